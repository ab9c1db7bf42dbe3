"""The ``memory_read`` / ``memory_write`` tools over any store that follows ``NoteStore``.

tools/ never imports memory/: the runtime hands in a store (memory/'s own, or an adapter) with
``search(query, k)`` -> hits (id/title/text/score) and ``add(text, metadata)`` -> id. ``memory_read``
returns the notes as text and, like ``search``, as structured hits in ``ToolResult.data``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from agentrt.core.errors import InputError
from tools.base import Tool, ToolError, ToolResult, tool
from tools.search import hits_result


class NoteStore(Protocol):
    def search(self, query: str, k: int) -> Sequence[Any]: ...

    def add(self, text: str, metadata: dict[str, Any]) -> str: ...


def make_memory_tools(store: NoteStore, *, max_note_chars: int = 2000, passage_chars: int = 400,
                      source: str = "agent") -> tuple[Tool, Tool]:
    """``(memory_read, memory_write)`` over ``store``. Notes are tagged with ``source`` on write."""
    if not (callable(getattr(store, "search", None)) and callable(getattr(store, "add", None))):
        raise InputError("make_memory_tools needs a store with search(query, k) and add(text, metadata)")

    @tool(timeout_s=30)
    def memory_read(query: str, k: int = 3) -> ToolResult:
        """Recall notes saved in earlier turns or runs that match the query.

        Args:
            query: What to recall, in a few words.
            k: How many notes to return (1-10).
        """
        # the notes as text for the model and as {id, title, text, score} dicts (ToolResult.data)
        return hits_result(list(store.search(query, max(1, min(k, 10)))), passage_chars, source="memory")

    @tool(timeout_s=30)
    def memory_write(note: str) -> str:
        """Save a short note for later turns (a fact learned, a user preference).

        Args:
            note: The note, one or two sentences.
        """
        if not note.strip():
            raise ToolError("the note is empty")
        if len(note) > max_note_chars:
            raise ToolError(f"the note is longer than {max_note_chars} characters; shorten it")
        return f"saved as {store.add(note.strip(), {'source': source})}"

    return memory_read, memory_write
