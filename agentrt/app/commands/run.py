"""``agentrt run`` (one question), and the checks every model-loading command shares.

``preflight`` is the check every model-loading command (run, chat, serve, eval, rollout) makes first: each
argument and setting is validated before a model loads, so a mistake costs a fraction of a second, not
the seconds of importing torch and loading the weights. ``--corpus`` is resolved there too
(``agentrt.app.corpus``): a collection that must exist, or files indexed once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from agentrt.core.config import Settings
from agentrt.core.confidence import CONFIDENCE_MODES
from agentrt.core.request import RunHooks, RunRequest
from agentrt.core.types import INDEX_ROUTES, ROUTES

if TYPE_CHECKING:  # the command imports the agent (and its model stack) only when it runs
    from agentrt.app.agent import Agent


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="answer one question")
    p.add_argument("question", help="the question to answer (non-empty UTF-8 text)")
    p.add_argument("--route", type=route_name, metavar="ROUTE[@TIER]",
                   help=f"skip the router: {', '.join(ROUTES)}; ROUTE@TIER runs it on a model tier (--tier)")
    p.add_argument("--router", help="auto, rules, self, cascade, learned:PATH, fixed:<action> (default: setting "
                   "router, $AGENTRT_ROUTER, else auto: the promoted or shipped router for the policy, else rules)")
    add_tools_args(p)
    p.add_argument("--budget", type=int, help="token budget for the whole run (default 1024)")
    p.add_argument("--thinking-cap", type=int, help="max thinking tokens for the reason route")
    p.add_argument("--samples", type=int, default=1,
                   help="reason route: draw N samples in one batched call and keep the majority answer (default 1)")
    p.add_argument("--policy", help="policy backend spec: hf:embedded (default), vllm:embedded|DIR, openai:URL[,URL]#MODEL")
    p.add_argument("--planner", help="planner backend spec (default: the policy's); same spec = one shared model; "
                   "tier:NAME plans on a model tier (--tier) while the searchers stay on the policy")
    add_tier_arg(p)
    add_corpus_arg(p)
    add_confidence_arg(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON (citations under \"sources\")")
    p.add_argument("--quiet", action="store_true", help="no live view on a terminal: print the answer when done")
    p.set_defaults(func=cmd_run)


CORPUS_HELP = ("what the plan route searches: NAME of an indexed collection (see `agentrt index`), or PATH of a "
               ".txt/.md/.jsonl file or folder, indexed once into a collection named after it and its content "
               "(default: setting corpus, $AGENTRT_CORPUS, else 'default')")


CONFIDENCE_HELP = ("ask the policy how sure it is (a number in [0, 1], stripped from the answer; JSON: \"confidence\"): "
                   "grammar (a short constrained call after the answer, any policy), tail (the policy writes "
                   "<confidence>q</confidence> itself, as an RLCR-trained one does), scored (the expectation over the "
                   "grammar's choices, one scoring pass, hf), off (default: setting confidence, $AGENTRT_CONFIDENCE, else off)")


def add_confidence_arg(p: argparse.ArgumentParser) -> None:
    """``--confidence off|tail|grammar|scored``: the run's stated-confidence mode (``Settings.confidence``)."""
    p.add_argument("--confidence", choices=list(CONFIDENCE_MODES), help=CONFIDENCE_HELP)


TIER_HELP = ("a model tier beside the policy, NAME=SPEC (repeatable; replaces the setting tiers): the router then "
             "chooses each answering route on either model, priced in seconds, e.g. --tier large=hf:embedded:qwen2.5-coder-0.5b; "
             "--tier none: the policy alone (the default policy has the tier large=hf:embedded:qwen2.5-coder-1.5b "
             "when that model is installed)")


def add_tier_arg(p: argparse.ArgumentParser) -> None:
    """``--tier NAME=SPEC`` (run, route, chat, serve, eval, learn): ``tier_overrides`` reads it."""
    p.add_argument("--tier", action="append", default=None, metavar="NAME=SPEC", help=TIER_HELP)


