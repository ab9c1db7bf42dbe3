"""An OpenAI-compatible HTTP server over the Agent (extra ``server``: fastapi + uvicorn).

``POST /v1/chat/completions`` runs the agent on the last user message (earlier turns are passed as
conversation context, like ``Agent.session``), streaming (SSE) or not. Responses are OpenAI's shape
plus an ``agentrt`` object: route, reason, status, trajectory id, budget. ``GET /healthz``,
``GET /v1/models``. Bad input (bad JSON, text that is not UTF-8 or holds a lone surrogate, JSON nested
too deep or with huge integers, an oversized body, unknown fields, a bad message list) gets a 4xx with
OpenAI's ``{"error": {"message", "type", "param", "code"}}``, never a 500; a 500 (same shape) means a bug.

The door (``create_app`` options, ``agentrt serve`` flags): ``api_key`` (every path but ``/healthz``
needs ``Authorization: Bearer KEY``, else 401), ``max_budget`` (a request's budget above it is a 400;
a request without one gets ``min(default, max_budget)``), ``request_timeout`` (a run that takes longer
is cancelled, saved as cancelled, and answered 504), ``max_body``, ``max_concurrency``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentrt.core.errors import AgentrtError, BackendError, UserError, missing_extra
from agentrt.app.session import Session, Turn

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from agentrt.app._http import ApiKeyGate, BadBody, error_response, parse_body
except ImportError as e:  # pragma: no cover - depends on the install
    raise missing_extra("fastapi", "server") from e

if TYPE_CHECKING:
    from agentrt.app.agent import Agent, Result

MODEL_ID = "agentrt"
DEFAULT_MAX_BODY = 1 << 20  # 1 MiB: far above any question the embedded model's context can take


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart]
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class ChatRequest(BaseModel):
    """The accepted request body. Sampling fields are accepted for compatibility; the agent's routes
    choose their own sampling. ``budget`` / ``route`` are agentrt's (``extra_body`` in the openai client)."""

    model_config = ConfigDict(extra="forbid")
    model: str = MODEL_ID
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: Literal[1] = 1
    user: str | None = None
    metadata: dict[str, str] | None = None
    budget: int | None = Field(default=None, ge=1)
    route: str | None = None
    samples: int = Field(default=1, ge=1, le=64)  # the reason route's parallel samples (majority vote)


_error = error_response


def _split(req: ChatRequest) -> tuple[str, list[Turn], str]:
    """The new question, the prior (user, assistant) turns and the system text of a request."""
    if req.messages[-1].role != "user":
        raise UserError("the last message must have role 'user'")
    system = "\n".join(m.text() for m in req.messages if m.role in ("system", "developer")).strip()
    turns: list[Turn] = []
    pending: str | None = None
    for m in req.messages[:-1]:
        if m.role == "user":
            pending = m.text() if pending is None else pending + "\n" + m.text()
        elif m.role == "assistant":
            turns.append(Turn(pending or "", m.text()))
            pending = None
    question = req.messages[-1].text() if pending is None else pending + "\n" + req.messages[-1].text()
    if not question.strip():
        raise UserError("the last user message is empty")
    return question, turns, system


def create_app(agent: Agent, *, max_body: int = DEFAULT_MAX_BODY, max_concurrency: int = 64, api_key: str | None = None,
               max_budget: int | None = None, request_timeout: float | None = None) -> FastAPI:
    """The ASGI app serving ``agent``; ``max_body`` bytes per request, ``max_concurrency`` runs at once;
    ``api_key``, ``max_budget``, ``request_timeout``: the door (see the module docstring)."""
    app = FastAPI(title="agentrt", version="0.1.0", docs_url=None, redoc_url=None)
    slots = asyncio.Semaphore(max_concurrency)
    if api_key:
        app.add_middleware(ApiKeyGate, key=api_key)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def server_error(_request: Request, exc: Exception) -> JSONResponse:
        """A true bug (bad input never gets here): still OpenAI's JSON shape; the traceback goes to the log."""
        detail = str(exc) if isinstance(exc, AgentrtError) else "an internal error; the server log has the traceback"
        return _error(500, f"{type(exc).__name__}: {detail}", kind="server_error")

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "model": agent.policy.name}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "agentrt",
                                            "policy": agent.policy.name}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > max_body:
            return _error(413, f"request body is {declared} bytes; the limit is {max_body}")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body:
                return _error(413, f"request body is over the {max_body}-byte limit")
        try:
            data = parse_body(bytes(body))
        except BadBody as e:
            return _error(400, str(e), param=e.param)
        if not isinstance(data, dict):
            return _error(400, "the body must be a JSON object")
        try:
            req = ChatRequest.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            return _error(400, f"invalid field '{where}': {err['msg']}", param=where)
        from agentrt.core.types import ROUTES

        if req.route is not None and req.route not in ROUTES:
            return _error(400, f"unknown route {req.route!r}; choose one of: {', '.join(ROUTES)}", param="route")
        budget = req.budget
        if max_budget is not None:
            if budget is not None and budget > max_budget:
                return _error(400, f"budget {budget} is over this server's cap of {max_budget} tokens per request; "
                              f"ask for at most {max_budget}", param="budget")
            budget = min(budget or agent.settings.budget, max_budget)
        try:
            question, turns, system = _split(req)
            session = Session(agent, budget=budget)
            session.turns = turns
            options = await session._options(question, {"budget": budget, "route": req.route, "samples": req.samples,
                                                  "system": system or None})
        except UserError as e:
            return _error(400, str(e))
        except BackendError as e:
            return _error(502, str(e), kind="backend_error")
        created = int(time.time())
        if req.stream:
            return StreamingResponse(_sse(agent, slots, question, options, req, created, request_timeout),
                                     media_type="text/event-stream")
        started: list[str] = []
        timer = asyncio.timeout(request_timeout)
        try:
            async with slots:
                async with timer:
                    result = await agent.arun(question, on_event=_run_id_into(started), **options)
        except TimeoutError:
            if not timer.expired():
                raise  # a TimeoutError of the run's own: not ours to describe
            return _error(504, _timeout_message(request_timeout, started), kind="timeout", code="request_timeout")
        except UserError as e:
            return _error(400, str(e))
        except BackendError as e:
            return _error(502, str(e), kind="backend_error")
        return _completion(result, req, created)

    return app


