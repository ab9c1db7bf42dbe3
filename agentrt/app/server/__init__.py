"""An OpenAI-compatible HTTP server over the Agent (extra ``server``: fastapi + uvicorn).

``POST /v1/chat/completions`` runs the agent on the conversation (``server_request``: how OpenAI's fields
map onto a run), streaming (SSE, ``server_stream``) or not (``server_response``). Responses are OpenAI's
shape plus an ``agentrt`` object: route, reason, status, trajectory id, budget. ``GET /healthz``,
``GET /v1/models`` (the served model names; a request for any other model is a 404). Bad input (bad JSON,
text that is not UTF-8 or holds a lone surrogate, JSON nested too deep or with huge integers, an oversized
body, unknown fields, a bad message list, a JSON schema the grammar cannot compile) gets a 4xx with
OpenAI's ``{"error": {"message", "type", "param", "code"}}``, never a 500; a 500 (same shape) means a bug.

The door (``create_app`` options, ``agentrt serve`` flags): ``api_key`` (every path but ``/healthz``
needs ``Authorization: Bearer KEY``, else 401), ``max_budget`` (a request's budget above it is a 400;
a request without one gets at most that), ``request_timeout`` (a run that takes longer is cancelled,
saved as cancelled, and answered 504), ``max_body``, ``max_concurrency``; ``served_model_names``.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agentrt.core.errors import AgentrtError, BackendError, UserError, missing_extra

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from agentrt.app.server.door import ApiKeyGate, BadBody, error_response, parse_body
except ImportError as e:  # pragma: no cover - depends on the install
    raise missing_extra("fastapi", "server") from e

from agentrt.app.server.request import ChatRequest, RequestError, plan_run
from agentrt.core.request import RunHooks, explain
from agentrt.core.protocols import Tokenized
from agentrt.app.server.response import completion
from agentrt.app.server.stream import sse, timeout_message

if TYPE_CHECKING:
    from agentrt.app.agent import Agent

MODEL_ID = "agentrt"
DEFAULT_MAX_BODY = 1 << 20  # 1 MiB: far above any question the embedded model's context can take

_error = error_response


def served_names(agent: Agent, names: list[str] | None = None) -> list[str]:
    """The model names a server answers to: ``names``, else ``agentrt`` and the policy's name."""
    return list(dict.fromkeys(names or [MODEL_ID, agent.policy.name]))


def create_app(agent: Agent, *, max_body: int = DEFAULT_MAX_BODY, max_concurrency: int = 64, api_key: str | None = None,
               max_budget: int | None = None, request_timeout: float | None = None,
               served_model_names: list[str] | None = None) -> FastAPI:
    """The ASGI app serving ``agent``; ``max_body`` bytes per request, ``max_concurrency`` runs at once;
    ``api_key``, ``max_budget``, ``request_timeout``: the door; ``served_model_names``: the names
    ``/v1/models`` lists and requests may ask for (default: ``agentrt`` and the policy's name)."""
    app = FastAPI(title="agentrt", version="0.1.0", docs_url=None, redoc_url=None)
    slots = asyncio.Semaphore(max_concurrency)
    names = served_names(agent, served_model_names)
    tokenizer = agent.policy.tokenizer if isinstance(agent.policy, Tokenized) else None  # names logprobs' tokens
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
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "agentrt",
                                            "root": agent.policy.name, "policy": agent.policy.name,
                                            "max_model_len": agent.policy.context_length} for name in names]}

    @app.post("/v1/feedback")
    async def feedback(request: Request) -> Any:
        """A user's verdict on a response (its ``id``): ``correct`` true/false or ``reward`` in [0, 1]."""
        try:
            data = parse_body(await request.body())
        except BadBody as e:
            return _error(400, str(e), param=e.param)
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            return _error(400, "the body must be a JSON object with the response's \"id\" and \"correct\" or "
                               "\"reward\"", param="id")
        correct, reward = data.get("correct"), data.get("reward")
        if correct is not None and not isinstance(correct, bool):
            return _error(400, "correct must be true or false", param="correct")
        try:
            entry = await asyncio.to_thread(agent.feedback, data["id"], reward=reward, correct=correct,
                                            note=str(data.get("note") or ""), source="server")
        except UserError as e:
            unknown = str(e).startswith("no run ")
            return _error(404 if unknown else 400, str(e), param="id" if unknown else "reward",
                          code="run_not_found" if unknown else None)
        return {"object": "feedback", "id": data["id"], **entry}

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
            message, where = explain(e, ChatRequest)  # the limits are RunRequest's (agentrt.core.request)
            return _error(400, message, param=where)
        model = req.model or names[0]
        if model not in names:
            return _error(404, f"The model `{model}` does not exist; this server serves: {', '.join(names)}",
                          param="model", code="model_not_found")
        try:
            plan = plan_run(req, agent, max_budget)  # in the loop: the tokenizer is not shared across threads
        except RequestError as e:
            return _error(e.status, str(e), param=e.param, code=e.code)
        except UserError as e:
            return _error(400, str(e))
        except BackendError as e:
            return _error(502, str(e), kind="backend_error")
        created = int(time.time())
        if req.stream:
            return StreamingResponse(sse(agent, slots, plan, req, model, created, request_timeout, tokenizer),
                                     media_type="text/event-stream")
        started: list[str] = []
        timer = asyncio.timeout(request_timeout)
        try:
            async with slots:
                async with timer:
                    result = await agent.run_request(plan.request, RunHooks(on_event=_run_id_into(started)))
        except TimeoutError:
            if not timer.expired():
                raise  # a TimeoutError of the run's own: not ours to describe
            return _error(504, timeout_message(request_timeout, started), kind="timeout", code="request_timeout")
        except UserError as e:
            return _error(400, str(e))
        except BackendError as e:
            return _error(502, str(e), kind="backend_error")
        return completion(result, plan, model, created, tokenizer)

    return app


def _run_id_into(started: list[str]) -> Any:
    """An ``on_event`` hook that keeps the run id (for the 504 message of a run cut short)."""
    from agentrt.app.streaming import RunStarted

    def hook(event: Any) -> None:
        if isinstance(event, RunStarted):
            started.append(event.run_id)

    return hook


def serve(agent: Agent, host: str = "127.0.0.1", port: int = 8000, **app_options: Any) -> None:
    """Load the model, then serve until interrupted."""
    try:
        import uvicorn
    except ImportError as e:  # pragma: no cover
        raise missing_extra("uvicorn", "server") from e
    agent.policy  # noqa: B018 - load before accepting requests, so /healthz means ready
    uvicorn.run(create_app(agent, **app_options), host=host, port=port, log_level="warning", access_log=False)


__all__ = ["ChatRequest", "MODEL_ID", "create_app", "serve", "served_names"]
