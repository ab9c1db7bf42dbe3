"""Context compression: when a conversation passes a token threshold, summarize its oldest turns with a
model, replace them by the summary, and archive the originals in a MemoryStore (still searchable).

Takes protocols, not implementations: ``count_tokens(messages) -> int`` (e.g. a backend's
``count_tokens``), ``summarize`` as a ModelBackend (its ``chat`` runs inside the given Budget) or a plain
callable ``(messages) -> str``, and any MemoryStore for the archive.

If the budget cannot pay for a summary, the old turns are still archived and replaced by a short stub
that says where they went: the context shrinks either way and nothing is lost.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrt.core.budget import Budget, chat_within
from agentrt.core.errors import BudgetExceeded, InputError
from agentrt.core.types import GenParams, Message, as_messages
from memory.protocol import MemoryStore, memory_op

SUMMARY_PREFIX = "Summary of earlier turns (originals archived in memory):"
_INSTRUCTION = (
    "Summarize the conversation below in at most five sentences. Keep every name, number, date and "
    "decision. Write only the summary."
)


@dataclass(slots=True)
class Compressed:
    """The result: the new message list, the trajectory step, and the archived ids."""

    messages: list[Message]
    step: dict[str, Any] | None = None
    archived_ids: list[str] = field(default_factory=list)

    @property
    def compressed(self) -> bool:
        return self.step is not None


def _transcript(messages: list[Message]) -> str:
    return "\n".join(f"{m.role}: {m.content}" for m in messages)


async def acompress_messages(
    messages: list[Message] | list[dict[str, Any]],
    *,
    count_tokens: Callable[[list[Message]], int],
    summarize: Any,
    store: MemoryStore,
    limit: int,
    keep_last: int = 4,
    budget: Budget | None = None,
    summary_tokens: int = 96,
    conversation: str = "conversation",
) -> Compressed:
    """Compress ``messages`` when ``count_tokens(messages) > limit`` (else return them unchanged).

    The leading system message and the last ``keep_last`` messages stay; everything between is
    archived to ``store`` (one item per message, metadata kind="message") and replaced by one user
    message holding the summary. ``summarize`` is a ModelBackend (uses ``budget``; greedy,
    ``summary_tokens`` new tokens at most) or a callable ``(messages) -> str`` (sync or async).
    """
    msgs = as_messages(messages)
    if limit < 1:
        raise InputError(f"limit must be >= 1 token, got {limit}")
    if keep_last < 0:
        raise InputError(f"keep_last must be >= 0, got {keep_last}")
    before = count_tokens(msgs)
    if before <= limit:
        return Compressed(msgs)
    head = msgs[:1] if msgs and msgs[0].role == "system" else []
    body = msgs[len(head):]
    keep = min(keep_last, max(len(body) - 1, 0))  # summarize at least one message
    old, tail = body[: len(body) - keep], body[len(body) - keep :]
    if not old:
        return Compressed(msgs)  # only the system message: nothing we may remove

    ids = _archive(store, old, conversation)
    summary, fallback, usage = await _summarize(old, summarize, budget, summary_tokens, count_tokens)
    note = Message("user", f"{SUMMARY_PREFIX} {summary}")
    out = head + [note] + tail
    step = memory_op(
        "compress", store=store.name, conversation=conversation, archived=len(old), ids=ids,
        tokens_before=before, tokens_after=count_tokens(out), summary=summary, fallback=fallback, usage=usage,
    )
    return Compressed(out, step, ids)


def compress_messages(messages: list[Message] | list[dict[str, Any]], **kwargs: Any) -> Compressed:
    """Synchronous ``acompress_messages`` (use the async one from inside an event loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(acompress_messages(messages, **kwargs))
    raise InputError("compress_messages called inside an event loop; await acompress_messages instead")


def _archive(store: MemoryStore, old: list[Message], conversation: str) -> list[str]:
    ids, texts, metas = [], [], []
    for m in old:
        text = f"{m.role}: {m.content}"
        # Content hash: archiving the same message twice (a re-run) does not duplicate it.
        ids.append("msg-" + hashlib.sha1(f"{conversation}\x00{text}".encode()).hexdigest()[:20])
        texts.append(text)
        metas.append({"kind": "message", "role": m.role, "conversation": conversation})
    # One message said twice in the conversation maps to one id: store it once.
    uniq = dict(zip(ids, zip(texts, metas, strict=True), strict=True))
    store.upsert(list(uniq), [t for t, _ in uniq.values()], [m for _, m in uniq.values()])
    return ids


async def _summarize(
    old: list[Message], summarize: Any, budget: Budget | None, max_tokens: int,
    count_tokens: Callable[[list[Message]], int],
) -> tuple[str, str | None, dict[str, int] | None]:
    """(summary, fallback reason or None, usage or None)."""
    if hasattr(summarize, "chat"):  # a ModelBackend
        return await _summarize_with_backend(old, summarize, budget, max_tokens)
    if not callable(summarize):
        raise InputError("summarize must be a ModelBackend or a callable (messages) -> str")
    text = summarize(old)
    if inspect.isawaitable(text):
        text = await text
    text = str(text or "").strip()
    if not text:
        return _stub(old), "empty summary", None
    return text, None, None


async def _summarize_with_backend(
    old: list[Message], backend: Any, budget: Budget | None, max_tokens: int
) -> tuple[str, str | None, dict[str, int] | None]:
    params = GenParams(max_tokens=max_tokens, temperature=0.0, logprobs=False)
    transcript = _transcript(old)
    prompt = [Message("system", _INSTRUCTION), Message("user", transcript)]
    room = int(getattr(backend, "context_length", 2048)) - max_tokens - 16
    # An over-long transcript keeps its newest part: the older text is archived and searchable anyway.
    while backend.count_tokens(prompt, params) > room and len(transcript) > 200:
        transcript = transcript[len(transcript) // 4 :]
        prompt = [Message("system", _INSTRUCTION), Message("user", "..." + transcript)]
    if budget is None:
        completion = await backend.chat(prompt, params)
    else:
        try:  # the one budgeted call (agentrt.core.budget): reserve, call, charge
            completion, _ = await chat_within(budget, backend, prompt, params, min_tokens=8)
        except BudgetExceeded:
            return _stub(old), "budget", None
    text = completion.text.strip()
    usage = completion.usage.to_dict()
    return (text, None, usage) if text else (_stub(old), "empty summary", usage)


def _stub(old: list[Message]) -> str:
    return f"[{len(old)} earlier messages were archived; search memory to recall them]"