def tier_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``{"tiers": {...}}`` for ``load_settings`` from ``--tier`` ({} when none was given)."""
    from agentrt.core.errors import InputError

    given = getattr(args, "tier", None)
    if not given:
        return {}
    if [g.strip().lower() for g in given] == ["none"]:
        return {"tiers": {}}
    tiers: dict[str, str] = {}
    for item in given:
        name, sep, spec = item.partition("=")
        if not sep or not name.strip() or not spec.strip():
            raise InputError(f"--tier wants NAME=SPEC (e.g. large=hf:embedded:qwen2.5-coder-0.5b) or none, got {item!r}")
        tiers[name.strip()] = spec.strip()
    return {"tiers": tiers}


def route_name(value: str) -> str:
    """``--route``'s type: a route, or ROUTE@TIER (argparse turns the ValueError into one usage line)."""
    from agentrt.core.request import check_route

    try:
        return check_route(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_corpus_arg(p: argparse.ArgumentParser) -> None:
    """``--corpus NAME|PATH`` (run, chat, serve, eval): resolved by ``preflight`` before a model loads."""
    p.add_argument("--corpus", metavar="NAME|PATH", help=CORPUS_HELP)


def _agent(args: argparse.Namespace, **checks: Any) -> Agent:
    """The Agent for a command, after ``preflight`` passed (``checks``: its keyword arguments)."""
    return _agent_and_request(args, **checks)[0]


def _agent_and_request(args: argparse.Namespace, **checks: Any) -> tuple[Agent, RunRequest]:
    """The Agent for a command and the request ``preflight`` validated."""
    from agentrt.app.agent import Agent
    from agentrt.core.config import load_settings

    settings = load_settings(args.config, policy=getattr(args, "policy", None), planner=getattr(args, "planner", None),
                             router=getattr(args, "router", None), **tier_overrides(args))
    req = preflight(settings, corpus=getattr(args, "corpus", None), **checks)
    return Agent(settings), req


def preflight(settings: Settings, *, question: str | None = None, budget: int | None = None,
              route: str | None = None, routers: list[str] | None = None, thinking_cap: int | None = None,
              samples: int = 1, corpus: str | None = None, confidence: str | None = None) -> RunRequest:
    """Validate what a command will run with, loading no model (a UserError, exit code 2, when wrong);
    returns the run's request (``RunRequest``; a command without a question, chat, eval, rollout, gets
    one whose options its questions will share).

    Backend specs; the request (the question non-empty valid Unicode; budget, route, thinking cap, samples,
    confidence: ``RunRequest``'s fields and limits); the router specs (``routers``, default
    ``[settings.router]``; none when ``route`` skips the router): their form, the file of ``learned:PATH``,
    and that ``self`` has a policy that can score (hf); the question's length against the policy's context
    and the budget, counted with its tokenizer alone (``check_length``); last, the corpus: ``corpus``
    (``--corpus NAME|PATH``) must name a collection that exists or files to index (indexed here, once;
    ``settings.corpus`` is set to the collection), else ``settings.corpus`` must be a valid name and,
    when the plan route will search it, exist.
    """
    from agentrt.backends import can_score, parse_spec
    from agentrt.core.errors import ConfigError

    for spec in (settings.policy, settings.planner, *settings.tiers.values()):
        if spec is not None and not (spec == settings.planner and spec.startswith("tier:")):
            parse_spec(spec.strip())
    if settings.planner and settings.planner.startswith("tier:") and settings.planner[5:] not in settings.tiers:
        raise ConfigError(f"planner {settings.planner}: no such tier (tiers: {', '.join(settings.tiers) or 'none'}); "
                          "add it with --tier NAME=SPEC")
    if route is not None and "@" in route and route.partition("@")[2] not in settings.tiers:
        raise ConfigError(f"--route {route}: no tier {route.partition('@')[2]!r} (tiers: "
                          f"{', '.join(settings.tiers) or 'none'}); add it with --tier NAME=SPEC")
    # a command without a question (chat, eval) checks its options now; "?" only stands in for its questions
    req = RunRequest.from_kwargs("?" if question is None else question, budget=budget, route=route,
                                 thinking_cap=thinking_cap, samples=samples, confidence=confidence)
    specs = [] if route is not None else [s.strip() for s in (routers if routers is not None else [settings.router])]
    if specs:
        from agentrt.router import make_router

        for spec in specs:
            make_router(spec, settings)  # unknown specs and unreadable learned:PATH files raise here
            if spec == "self" and not can_score(settings.policy):
                raise ConfigError(f"the self router scores with the policy model and needs an hf:... policy; "
                                  f"{settings.policy} cannot score text")
    if question is not None:
        check_length(settings, question, settings.budget if budget is None else budget)
    check_corpus(settings, corpus, needed=route in INDEX_ROUTES or any(f"fixed:{r}" in specs for r in INDEX_ROUTES))
    return req


def check_corpus(settings: Settings, corpus: str | None, *, needed: bool) -> None:
    """``--corpus`` resolved into ``settings.corpus`` (a NAME that exists, a PATH indexed once); without
    it, the setting's name is checked, and when the plan route will search it, that it exists (a local
    store is opened: ~1.5 s, no model; a server is asked when the route runs)."""
    from agentrt.app.corpus import check_name, require_collection, resolve_corpus
    from memory.corpus import resolve_location

    if corpus is not None:
        settings.corpus = resolve_corpus(settings, corpus, announce=lambda line: print(f"agentrt: {line}",
                                                                                       file=sys.stderr, flush=True))
        return
    check_name(settings.corpus)
    location = resolve_location(settings)
    if needed and not location.startswith(("http://", "https://")) and location != ":memory:":
        require_collection(settings, settings.corpus)


def check_length(settings: Settings, question: str, budget: int) -> None:
    """Refuse a question longer than the policy's context, or than the budget, before the model loads.

    Counted with the policy's own ``tokenizer.json`` through the ``tokenizers`` library (~0.2 s: no torch,
    no transformers, no weights), and only when it could matter: a token is at least one byte, so a
    question of fewer UTF-8 bytes than both limits passes uncounted. The question alone is a lower bound
    of the prompt (the chat template and system text add to it), so a refusal here is always right; the
    exact check runs when the model has loaded. Nothing is checked here when the policy's files are not
    local (``openai:``: the server reports its context when we connect, in well under a second;
    ``hf:embedded`` or a ``.gguf`` before its one-time conversion) or ``tokenizers`` is missing.
    """
    import json

    from agentrt.backends import parse_spec
    from agentrt.core.request import check_fit

    kind, arg = parse_spec(settings.policy.strip())
    if kind not in ("hf", "vllm"):
        return
    from agentrt.backends.embedded import local_folder

    folder = local_folder(arg.split("?", 1)[0], settings.models_dir)
    if folder is None:  # a GGUF not converted yet
        return
    try:
        context = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError):
        return
    if not isinstance(context, int) or len(question.encode("utf-8")) < min(context, budget):
        return
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    except Exception:  # noqa: BLE001 - no tokenizers, no file, a format it cannot read: the real check decides
        return
    n = len(tokenizer.encode(question, add_special_tokens=False).ids)
    check_fit(n, context, budget, what="the question", lower_bound=True)


