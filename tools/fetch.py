"""The ``fetch`` tool: a whole document by id (an id that ``search`` returned).

The runtime hands in a ``Fetcher``: ``fetcher(doc_id)`` -> a document (dict or object with ``id``,
``title``, ``text``) or None when there is no such id. A call's ``ToolResult.data`` is the document as
``{id, title, text, truncated}``.
"""

from __future__ import annotations

from typing import Any, Protocol

from agentrt.core.errors import InputError
from agentrt.core.text import legacy_rendering, quote_untrusted
from tools._hits import field
from tools.base import Tool, ToolError, ToolResult, tool


class Fetcher(Protocol):
    def __call__(self, doc_id: str) -> Any | None: ...


def make_fetch_tool(fetcher: Fetcher, *, name: str = "fetch", max_chars: int = 4000,
                    timeout_s: float = 30.0) -> Tool:
    """A ``fetch(doc_id)`` tool over ``fetcher``; long documents are cut to ``max_chars``."""
    if not callable(fetcher):
        raise InputError("make_fetch_tool needs a callable fetcher(doc_id) -> document or None")

    @tool(name=name, timeout_s=timeout_s, max_output_chars=max_chars + 200)
    def fetch(doc_id: str) -> ToolResult:
        """Fetch one document by the id a search result showed in brackets.

        Args:
            doc_id: The document id, e.g. "doc-17".
        """
        doc = fetcher(doc_id.strip().strip("[]"))
        if doc is None:
            raise ToolError(f"no document with id {doc_id!r}; use an id from a search result")
        text = str(field(doc, "text", "") or "")
        cut = " [truncated]" if len(text) > max_chars else ""
        data = {"id": str(field(doc, "id", doc_id)), "title": str(field(doc, "title", "") or ""),
                "text": text[:max_chars], "truncated": bool(cut)}
        if legacy_rendering():  # the injection benchmark's "before" baseline
            return ToolResult(f"[{data['id']}] {data['title']}".rstrip() + f"\n{text[:max_chars]}{cut}", data=data)
        # quoted as data (agentrt.core.text): the document cannot close its own block
        return ToolResult(quote_untrusted(data["text"] + cut, id=data["id"], source="fetch",
                                          title=data["title"] or None), data=data)

    return fetch
