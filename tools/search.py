"""The ``search`` tool: corpus / memory search, returning passages with ids and titles to cite.

tools/ never imports memory/: the runtime hands in any ``Searcher`` (``searcher(query, k)`` -> hits,
each a dict or object with ``id``, ``title``, ``text`` and ``score``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from agentrt.core.errors import InputError
from tools._hits import clip, field
from tools.base import Tool, ToolError, tool


class Searcher(Protocol):
    """Anything that returns the ``k`` best hits for a query."""

    def __call__(self, query: str, k: int) -> Sequence[Any]: ...


def format_hits(hits: Sequence[Any], passage_chars: int) -> str:
    """One block per hit: ``[id] title (score)`` then the passage. Retrieved text is data, not orders."""
    if not hits:
        return "no results"
    blocks = []
    for hit in hits:
        score = field(hit, "score")
        head = f"[{field(hit, 'id', '?')}] {field(hit, 'title', '') or ''}".rstrip()
        if isinstance(score, (int, float)):
            head += f" (score {score:.3f})"
        blocks.append(f"{head}\n{clip(field(hit, 'text', '') or '', passage_chars)}")
    return "\n\n".join(blocks)


def make_search_tool(searcher: Searcher, *, name: str = "search", max_k: int = 10,
                     passage_chars: int = 600, timeout_s: float = 30.0) -> Tool:
    """A ``search(query, k)`` tool over ``searcher``; results name their ids so answers can cite them."""
    if not callable(searcher):
        raise InputError("make_search_tool needs a callable searcher(query, k) -> hits")

    @tool(name=name, timeout_s=timeout_s, max_output_chars=max_k * (passage_chars + 120))
    def search(query: str, k: int = 5) -> str:
        """Search the knowledge base and return the best passages with their ids and titles.

        Args:
            query: What to look for, in a few words.
            k: How many passages to return (1-10).
        """
        if not query.strip():
            raise ToolError("the query is empty; pass a few words to search for")
        return format_hits(list(searcher(query, max(1, min(k, max_k))))[:max_k], passage_chars)

    return search
