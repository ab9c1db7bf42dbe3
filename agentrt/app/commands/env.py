"""``agentrt env serve NAME`` and ``agentrt env list``: the environments over OpenEnv's HTTP/WebSocket API.

    agentrt env serve suite:gsm8k --port 8011 --budget 512
    agentrt env serve search:hotpotqa-index --max-steps 6 --budget 1024 --split train
    agentrt env serve strategy --suite easy --suite hotpotqa-index --budget 512

NAME: ``suite:SUITE`` (every eval suite; single-turn items), ``search:CORPUS`` (hotpotqa-index, squad, docs: the
bundled corpora with their questions; or a collection NAME / a PATH to index, with ``--suite`` for the
questions), ``strategy`` (questions of ``--suite``, default the router's dev sets). The eval harness (suites,
their verifiers, their corpora) is imported here, lazily: the runtime never imports it.

The door is ``agentrt serve``'s: ``--api-key`` (or $AGENTRT_API_KEY; a non-loopback ``--host`` without one is
refused unless ``--insecure``), ``--allowed-origins``, ``--max-body`` (requests and WebSocket messages).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any
from agentrt.core.config import Settings

STRATEGY_SUITES = ("easy", "arith", "unanswerable", "ambiguous", "hotpotqa-index")  # one corpus among them


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("env", help="serve environments a trainer can step (OpenEnv API: suite, search, strategy)")
    cmds = p.add_subparsers(dest="env_command", metavar="ENV_COMMAND")
    s = cmds.add_parser("serve", help="serve one environment over HTTP and WebSocket (OpenEnv)")
    s.add_argument("name", metavar="NAME", help="suite:SUITE, search:CORPUS or strategy (see `agentrt env list`)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    s.add_argument("--budget", type=int, default=1024, help="token budget of an episode (default 1024)")
    s.add_argument("--max-steps", type=int, default=6, help="search: actions per episode (default 6)")
    s.add_argument("--k", type=int, default=3, help="search: passages a search shows (default 3)")
    s.add_argument("--suite", action="append", help="the questions (a suite name or FILE.jsonl; repeatable): "
                   "search over a corpus of your own, or strategy (default: " + ", ".join(STRATEGY_SUITES) + ")")
    s.add_argument("--split", choices=("all", "train", "heldout"), default="all",
                   help="which questions: all (default), the training side or the held-out side of a stable hash "
                        "split (the strategy trainer's rule)")
    s.add_argument("--holdout", type=float, default=0.2, help="the held-out share of --split (default 0.2)")
    s.add_argument("--limit", type=int, help="the first K questions of each suite")
    s.add_argument("--lam", type=float, help="strategy: token weight of the reward (default: router_lambda, 0.3)")
    s.add_argument("--policy", help="strategy: the policy backend spec the routes run on (default hf:embedded)")
    s.add_argument("--max-sessions", type=int, default=64, help="WebSocket sessions at once (default 64)")
    # agentrt serve's door: the same flags, the same checks (agentrt.app.server.door, guard)
    from agentrt.app.commands.serve import add_door_args

    add_door_args(s, guards="every path but /health, the WebSocket handshake included",
                  reach="step episodes and have answers graded", body="request body and WebSocket message")
    s.set_defaults(func=cmd_serve)
    ls = cmds.add_parser("list", help="the environments `agentrt env serve` takes")
    ls.set_defaults(func=cmd_list)
    p.set_defaults(func=lambda _args: (p.print_help(), 2)[1])


def cmd_list(args: argparse.Namespace) -> int:
    from evals.devsets import FAMILIES
    from evals.suites import BUILTIN, dev_sets

    print("suite:NAME      one question, one answer, scored by its verifier")
    for name in (*BUILTIN, *dev_sets()):
        print(f"  suite:{name}")
    print("search:CORPUS   search(query) / open(id) / answer(text) over an index, within a step and token budget")
    for name, (_suite, _file, shape) in FAMILIES.items():
        print(f"  search:{name}  ({shape})")
    print("  search:NAME|PATH --suite QUESTIONS  (a collection of your memory store, or files to index)")
    print("strategy        name a route; the runtime runs it; reward = score - lam * tokens / budget")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from agentrt.core.config import load_settings
    from agentrt.core.errors import InputError

    kind, _, arg = args.name.partition(":")
    if kind not in ("suite", "search", "strategy") or (kind != "strategy" and not arg) or (kind == "strategy" and arg):
        raise InputError(f"unknown environment {args.name!r}; use suite:SUITE, search:CORPUS or strategy "
                         "(see `agentrt env list`)")
    _check(args)
    from agentrt.app.commands.serve import door

    key, warning = door(args, "step episodes and have answers graded", "agentrt env serve")
    if warning:
        print(warning, file=sys.stderr, flush=True)
    settings = load_settings(args.config, **({"policy": args.policy} if args.policy else {}))
    spec = build_spec(kind, arg, args, settings)
    from agentrt.envs.openenv_app import serve

    def ready() -> None:
        print(f"agentrt env: serving {spec.name} ({len(spec.items)} questions) on http://{args.host}:{args.port} "
              f"(WebSocket /ws, HTTP /reset /step /state){' (API key required)' if key else ''}", file=sys.stderr,
              flush=True)

    serve(spec, host=args.host, port=args.port, max_sessions=args.max_sessions, on_ready=ready, api_key=key,
          allowed_origins=args.allowed_origins, max_body=args.max_body)
    return 0


def _check(args: argparse.Namespace) -> None:
    from agentrt.core.errors import InputError

    if not 0 <= args.port <= 65535:
        raise InputError(f"--port must be in 0..65535, got {args.port}")
    for flag, value in (("--budget", args.budget), ("--max-steps", args.max_steps), ("--k", args.k),
                        ("--max-sessions", args.max_sessions), ("--max-body", args.max_body)):
        if value < 1:
            raise InputError(f"{flag} must be >= 1, got {value}")
    if args.limit is not None and args.limit < 1:
        raise InputError(f"--limit must be >= 1, got {args.limit}")
    if not 0 < args.holdout < 1:
        raise InputError(f"--holdout must be in (0, 1), got {args.holdout}")
    if args.lam is not None and args.lam < 0:
        raise InputError(f"--lam must be >= 0, got {args.lam}")


def _items(suites: list[str], args: argparse.Namespace) -> list[Any]:
    return env_items(suites, limit=args.limit, split=args.split, holdout=args.holdout)


def build_spec(kind: str, arg: str, args: argparse.Namespace, settings: Settings) -> Any:
    """The ``EnvSpec`` of ``kind:arg`` (its questions, its episode factory) from the command's options."""
    from agentrt.envs.openenv_app import EnvSpec
    from agentrt.trajectory import TrajectoryWriter

    recorder = TrajectoryWriter(settings.trajectory_dir)
    if kind == "suite":
        from agentrt.envs.suite import SuiteEpisode

        suites = [arg]
        return EnvSpec("suite", f"suite:{arg}", _items(suites, args), lambda: SuiteEpisode(
            token_budget=args.budget, recorder=recorder), f"single-turn questions of the {arg} suite")
    if kind == "search":
        from agentrt.envs.search import SearchEpisode, open_search_corpus

        target, suites, shape = search_source(arg, args.suite)
        items = _items(suites, args)  # bad questions fail before anything is indexed
        print(f"agentrt env: opening the index of {arg} (indexed once, on first use)", file=sys.stderr, flush=True)
        corpus = open_search_corpus(target, settings)
        return EnvSpec("search", f"search:{arg}", items, lambda: SearchEpisode(
            corpus, max_steps=args.max_steps, token_budget=args.budget, k=args.k, recorder=recorder),
            f"multi-turn search over {shape}")
    from agentrt.app.agent import Agent
    from agentrt.envs.strategy import StrategyEpisode
    from evals.multiturn import prepare_corpus
    from evals.suites import load_suite

    suites = args.suite or list(STRATEGY_SUITES)
    items = _items(suites, args)
    prepare_corpus(settings, [it for name in suites for it in load_suite(name).items if it.corpus])  # read, plan
    agent = Agent(settings)
    lam = settings.router_lambda if args.lam is None else args.lam
    return EnvSpec("strategy", "strategy", items, lambda: StrategyEpisode(
        agent, budget=args.budget, lam=lam, recorder=recorder), f"route choice over {', '.join(suites)}")


