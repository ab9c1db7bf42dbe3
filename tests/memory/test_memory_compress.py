"""Context compression: stays under the limit, spends inside the budget, archives what it removes."""

from __future__ import annotations

import pytest

from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.budget import Budget
from agentrt.core.errors import InputError
from agentrt.core.types import Message
from memory.compress import SUMMARY_PREFIX, compress_messages

TOPICS = ["the weather", "a recipe for soup", "train times", "a football match", "the garden", "a new phone"]


def conversation_turn(i: int) -> list[Message]:
    if i == 2:
        return [Message("user", "Please remember that my locker code is 4417."), Message("assistant", "Noted: locker code 4417.")]
    topic = TOPICS[i % len(TOPICS)]
    return [Message("user", f"Turn {i}: tell me something short about {topic}."),
            Message("assistant", f"Here is a short remark about {topic}, number {i}.")]


def words(messages: list[Message]) -> int:
    return sum(len(m.content.split()) + 4 for m in messages)


def run_conversation(store, limit: int, count_tokens, summarize, **kw):
    msgs = [Message("system", "You are a helpful assistant.")]
    steps = []
    for i in range(1, 31):
        msgs += conversation_turn(i)
        res = compress_messages(msgs, count_tokens=count_tokens, summarize=summarize, store=store, limit=limit, **kw)
        msgs = res.messages
        if res.step:
            steps.append(res.step)
        assert count_tokens(msgs) <= limit, f"turn {i}: {count_tokens(msgs)} tokens"
    return msgs, steps


def test_thirty_turns_stay_under_limit_and_turn_two_is_retrievable(mem_store):
    summaries = []

    def summarize(old: list[Message]) -> str:
        summaries.append(len(old))
        return f"We chatted about {len(old)} messages of small talk."

    msgs, steps = run_conversation(mem_store, 120, words, summarize)
    assert steps and all(s["kind"] == "memory_op" and s["op"] == "compress" for s in steps)
    assert msgs[0].role == "system" and msgs[1].content.startswith(SUMMARY_PREFIX)
    assert all(s["tokens_after"] <= 120 < s["tokens_before"] for s in steps)
    hits = mem_store.search("What is my locker code?", k=3, where={"kind": "message"})
    assert any("4417" in h.text for h in hits)
    # Every removed message is archived: 60 conversation messages, minus those still in context.
    in_context = {m.content for m in msgs}
    archived = {h.text.split(": ", 1)[1] for h in mem_store.get([i for s in steps for i in s["ids"]])}
    for i in range(1, 31):
        for m in conversation_turn(i):
            assert m.content in in_context or m.content in archived


def test_under_limit_is_untouched(mem_store):
    msgs = [Message("user", "hi")]
    res = compress_messages(msgs, count_tokens=words, summarize=lambda old: "x", store=mem_store, limit=100)
    assert res.messages == msgs and res.step is None and mem_store.count() == 0


def test_backend_summary_is_charged_to_the_budget(mem_store):
    backend = ScriptedBackend(["They discussed soup and trains."])
    budget = Budget(10_000)
    msgs = [Message("user", "word " * 50), Message("assistant", "ok"), Message("user", "next"), Message("assistant", "fine")]
    res = compress_messages(msgs, count_tokens=backend.count_tokens, summarize=backend, store=mem_store,
                            limit=40, keep_last=2, budget=budget, summary_tokens=16)
    assert res.step["summary"] == "They discussed soup and trains."
    assert budget.spent == res.step["usage"]["total_tokens"] > 0 and budget.reserved == 0
    assert len(backend.calls) == 1 and backend.calls[0][1].max_tokens == 16


def test_no_budget_left_archives_with_a_stub(mem_store):
    backend = ScriptedBackend(["never used"])
    budget = Budget(5)
    msgs = [Message("user", "word " * 50), Message("assistant", "ok"), Message("user", "next")]
    res = compress_messages(msgs, count_tokens=backend.count_tokens, summarize=backend, store=mem_store,
                            limit=20, keep_last=1, budget=budget)
    assert res.step["fallback"] == "budget" and backend.calls == [] and budget.spent == 0
    assert "2 earlier messages were archived" in res.messages[0].content
    assert mem_store.count() == 2


def test_bad_arguments(mem_store):
    with pytest.raises(InputError, match="limit"):
        compress_messages([Message("user", "x")], count_tokens=words, summarize=lambda o: "s", store=mem_store, limit=0)
    with pytest.raises(InputError, match="summarize must be"):
        compress_messages([Message("user", "x " * 50)], count_tokens=words, summarize=42, store=mem_store, limit=5)


def test_real_model_summarizes_a_long_conversation(embedded, mem_store):
    """SmolLM2-135M writes the summaries; the budget bounds their cost; turn 2 stays retrievable."""
    budget = Budget(6000)
    msgs, steps = run_conversation(mem_store, 450, embedded.count_tokens, embedded, budget=budget, summary_tokens=40)
    assert 1 <= len(steps) <= 4
    assert all(s["fallback"] is None and s["summary"] for s in steps)
    assert budget.spent == sum(s["usage"]["total_tokens"] for s in steps) <= budget.total
    hits = mem_store.search("locker code", k=3, where={"kind": "message"})
    assert any("4417" in h.text for h in hits)
