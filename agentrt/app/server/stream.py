"""The server's SSE stream: one chunk per token delta, in the shape OpenAI's and vLLM's clients read.

* The first chunk carries ``delta.role``; each ``TokenDelta`` of the run becomes one chunk: the answer's
  text in ``delta.content``, every other model text (``TokenDelta.thought``: a thought, a plan, a
  searcher's work) in ``delta.reasoning_content`` (vLLM's reasoning-parser convention).
* The run's other events (route decided, steps, budget) go out as ``choices: []`` chunks with an
  ``agentrt_event`` only when the client asks (``stream_options.include_agentrt_events``): OpenAI's
  stream has no such chunks, and some clients choke on them.
* Before any chunk, a ``RouteKnown`` (not sent: the server puts it in the response headers) once the
  route is known: at the start when it is fixed, else when the router has decided.
* At the end: what the answer adds to the streamed content (a route that rewrote its call's text, a
  majority vote), the finish chunk (``finish_reason``, ``logprobs`` when asked, the ``agentrt`` object),
  then a usage chunk when ``stream_options.include_usage``, then ``[DONE]``.
* With ``n`` > 1 or tools, the choices are sent whole at the end (the token deltas do not say which
  choice they belong to, and a tool call is parsed from the whole reply): each choice's content, or its
  ``tool_calls`` in OpenAI's streamed shape (name first, then the arguments), then its finish chunk.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator

from agentrt.app.server.response import agentrt_extra, choices, usage
from agentrt.core.errors import BackendError, UserError

if TYPE_CHECKING:
    from agentrt.app.agent import Agent
    from agentrt.app.server.request import ChatRequest, RunPlan


@dataclass(frozen=True)
class RouteKnown:
    """The run's route and why, for the response headers (yielded by ``sse`` before its first chunk)."""

    route: str
    reason: str


def timeout_message(limit: float | None, started: list[str]) -> str:
    saved = f"; its trajectory {started[0]} is saved as cancelled" if started else ""
    return (f"the run took longer than this server's limit of {limit:g} s per request (--request-timeout) and was "
            f"cancelled{saved}; ask for a smaller budget or a cheaper route")


def remainder(streamed: str, answer: str) -> str | None:
    """What ``answer`` adds to the ``streamed`` content; None when the stream is not its start."""
    if answer.startswith(streamed):
        return answer[len(streamed):]
    head = streamed.strip()
    if answer.startswith(head):  # the route stripped the call's whitespace
        return answer[len(head):].rstrip() if head else answer
    return None


def is_answer(event: Any) -> bool:
    """A token delta of the answer (content), as opposed to reasoning text (``TokenDelta.thought``: thinking,
    plans, searchers, reason's samples; a route whose answer is not streamed says it whole at its end)."""
    return not event.thought


