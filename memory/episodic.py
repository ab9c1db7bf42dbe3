"""Episodic memory: finished runs (question, route, answer, reward, tokens, trajectory id), retrievable
by question similarity, so the router/planner can look at how similar questions went before.

    episodes = EpisodicMemory(open_store(location, "episodes"))
    step = episodes.add_run("What is 2+2?", route="direct", answer="4", reward=1.0, tokens=31, trajectory_id="t1")
    for ep in episodes.similar("What is 3+3?", k=3): ...

Writes return a ``memory_op`` record (a trajectory step); ``last_step`` holds the record of the latest
operation, reads included.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass
from typing import Any

from agentrt.core.errors import InputError
from agentrt.core.types import ROUTES
from memory.protocol import MemoryStore, memory_op

KIND = "episode"


@dataclass(slots=True)
class Episode:
    """One finished run as remembered. ``score`` is the similarity to the query that found it."""

    id: str
    question: str
    route: str
    answer: str
    reward: float | None
    tokens: int
    trajectory_id: str | None
    ts: float
    score: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class EpisodicMemory:
    """Past runs in a MemoryStore (one item per run; the question is the searchable text)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.last_step: dict[str, Any] | None = None

    def add_run(
        self,
        question: str,
        route: str,
        answer: str,
        *,
        reward: float | None = None,
        tokens: int = 0,
        trajectory_id: str | None = None,
    ) -> dict[str, Any]:
        """Remember a finished run. The same trajectory id stored twice replaces the first record
        (a reward that arrives later updates it). Returns the memory_op step."""
        if not isinstance(question, str) or not question.strip():
            raise InputError("cannot remember a run with an empty question")
        if route not in ROUTES:
            raise InputError(f"unknown route {route!r}; use one of {', '.join(ROUTES)}")
        if reward is not None and not isinstance(reward, (int, float)):
            raise InputError(f"reward must be a number or None, got {reward!r}")
        if not isinstance(tokens, int) or tokens < 0:
            raise InputError(f"tokens must be a non-negative integer, got {tokens!r}")
        ts = time.time()
        key = trajectory_id or f"{question}\x00{answer}\x00{ts}"
        eid = "ep-" + hashlib.sha1(key.encode()).hexdigest()[:20]
        meta: dict[str, Any] = {"kind": KIND, "route": route, "answer": answer, "tokens": tokens, "ts": ts}
        if reward is not None:
            meta["reward"] = float(reward)  # Chroma metadata cannot hold None: absent means unknown
        if trajectory_id:
            meta["trajectory_id"] = trajectory_id
        self.store.upsert([eid], [question], [meta])
        self.last_step = memory_op(
            "episode.add", store=self.store.name, id=eid, route=route, reward=reward, trajectory_id=trajectory_id
        )
        return self.last_step

    def add_result(self, question: str, result: Any, *, reward: float | None = None) -> dict[str, Any]:
        """Remember an ``agentrt.Result`` (duck-typed: route, answer, usage.total_tokens, trajectory_id)."""
        usage = getattr(result, "usage", None)
        return self.add_run(
            question, result.route, result.answer, reward=reward,
            tokens=int(getattr(usage, "total_tokens", 0) or 0), trajectory_id=getattr(result, "trajectory_id", None),
        )

    def similar(
        self, question: str, k: int = 5, *, route: str | None = None, min_reward: float | None = None
    ) -> list[Episode]:
        """The ``k`` past runs whose questions are most similar, best first; optionally only one
        route, or only runs whose known reward is at least ``min_reward``."""
        clauses: list[dict[str, Any]] = [{"kind": KIND}]
        if route:
            clauses.append({"route": route})
        if min_reward is not None:
            clauses.append({"reward": {"$gte": float(min_reward)}})
        where = clauses[0] if len(clauses) == 1 else {"$and": clauses}
        hits = self.store.search(question, k, where)
        out = [_episode(h.id, h.text, h.metadata, h.score) for h in hits]
        self.last_step = memory_op(
            "episode.similar", store=self.store.name, query=question, k=k, ids=[e.id for e in out]
        )
        return out


def _episode(id: str, question: str, m: dict[str, Any], score: float) -> Episode:
    reward = m.get("reward")
    return Episode(
        id=id,
        question=question,
        route=str(m.get("route", "")),
        answer=str(m.get("answer", "")),
        reward=float(reward) if reward is not None else None,
        tokens=int(m.get("tokens", 0)),
        trajectory_id=m.get("trajectory_id"),  # type: ignore[arg-type]
        ts=float(m.get("ts", 0.0)),
        score=score,
    )
