"""The ``search`` tool: corpus / memory search, returning passages with ids and titles to cite.

tools/ never imports memory/: the runtime hands in any ``Searcher`` (``searcher(query, k)`` -> hits,
each a dict or object with ``id``, ``title``, ``text`` and ``score``). A call's ``ToolResult`` carries
the hits twice: as text for the model (``output``) and as ``{id, title, text, score}`` dicts for the
runtime (``data``), so the plan route cites passages without parsing the text back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from agentrt.core.errors import InputError
from agentrt.core.text import legacy_rendering, quote_untrusted
from tools._hits import as_hit
from tools.base import Tool, ToolError, ToolResult, tool


class Searcher(Protocol):
    """Anything that returns the ``k`` best hits for a query."""

    def __call__(self, query: str, k: int) -> Sequence[Any]: ...


def hits_result(hits: Sequence[Any], passage_chars: int, *, source: str = "search") -> ToolResult:
    """``hits`` as the model reads them (``output``: one quoted ``<document id=... source=... title=...
    score=...>`` block per hit, see ``agentrt.core.text.quote_untrusted``) and as the runtime uses them
    (``data``: a list of ``{id, title, text, score}`` dicts). Retrieved text is data, not orders: the
    block keeps it from closing its own frame, the tool loop's system prompt says so."""
    data = [as_hit(h, passage_chars) for h in hits]
    if legacy_rendering():  # the injection benchmark's "before" baseline
        return ToolResult("\n\n".join(_legacy_block(h) for h in data) or "no results", data=data)
    blocks = [quote_untrusted(h["text"], id=h["id"], source=source, title=h["title"] or None,
                              score=None if h["score"] is None else f"{h['score']:.3f}") for h in data]
    return ToolResult("\n".join(blocks) if blocks else "no results", data=data)


def _legacy_block(h: dict[str, Any]) -> str:
    head = f"[{h['id']}] {h['title']}".rstrip()
    if h["score"] is not None:
        head += f" (score {h['score']:.3f})"
    return f"{head}\n{h['text']}"


def format_hits(hits: Sequence[Any], passage_chars: int) -> str:
    """Just the text of ``hits_result``."""
    return hits_result(hits, passage_chars).output


def make_search_tool(searcher: Searcher, *, name: str = "search", max_k: int = 10,
                     passage_chars: int = 600, timeout_s: float = 30.0) -> Tool:
    """A ``search(query, k)`` tool over ``searcher``; results name their ids so answers can cite them,
    and carry the hits as ``ToolResult.data``."""
    if not callable(searcher):
        raise InputError("make_search_tool needs a callable searcher(query, k) -> hits")

    @tool(name=name, timeout_s=timeout_s, max_output_chars=max_k * (passage_chars + 200))
    def search(query: str, k: int = 5) -> ToolResult:
        """Search the knowledge base and return the best passages with their ids and titles.

        Args:
            query: What to look for, in a few words.
            k: How many passages to return (1-10).
        """
        if not query.strip():
            raise ToolError("the query is empty; pass a few words to search for")
        return hits_result(list(searcher(query, max(1, min(k, max_k))))[:max_k], passage_chars)

    return search
