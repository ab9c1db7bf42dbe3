"""``/v1/completions``' output: the legacy ``logprobs`` object and the SSE stream of a completion as it is written."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, AsyncIterator

from agentrt.app.server.metrics import ServerMetrics
from agentrt.app.server.response import token_logprobs
from agentrt.app.server.stream import timeout_message
from agentrt.core.errors import BackendError, UserError
from agentrt.core.protocols import Completer
from agentrt.core.types import Completion, GenParams


def legacy_logprobs(done: Completion, i: int, k: int | None, tok: Any) -> dict[str, Any] | None:
    """The legacy ``logprobs`` object of choice ``i`` (tokens, token_logprobs, top_logprobs, text_offset)."""
    if k is None:
        return None
    step = {"completion_token_ids": [c.token_ids for c in done.choices],
            "completion_logprobs": [c.logprobs for c in done.choices]}
    entries = token_logprobs(step, i, k, tok)  # chat's, with the special tokens left out
    if entries is None:
        return None
    offsets, at = [], 0
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{e["token"]: e["logprob"]} for e in entries] if k else None, "text_offset": offsets}


async def stream_completion(policy: Completer, ids: list[int], params: GenParams, include_usage: bool,
                            slots: asyncio.Semaphore, timeout: float | None, metrics: ServerMetrics,
                            head: tuple[str, int, str], record: Any = None) -> AsyncIterator[str]:
    """SSE ``text_completion`` chunks as the backend writes each choice, the finishes, the usage, ``[DONE]``;
    ``record(done, status, error)`` saves the call's trajectory (``cancelled`` past the deadline, ``failed``)."""
    cid, created, model = head
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue[tuple[int, str] | None] = asyncio.Queue()
    params.on_token = lambda index, text: loop.call_soon_threadsafe(pieces.put_nowait, (index, text))

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        body = {"id": cid, "object": "text_completion", "created": created, "model": model, "choices": choices, **extra}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def error(message: str, kind: str, code: str) -> str:
        return f"data: {json.dumps({'error': {'message': message, 'type': kind, 'param': None, 'code': code}})}\n\n"

    sent: dict[int, str] = {}
    async with slots:
        deadline = None if timeout is None else loop.time() + timeout
        task = asyncio.ensure_future(policy.complete(ids, params))
        # pieces are queued before the backend's result (agentrt.routes._deltas): the end mark comes last
        task.add_done_callback(lambda _: pieces.put_nowait(None))
        try:
            while (item := await _next(pieces, deadline)) is not None:
                index, text = item
                sent[index] = sent.get(index, "") + text
                yield chunk([{"index": index, "text": text, "logprobs": None, "finish_reason": None}])
            done = task.result()
            metrics.tokens(done.usage.prompt_tokens, done.usage.completion_tokens)
            if record is not None:
                await record(done)
            for i, c in enumerate(done.choices):
                streamed = sent.get(i, "")
                rest = c.text[len(streamed):] if c.text.startswith(streamed) else ""
                yield chunk([{"index": i, "text": rest, "logprobs": None, "finish_reason": finish_reason(c.finish_reason)}])
            if include_usage:
                yield chunk([], usage=done.usage.to_dict())
        except TimeoutError:
            if record is not None:
                await record(None, "cancelled", timeout_message(timeout, []))
            yield error(timeout_message(timeout, []), "timeout", "request_timeout")
        except UserError as e:
            yield error(str(e), "invalid_request_error", "invalid_request")
        except BackendError as e:
            if record is not None:
                await record(None, "failed", str(e))
            yield error(str(e), "backend_error", "backend_error")
        except Exception:  # noqa: BLE001 - the stream has begun: a bug is said in the stream's shape too
            logging.getLogger("agentrt.server").exception("a streamed completion failed")
            yield error("an internal error; the server log has the traceback", "server_error", "internal_error")
        finally:
            if not task.done():  # the client left or the deadline passed: the backend stops the rows
                task.cancel()
    yield "data: [DONE]\n\n"


async def _next(pieces: asyncio.Queue[Any], deadline: float | None) -> Any:
    async with asyncio.timeout_at(deadline):
        return await pieces.get()


def finish_reason(reason: str) -> str:
    return reason if reason in ("stop", "length") else "stop"