async def sse(agent: Agent, slots: asyncio.Semaphore, plan: RunPlan, req: ChatRequest, model: str, created: int,
              timeout: float | None = None, tokenizer: Any = None) -> AsyncIterator[str | RouteKnown]:
    """The response stream of one request (see the module docstring)."""
    from agentrt.app.streaming import Answer, RouteDecided, RunStarted, TokenDelta, astream

    cid = "chatcmpl-pending"
    live = plan.n == 1 and not plan.tools  # the answer's tokens go out as they come
    events_wanted = bool(req.stream_options and req.stream_options.include_agentrt_events)

    def chunk(choices_: list[dict[str, Any]], **extra: Any) -> str:
        payload = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": choices_, **extra}
        return f"data: {json.dumps(payload, ensure_ascii=False, default=str)}\n\n"

    def error(message: str, kind: str, code: str) -> str:
        return f"data: {json.dumps({'error': {'message': message, 'type': kind, 'param': None, 'code': code}})}\n\n"

    started: list[str] = []
    streamed = ""
    async with slots:
        # the deadline covers only the waits for the run's next event (never a yield: a timeout that
        # fired while the response is being sent would cancel the server's send, not the run)
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        events = astream(agent, plan.request)
        timer = asyncio.timeout_at(deadline)  # replaced by a fresh one for each wait, below
        try:
            while True:
                try:
                    async with (timer := asyncio.timeout_at(deadline)):
                        event = await anext(events)
                except StopAsyncIteration:
                    break
                if isinstance(event, RunStarted):
                    cid = f"chatcmpl-{event.run_id}"
                    started.append(event.run_id)
                    if event.route:
                        yield RouteKnown(event.route, plan.route_reason or "route given by the caller")
                    yield chunk([_delta(i, role="assistant", content="") for i in range(plan.n)])
                if isinstance(event, TokenDelta):
                    if not event.text:
                        continue
                    if not is_answer(event):
                        yield chunk([_delta(0, reasoning_content=event.text)])
                    elif live:
                        streamed += event.text
                        yield chunk([_delta(0, content=event.text)])
                elif isinstance(event, Answer):
                    for part in _ending(event.result, plan, req, streamed if live else None, tokenizer):
                        yield chunk(**part)
                else:
                    if isinstance(event, RouteDecided):
                        yield RouteKnown(event.route, event.reason)
                    if events_wanted:
                        yield chunk([], agentrt_event=event.to_dict())
        except Exception as e:  # noqa: BLE001 - the stream has begun: every failure is said in the stream's shape
            if isinstance(e, TimeoutError) and timer.expired():
                yield error(timeout_message(timeout, started), "timeout", "request_timeout")
            elif isinstance(e, UserError):
                yield error(str(e), "invalid_request_error", "invalid_request")
            elif isinstance(e, BackendError):
                yield error(str(e), "backend_error", "backend_error")
            else:  # a bug
                logging.getLogger("agentrt.server").exception("a streamed run failed")
                yield error(f"{type(e).__name__}: an internal error; the server log has the traceback",
                            "server_error", "internal_error")
        finally:
            await events.aclose()  # a client that left: the run is cancelled (and saved as cancelled)
    yield "data: [DONE]\n\n"


def _ending(result: Any, plan: RunPlan, req: ChatRequest, streamed: str | None, tokenizer: Any) -> list[dict[str, Any]]:
    """The chunks after the run: the rest of the content (or the whole choices), the finishes, the usage."""
    parts: list[dict[str, Any]] = []
    mismatch = None
    outs = choices(result, plan, tokenizer)
    for c in outs:
        if streamed is not None:  # choice 0 went out token by token
            rest = remainder(streamed, c.content or "")
            if rest is None:
                mismatch = streamed
            elif rest:
                parts.append({"choices_": [_delta(c.index, content=rest)]})
        elif c.tool_calls:
            for k, call in enumerate(c.tool_calls):
                fn = call["function"]
                first = {"index": k, "id": call["id"], "type": "function",
                         "function": {"name": fn["name"], "arguments": ""}}
                parts.append({"choices_": [_delta(c.index, tool_calls=[first])]})
                parts.append({"choices_": [_delta(c.index, tool_calls=[
                    {"index": k, "function": {"arguments": fn["arguments"]}}])]})
        elif c.content:
            parts.append({"choices_": [_delta(c.index, content=c.content)]})
    for c in outs:
        parts.append({"choices_": [_delta(c.index, c.finish_reason, c.logprobs_obj())],
                      "agentrt": agentrt_extra(result, mismatch, plan.warnings, plan.route_reason)})
    if req.stream_options and req.stream_options.include_usage:
        parts.append({"choices_": [], "usage": usage(result)})
    return parts


def _delta(index: int, finish: str | None = None, logprobs: Any = None, **fields: Any) -> dict[str, Any]:
    return {"index": index, "delta": fields, "logprobs": logprobs, "finish_reason": finish}


__all__ = ["RouteKnown", "is_answer", "remainder", "sse", "timeout_message"]
