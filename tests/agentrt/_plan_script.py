"""A scripted model for plan-workflow control-flow tests: it answers each kind of call by its schema."""

from __future__ import annotations

import json
from typing import Any

from agentrt.core.types import GenParams, Message

PASSAGES = {
    "p1": ("Arthur's Magazine", "Arthur's Magazine was an American literary periodical first published in 1844."),
    "p2": ("First for Women", "First for Women is a woman's magazine started in 1989."),
    "p3": ("Tom Hanks", "Tom Hanks starred in the film Forrest Gump in 1994."),
    "p4": ("Forrest Gump", "Forrest Gump was directed by Robert Zemeckis."),
}


def searcher(query: str, k: int) -> list[dict[str, Any]]:
    """Word-overlap search over PASSAGES, best first."""
    words = set(query.lower().split())
    scored = sorted(PASSAGES.items(), key=lambda kv: -len(words & set((kv[1][0] + " " + kv[1][1]).lower().split())))
    return [{"id": i, "title": t, "text": x, "score": 1.0} for i, (t, x) in scored[:k]]


def reply(messages: list[Message], params: GenParams) -> str:
    schema = params.json_schema or {}
    props = schema.get("properties", {})
    if "steps" in props:  # the planner: a weak plan (duplicated steps), as the 135M model gives
        return json.dumps({"steps": [{"id": "s1", "question": "what", "depends_on": []},
                                     {"id": "s2", "question": "what", "depends_on": []}]}, separators=(",", ":"))
    if "citations" in props:  # synthesis: first allowed answer, first allowed id
        ans = props["answer"].get("enum", ["an answer"])[0]
        ids = props["citations"].get("items", {}).get("enum", [])[:1]
        return json.dumps({"answer": ans, "citations": ids}, separators=(",", ":"))
    last = messages[-1].content
    if "<tool_response" in last:
        return json.dumps({"name": "final_answer", "arguments": {"answer": "found"}}, separators=(",", ":"))
    query = last.split("Find out:", 1)[-1].splitlines()[0].strip()
    return json.dumps({"name": "search", "arguments": {"query": query, "k": 2}}, separators=(",", ":"))


def wide_reply(messages: list[Message], params: GenParams) -> str:
    """Like ``reply``, but the planner proposes as many distinct steps as its schema admits."""
    steps = (params.json_schema or {}).get("properties", {}).get("steps")
    if steps is None:
        return reply(messages, params)
    return json.dumps({"steps": [{"id": f"s{i}", "question": f"Where was person number {i} born?", "depends_on": []}
                                 for i in range(1, steps["maxItems"] + 1)]}, separators=(",", ":"))