def _run_id_into(started: list[str]) -> Any:
    """An ``on_event`` hook that keeps the run id (for the 504 message of a run cut short)."""
    from agentrt.app.events import RunStarted

    def hook(event: Any) -> None:
        if isinstance(event, RunStarted):
            started.append(event.run_id)

    return hook


def _timeout_message(limit: float | None, started: list[str]) -> str:
    saved = f"; its trajectory {started[0]} is saved as cancelled" if started else ""
    return (f"the run took longer than this server's limit of {limit:g} s per request (--request-timeout) and was "
            f"cancelled{saved}; ask for a smaller budget or a cheaper route")


def _extra(result: Result) -> dict[str, Any]:
    return {"route": result.route, "reason": result.reason, "status": result.status,
            "trajectory_id": result.trajectory_id, "budget": result.budget, "truncated": result.truncated}


def _completion(result: Result, req: ChatRequest, created: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{result.trajectory_id}", "object": "chat.completion", "created": created, "model": req.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result.answer},
                     "finish_reason": "length" if result.truncated else "stop", "logprobs": None}],
        "usage": result.usage.to_dict(), "agentrt": _extra(result),
    }


async def _sse(agent: Agent, slots: asyncio.Semaphore, question: str, options: dict[str, Any], req: ChatRequest,
               created: int, timeout: float | None = None) -> AsyncIterator[str]:
    """Chunks: the role, each run event (``choices: []`` + ``agentrt_event``), the answer, the finish."""
    from agentrt.app.events import Answer, RunStarted, astream

    cid = "chatcmpl-pending"

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        payload = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": req.model,
                   "choices": choices, **extra}
        return f"data: {json.dumps(payload, ensure_ascii=False, default=str)}\n\n"

    def error(message: str, kind: str, code: int | str) -> str:
        return f"data: {json.dumps({'error': {'message': message, 'type': kind, 'param': None, 'code': code}})}\n\n"

    started: list[str] = []
    async with slots:
        # the deadline covers only the waits for the run's next event (never a yield: a timeout that
        # fired while the response is being sent would cancel the server's send, not the run)
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        events = astream(agent, question, **options)
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
                    yield chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
                if isinstance(event, Answer):
                    result = event.result
                    yield chunk([{"index": 0, "delta": {"content": result.answer}, "finish_reason": None}])
                    yield chunk([{"index": 0, "delta": {}, "finish_reason": "length" if result.truncated else "stop"}],
                                agentrt=_extra(result))
                    if req.stream_options and req.stream_options.include_usage:
                        yield chunk([], usage=result.usage.to_dict())
                else:
                    yield chunk([], agentrt_event=event.to_dict())
        except Exception as e:  # noqa: BLE001 - the stream has begun: every failure is said in the stream's shape
            if isinstance(e, TimeoutError) and timer.expired():
                yield error(_timeout_message(timeout, started), "timeout", "request_timeout")
            elif isinstance(e, UserError):
                yield error(str(e), "invalid_request_error", 400)
            elif isinstance(e, BackendError):
                yield error(str(e), "backend_error", 502)
            else:  # a bug
                logging.getLogger("agentrt.server").exception("a streamed run failed")
                yield error(f"{type(e).__name__}: an internal error; the server log has the traceback", "server_error", 500)
        finally:
            await events.aclose()  # a client that left: the run is cancelled (and saved as cancelled)
    yield "data: [DONE]\n\n"


def serve(agent: Agent, host: str = "127.0.0.1", port: int = 8000, **app_options: Any) -> None:
    """Load the model, then serve until interrupted."""
    try:
        import uvicorn
    except ImportError as e:  # pragma: no cover
        raise missing_extra("uvicorn", "server") from e
    agent.policy  # noqa: B018 - load before accepting requests, so /healthz means ready
    uvicorn.run(create_app(agent, **app_options), host=host, port=port, log_level="warning", access_log=False)


__all__ = ["create_app", "serve", "ChatRequest"]
