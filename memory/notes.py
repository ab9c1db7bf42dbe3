"""Notes: free-text memory for the ``memory_read`` / ``memory_write`` tools (tools.memory.NoteStore).

``add(text, metadata) -> id`` (content-hash id: saving the same note twice stores it once) and
``search(query, k) -> [Hit]``. ``last_step`` holds the memory_op record of the latest operation.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from agentrt.core.errors import InputError
from memory.protocol import Hit, MemoryStore, memory_op

KIND = "note"


class Notes:
    """A NoteStore over any MemoryStore (notes are tagged kind="note", so a store can be shared)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.last_step: dict[str, Any] | None = None

    def add(self, text: str, metadata: dict[str, Any] | None = None) -> str:
        if not isinstance(text, str) or not text.strip():
            raise InputError("a note needs non-empty text")
        nid = "note-" + hashlib.sha1(text.strip().encode()).hexdigest()[:20]
        meta = {k: v for k, v in (metadata or {}).items() if isinstance(v, (str, int, float, bool))}
        self.store.upsert([nid], [text.strip()], [{**meta, "kind": KIND, "ts": time.time()}])
        self.last_step = memory_op("note.add", store=self.store.name, id=nid)
        return nid

    def search(self, query: str, k: int = 3) -> list[Hit]:
        hits = self.store.search(query, k, {"kind": KIND})
        self.last_step = memory_op("note.search", store=self.store.name, query=query, k=k, ids=[h.id for h in hits])
        return hits