def add_tools_args(p: argparse.ArgumentParser) -> None:
    """``--tools`` / ``--no-tools``; without either a run gets the safe defaults (``settings.tools``)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tools", dest="tools", action="store_const", const="builtin",
                   help="the built-in tools: calculator, ask_user, python when allow_python is set "
                        "(default: the safe ones, the calculator and a search of the index, per the tools setting)")
    g.add_argument("--no-tools", dest="tools", action="store_const", const="off", help="no tools at all")
    p.set_defaults(tools="safe")


def cmd_run(args: argparse.Namespace) -> int:
    agent, req = _agent_and_request(args, question=args.question, budget=args.budget, route=args.route,
                                    thinking_cap=args.thinking_cap, samples=args.samples, confidence=args.confidence)
    from agentrt.routes.toolcall import tools_for_mode

    tools = tools_for_mode(args.tools, agent.settings)
    from agentrt.app.live import no_answer_line, run_live, wants_live  # on a terminal the answer streams (issue 37)
    from agentrt.app.terminal import printable  # the model's text, escaped for the terminal (--json keeps it raw)

    if wants_live(args):
        from agentrt.app.streaming import stream

        result = run_live(stream(agent, req, RunHooks(tools=tools)))
    else:
        result = asyncio.run(agent.run_request(req, RunHooks(tools=tools)))
    sources = []
    if result.citations:
        from agentrt.app.corpus import titles

        sources = titles(agent.settings, result.citations)
    if args.json:
        print(json.dumps({**result.to_dict(), "sources": sources}, ensure_ascii=False))
    else:
        if not wants_live(args):  # the live view has shown the answer already
            print(printable(result.answer or no_answer_line(result)))
        if sources:
            print(f"sources ({agent.settings.corpus}):")
            for n, src in enumerate(sources, 1):
                print(printable(f"  [{n}] {src['title'] or '(untitled)'}  id={src['id']}"))
        stated = "" if result.confidence_status is None else (
            f" confidence={result.confidence:g}" if result.confidence is not None else f" confidence={result.confidence_status}")
        print(
            f"[route={result.route} tokens={result.usage.total_tokens}/{result.budget}{stated} "
            f"status={result.status} trajectory={result.trajectory_id}]",
            file=sys.stderr,
        )
    exit_now(agent)
    return 0


def exit_now(agent: Any) -> None:
    """End the process here, skipping the interpreter's teardown (~1 s of freeing torch and
    transformers), when this process is the ``agentrt`` command itself (not a program calling
    ``cli.main``) and nothing is left to finish: the trajectory is already on disk (written and fsynced
    before ``run`` returned), output is flushed, and no part of the run relies on exit handlers: no
    tracing exporter, no episodic memory or files indexed by this process (Chroma writes), no vLLM engine
    (its atexit shutdown). Otherwise it returns and the process exits normally."""
    from pathlib import Path

    from agentrt.app import corpus
    from agentrt.backends import parse_spec

    entry = Path(sys.argv[0])
    if not (entry.name == "agentrt" or (entry.name == "cli.py" and entry.parent.name == "app")):
        return
    s = agent.settings
    kinds = {parse_spec(spec.strip())[0] for spec in (s.policy, s.planner, *s.tiers.values())
             if spec and not spec.startswith("tier:")}
    if s.tracing != "none" or s.episodic_memory or corpus.wrote_this_process() or not kinds <= {"hf", "openai"}:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # a closed pipe: let the normal exit report it
    os._exit(0)
