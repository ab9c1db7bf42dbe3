"""``agentrt run`` (one question) and ``agentrt demo`` (the sample questions ``make run`` shows)."""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources

from agentrt.core.types import ROUTES


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="answer one question")
    p.add_argument("question")
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
    d.add_argument("--budget", type=int, default=1024)
    d.set_defaults(func=cmd_demo)


def _agent(args: argparse.Namespace):
    from agentrt.app.agent import Agent
    from agentrt.core.config import load_settings

    from agentrt.backends import parse_spec

    settings = load_settings(args.config, policy=getattr(args, "policy", None), planner=getattr(args, "planner", None),
                             router=getattr(args, "router", None))
    for spec in (settings.policy, settings.planner):
        if spec is not None:
            parse_spec(spec)  # a bad spec is a one-line error now, not after loading the other model
    return Agent(settings)


def cmd_run(args: argparse.Namespace) -> int:
    agent = _agent(args)
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
