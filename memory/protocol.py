"""The memory vocabulary: the ``MemoryStore`` protocol, scored hits, and memory-op records.

Light on purpose (stdlib only): planners, tools and the runtime import it without pulling ChromaDB.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Metadata = dict[str, str | int | float | bool]


@dataclass(slots=True)
class Hit:
    """One stored item as returned by a search or a get. ``score`` is higher-is-better (cosine
    similarity for vector search, the fused score for hybrid search, 1.0 for a plain ``get``)."""

    id: str
    text: str
    score: float = 1.0
    metadata: Metadata = field(default_factory=dict)

    @property
    def title(self) -> str:
        return str(self.metadata.get("title", ""))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "text": self.text, "score": self.score, "metadata": self.metadata}


@runtime_checkable
class MemoryStore(Protocol):
    """A named collection of texts with vectors. Every store passes tests/memory/test_conformance.py.

    * ``add`` refuses ids that exist already (or repeat within the call): InputError, nothing written.
    * ``upsert`` inserts or replaces.
    * ``search`` returns at most ``k`` hits, best first; ``where`` filters on metadata equality
      (Chroma's filter syntax, e.g. ``{"kind": "fact"}`` or ``{"$and": [...]}``).
    * ``get`` returns the hits for the ids that exist, in the order asked; missing ids are left out.
    * ``delete`` of an unknown id is a no-op.
    """

    name: str

    def add(self, ids: list[str], texts: list[str], metadatas: list[Metadata] | None = None) -> None: ...

    def upsert(self, ids: list[str], texts: list[str], metadatas: list[Metadata] | None = None) -> None: ...

    def search(self, query: str, k: int = 10, where: dict[str, Any] | None = None) -> list[Hit]: ...

    def get(self, ids: list[str]) -> list[Hit]: ...

    def delete(self, ids: list[str]) -> None: ...

    def count(self) -> int: ...


def memory_op(op: str, **fields: Any) -> dict[str, Any]:
    """A memory operation as a trajectory step: ``{"kind": "memory_op", "op": ..., "ts": ..., ...}``."""
    return {"kind": "memory_op", "op": op, "ts": time.time(), **fields}
