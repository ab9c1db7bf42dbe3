"""Structured output on the transformers backend: 50 prompts through the dynamic batcher, every one
parses as JSON of the requested schema (SmolLM2-135M cannot do this unconstrained: 0/20 in FACTS.md)."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentrt.core.types import GenParams, Message

pytestmark = pytest.mark.slow
SCHEMA = {
    "type": "object",
    "properties": {
        "route": {"enum": ["direct", "reason", "plan", "ask", "abstain"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "steps": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 2},
    },
    "required": ["route", "confidence", "steps"],
    "additionalProperties": False,
}
TOPICS = ["the capital of France", "17 * 23", "how rainbows form", "the tallest mountain", "a haiku about tea",
          "the boiling point of water", "who wrote Hamlet", "the speed of light", "how to sort a list",
          "the largest ocean"]


def test_fifty_prompts_all_parse_as_the_schema(embedded):
    prompts = [f"Plan how to answer: {t}. Variant {i}." for i in range(5) for t in TOPICS]

    async def go():
        params = GenParams(max_tokens=96, json_schema=SCHEMA)
        return await asyncio.gather(*[embedded.chat([Message("user", p)], params) for p in prompts])

    outs = asyncio.run(go())
    assert len(outs) == 50
    for out in outs:
        assert out.finish_reason == "stop", out.text  # the grammar closed the object within max_tokens
        data = json.loads(out.text)
        assert set(data) == {"route", "confidence", "steps"}
        assert data["route"] in SCHEMA["properties"]["route"]["enum"]
        assert 0 <= data["confidence"] <= 1 and isinstance(data["steps"], list) and len(data["steps"]) <= 2


def test_choice_list_returns_one_of_the_choices(embedded):
    async def go():
        params = GenParams(max_tokens=8, choices=["direct", "reason", "plan"])
        return await asyncio.gather(*[embedded.chat([Message("user", f"Route for: {t}")], params) for t in TOPICS])

    assert all(o.text in ("direct", "reason", "plan") for o in asyncio.run(go()))
