"""search / fetch / memory_read / memory_write over plain callables and a tiny in-test store."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from agentrt.core.errors import InputError
from tools import ToolResult, execute, tool
from tools.fetch import make_fetch_tool
from tools.memory import make_memory_tools
from tools.search import make_search_tool


@dataclass
class Hit:
    id: str
    title: str
    text: str
    score: float


DOCS = {"d1": Hit("d1", "Paris", "Paris is the capital   of France.", 0.91),
        "d2": Hit("d2", "Lyon", "Lyon is a city in France. " * 50, 0.42)}


def searcher(query: str, k: int) -> list:
    return [h for h in DOCS.values() if any(w.lower() in h.text.lower() for w in query.split())][:k]


def run(tool, args):
    return asyncio.run(execute(tool, args))


def test_search_returns_ids_titles_scores_for_citation():
    search = make_search_tool(searcher, passage_chars=40)
    out = run(search, {"query": "france", "k": 2}).output
    first, second = out.split("\n</document>\n")  # each hit quoted as untrusted data
    assert first == '<document id="d1" source="search" title="Paris" score="0.910">\nParis is the capital of France.'
    assert second.startswith('<document id="d2" source="search" title="Lyon" score="0.420">\nLyon is a city')
    assert second.endswith("…\n</document>")
    assert run(search, {"query": "tokyo"}).output == "no results"
    # the same hits, structured, for the runtime (the plan route cites from these, never from the text)
    assert run(search, {"query": "france", "k": 2}).data == [
        {"id": "d1", "title": "Paris", "text": "Paris is the capital of France.", "score": 0.91},
        {"id": "d2", "title": "Lyon", "text": second.split("\n")[1], "score": 0.42}]
    assert run(search, {"query": "tokyo"}).data == []
    assert run(search, {"query": "  "}).error == "the query is empty; pass a few words to search for"
    dict_hits = make_search_tool(lambda q, k: [{"id": 7, "title": "T", "text": "x", "score": None}])
    assert run(dict_hits, {"query": "x"}).output == '<document id="7" source="search" title="T">\nx\n</document>'
    assert run(dict_hits, {"query": "x"}).data == [{"id": "7", "title": "T", "text": "x", "score": None}]
    with pytest.raises(InputError):
        make_search_tool("not callable")  # type: ignore[arg-type]


def test_fetch_by_id():
    fetch = make_fetch_tool(DOCS.get, max_chars=40)
    assert run(fetch, {"doc_id": "[d1]"}).output == ('<document id="d1" source="fetch" title="Paris">\n'
                                                     'Paris is the capital   of France.\n</document>')
    assert run(fetch, {"doc_id": "[d1]"}).data == {"id": "d1", "title": "Paris", "text": DOCS["d1"].text,
                                                    "truncated": False}
    assert run(fetch, {"doc_id": "d2"}).output.endswith(" [truncated]\n</document>")
    assert run(fetch, {"doc_id": "d2"}).data["truncated"] is True
    assert run(fetch, {"doc_id": "nope"}).error == "no document with id 'nope'; use an id from a search result"


class NoteStore:
    def __init__(self):
        self.notes: list[tuple[str, dict]] = []

    def add(self, text, metadata):
        self.notes.append((text, metadata))
        return f"note-{len(self.notes)}"

    def search(self, query, k):
        return [{"id": f"note-{i + 1}", "title": "", "text": t, "score": 1.0}
                for i, (t, _) in enumerate(self.notes) if query.lower() in t.lower()][:k]


def test_memory_read_write_roundtrip():
    store = NoteStore()
    read, write = make_memory_tools(store, max_note_chars=50)
    assert (read.name, write.name) == ("memory_read", "memory_write")
    assert run(write, {"note": "The user prefers metric units."}).output == "saved as note-1"
    assert store.notes[0][1] == {"source": "agent"}
    assert run(read, {"query": "metric"}).output == ('<document id="note-1" source="memory" score="1.000">\n'
                                                     'The user prefers metric units.\n</document>')
    assert run(read, {"query": "metric"}).data == [
        {"id": "note-1", "title": "", "text": "The user prefers metric units.", "score": 1.0}]
    assert run(write, {"note": "x" * 51}).error.startswith("the note is longer than 50")
    assert run(write, {"note": " "}).error == "the note is empty"
    with pytest.raises(InputError):
        make_memory_tools(object())  # type: ignore[arg-type]


def test_a_tool_may_return_text_with_structured_data():
    @tool(max_output_chars=12)
    def rows(n: int) -> ToolResult:
        """Rows as text and as data.

        Args:
            n: How many rows.
        """
        return ToolResult("\n".join(f"row {i}" for i in range(n)), data=list(range(n)))

    short, long = run(rows, {"n": 2}), run(rows, {"n": 5})
    assert (short.output, short.data, short.truncated) == ("row 0\nrow 1", [0, 1], False)
    assert long.truncated and long.output.endswith(" [truncated]") and long.data == [0, 1, 2, 3, 4]  # text cap only
    failed = run(tool(lambda: ToolResult(error="no"), name="f"), {})
    assert (failed.error, failed.data) == ("no", None)
