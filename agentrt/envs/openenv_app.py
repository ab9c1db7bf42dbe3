"""The episode kinds as OpenEnv environments (``openenv-core``: reset / step / state over HTTP and WebSocket).

The one module that imports ``openenv`` (it pulls gradio: seconds): ``agentrt[envs]``. What is served is fixed
when the server starts (``EnvSpec``: the kind, its questions, its corpus or agent, its budgets); no request
field names a file or a path. A request picks a question only among those: ``item_id`` (one of the served
ids), else ``seed`` (a seeded draw), else the next one in turn.

* Action ``{"tool": ..., "text": ...}``: ``search`` / ``open`` / ``answer`` (search), ``answer`` (suite),
  ``choose`` (strategy: ``text`` is the reply naming a route). ``tool`` may be left out where one tool fits.
* Observation: ``text`` (what the policy reads), ``error`` (a bad action's one line, the episode goes on),
  ``tools``, ``item_id``, ``episode_id``, ``info`` (the episode's counters: steps, tokens, end reason, ...),
  ``done`` and ``reward`` (the episode's at ``done``, else 0).

The door is ``agentrt serve``'s (``make_app``): an API key, Host/Origin checks (WebSocket handshakes too),
JSON-only bodies, a body cap (HTTP and WebSocket messages), loopback by default.

OpenEnv's WebSocket ``/ws`` keeps one environment per connection (its client, ``openenv.core.GenericEnvClient``,
talks to it). Its HTTP ``/reset`` and ``/step`` build a fresh environment per request, so an episode is found
again by the ``episode_id`` that ``reset`` returned (pass it in the ``/step`` body beside ``action``); the
server keeps the latest ``MAX_EPISODES`` episodes.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from agentrt.core.errors import UserError, missing_extra
from agentrt.envs.episode import Scorer

try:
    from openenv.core.env_server import Environment, create_app
    from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
except ImportError:  # pragma: no cover - the extra is missing
    raise missing_extra("openenv-core", "envs") from None

# agentrt serve's door (the server extra comes with envs: fastapi, uvicorn)
from agentrt.app.server import DEFAULT_MAX_BODY  # noqa: E402
from agentrt.app.server.door import ApiKeyGate  # noqa: E402
from agentrt.app.server.guard import BodyCap, guard_door, uvicorn_options  # noqa: E402

KINDS = ("suite", "search", "strategy")
TOOLS = {"suite": ("answer",), "search": ("search", "open", "answer"), "strategy": ("choose",)}
MAX_EPISODES = 1024  # episodes an HTTP client can still step (the oldest are forgotten first)
MAX_TEXT = 8000  # characters of an action's text (longer: OpenEnv's 422)


@dataclass(slots=True)
class EnvItem:
    """One question an environment serves: its ground truth and verifier (a name, or a scoring function)."""

    id: str
    question: str
    ground_truth: Any
    verifier: str | Scorer
    family: str = ""


@dataclass
class EnvSpec:
    """What a server serves: ``kind`` (suite | search | strategy), its ``name`` (``search:hotpotqa-index``), the
    ``items``, and ``make_episode()``, a fresh episode object of that kind (the corpus, the agent, the budgets
    and the recorder are bound in it)."""

    kind: str
    name: str
    items: list[EnvItem]
    make_episode: Callable[[], Any]
    description: str = ""
    episodes: OrderedDict[str, tuple[EnvItem, Any]] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)  # the episodes table, the turn counter
    run_lock: threading.Lock = field(default_factory=threading.Lock)  # one strategy run at a time (one model)
    turn: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UserError(f"unknown environment kind {self.kind!r}; use one of {', '.join(KINDS)}")
        if not self.items:
            raise UserError(f"{self.name}: no questions to serve; give a suite with items (--suite)")
        self.by_id = {it.id: it for it in self.items}

    def pick(self, item_id: str | None, seed: int | None) -> EnvItem | None:
        """The item ``item_id`` names (None when it names none), else a ``seed``ed draw, else the next in turn."""
        if item_id is not None:
            return self.by_id.get(str(item_id))
        if seed is not None:
            return self.items[random.Random(seed).randrange(len(self.items))]
        with self.lock:
            item = self.items[self.turn % len(self.items)]
            self.turn += 1
        return item

    def keep(self, episode_id: str, item: EnvItem, episode: Any) -> None:
        with self.lock:
            self.episodes[episode_id] = (item, episode)
            self.episodes.move_to_end(episode_id)
            while len(self.episodes) > MAX_EPISODES:
                self.episodes.popitem(last=False)

    def find(self, episode_id: str) -> tuple[EnvItem, Any] | None:
        with self.lock:
            return self.episodes.get(episode_id)


class EnvAction(Action):
    """One action: ``tool`` (search, open, answer, choose; empty: the kind's only tool) and its ``text``."""

    tool: str = Field(default="", max_length=32, description="search | open | answer (search); answer (suite); "
                                                             "choose (strategy); empty: the only tool there is")
    text: str = Field(default="", max_length=MAX_TEXT, description="the query, the passage id, the answer or "
                                                                   "the reply naming a route")


class EnvObservation(Observation):
    """What the policy reads after a reset or an action (``done``, ``reward``, ``metadata`` from OpenEnv)."""

    text: str = Field(default="", description="the observation: question, passages, outcome")
    error: str | None = Field(default=None, description="a bad action or request, in one line")
    tools: list[str] = Field(default_factory=list, description="the actions this environment takes")
    item_id: str = ""
    episode_id: str = ""
    info: dict[str, Any] = Field(default_factory=dict, description="the episode's counters: steps, tokens, end "
                                                                   "reason, ... (OpenEnv's metadata is not sent)")


class AgentrtEnvironment(Environment[EnvAction, EnvObservation, State]):
    """An agentrt episode kind behind OpenEnv's interface (one instance per WebSocket session)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each instance holds its own episode; shared parts are locked

    def __init__(self, spec: EnvSpec) -> None:
        super().__init__()
        self.spec = spec
        self.item: EnvItem | None = None
        self.episode: Any = None
        self.episode_id: str | None = None

    def reset(self, seed: int | None = None, episode_id: str | None = None, item_id: str | None = None,
              **kwargs: Any) -> EnvObservation:
        """Start an episode on a served question (``item_id``, else ``seed``, else the next in turn)."""
        self.item, self.episode, self.episode_id = None, None, None  # an error below leaves no episode behind
        item = self.spec.pick(item_id, seed)
        if item is None:
            return self._obs(error=f"no item {str(item_id)[:80]!r} in {self.spec.name}; leave item_id out or give "
                                   f"one of the served ids (e.g. {self.spec.items[0].id!r})", done=True)
        episode = self.spec.make_episode()
        try:
            text = episode.reset(item.question, item.ground_truth, item.verifier, item.id)
        except UserError as e:
            return self._obs(error=str(e), done=True)
        self.item, self.episode = item, episode
        self.episode_id = str(episode_id or uuid.uuid4().hex)[:255]
        self.spec.keep(self.episode_id, item, episode)
        return self._obs(text=text)

    def step(self, action: EnvAction, timeout_s: float | None = None, episode_id: str | None = None,
             **kwargs: Any) -> EnvObservation:
        """Apply ``action`` to this session's episode, or (HTTP) to the episode ``episode_id`` names."""
        if episode_id is not None and episode_id != self.episode_id:
            found = self.spec.find(str(episode_id))
            if found is None:
                return self._obs(error=f"no episode {str(episode_id)[:80]!r} (unknown, or one of the oldest "
                                       f"forgotten): call reset and step with the episode_id it returns")
            self.item, self.episode = found
            self.episode_id = str(episode_id)
        if self.episode is None:
            return self._obs(error="no episode: call reset first (over HTTP, pass the episode_id reset returned "
                                   "beside the action)")
        tools = TOOLS[self.spec.kind]
        tool = (action.tool or "").strip().lower() or (tools[0] if len(tools) == 1 else "")
        if tool not in tools:
            return self._obs(error=f"unknown tool {action.tool!r}; {self.spec.name} takes {', '.join(tools)} "
                                   "(give it as 'tool' with its argument as 'text')")
        try:
            if self.spec.kind == "strategy":
                with self.spec.run_lock:
                    text = self.episode.choose(action.text)
            else:
                text = getattr(self.episode, tool)(action.text)
        except UserError as e:
            return self._obs(error=str(e))
        if text.startswith("error: "):  # the episode's own one-line error (the episode goes on unless it ended)
            return self._obs(error=text[len("error: "):].split("\n")[0], text=text)
        return self._obs(text=text)

    @property
    def state(self) -> State:
        """The episode's counters (OpenEnv's ``State`` with extra fields)."""
        counters = self.episode.state() if self.episode is not None else {}
        counters.pop("episode_id", None)
        return State(episode_id=self.episode_id, step_count=int(counters.pop("steps", 0)), env=self.spec.name,
                     **counters)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=f"agentrt {self.spec.name}", version="1",
                                   description=self.spec.description or f"agentrt's {self.spec.kind} environment")

    def _obs(self, *, text: str = "", error: str | None = None, done: bool | None = None) -> EnvObservation:
        ep = self.episode
        finished = bool(ep.done) if ep is not None and done is None else bool(done)
        counters = ep.state() if ep is not None else {}
        return EnvObservation(text=text, error=error, tools=list(TOOLS[self.spec.kind]),
                              item_id=self.item.id if self.item else "", episode_id=self.episode_id or "",
                              done=finished, reward=float(ep.reward) if ep is not None and finished else 0.0,
                              info={k: v for k, v in counters.items() if k != "episode_id"})


