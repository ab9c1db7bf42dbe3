"""The strategy outcome cache: question x route -> (score, tokens), read from exploration logs.

A strategy step (one route label for a question, reward = verifier score - lambda * tokens / budget) would
otherwise run the route. The cache answers it from runs already logged: every rewarded run of the trajectory
folders (``agentrt learn`` / ``agentrt rollout`` / exploration; read by ``agentrt.train.router.load_examples``,
so the same records, rewards, verdicts and routes as router training) is one observation of its
(question, route) cell; a cell observed several times keeps the mean score, success and tokens.

A cell nobody ran is **missing**; it is never invented silently:

* ``lookup`` (the ``outcomes`` callable of ``agentrt.envs.strategy.StrategyEpisode``: ``(item id or question,
  route) -> (score, tokens) | None``) returns None, so the environment runs the route live, and the caller may
  ``add`` the result and ``save`` it (the cache file grows as JSON lines);
* training (``agentrt.train.strategy``) uses ``estimate``: the cell when there is one, else the documented
  fallback, the mean of the route's cells in the question's family (its suite) over the questions it is allowed
  to see, else the route's mean over them, and counts how often it had to (``imputed`` in the report).

The family of a run is its suite (exploration task keys are ``explore|SUITE|ITEM|SAMPLE``); runs without one are
family ``logged``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrt.core.errors import InputError


def family_of(key: str) -> str:
    """The suite of a run from its task key (``explore|SUITE|ITEM|SAMPLE`` or ``free:ACTION|SUITE|ITEM|SAMPLE``)."""
    parts = key.split("|")
    return parts[1] if len(parts) == 4 and parts[1] else "logged"


def item_of(key: str) -> str:
    """The item id within its suite (``SUITE/ITEM``), or "" without a task key."""
    parts = key.split("|")
    return f"{parts[1]}/{parts[2]}" if len(parts) == 4 else ""


@dataclass
class Cell:
    """The mean outcome of one route on one question over ``n`` logged runs."""

    score: float  # the verifier's score, with partial credit (the reward before the token price)
    success: float  # the verifier's pass/fail verdict (mean over runs)
    tokens: float
    budget: int
    n: int = 1

    def reward(self, lam: float) -> float:
        return self.score - lam * self.tokens / max(1, self.budget)


@dataclass
class OutcomeCache:
    """question x route -> Cell, with each question's family and item id."""

    cells: dict[tuple[str, str], Cell]
    families: dict[str, str]  # question -> family
    items: dict[str, str]  # item id (SUITE/ITEM) -> question

    # -- building ------------------------------------------------------------------------------------------
    @classmethod
    def from_trajectories(cls, paths: Iterable[str | Path]) -> OutcomeCache:
        """The cache of every rewarded run under ``paths`` (trajectory files or folders)."""
        from agentrt.train.router import load_examples

        paths = list(paths)
        if not paths:
            raise InputError("no trajectories given: pass the exploration folders, e.g. --outcomes X/trajectories")
        return cls.from_examples(load_examples(paths))

    @classmethod
    def from_examples(cls, examples: Iterable[Any]) -> OutcomeCache:
        """The cache of router-training ``Example`` rows (``agentrt.train.router.load_examples``)."""
        cache = cls({}, {}, {})
        for e in examples:
            cache.add(e.question, e.action, e.reward, e.tokens, e.budget, success=e.success,
                      family=family_of(e.key), item=item_of(e.key))
        return cache

    def add(self, question: str, route: str, score: float, tokens: float, budget: int, *, success: float | None = None,
            family: str = "logged", item: str = "") -> Cell:
        """One more observation of (question, route): the cell keeps the running mean."""
        success = float(score >= 1.0) if success is None else float(success)
        cell = self.cells.get((question, route))
        if cell is None:
            cell = self.cells[(question, route)] = Cell(float(score), success, float(tokens), int(budget), 1)
        else:
            k = cell.n + 1
            cell.score += (score - cell.score) / k
            cell.success += (success - cell.success) / k
            cell.tokens += (tokens - cell.tokens) / k
            cell.n = k
        self.families.setdefault(question, family)
        if item:
            self.items.setdefault(item, question)
        return cell

    # -- reading -------------------------------------------------------------------------------------------
    def question(self, item_or_question: str) -> str:
        return self.items.get(item_or_question, item_or_question)

    def lookup(self, item_or_question: str, route: str) -> tuple[float, float] | None:
        """(score, tokens) of a cell, or None when it is missing (StrategyEpisode's ``outcomes`` callable)."""
        cell = self.cells.get((self.question(item_or_question), route))
        return None if cell is None else (cell.score, cell.tokens)

    __call__ = lookup

    @property
    def questions(self) -> list[str]:
        return sorted(self.families)

    @property
    def routes(self) -> list[str]:
        return sorted({r for _, r in self.cells})

    def budget(self, question: str) -> int:
        return max((c.budget for (q, _), c in self.cells.items() if q == question), default=1)

    def missing(self, questions: Iterable[str], routes: Iterable[str]) -> list[tuple[str, str]]:
        """The (question, route) cells nobody ran."""
        routes = list(routes)
        return [(q, r) for q in questions for r in routes if (q, r) not in self.cells]

    def means(self, questions: Iterable[str], lam: float) -> dict[tuple[str, str], tuple[float, float]]:
        """Mean (reward, success) of each (family, route) and ("*", route) over the cells of ``questions``:
        the fallback for a missing cell, from the questions a trainer may see (never the held-out ones)."""
        sums: dict[tuple[str, str], list[float]] = {}
        keep = set(questions)
        for (q, r), c in self.cells.items():
            if q in keep:
                for key in ((self.families.get(q, "logged"), r), ("*", r)):
                    s = sums.setdefault(key, [0.0, 0.0, 0.0])
                    s[0] += c.reward(lam)
                    s[1] += c.success
                    s[2] += 1
        return {k: (s[0] / s[2], s[1] / s[2]) for k, s in sums.items()}

    def estimate(self, question: str, route: str, lam: float,
                 means: dict[tuple[str, str], tuple[float, float]]) -> tuple[float, str]:
        """(reward, source) of a label: source ``cache`` (the cell), ``family`` or ``route`` (the means' fallback,
        from ``means``) or ``missing`` (no run of this route anywhere: reward 0, what abstaining earns)."""
        cell = self.cells.get((question, route))
        if cell is not None:
            return cell.reward(lam), "cache"
        fam = means.get((self.families.get(question, "logged"), route))
        if fam is not None:
            return fam[0], "family"
        anywhere = means.get(("*", route))
        return (anywhere[0], "route") if anywhere is not None else (0.0, "missing")

    # -- the cache file (JSON lines, one cell a line; append-friendly) --------------------------------------
    def save(self, path: str | Path) -> None:
        lines = [json.dumps({"question": q, "route": r, "family": self.families.get(q, "logged"),
                             "item": next((i for i, qq in self.items.items() if qq == q), ""), **c.__dict__})
                 for (q, r), c in sorted(self.cells.items())]
        Path(path).write_text("\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> OutcomeCache:
        cache = cls({}, {}, {})
        for i, line in enumerate(Path(path).read_text().splitlines()):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                cell = Cell(float(d["score"]), float(d["success"]), float(d["tokens"]), int(d["budget"]), int(d["n"]))
            except (ValueError, KeyError, TypeError) as e:
                raise InputError(f"{path} line {i + 1} is not an outcome cell ({e}); rebuild the cache from the "
                                 "trajectories (--outcomes DIR)") from None
            cache.cells[(d["question"], d["route"])] = cell
            cache.families.setdefault(d["question"], d.get("family") or "logged")
            if d.get("item"):
                cache.items.setdefault(d["item"], d["question"])
        return cache

    def summary(self) -> dict[str, Any]:
        per_family: dict[str, int] = {}
        for q in self.families:
            per_family[self.families[q]] = per_family.get(self.families[q], 0) + 1
        return {"cells": len(self.cells), "questions": len(self.families), "routes": self.routes,
                "runs": sum(c.n for c in self.cells.values()), "questions_per_family": per_family}


def load_outcomes(paths: Iterable[str | Path]) -> OutcomeCache:
    """A cache from ``--outcomes`` arguments: trajectory files / folders, or cache files (``*.cells.jsonl``)."""
    paths = [Path(p) for p in paths]
    files = [p for p in paths if p.name.endswith(".cells.jsonl")]
    cache = OutcomeCache.from_trajectories([p for p in paths if p not in files]) if len(files) < len(paths) \
        else OutcomeCache({}, {}, {})
    for f in files:
        other = OutcomeCache.load(f)
        for (q, r), c in other.cells.items():
            for _ in range(c.n):
                cache.add(q, r, c.score, c.tokens, c.budget, success=c.success, family=other.families.get(q, "logged"))
        cache.items.update({i: q for i, q in other.items.items() if i not in cache.items})
    return cache
