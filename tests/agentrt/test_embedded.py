"""The real embedded model (SmolLM2-135M-Instruct, fp32, CPU) through the transformers backend."""

import asyncio
import json

import pytest

from agentrt.core.types import GenParams, Message

pytestmark = pytest.mark.slow

FRANCE = [Message("user", "What is the capital of France?")]


def test_greedy_answer_is_paris_and_matches_generate(embedded):
    import torch

    c = embedded.chat_sync(FRANCE, GenParams(max_tokens=32))
    assert "Paris" in c.text
    assert c.finish_reason == "stop"
    assert c.usage.prompt_tokens == len(c.prompt_token_ids) == embedded.count_tokens(FRANCE)
    assert c.usage.completion_tokens == len(c.choices[0].token_ids) == len(c.choices[0].logprobs)
    assert all(lp <= 0 for lp in c.choices[0].logprobs)
    # Our decode loop gives exactly what transformers' own greedy generate gives.
    ids = torch.tensor([c.prompt_token_ids])
    ref = embedded.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, do_sample=False)
    assert ref[0, ids.shape[1]:].tolist() == c.choices[0].token_ids


def test_concurrent_requests_share_forward_passes(embedded):
    """8 concurrent requests decode as one batch; each gets the same tokens it gets alone."""
    questions = [f"Name a famous {x}." for x in ("river", "city", "painter", "song", "planet", "tree", "car", "poet")]
    params = GenParams(max_tokens=12)
    alone = [embedded.chat_sync([Message("user", q)], params).choices[0].token_ids for q in questions[:2]]
    before = embedded.stats.forward_passes, embedded.stats.batches

    async def all_at_once():
        return await asyncio.gather(*(embedded.chat([Message("user", q)], params) for q in questions))

    results = asyncio.run(all_at_once())
    passes = embedded.stats.forward_passes - before[0]
    batches = embedded.stats.batches - before[1]
    assert batches <= 2 and embedded.stats.max_batch_rows >= 4
    assert passes <= 2 * 12, f"{passes} forward passes for 8 x 12 tokens: requests did not share passes"
    assert [r.choices[0].token_ids for r in results[:2]] == alone


def test_wide_threads_default_to_every_core_and_change_no_token(embedded):
    """Prompt passes and multi-row steps use every core by default (the tests pin 1: two test processes share
    the cores); the greedy tokens of a batch are the same at either thread count."""
    from agentrt.backends.hf import HFBackend
    from agentrt.core.config import Settings, all_cores

    assert Settings.model_fields["torch_wide_threads"].default == 0
    assert embedded.wide_threads == 1  # conftest's AGENTRT_TORCH_WIDE_THREADS=1
    questions = [f"Name a famous {x}." for x in ("river", "city", "painter", "song")]
    params = GenParams(max_tokens=12)

    async def all_at_once(backend):
        return await asyncio.gather(*(backend.chat([Message("user", q)], params) for q in questions))

    wide = HFBackend(embedded.path, name="wide")
    try:
        assert wide.wide_threads == all_cores() and wide.threads == 1
        got = [c.choices[0].token_ids for c in asyncio.run(all_at_once(wide))]
        assert wide.stats.batches < len(questions)  # decoded together, on the wide threads
    finally:
        wide.close()
    assert got == [c.choices[0].token_ids for c in asyncio.run(all_at_once(embedded))]


def test_late_request_joins_the_running_batch_and_returns_first(embedded):
    """Continuous batching: a request sent while a long one decodes joins its batch (no wait for it to
    finish), gets exactly the tokens it gets alone, and is answered as soon as its own rows are done."""
    short_q = [Message("user", "Name a famous river.")]
    long_q = [Message("user", "Write a long story about a dragon.")]
    alone_short = embedded.chat_sync(short_q, GenParams(max_tokens=10)).choices[0].token_ids
    alone_long = embedded.chat_sync(long_q, GenParams(max_tokens=60)).choices[0].token_ids
    joined_before, batches_before = embedded.stats.joined, embedded.stats.batches

    async def scenario():
        long = asyncio.ensure_future(embedded.chat(long_q, GenParams(max_tokens=60)))
        while embedded.stats.tokens_generated == tokens_before:  # the long request is decoding
            await asyncio.sleep(0.01)
        short = await embedded.chat(short_q, GenParams(max_tokens=10))
        return short, long.done(), await long

    tokens_before = embedded.stats.tokens_generated
    short, long_was_done, long = asyncio.run(scenario())
    assert embedded.stats.joined == joined_before + 1 and embedded.stats.batches == batches_before + 1
    assert not long_was_done, "the short request waited for the long one"
    assert short.choices[0].token_ids == alone_short
    assert long.choices[0].token_ids == alone_long


