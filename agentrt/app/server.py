"""An OpenAI-compatible HTTP server over the Agent (extra ``server``: fastapi + uvicorn).

``POST /v1/chat/completions`` runs the agent on the last user message (earlier turns are passed as
conversation context, like ``Agent.session``), streaming (SSE) or not. Responses are OpenAI's shape
plus an ``agentrt`` object: route, reason, status, trajectory id, budget. ``GET /healthz``,
``GET /v1/models``. Bad input (bad JSON, an oversized body, unknown fields, a bad message list)
gets a 4xx with an OpenAI-style ``{"error": {"message": ...}}``, never a 500.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentrt.core.errors import BackendError, UserError, missing_extra
from agentrt.app.session import Session, Turn

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException
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


def _error(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}}, status_code=status)


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


def create_app(agent: Agent, *, max_body: int = DEFAULT_MAX_BODY, max_concurrency: int = 64) -> FastAPI:
    """The ASGI app serving ``agent``; ``max_body`` bytes per request, ``max_concurrency`` runs at once."""
    app = FastAPI(title="agentrt", version="0.1.0", docs_url=None, redoc_url=None)
    slots = asyncio.Semaphore(max_concurrency)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

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
            data = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return _error(400, f"the body is not valid JSON: {e}")
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
        try:
            question, turns, system = _split(req)
            session = Session(agent, budget=req.budget)
            session.turns = turns
            options = await session._options(question, {"budget": req.budget, "route": req.route, "samples": req.samples,
                                                  "system": system or None})
        except UserError as e:
            return _error(400, str(e))
        created = int(time.time())
        if req.stream:
            return StreamingResponse(_sse(agent, slots, question, options, req, created), media_type="text/event-stream")
        try:
            async with slots:
                result = await agent.arun(question, **options)
        except UserError as e:
            return _error(400, str(e))
        except BackendError as e:
            return _error(502, str(e), kind="backend_error")
        return _completion(result, req, created)

    return app


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
               created: int) -> AsyncIterator[str]:
    """Chunks: the role, each run event (``choices: []`` + ``agentrt_event``), the answer, the finish."""
    from agentrt.app.events import Answer, RunStarted, astream

    cid = "chatcmpl-pending"

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        payload = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": req.model,
                   "choices": choices, **extra}
        return f"data: {json.dumps(payload, ensure_ascii=False, default=str)}\n\n"

    async with slots:
        try:
            async for event in astream(agent, question, **options):
                if isinstance(event, RunStarted):
                    cid = f"chatcmpl-{event.run_id}"
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
        except (UserError, BackendError) as e:
            yield f"data: {json.dumps({'error': {'message': str(e), 'type': type(e).__name__}})}\n\n"
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
