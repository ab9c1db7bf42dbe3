"""``agentrt run`` (one question) and ``agentrt demo`` (the sample questions ``make run`` shows).

``preflight`` is the check every model-loading command (run, chat, eval, rollout) makes first: each
argument and setting is validated before a model loads, so a mistake costs a fraction of a second, not
the ~10 s of importing torch and loading the weights.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from typing import Any

from agentrt.core.types import ROUTES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="answer one question")
    p.add_argument("question", help="the question to answer (non-empty UTF-8 text)")
    p.add_argument("--route", choices=list(ROUTES), help="skip the router")
    p.add_argument("--router", help="fixed:<action>, rules (default), self, learned:PATH, cascade")
    p.add_argument("--tools", action="store_true", help="let the reason route act through the built-in tools (calculator)")
    p.add_argument("--budget", type=int, help="token budget for the whole run (default 1024)")
    p.add_argument("--thinking-cap", type=int, help="max thinking tokens for the reason route")
    p.add_argument("--samples", type=int, default=1,
                   help="reason route: draw N samples in one batched call and keep the majority answer (default 1)")
    p.add_argument("--policy", help="policy backend spec: hf:embedded (default), vllm:embedded|DIR, openai:URL[,URL]#MODEL")
    p.add_argument("--planner", help="planner backend spec (default: the policy's); same spec = one shared model")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_run)

    d = sub.add_parser("demo", help="answer the bundled sample questions on the embedded model")
    d.add_argument("--budget", type=int, default=1024, help="token budget per question (default 1024)")
    d.set_defaults(func=cmd_demo)


def _agent(args: argparse.Namespace, **checks: Any):
    """The Agent for a command, after ``preflight`` passed (``checks``: its keyword arguments)."""
    from agentrt.app.agent import Agent
    from agentrt.core.config import load_settings

    settings = load_settings(args.config, policy=getattr(args, "policy", None), planner=getattr(args, "planner", None),
                             router=getattr(args, "router", None))
    preflight(settings, **checks)
    return Agent(settings)


def preflight(settings: Any, *, question: str | None = None, budget: int | None = None, route: str | None = None,
              routers: list[str] | None = None, thinking_cap: int | None = None, samples: int = 1) -> None:
    """Validate what a command will run with, loading no model (a UserError, exit code 2, when wrong).

    Backend specs; the question (non-empty valid Unicode); budget, route, thinking cap, samples; the router
    specs (``routers``, default ``[settings.router]``; none when ``route`` skips the router): their form, the file of
    ``learned:PATH``, and that ``self`` has a policy that can score (hf); the corpus name, and for the plan
    route that its collection exists; the question's length against the policy's context and the budget,
    counted with its tokenizer alone (``check_length``).
    """
    from agentrt.app.inputs import check_request
    from agentrt.backends import parse_spec
    from agentrt.core.errors import ConfigError, InputError

    for spec in (settings.policy, settings.planner):
        if spec is not None:
            parse_spec(spec.strip())
    total = settings.budget if budget is None else budget
    if question is not None:
        check_request(question, None, None, total, route, thinking_cap, samples, None)
    elif isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        raise InputError(f"budget must be a positive number of tokens, got {total!r}")
    elif route is not None:
        from agentrt.routes import check_route

        check_route(route)
    specs = [] if route is not None else [s.strip() for s in (routers if routers is not None else [settings.router])]
    if specs:
        from agentrt.routing import make_router

        for spec in specs:
            make_router(spec, settings)  # unknown specs and unreadable learned:PATH files raise here
            if spec == "self" and parse_spec(settings.policy.strip())[0] != "hf":
                raise ConfigError(f"the self router scores with the policy model and needs an hf:... policy; "
                                  f"{settings.policy} cannot score text")
    _check_corpus(settings, needed=route == "plan" or "fixed:plan" in specs)
    if question is not None:
        check_length(settings, question, total)


def _check_corpus(settings: Any, *, needed: bool) -> None:
    """The corpus name is a valid collection name; when the plan route will search it, that it exists
    (a local store that does not exist yet holds nothing; one that does is opened: ~1.5 s, no model)."""
    import re
    from pathlib import Path

    from agentrt.core.errors import ConfigError, InputError

    # Chroma's rule, as memory.chroma._check_name applies it (that module imports chromadb: ~1.5 s)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]", settings.corpus or ""):
        raise InputError(f"bad corpus name {settings.corpus!r}: use 3-512 letters, digits, '.', '_' or '-', "
                         "starting and ending with a letter or digit")
    if not needed:
        return
    from memory.corpus import open_corpus, resolve_location

    location = resolve_location(settings)
    if location.startswith(("http://", "https://")) or location == ":memory:":
        return  # a server is asked when the route runs
    if not Path(location).expanduser().exists():
        raise ConfigError(f"no collection {settings.corpus!r} in memory store {location} (have: none); "
                          "create it with `agentrt index`")
    open_corpus(location, settings.corpus)


def check_length(settings: Any, question: str, budget: int) -> None:
    """Refuse a question longer than the policy's context, or than the budget, before the model loads.

    Counted with the policy's own ``tokenizer.json`` through the ``tokenizers`` library (~0.2 s: no torch,
    no transformers, no weights), and only when it could matter: a token is at least one byte, so a
    question of fewer UTF-8 bytes than both limits passes uncounted. The question alone is a lower bound
    of the prompt (the chat template and system text add to it), so a refusal here is always right; the
    exact check runs when the model has loaded. Nothing is checked here when the policy's files are not
    local (``openai:``: the server reports its context when we connect, in well under a second;
    ``hf:embedded`` before its one-time conversion) or ``tokenizers`` is missing.
    """
    import json
    from pathlib import Path

    from agentrt.backends import parse_spec
    from agentrt.core.errors import InputError

    kind, arg = parse_spec(settings.policy.strip())
    if kind not in ("hf", "vllm"):
        return
    arg = arg.split("?", 1)[0]
    if arg == "embedded":
        from agentrt.backends._embedded import _FOLDER

        folder = settings.models_dir / _FOLDER
    else:
        folder = Path(arg).expanduser()
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
    if n >= context:
        raise InputError(f"the question is {n} tokens, longer than the model's context ({context}); shorten it")
    if budget <= n:
        raise InputError(f"budget {budget} is smaller than the prompt (the question alone is {n} tokens, before "
                         "the chat template); raise the budget")


def cmd_run(args: argparse.Namespace) -> int:
    agent = _agent(args, question=args.question, budget=args.budget, route=args.route,
                   thinking_cap=args.thinking_cap, samples=args.samples)
    tools = None
    if args.tools:
        from agentrt.routes.toolcall import builtin_tools

        tools = builtin_tools(agent.settings)
    result = agent.run(args.question, budget=args.budget, route=args.route, thinking_cap=args.thinking_cap,
                       samples=args.samples, tools=tools)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False))
    else:
        print(result.answer)
        print(
            f"[route={result.route} tokens={result.usage.total_tokens}/{result.budget} "
            f"status={result.status} trajectory={result.trajectory_id}]",
            file=sys.stderr,
        )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Index the bundled sample corpus (once), then answer the sample questions: the router picks the
    route for most; one comparison question runs plan-then-parallel-search over the corpus."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    questions = [
        json.loads(line)
        for line in resources.files("agentrt.data").joinpath("demo_questions.jsonl").read_text().splitlines()
        if line.strip()
    ]
    with console.status("loading the embedded model (SmolLM2-135M, CPU)..."):
        agent = _agent(args)
        agent.settings.corpus = DEMO_CORPUS
        agent.policy  # noqa: B018 - load now, under the spinner
    with console.status("indexing the bundled sample corpus (239 HotpotQA paragraphs, embedded ChromaDB)..."):
        indexed = _index_sample_corpus(agent.settings)
    console.print(f"corpus '{DEMO_CORPUS}': {indexed} passages in {agent.settings.home / 'memory'}")
    table = Table(title=f"agentrt demo on {agent.policy.name}")
    for col in ("question", "route (why)", "answer", "tokens used / budget", "status"):
        table.add_column(col, overflow="fold")
    for item in questions:
        budget = item.get("budget", args.budget)
        with console.status(f"answering: {item['question']}"):
            r = agent.run(item["question"], budget=budget, route=item.get("route"))
        answer = r.answer + (f"\n[cites {', '.join(r.citations)}]" if r.citations else "")
        why = r.reason.split(";")[0] if r.decision else "given"
        table.add_row(item["question"], f"{r.route} ({why})", answer, f"{r.usage.total_tokens} / {budget}", r.status)
    console.print(table)
    console.print(f"trajectories: {agent.writer.path}")
    return 0


DEMO_CORPUS = "sample"


def _index_sample_corpus(settings) -> int:
    """Index agentrt/data/sample_corpus.jsonl into the 'sample' collection; a no-op once done."""
    from pathlib import Path

    from memory.corpus import open_corpus, resolve_location
    from memory.ingest import file_chunks, ingest

    with resources.as_file(resources.files("agentrt.data").joinpath("sample_corpus.jsonl")) as path:
        chunks = list(file_chunks(Path(path)))
    corpus = open_corpus(resolve_location(settings), DEMO_CORPUS, create=True)
    if corpus.count() < len(chunks):
        ingest(corpus.store, chunks)
        corpus.invalidate()
    return corpus.count()
