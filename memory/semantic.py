"""Semantic memory: facts (subject, relation, value) with provenance and conflict handling.

* A duplicate (same subject + relation + value, compared case- and space-insensitively) is a no-op.
* A contradiction (same subject + relation, a different value) invalidates the old fact and stores
  the new one; the old one stays in the store (``valid=False``, ``superseded_by``), so
  ``history(subject, relation)`` shows every value the fact ever had.
* ``multi=True`` relations (e.g. "likes") keep several values side by side.

Every write returns a ``{"kind": "memory_op", ...}`` record for the trajectory; ``last_step`` holds the
record of the latest operation, reads included.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import asdict, dataclass
from typing import Any

from agentrt.core.errors import InputError
from memory.protocol import Hit, MemoryStore, memory_op

KIND = "fact"
_MAX_VERSIONS = 1000


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s.strip().lower())


def fact_key(subject: str, relation: str) -> str:
    return hashlib.sha1(f"{_norm(subject)}\x00{_norm(relation)}".encode()).hexdigest()[:20]


@dataclass(slots=True)
class Fact:
    """One fact. ``valid`` is False once a newer value superseded it (or it was retracted)."""

    id: str
    subject: str
    relation: str
    value: str
    source: str
    ts: float
    version: int
    valid: bool = True
    superseded_by: str | None = None
    score: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def text(self) -> str:
        return f"{self.subject} {self.relation} {self.value}"


class SemanticMemory:
    """Facts in a MemoryStore; the searchable text is "subject relation value"."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.last_step: dict[str, Any] | None = None

    # -- writing -------------------------------------------------------------------------------
    def assert_fact(
        self, subject: str, relation: str, value: str, *, source: str = "", multi: bool = False
    ) -> dict[str, Any]:
        """Remember that ``subject relation value`` (from ``source``). Returns the memory_op step with
        ``op`` one of ``fact.add``, ``fact.duplicate`` (nothing written) or ``fact.update`` (the old
        value was invalidated; ``replaced`` names it)."""
        for what, s in (("subject", subject), ("relation", relation), ("value", value)):
            if not isinstance(s, str) or not s.strip():
                raise InputError(f"a fact needs a non-empty {what}")
        versions = self._versions(subject, relation)
        current = [f for f in versions if f.valid]
        same = [f for f in current if _norm(f.value) == _norm(value)]
        if same:
            self.last_step = memory_op("fact.duplicate", store=self.store.name, id=same[0].id, source=source)
            return self.last_step
        version = (versions[-1].version + 1) if versions else 1
        if version > _MAX_VERSIONS:
            raise InputError(f"fact '{subject} {relation}' changed {_MAX_VERSIONS} times; store it as multi=True")
        key = fact_key(subject, relation)
        new = Fact(f"fact-{key}-v{version}", subject.strip(), relation.strip(), value.strip(), source, time.time(), version)
        replaced = [] if multi else current
        # New fact first, then invalidate the old: a crash in between leaves two valid versions, which
        # the next write resolves, rather than none.
        self.store.upsert([new.id], [new.text], [_meta(new, key, multi)])
        for old in replaced:
            old.valid, old.superseded_by = False, new.id
            self.store.upsert([old.id], [old.text], [_meta(old, key, multi)])
        op = "fact.update" if replaced else "fact.add"
        self.last_step = memory_op(
            op, store=self.store.name, id=new.id, subject=new.subject, relation=new.relation, value=new.value,
            source=source, replaced=[{"id": f.id, "value": f.value} for f in replaced],
        )
        return self.last_step

    def retract(self, subject: str, relation: str, *, source: str = "") -> dict[str, Any]:
        """Invalidate the current value(s) of a fact, keeping them in the history."""
        key = fact_key(subject, relation)
        gone = [f for f in self._versions(subject, relation) if f.valid]
        for f in gone:
            f.valid = False
            self.store.upsert([f.id], [f.text], [_meta(f, key, False)])
        self.last_step = memory_op(
            "fact.retract", store=self.store.name, ids=[f.id for f in gone], subject=subject, relation=relation,
            source=source,
        )
        return self.last_step

    # -- reading -------------------------------------------------------------------------------
    def current(self, subject: str, relation: str) -> Fact | None:
        """The valid fact for subject + relation (the newest, for a multi relation), or None."""
        valid = [f for f in self._versions(subject, relation) if f.valid]
        self.last_step = memory_op("fact.get", store=self.store.name, subject=subject, relation=relation,
                                   ids=[f.id for f in valid])
        return valid[-1] if valid else None

    def history(self, subject: str, relation: str) -> list[Fact]:
        """Every version of the fact, oldest first (invalid ones included)."""
        return self._versions(subject, relation)

    def search(self, query: str, k: int = 5, *, include_invalid: bool = False) -> list[Fact]:
        """Facts most similar to ``query`` (valid ones only, unless ``include_invalid``)."""
        where: dict[str, Any] = {"kind": KIND} if include_invalid else {"$and": [{"kind": KIND}, {"valid": True}]}
        facts = [_fact(h) for h in self.store.search(query, k, where)]
        self.last_step = memory_op("fact.search", store=self.store.name, query=query, k=k, ids=[f.id for f in facts])
        return facts

    def _versions(self, subject: str, relation: str) -> list[Fact]:
        key = fact_key(subject, relation)
        hits = self.store.search(f"{subject} {relation}", _MAX_VERSIONS, {"key": key})
        return sorted((_fact(h) for h in hits), key=lambda f: f.version)


def _meta(f: Fact, key: str, multi: bool) -> dict[str, Any]:
    m: dict[str, Any] = {
        "kind": KIND, "key": key, "subject": f.subject, "relation": f.relation, "value": f.value,
        "source": f.source, "ts": f.ts, "version": f.version, "valid": f.valid, "multi": multi,
    }
    if f.superseded_by:
        m["superseded_by"] = f.superseded_by
    return m


def _fact(h: Hit) -> Fact:
    m = h.metadata
    return Fact(
        id=h.id, subject=str(m["subject"]), relation=str(m["relation"]), value=str(m["value"]),
        source=str(m.get("source", "")), ts=float(m.get("ts", 0.0)), version=int(m.get("version", 1)),
        valid=bool(m.get("valid", True)), superseded_by=m.get("superseded_by"),  # type: ignore[arg-type]
        score=h.score,
    )