def test_models_whose_cache_cannot_merge_prefill_in_one_padded_pass(embedded, monkeypatch):
    """The path for sliding-window caches: one left-padded prompt pass, the same tokens as alone."""
    questions = [[Message("user", f"Name a famous {x}.")] for x in ("river", "mountain painter", "city")]
    params = GenParams(max_tokens=8)
    alone = [embedded.chat_sync(q, params).choices[0].token_ids for q in questions]
    monkeypatch.setattr(embedded.runner, "mergeable", False)
    passes = embedded.stats.forward_passes

    async def together():
        return await asyncio.gather(*(embedded.chat(q, params) for q in questions))

    results = asyncio.run(together())
    assert [r.choices[0].token_ids for r in results] == alone
    assert embedded.stats.forward_passes - passes <= 8  # one prompt pass for all three, then shared steps


def test_prefix_cache_reuses_the_kv_of_an_earlier_prompt(embedded):
    """The next step of a conversation prefills only its new tokens, and decodes what generate decodes."""
    import torch

    first = [Message("system", "You answer questions about geography in one short sentence."), *FRANCE]
    a = embedded.chat_sync(first, GenParams(max_tokens=16))
    follow = [*first, Message("assistant", a.text), Message("user", "And what is the capital of Italy?")]
    cached_before, prompt_before = embedded.stats.prefix_cached_tokens, embedded.stats.prompt_tokens
    b = embedded.chat_sync(follow, GenParams(max_tokens=16))
    assert embedded.stats.prompt_tokens - prompt_before == len(b.prompt_token_ids)
    assert embedded.stats.prefix_cached_tokens - cached_before >= len(a.prompt_token_ids) - 1
    assert "Rome" in b.text
    ids = torch.tensor([b.prompt_token_ids])
    ref = embedded.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False)
    assert ref[0, ids.shape[1]:].tolist() == b.choices[0].token_ids


def test_next_turn_reuses_the_kv_of_the_answer_just_generated(embedded):
    """A batch's finished rows leave their prompt-and-answer KV in the prefix cache: the next turn, which
    starts with that answer, prefills only its new message, and its tokens are still what generate gives
    for the whole prompt."""
    import torch

    questions = [[Message("user", f"Name a famous {x} city in one sentence.")] for x in ("French", "Italian")]

    async def both(msgs, params):
        return await asyncio.gather(*(embedded.chat(m, params) for m in msgs))

    firsts = asyncio.run(both(questions, GenParams(max_tokens=24)))
    follows = [[*q, Message("assistant", c.text), Message("user", "And another one?")]
               for q, c in zip(questions, firsts)]
    cached_before = embedded.stats.prefix_cached_tokens
    seconds = asyncio.run(both(follows, GenParams(max_tokens=12)))
    reused = embedded.stats.prefix_cached_tokens - cached_before
    # more than the earlier prompts: most of each answer came from the cache too
    assert reused > sum(len(c.prompt_token_ids) + len(c.choices[0].token_ids) // 2 for c in firsts)
    for c in seconds:
        ids = torch.tensor([c.prompt_token_ids])
        ref = embedded.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
        assert ref[0, ids.shape[1]:].tolist() == c.choices[0].token_ids


def test_max_tokens_stop_and_n_with_seed(embedded):
    c = embedded.chat_sync(FRANCE, GenParams(max_tokens=3))
    assert c.finish_reason == "length" and len(c.choices[0].token_ids) == 3
    c = embedded.chat_sync(FRANCE, GenParams(max_tokens=32, stop=["Paris"]))
    assert c.finish_reason == "stop" and "Paris" not in c.text
    p = GenParams(max_tokens=16, temperature=1.0, n=3, seed=7)
    a, b = embedded.chat_sync(FRANCE, p), embedded.chat_sync(FRANCE, p)
    assert len(a.choices) == 3
    assert [x.token_ids for x in a.choices] == [x.token_ids for x in b.choices]  # seeded
    assert a.usage.completion_tokens == sum(len(x.token_ids) for x in a.choices)


def test_prefill_continues_the_assistant_message(embedded):
    msgs = FRANCE + [Message("assistant", "The capital of France is")]
    c = embedded.chat_sync(msgs, GenParams(max_tokens=8))
    assert c.text.strip().startswith("Paris")


def test_structured_output_choice_and_json(embedded):
    c = embedded.chat_sync(FRANCE, GenParams(max_tokens=8, choices=["direct", "reason", "plan"]))
    assert c.text in {"direct", "reason", "plan"}
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    c = embedded.chat_sync(FRANCE, GenParams(max_tokens=48, json_schema=schema))
    assert isinstance(json.loads(c.text)["answer"], str)


def test_cancelling_one_request_stops_its_rows_and_spares_the_batch(embedded):
    async def scenario():
        long = asyncio.ensure_future(embedded.chat([Message("user", "Write a long story.")], GenParams(max_tokens=200)))
        short = asyncio.ensure_future(embedded.chat(FRANCE, GenParams(max_tokens=16)))
        await asyncio.sleep(0.5)
        long.cancel()
        return await short, long

    before = embedded.stats.forward_passes
    short, long = asyncio.run(scenario())
    assert "Paris" in short.text and long.cancelled()
    assert embedded.stats.forward_passes - before < 200  # the cancelled request did not decode to its cap
