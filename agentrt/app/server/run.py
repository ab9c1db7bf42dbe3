"""What the server runs on a user's behalf, shared by the endpoints that run it.

* One agent run for a chat-shaped request (``/v1/chat/completions``, ``/v1/responses``): ``plan_request``
  checks it and maps it onto a run (``max_latency_s``, ``--max-model-len``), ``run_plan`` runs it
  unstreamed (a concurrency slot, ``--request-timeout`` -> 504, errors -> 4xx/5xx), ``routed_stream``
  streams it with the route in the response headers (``x-agentrt-route``), and ``error_for`` answers a
  request that cannot run.
* One plain model call (``/v1/completions``): ``completion_record`` is its trajectory, written by the
  agent's own ``TrajectoryWriter`` like every run, so the store holds every model call the server makes.
  ``metadata.endpoint`` is ``completions``: no route was decided, so the router's learning skips it and the
  chat-shaped exports leave it out (it has token ids and logprobs for the token-level ones).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from fastapi.responses import JSONResponse, StreamingResponse

from agentrt.app.server.door import error_response
from agentrt.app.server.latency import DecodeSpeed, route_headers
from agentrt.app.server.offload import ClientGone, unless_gone
from agentrt.app.server.request import ChatRequest, RequestError, RunPlan, plan_run
from agentrt.app.server.stream import RouteKnown, timeout_message
from agentrt.core.errors import BackendError, UserError
from agentrt.core.request import RunHooks
from agentrt.core.types import Completion, GenParams
from agentrt.trajectory import ModelCallStep, TrajectoryRecord

if TYPE_CHECKING:
    from agentrt.app.agent import Agent

COMPLETIONS = "completions"  # TrajectoryRecord.metadata["endpoint"] of a /v1/completions call


def plan_request(req: ChatRequest, agent: Agent, *, max_budget: int | None, default_route: str | None,
                 speed: DecodeSpeed, context_cap: int, warnings: list[str] | None = None) -> RunPlan:
    """``req`` as one run (``plan_run``) with ``warnings`` first among its own; ``RequestError`` when its
    messages plus ``max_tokens`` are over ``context_cap`` (``--max-model-len``). Called in the server's work
    thread (``offload``): rendering and counting a long conversation would stall the event loop."""
    rate = speed.rate() if req.max_latency_s is not None else None
    plan = plan_run(req, agent, max_budget, default_route=default_route, tokens_per_s=rate)
    plan.warnings[:0] = warnings or []
    prompt = agent.policy.count_tokens(plan.request.messages())
    wanted = prompt + (req.max_completion_tokens or req.max_tokens or 0)
    if wanted > context_cap:
        raise RequestError(f"This model's maximum context length is {context_cap} tokens (--max-model-len); this "
                           f"request asks for {wanted} ({prompt} in the messages, {wanted - prompt} for the "
                           "completion): shorten the messages or max_tokens", "messages",
                           code="context_length_exceeded")
    return plan


def gone() -> JSONResponse:
    """The answer to a client that disconnected (nobody reads it; ``/metrics`` counts it as a 499)."""
    return error_response(499, "the client disconnected; its run was cancelled", code="client_closed_request")


def error_for(e: Exception, param: Callable[[str | None], str | None] = lambda p: p) -> JSONResponse:
    """The JSON error of a request that cannot run: a ``RequestError``'s status, a ``UserError`` 400, a
    ``BackendError`` 502; ``param`` renames the field a ``RequestError`` names (Responses' names)."""
    if isinstance(e, RequestError):
        return error_response(e.status, str(e), param=param(e.param), code=e.code)
    if isinstance(e, BackendError):
        return error_response(502, str(e), kind="backend_error")
    return error_response(400, str(e))


async def run_plan(agent: Agent, slots: asyncio.Semaphore, plan: RunPlan, timeout: float | None,
                   request: Any = None) -> Any:
    """The run's ``Result``, or the JSON error that says why there is none (504 past ``timeout``; 499 when
    ``request``'s client disconnected: the run was cancelled then, not left running for nobody)."""
    if request is not None:
        try:
            return await unless_gone(request, run_plan(agent, slots, plan, timeout))
        except ClientGone:
            return gone()
    from agentrt.app.streaming import RunStarted

    started: list[str] = []

    def keep_id(event: Any) -> None:  # for the 504 message of a run cut short
        if isinstance(event, RunStarted):
            started.append(event.run_id)

    timer = asyncio.timeout(timeout)
    try:
        async with slots:
            async with timer:
                return await agent.run_request(plan.request, RunHooks(on_event=keep_id))
    except TimeoutError:
        if not timer.expired():
            raise  # a TimeoutError of the run's own: not ours to describe
        return error_response(504, timeout_message(timeout, started), kind="timeout", code="request_timeout")
    except (UserError, BackendError) as e:
        return error_for(e)


async def routed_stream(stream: AsyncIterator[Any],
                        shape: Callable[[AsyncIterator[str]], AsyncIterator[str]] | None = None) -> StreamingResponse:
    """An SSE response of ``stream`` (``sse``'s chunks, reshaped by ``shape``), its headers naming the
    route: the chunks are held until the stream says its route (before any token)."""
    head: list[str] = []
    known = None
    async for item in stream:
        if isinstance(item, RouteKnown):
            known = item
            break
        head.append(item)
    body = _rest(head, stream)
    headers = route_headers(known.route, known.reason) if known else {}
    return StreamingResponse(shape(body) if shape else body, media_type="text/event-stream", headers=headers)


async def _rest(head: list[str], stream: Any) -> AsyncIterator[str]:
    """``head``, then the rest of ``stream``'s chunks (its later route notes are not sent)."""
    try:
        for item in head:
            yield item
        async for item in stream:
            if not isinstance(item, RouteKnown):
                yield item
    finally:
        await stream.aclose()  # a client that left: the run is cancelled now, not when collected


def completion_record(run_id: str, prompt: str, ids: list[int], params: GenParams, done: Completion | None, *,
                      backend: str, created_at: float, wall_s: float, status: str = "ok",
                      error: str | None = None) -> TrajectoryRecord:
    """The trajectory of one ``/v1/completions`` call: its prompt (text and ids), each choice's text, token
    ids and logprobs (where the backend gives them), usage and sampling params; ``done`` None: it failed."""
    choices = done.choices if done is not None else []
    usage = done.usage.to_dict() if done is not None else {"prompt_tokens": len(ids), "completion_tokens": 0,
                                                          "total_tokens": len(ids)}
    steps = [] if done is None else [ModelCallStep(
        name="completion", backend=backend, model=done.model, messages=[], prompt=prompt,
        prompt_token_ids=done.prompt_token_ids or list(ids), completion_token_ids=[c.token_ids for c in choices],
        completion_logprobs=[c.logprobs for c in choices], completions=[c.text for c in choices],
        finish_reasons=[c.finish_reason for c in choices],
        loss_mask=[[1] * len(c.token_ids or []) for c in choices], usage=usage,
        params={"max_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p,
                "top_k": params.top_k, "min_p": params.min_p, "repetition_penalty": params.repetition_penalty,
                "n": params.n, "stop": params.stop, "seed": params.seed},
        latency_s=round(done.latency_s, 4), t_start_s=0.0).model_dump()]
    return TrajectoryRecord(
        run_id=run_id, created_at=created_at, question=prompt, route="completion", steps=steps,
        answer=choices[0].text if choices else "", budget={"total": params.max_tokens * params.n + len(ids),
                                                           "spent": usage["total_tokens"]},
        usage=usage, timings={"wall_s": round(wall_s, 4)}, status=status, error=error,  # type: ignore[arg-type]
        metadata={"endpoint": COMPLETIONS})


async def record_completion(agent: Agent, run_id: str, prompt: str, ids: list[int], params: GenParams,
                            done: Completion | None, started: tuple[float, float], status: str = "ok",
                            error: str | None = None) -> None:
    """Append ``completion_record`` to the agent's trajectory store (in a thread: the writer fsyncs);
    ``started``: ``(time.time(), time.perf_counter())`` when the call began."""
    record = completion_record(run_id, prompt, ids, params, done, backend=agent.policy.name, created_at=started[0],
                               wall_s=time.perf_counter() - started[1], status=status, error=error)
    await asyncio.to_thread(agent.writer.append, record)


__all__ = ["COMPLETIONS", "completion_record", "error_for", "gone", "plan_request", "record_completion",
           "routed_stream", "run_plan"]