def make_app(spec: EnvSpec, *, max_sessions: int = 64, api_key: str | None = None, host: str | None = None,
             allowed_origins: list[str] | None = None, max_body: int = DEFAULT_MAX_BODY) -> Any:
    """OpenEnv's FastAPI app (``create_app``: /reset, /step, /state, /schema, /health, /ws) serving ``spec``,
    behind ``agentrt serve``'s door: ``api_key`` (every path but /health, the WebSocket handshake included),
    ``host`` and ``allowed_origins`` (Host/Origin checks, JSON-only bodies, header caps: ``guard_door``) and
    ``max_body`` (a bigger body is a 413, declared or streamed: ``BodyCap``)."""
    app = create_app(lambda: AgentrtEnvironment(spec), EnvAction, EnvObservation, env_name=spec.name,
                     max_concurrent_envs=max_sessions)
    app.add_middleware(BodyCap, max_body=max_body)  # innermost: a keyless client is refused before any body
    if api_key:
        app.add_middleware(ApiKeyGate, key=api_key)
    guard_door(app, host, allowed_origins)  # outermost: Host/Origin/content type, CORS only where allowed
    return app


def serve(spec: EnvSpec, *, host: str = "127.0.0.1", port: int = 8000, max_sessions: int = 64,
          on_ready: Callable[[], None] | None = None, api_key: str | None = None,
          allowed_origins: list[str] | None = None, max_body: int = DEFAULT_MAX_BODY) -> None:
    """Serve ``spec`` with uvicorn until interrupted (the door: ``make_app``; a WebSocket message over
    ``max_body`` bytes closes its connection, 1009)."""
    try:
        import uvicorn
    except ImportError:  # pragma: no cover
        raise missing_extra("uvicorn", "envs") from None
    app = make_app(spec, max_sessions=max_sessions, api_key=api_key, host=host, allowed_origins=allowed_origins,
                   max_body=max_body)
    if on_ready is not None:
        app.router.on_startup.append(on_ready)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, ws_max_size=max_body,
                **uvicorn_options())


__all__ = ["AgentrtEnvironment", "EnvAction", "EnvItem", "EnvObservation", "EnvSpec", "KINDS", "TOOLS", "make_app",
           "serve"]
