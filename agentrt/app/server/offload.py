"""Work that would stall the event loop, and clients that leave: what keeps one request from holding up others.

* ``offload``: run a function in the server's work thread, so the event loop keeps answering (``/healthz``,
  other clients' tokens) while it runs. Everything a request costs in proportion to its body goes there:
  parsing a large body, validating its messages, rendering the chat template and counting tokens
  (``plan_request``), ``/tokenize``, ``/detokenize``, a completion's prompt ids. One thread, so the
  tokenizer is never used by two of these at once (as vLLM's tokenizer executor); the tokenizer must let go
  of the GIL while it encodes (``LeanTokenizer`` does: ``encode_batch``), else the thread still stalls the loop.
* ``unless_gone``: await a run unless the client disconnects first; then the run is cancelled (saved as
  cancelled, its slot and its rows in the batcher freed) instead of going on for nobody.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, TypeVar

T = TypeVar("T")
INLINE_BYTES = 64 * 1024  # a body up to this size is parsed in the event loop (a thread hop costs more)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _work_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:  # one per process, made on first use: every app in it shares the tokenizer's thread
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentrt-serve-work")
        return _pool


async def offload(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in the server's work thread (see the module docstring); its exception is raised
    here. A caller cancelled meanwhile stops waiting; the call itself finishes in the thread."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_work_pool(), functools.partial(fn, *args, **kwargs))


class ClientGone(Exception):
    """The client disconnected before its run finished; the run was cancelled."""


async def _disconnected(receive: Callable[[], Awaitable[dict[str, Any]]]) -> None:
    """Return when the ASGI server says the client left (the body was read whole before: the next message
    is ``http.disconnect``, sent when the connection closes)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_gone(request: Any, work: Awaitable[T]) -> T:
    """``await work``, cancelled when ``request``'s client disconnects first (then ``ClientGone``, after the
    run has seen its cancellation, so its record says cancelled). Call it after the body has been read."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done() and not watch.done():  # we were cancelled ourselves (server shutdown): so is the run
            task.cancel()
        watch.cancel()
    if not task.done():
        task.cancel()
        await asyncio.wait({task})
        raise ClientGone
    return task.result()


__all__ = ["ClientGone", "INLINE_BYTES", "offload", "unless_gone"]
