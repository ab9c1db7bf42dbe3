"""``agentrt demo`` (what ``make run`` shows): the router at work on the embedded model, checked against
the known answers, nothing staged.

The questions (``agentrt/data/demo_questions.jsonl``) were picked by measuring the embedded model, and
the demo shows what happens, right or wrong: the router chooses every route (a route given by the demo is
labelled "forced"); each answer with a known gold answer is marked right or wrong; a question's
``compare`` routes run again, forced, beside the router's choice (plan vs direct: what searching the index
buys);
``unanswerable`` questions are right only when the agent abstains. It ends with next steps.

Item fields: ``question``; optional ``answer`` (the gold), ``verifier`` (``numeric``, ``yes_no`` or
``contains``; default from the gold), ``budget``, ``compare`` (routes to force for comparison),
``unanswerable`` (bool).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from importlib import resources
from pathlib import Path
from typing import Any
from agentrt.core.config import Settings

DEMO_CORPUS = "sample"  # the collection the demo (and the README's examples) index the bundled corpus into


def register(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("demo", help="the router at work on the embedded model: sample questions, checked answers, "
                                    "plan over the bundled corpus vs direct, next steps")
    d.add_argument("--budget", type=int, default=1024, help="token budget of questions without their own (default 1024)")
    d.add_argument("--policy", help="policy backend spec (default hf:embedded)")
    from agentrt.app.commands.run import add_tier_arg

    add_tier_arg(d)
    d.add_argument("--no-tiers", action="store_true",
                   help="skip the second part, where the router also chooses the model tier (default: it runs when "
                        "the second embedded model, Qwen2.5-Coder-0.5B, is installed, as `make venv` does)")
    d.set_defaults(func=cmd_demo)


def load_questions() -> list[dict[str, Any]]:
    text = resources.files("agentrt.data").joinpath("demo_questions.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def index_sample_corpus(settings: Settings) -> int:
    """Index agentrt/data/sample_corpus.jsonl into the collection 'sample' (a no-op once done); passages."""
    from agentrt.app.corpus import index_path

    with resources.as_file(resources.files("agentrt.data").joinpath("sample_corpus.jsonl")) as path:
        return index_path(settings, Path(path), name=DEMO_CORPUS)[1]


_YES_NO = re.compile(r"^\W*(yes|no)\b", re.I)


def check(item: dict[str, Any], answer: str, route: str) -> tuple[bool | None, str]:
    """(right?, mark) for an answer: None when there is nothing to check it against."""
    from agentrt.trajectory.rewards import normalize_answer, score

    if item.get("unanswerable"):
        abstained = route == "abstain" or not answer.strip() or "don't know" in answer.lower()
        return (True, "✓ abstained: nobody can know") if abstained else (False, "✗ answered the unknowable")
    gold = item.get("answer")
    if gold is None:
        return None, "-"
    kind = item.get("verifier") or ("yes_no" if str(gold).lower() in ("yes", "no") else
                                     "numeric" if re.fullmatch(r"-?[\d.,]+", str(gold)) else "contains")
    if kind == "numeric":
        ok = score("numeric", answer, str(gold)).score >= 1.0
    elif kind == "yes_no":
        m = _YES_NO.match(answer)
        ok = bool(m) and m.group(1).lower() == str(gold).lower()
    else:  # every word of the gold answer appears in the answer
        ok = set(normalize_answer(str(gold)).split()) <= set(normalize_answer(answer).split())
    return (True, "✓ right") if ok else (False, f"✗ wrong (gold: {gold})")


def _why(result: Any) -> str:
    if result.decision is None:
        return "forced"
    why = result.reason.split(";")[0].split(": ", 1)[-1]
    coverage = (result.decision.get("features") or {}).get("coverage")
    return why + (f"; index covers {coverage:.0%}" if coverage else "")


def cmd_demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from agentrt.app.commands.run import _agent

    console = Console(highlight=False)
    questions = load_questions()
    agent = _agent(args, budget=args.budget)  # every setting checked before anything loads
    agent.settings.corpus = DEMO_CORPUS
    # the first part routes on the policy alone; the second adds the tiers (--tier, the setting, else the default:
    # the second embedded model beside the default policy, agentrt.core.config.default_tiers)
    tiers = None if args.no_tiers else dict(agent.settings.tiers)
    agent.settings.tiers = {}
    t0 = time.perf_counter()
    with console.status("indexing the bundled sample corpus (239 HotpotQA paragraphs, embedded ChromaDB; once)..."):
        passages = index_sample_corpus(agent.settings)
    with console.status(f"loading {agent.settings.policy} ..."):
        policy = agent.policy
    from memory.corpus import resolve_location

    console.print(f"[bold]agentrt demo[/bold] — policy {policy.name} ({agent.settings.policy}) on the CPU; corpus "
                  f"'{DEMO_CORPUS}': {passages} passages (239 HotpotQA paragraphs) in {resolve_location(agent.settings)}")
    table = Table(title="the router chooses the route for each question", show_lines=True)
    for col in ("question", "route (why)", "answer", "check", "tokens / budget", "s"):
        table.add_column(col, overflow="fold")
    compare = Table(title="the same questions on other routes, forced, for comparison", show_lines=True)
    for col in ("question", "route", "answer", "check", "tokens / budget", "s"):
        compare.add_column(col, overflow="fold")
    right = checked = 0
    routers: set[str] = set()
    for item in questions:
        budget = item.get("budget", args.budget)
        started = time.perf_counter()
        with console.status(f"answering: {item['question']}"):
            r = agent.run(item["question"], budget=budget)
        ok, mark = check(item, r.answer, r.route)
        right, checked = right + bool(ok), checked + (ok is not None)
        routers.add((r.decision or {}).get("router", "?"))
        table.add_row(item["question"], f"{r.route} ({_why(r)})", _answer(agent, r), _style(ok, mark),
                      f"{r.usage.total_tokens} / {budget}", f"{time.perf_counter() - started:.1f}")
        for route in [x for x in item.get("compare", []) if x != r.route]:
            started = time.perf_counter()
            with console.status(f"for comparison, {route}: {item['question']}"):
                f = agent.run(item["question"], budget=budget, route=route)
            ok, mark = check(item, f.answer, f.route)
            compare.add_row(item["question"], f"{route} (forced)", _answer(agent, f), _style(ok, mark),
                            f"{f.usage.total_tokens} / {budget}", f"{time.perf_counter() - started:.1f}")
    console.print(table)
    if compare.row_count:
        console.print(compare)
    console.print(f"routes chosen by the {', '.join(sorted(routers))} router (setting router = "
                  f"{agent.settings.router}); {right} of its {checked} checked answers right; {time.perf_counter() - t0:.0f} s; "
                  f"every run is a trajectory in {agent.writer.path}")
    if tiers:
        tier_demo(console, agent, tiers, questions, args.budget)
    console.print(NEXT_STEPS)
    return 0


def tier_demo(console: Any, agent: Any, tiers: dict[str, str], questions: list[dict[str, Any]], default_budget: int) -> None:
    """The same questions with a model tier beside the policy: the router chooses the route and the model."""
    from rich.table import Table

    from agentrt.app.agent import Agent
    from agentrt.core.types import BASE_TIER, TIER_ROUTES, split_action, tier_action
    from agentrt.router.tiers import seconds_per_token

    settings = agent.settings.model_copy(update={"tiers": tiers})
    tiered = Agent(settings, policy=agent.policy)
    with console.status(f"loading the tiers {', '.join(f'{k} ({v})' for k, v in tiers.items())} (the first time: "
                        "assembled, checked and converted once, ~3 min) ..."):
        for name in tiers:
            tiered.tier(name)
    speeds = "; ".join(f"{t} {s:.3f} s/token ({how})" if s else f"{t} ({how})"
                       for t, (s, how) in seconds_per_token(settings).items())
    table = Table(title=f"with a second model tier ({', '.join(tiers)}): the router chooses the route and the model; "
                        f"each action priced in seconds ({speeds})", show_lines=True)
    for col in ("question", "action (why)", "answer", "check", "tokens / budget", "s"):
        table.add_column(col, overflow="fold")
    deciders: set[str] = set()
    for item in questions:
        budget = item.get("budget", default_budget)
        started = time.perf_counter()
        with console.status(f"answering, tiers {', '.join(tiers)}: {item['question']}"):
            r = tiered.run(item["question"], budget=budget)
        decision = r.decision or {}
        deciders.add(str(decision.get("router_version") or decision.get("router", "?")))
        ok, mark = check(item, r.answer, r.route.partition("@")[0])
        table.add_row(item["question"], f"{r.route} ({_why(r)})", _answer(tiered, r), _style(ok, mark),
                      f"{r.usage.total_tokens} / {budget}", f"{time.perf_counter() - started:.1f}")
        route, chosen_tier = split_action(r.route)
        for other in [t for t in (BASE_TIER, *tiers) if t != chosen_tier] if route in TIER_ROUTES else []:
            action, started = tier_action(route, other), time.perf_counter()
            with console.status(f"for comparison, {action}: {item['question']}"):
                f = tiered.run(item["question"], budget=budget, route=action)
            ok, mark = check(item, f.answer, route)
            table.add_row("", f"{action} (forced: the same route on the other model)", _answer(tiered, f),
                          _style(ok, mark), f"{f.usage.total_tokens} / {budget}", f"{time.perf_counter() - started:.1f}")
    console.print(table)
    from agentrt.router.registry import settings_fingerprint

    console.print(f"actions chosen by the router {', '.join(sorted(deciders))} for the policy "
                  f"{settings_fingerprint(settings, tiered.policy).model}; it learns your own questions' best model "
                  "with `agentrt learn SUITE --every-action` (docs/routing.md)")


def _answer(agent: Any, result: Any) -> str:
    """The answer, and the titles of the passages it cites (the plan route)."""
    from agentrt.app.corpus import titles

    text = result.answer or "(no answer)"
    if result.citations:
        cited = "; ".join(s["title"] or s["id"] for s in titles(agent.settings, result.citations))
        text += f"\n[dim]sources: {cited}[/dim]"
    return text


def _style(ok: bool | None, mark: str) -> str:
    return mark if ok is None else f"[green]{mark}[/green]" if ok else f"[red]{mark}[/red]"


NEXT_STEPS = """
[bold]next steps[/bold]
  agentrt run --corpus sample --route plan --budget 4000 "Who is the director of the film Sinister?"
  agentrt chat --corpus sample                    chat in the terminal (/help inside)
  agentrt serve --corpus sample --port 8000       an OpenAI-compatible server (/v1/chat/completions)
  agentrt index YOUR_DOCS/ --collection mydocs    then --corpus mydocs (or --corpus YOUR_DOCS/ directly)
  agentrt eval --suite gsm8k --router rules --router fixed:direct --limit 20 --out runs/g
  agentrt learn --help                            train the router from your own runs' rewards"""
