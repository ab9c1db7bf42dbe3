"""An OpenAI-compatible HTTP server over the Agent (extra ``server``: fastapi + uvicorn).

``POST /v1/chat/completions`` runs the agent on the conversation (``server_request``: how OpenAI's fields
map onto a run), streaming (SSE, ``server_stream``) or not (``server_response``). Responses are OpenAI's
shape plus an ``agentrt`` object: route, reason, status, trajectory id, budget. ``GET /healthz``,
``GET /v1/models`` (the served model names; a request for any other model is a 404). Bad input (bad JSON,
text that is not UTF-8 or holds a lone surrogate, JSON nested too deep or with huge integers, an oversized
body, unknown fields, a bad message list, a JSON schema the grammar cannot compile) gets a 4xx with
OpenAI's ``{"error": {"message", "type", "param", "code"}}``, never a 500; a 500 (same shape) means a bug.

The door (``create_app`` options, ``agentrt serve`` flags): ``api_key`` (every path but ``/healthz`` and
``/health`` needs ``Authorization: Bearer KEY``, else 401; ``metrics_open`` leaves ``/metrics`` open too), ``max_budget`` (a request's budget above it is a 400;
a request without one gets at most that), ``request_timeout`` (a run that takes longer is cancelled,
saved as cancelled, and answered 504), ``max_body``, ``max_concurrency``; ``served_model_names``;
``host`` (the bind address) and ``allowed_origins``: what a browser may reach (``server.guard``: Host/Origin
checks, JSON content type, header caps, read timeouts; ``server.specs``: no request names a server file).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agentrt.core.errors import AgentrtError, BackendError, UserError, missing_extra

try:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from agentrt.app.server.door import ApiKeyGate, error_response, read_object
    from agentrt.app.server.guard import guard_door
except ImportError as e:  # pragma: no cover - depends on the install
    raise missing_extra("fastapi", "server") from e

from agentrt.app.server.fields import take_vllm_fields
from agentrt.app.server.latency import DecodeSpeed, Measured, route_headers
from agentrt.app.server.offload import offload
from agentrt.app.server.request import ChatRequest, RequestError
from agentrt.app.server.run import error_for, plan_request, routed_stream, run_plan
from agentrt.core.request import explain
from agentrt.core.protocols import Tokenized
from agentrt.app.server.response import completion
from agentrt.app.server import responses  # POST /v1/responses: OpenAI's Responses API over the chat path
from agentrt.app.server import feedback  # POST /v1/feedback: verdicts on served runs (learn --traffic)
from agentrt.app.server import endpoints  # completions, embeddings, (de)tokenize, health, version, metrics
from agentrt.app.server.stream import sse

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
               served_model_names: list[str] | None = None, host: str | None = None,
               allowed_origins: list[str] | None = None, default_route: str | None = None,
               max_model_len: int | None = None, metrics_open: bool = False) -> FastAPI:
    """The ASGI app serving ``agent``; ``max_body`` bytes per request, ``max_concurrency`` runs at once;
    ``api_key``, ``max_budget``, ``request_timeout``: the door; ``served_model_names``: the names
    ``/v1/models`` lists and requests may ask for (default: ``agentrt`` and the policy's name);
    ``default_route``: the route of a request that names none (None: the router decides);
    ``max_model_len``: a prompt plus ``max_tokens`` beyond it is a 400 (default: the model's context);
    ``metrics_open``: ``/metrics`` answers without the key (for a scraper; the operator's choice)."""
    app = FastAPI(title="agentrt", version="0.1.0", docs_url=None, redoc_url=None)
    slots = asyncio.Semaphore(max_concurrency)
    names = served_names(agent, served_model_names)
    tokenizer = agent.policy.tokenizer if isinstance(agent.policy, Tokenized) else None  # names logprobs' tokens
    speed = DecodeSpeed(agent.settings.serve_decode_tokens_per_s)  # for max_latency_s (server.latency)
    context_cap = max_model_len or agent.policy.context_length
    if api_key:
        app.add_middleware(ApiKeyGate, key=api_key, also_open=frozenset({"/metrics"} if metrics_open else ()))
    guard_door(app, host, allowed_origins)  # outside the key: CORS preflights, Host/Origin/content type, disconnects
    # outermost: /metrics counts every response; the routes below run on the agent it returns (runs counted)
    # and every run (streamed or not) measures the decode speed max_latency_s goes by
    agent = Measured(endpoints.register(app, agent, names=names, slots=slots, max_body=max_body,
                                        max_budget=max_budget, request_timeout=request_timeout,
                                        max_model_len=context_cap), speed)

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
                                            "max_model_len": context_cap} for name in names]
                + endpoints.embedding_models()}

    feedback.register(app, agent, max_body=max_body)  # POST /v1/feedback: served, stored runs only, bounded

    def prepare_chat(data: dict[str, Any]) -> Any:
        """(In the work thread: its cost grows with the messages) the body as a request, its model and its
        run, or the 4xx to send."""
        try:
            ignored = take_vllm_fields(data)  # vLLM's extras: honoured by ChatRequest, or warned; images: a 400
        except RequestError as e:
            return _error(e.status, str(e), param=e.param, code=e.code)
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
            plan = plan_request(req, agent, max_budget=max_budget, default_route=default_route, speed=speed,
                                context_cap=context_cap, warnings=ignored)
        except (UserError, BackendError) as e:  # RequestError is a UserError
            return error_for(e)
        return req, model, plan

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        data = await read_object(request, max_body)
        if isinstance(data, JSONResponse):
            return data
        prepared = await offload(prepare_chat, data)
        if isinstance(prepared, JSONResponse):
            return prepared
        req, model, plan = prepared
        created = int(time.time())
        if req.stream:
            return await routed_stream(sse(agent, slots, plan, req, model, created, request_timeout, tokenizer))
        result = await run_plan(agent, slots, plan, request_timeout, request)  # cancelled if the client leaves
        if isinstance(result, JSONResponse):
            return result
        return JSONResponse(completion(result, plan, model, created, tokenizer),
                            headers=route_headers(result.route, plan.route_reason or result.reason))

    responses.register(app, agent, names=names, slots=slots, max_body=max_body, max_budget=max_budget,
                       request_timeout=request_timeout, tokenizer=tokenizer, default_route=default_route,
                       speed=speed, max_model_len=context_cap)
    return app


def serve(agent: Agent, host: str = "127.0.0.1", port: int = 8000, **app_options: Any) -> None:
    """Load the model, then serve until interrupted."""
    try:
        import uvicorn
    except ImportError as e:  # pragma: no cover
        raise missing_extra("uvicorn", "server") from e
    agent.policy  # noqa: B018 - load before accepting requests, so /healthz means ready
    for name in agent.settings.tiers:  # the tiers too: a first tier request must not wait for a load (or a conversion)
        agent.tier(name)
    from agentrt.app.server.guard import uvicorn_options

    try:  # a stop waits guard.SHUTDOWN_GRACE_S for requests in flight, then cancels them
        uvicorn.run(create_app(agent, host=host, **app_options), host=host, port=port, log_level="warning",
                    access_log=False, **uvicorn_options())
    finally:  # the batcher thread stops before the interpreter does (its cancelled rows stop at once)
        from agentrt.core.protocols import Closable

        import inspect

        for backend in (agent.policy, *(agent.tier(name) for name in agent.settings.tiers)):
            if isinstance(backend, Closable):
                close = backend.close
                close(**({"timeout": 2.0} if "timeout" in inspect.signature(close).parameters else {}))


__all__ = ["ChatRequest", "MODEL_ID", "create_app", "serve", "served_names"]