def search_source(corpus: str, suites: list[str] | None = None) -> tuple[str, list[str], str]:
    """``search:CORPUS`` resolved: (what ``open_search_corpus`` opens, the question suites, a description).
    A bundled family (hotpotqa-index, squad, docs: ``evals.devsets.FAMILIES``) is its file under evals/data/
    and its dev set; a collection NAME or a PATH needs ``suites`` (an InputError otherwise)."""
    from evals.devsets import FAMILIES
    from evals.suites import DATA_DIR

    if corpus in FAMILIES:
        suite, corpus_file, shape = FAMILIES[corpus]
        return str(DATA_DIR / corpus_file), list(suites or [suite]), shape
    if not suites:
        raise _input(f"search:{corpus}: give the questions with --suite NAME|FILE.jsonl (the bundled corpora "
                     f"{', '.join(FAMILIES)} bring their own)")
    return corpus, list(suites), f"the corpus {corpus}"


def env_items(suites: list[str], *, limit: int | None = None, split: str = "all", holdout: float = 0.2) -> list[Any]:
    """The single-turn questions of ``suites`` (the first ``limit`` of each) on ``split`` (all | train | heldout:
    ``agentrt.envs.episode.held_out``), as ``EnvItem``s with their verifiers (a name, or the eval's own
    scoring for abstain / ask items)."""
    from agentrt.envs.episode import held_out
    from agentrt.envs.openenv_app import EnvItem
    from agentrt.trajectory.rewards import VERIFIERS
    from evals.outcomes import reward_of
    from evals.suites import load_suite

    out = []
    for name in suites:
        suite = load_suite(name)
        for item in suite.items[:limit]:
            if item.turns:  # a conversation is no single episode
                continue
            if split != "all" and held_out(item.question, holdout) != (split == "heldout"):
                continue
            verifier = item.verifier if item.verifier in VERIFIERS else _scorer(reward_of, item)
            out.append(EnvItem(item.id, item.question, item.ground_truth(), verifier, suite.name))
    if not out:
        raise _input(f"no single-turn questions in {', '.join(suites)} on split {split}")
    return out


def _scorer(reward_of: Any, item: Any) -> Any:
    def score(answer: str, route: str) -> Any:
        return reward_of(item, answer, route)

    score.__name__ = item.verifier  # the record names the suite's verifier (abstain, ask)
    return score


def _input(message: str) -> Exception:
    from agentrt.core.errors import InputError

    return InputError(message)


__all__ = ["build_spec", "cmd_list", "cmd_serve", "env_items", "register", "search_source"]
