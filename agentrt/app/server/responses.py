"""``/v1/responses``: OpenAI's Responses API over the chat path (docs/server.md, "/v1/responses").

A Responses request is rewritten into the chat-completions request it means (``chat_body``: input items
-> messages, ``instructions`` -> a system message, flat function tools -> chat tools, ``text.format`` ->
``response_format``, ``max_output_tokens`` -> ``max_tokens``) and runs through the chat path unchanged:
``plan_run`` maps it onto one agent run, ``completion`` shapes the answer (tool calls, usage, the
``agentrt`` object) and ``sse`` streams it; ``responses_out`` retells both as Responses output.

``previous_response_id``: the server keeps each stored response's conversation (``ResponseStore``: in
memory as compact JSON, ``ttl_s`` seconds, at most ``max_items`` responses and ``max_bytes`` bytes (8 MiB),
the oldest dropped first); ``store: false`` keeps nothing, so a later reference to it is a 404 like any unknown id.
``GET``/``DELETE /v1/responses/{id}`` read and drop a stored response.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from agentrt.app.server.door import error_response
from agentrt.app.server.door import read_json
from agentrt.app.server.fields import take_vllm_fields
from agentrt.app.server.latency import DecodeSpeed, route_headers
from agentrt.app.server.offload import offload
from agentrt.app.server.request import ChatRequest, RequestError
from agentrt.app.server.response import completion
from agentrt.app.server.responses_out import ResponseStream, from_completion
from agentrt.app.server.run import error_for, plan_request, routed_stream, run_plan
from agentrt.app.server.stream import sse
from agentrt.core.errors import BackendError, UserError
from agentrt.core.request import AnswerOptions, RouteName, RunRequest, explain, field_of

if TYPE_CHECKING:
    from agentrt.app.agent import Agent

# the chat field a Responses field became, for error messages that name what the client sent
_PARAMS = (("messages", "input"), ("max_tokens", "max_output_tokens"), ("response_format.json_schema", "text.format"),
           ("response_format", "text.format"), ("tool_choice.function", "tool_choice"))
DEFAULT_STORE_BYTES = 8 * 2**20  # the store's whole size: 8 MiB of JSON is ~8 MB of RSS
_TEXT_PARTS = {"input_text", "output_text", "text", "summary_text", "reasoning_text"}


class ResponsesRequest(BaseModel):
    """The accepted body: OpenAI's Responses fields (those agentrt cannot honour are a 400 or accepted and
    ignored, docs/server.md), vLLM's sampling extras chat honours (``top_k``, ``min_p``,
    ``repetition_penalty``; its others are warned, ``fields.IGNORED``) and agentrt's own (``extra_body``):
    ``budget``, ``route``, ``router``, ``samples``, ``thinking_cap``, ``seed``, ``max_latency_s``. Unknown
    fields are a 400, as in chat."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    input: str | list[Any]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = field_of(AnswerOptions, "max_tokens")
    temperature: float | None = field_of(RunRequest, "temperature")
    top_p: float | None = field_of(AnswerOptions, "top_p")
    top_k: int | None = field_of(AnswerOptions, "top_k")
    min_p: float | None = field_of(AnswerOptions, "min_p")
    repetition_penalty: float | None = field_of(AnswerOptions, "repetition_penalty")
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    include: list[str] | None = None
    text: dict[str, Any] | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    metadata: dict[str, str] | None = None
    # accepted and ignored: they steer OpenAI's hosted features, which a local model does not have
    reasoning: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    stream_options: dict[str, Any] | None = None
    max_tool_calls: int | None = Field(default=None, ge=1)
    context_management: list[Any] | None = None
    # refused with a 400 when set: no hosted conversations, prompts or background jobs here
    background: bool | None = None
    conversation: Any = None
    prompt: Any = None
    # agentrt's own
    budget: int | None = field_of(RunRequest, "budget")
    route: RouteName | None = field_of(RunRequest, "route")
    router: str | None = field_of(RunRequest, "router")
    samples: int | None = field_of(AnswerOptions, "samples")
    thinking_cap: int | None = field_of(AnswerOptions, "thinking_cap")
    seed: int | None = Field(default=None, ge=-(2**63), lt=2**64)
    max_latency_s: float | None = ChatRequest.model_fields["max_latency_s"]


class _Body(RootModel[dict[str, Any]]):
    """Any JSON object: the body before vLLM's ignored fields are taken out (``take_vllm_fields``)."""


# -- the request: a Responses body as the chat request it means -----------------------------------------------------

def _text(content: Any, where: str) -> str:
    """The text of a string or a list of text parts; a 400 naming any image, file or audio part."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise RequestError(f"{where} must be a string or a list of input_text parts", where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        elif kind in ("input_image", "input_file", "input_audio"):
            raise RequestError(f"{where}.{j} is an {kind} part; agentrt serves a text-only model: send input_text "
                               "parts", f"{where}.{j}")
        else:
            raise RequestError(f"{where}.{j} must be a text part ({{\"type\": \"input_text\", \"text\": ...}}), "
                               f"got type {kind!r}", f"{where}.{j}")
    return "".join(texts)


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise RequestError(f"{where}.{key} must be a non-empty string", f"{where}.{key}")
    return value


def input_messages(items: str | list[Any]) -> list[dict[str, Any]]:
    """Responses input items as chat messages: ``function_call`` items join the assistant turn before
    them as its ``tool_calls``; a ``function_call_output`` becomes a ``tool`` message; ``reasoning`` items
    (a thought this server sent, echoed back) are left out, as chat leaves out ``reasoning_content``."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"input.{i}"
        if not isinstance(item, dict):
            raise RequestError(f"{where} must be an object: a message, function_call or function_call_output item",
                               where)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise RequestError(f"{where}.role must be one of user, system, developer, assistant; got {role!r}",
                                   f"{where}.role")
            out.append({"role": role, "content": _text(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            arguments = item.get("arguments", "")
            if not isinstance(arguments, str):
                raise RequestError(f"{where}.arguments must be a JSON string", f"{where}.arguments")
            call = {"id": _string(item, "call_id", where), "type": "function",
                    "function": {"name": _string(item, "name", where), "arguments": arguments}}
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": _string(item, "call_id", where),
                        "content": _text(item.get("output"), f"{where}.output")})
        elif kind != "reasoning":
            raise RequestError(f"{where}.type {kind!r} is not supported; send message, function_call and "
                               "function_call_output items", f"{where}.type")
    return out


def _tools(req: ResponsesRequest) -> tuple[list[dict[str, Any]] | None, Any]:
    """The chat ``tools`` and ``tool_choice`` of Responses' flat function tools and choice."""
    tools = None
    if req.tools is not None:
        tools = []
        for i, tool in enumerate(req.tools):
            if tool.get("type") != "function":
                raise RequestError(f"tools.{i} is a {tool.get('type')!r} tool; agentrt offers only function tools "
                                   "(the client runs them)", f"tools.{i}.type")
            tools.append({"type": "function", "function": {k: tool[k] for k in
                                                           ("name", "description", "parameters", "strict")
                                                           if tool.get(k) is not None}})
    choice = req.tool_choice
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise RequestError("tool_choice must be none, auto, required or {\"type\": \"function\", \"name\": ...}",
                               "tool_choice")
        choice = {"type": "function", "function": {"name": choice["name"]}}
    return tools, choice


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt.get("type") == "json_schema":
        spec = {k: fmt[k] for k in ("name", "description", "schema", "strict") if fmt.get(k) is not None}
        return {"type": "json_schema", "json_schema": spec}
    return {"type": fmt.get("type")}


def ignored(req: ResponsesRequest) -> list[str]:
    """A warning (``agentrt.warnings``) for each field set that agentrt accepts without acting on it."""
    out = []
    if req.reasoning and any(v is not None for v in req.reasoning.values()):
        out.append("reasoning is ignored: the router decides how much to think (pass route or budget to steer it)")
    if req.truncation == "auto":
        out.append("truncation 'auto' is ignored: the whole conversation is kept unless an explicit budget "
                   "cannot hold it, then the oldest turns are dropped")
    if req.max_tool_calls is not None:
        out.append("max_tool_calls is ignored: the server runs no tools; each response holds one turn's calls")
    out += [f"include {name!r} is ignored: agentrt has no such output" for name in req.include or []
            if name != "message.output_text.logprobs"]
    return out


def chat_body(req: ResponsesRequest, history: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The chat-completions body ``req`` means after the stored ``history``, and the conversation to
    store for a later ``previous_response_id`` (the messages without this request's instructions)."""
    for name in ("background", "conversation", "prompt"):
        if getattr(req, name):
            raise RequestError(f"{name} is not supported by agentrt serve (no hosted conversations, prompts or "
                               "background jobs); chain turns with previous_response_id", name)
    messages = history + input_messages(req.input)
    tools, choice = _tools(req)
    logprobs = req.top_logprobs is not None or "message.output_text.logprobs" in (req.include or [])
    body = {"model": req.model, "stream": req.stream, "stream_options": {"include_usage": True} if req.stream else None,
            "messages": ([{"role": "system", "content": req.instructions}] if req.instructions else []) + messages,
            "temperature": req.temperature, "top_p": req.top_p, "max_tokens": req.max_output_tokens,
            "tools": tools, "tool_choice": choice, "parallel_tool_calls": req.parallel_tool_calls,
            "response_format": _response_format(req.text), "logprobs": logprobs, "top_logprobs": req.top_logprobs,
            "metadata": req.metadata, "user": req.user, "budget": req.budget, "route": req.route, "router": req.router,
            "samples": req.samples, "thinking_cap": req.thinking_cap, "seed": req.seed, "top_k": req.top_k, "store": req.store,
            "min_p": req.min_p, "repetition_penalty": req.repetition_penalty, "max_latency_s": req.max_latency_s}
    return {k: v for k, v in body.items() if v is not None}, messages


def responses_param(param: str | None) -> str | None:
    """The Responses name of a chat field named in an error (``messages.2`` -> ``input``)."""
    if not param:
        return param
    param = param.replace(".function.", ".") if param.startswith("tools.") else param
    for chat, ours in _PARAMS:
        if param == chat or param.startswith(chat + "."):
            return ours if chat == "messages" else ours + param[len(chat):]
    return param


# -- the store behind previous_response_id ---------------------------------------------------------------------------

@dataclass
class _Stored:
    """One stored response: its conversation and its body as compact UTF-8 JSON, decoded when read (as
    Python objects they took ten times the memory: 32M characters of them were ~330 MB of RSS)."""

    expires: float
    _messages: bytes
    _response: bytes

    @property
    def size(self) -> int:
        return len(self._messages) + len(self._response)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return json.loads(self._messages)

    @property
    def response(self) -> dict[str, Any]:
        return json.loads(self._response)


def _packed(value: Any) -> bytes:
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class ResponseStore:
    """Stored responses and their conversations, in this process's memory: each kept ``ttl_s`` seconds;
    beyond ``max_items`` responses or ``max_bytes`` bytes of them (their compact JSON, which is what they
    hold in memory), the oldest is dropped first."""

    def __init__(self, ttl_s: float = 3600.0, max_items: int = 1000, max_bytes: int = DEFAULT_STORE_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self.max_items, self.max_bytes, self.clock = ttl_s, max_items, max_bytes, clock
        self._items: OrderedDict[str, _Stored] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        """The bytes the stored responses hold."""
        return self._bytes

    def put(self, rid: str, messages: list[dict[str, Any]], response: dict[str, Any]) -> None:
        stored = _Stored(self.clock() + self.ttl_s, _packed(messages), _packed(response))
        self.delete(rid)
        self._items[rid] = stored
        self._bytes += stored.size
        while self._items and (len(self._items) > self.max_items or self._bytes > self.max_bytes):
            self.delete(next(iter(self._items)))

    def get(self, rid: str) -> _Stored | None:
        stored = self._items.get(rid)
        if stored is not None and stored.expires <= self.clock():
            self.delete(rid)
            return None
        return stored

    def delete(self, rid: str) -> bool:
        stored = self._items.pop(rid, None)
        if stored is not None:
            self._bytes -= stored.size
        return stored is not None


def _not_found(rid: str, param: str | None, ttl_s: float) -> JSONResponse:
    return error_response(404, f"no stored response {rid!r}: this server keeps responses in memory for {ttl_s:g} s "
                               "(not those made with store: false, nor across restarts); send the whole "
                               "conversation as input instead", param=param, code="previous_response_not_found")


# -- the routes ---------------------------------------------------------------------------------------------------

def register(app: FastAPI, agent: Agent, *, names: list[str], slots: asyncio.Semaphore, max_body: int,
             max_budget: int | None, request_timeout: float | None, tokenizer: Any = None,
             default_route: str | None = None, store: ResponseStore | None = None, speed: DecodeSpeed | None = None,
             max_model_len: int | None = None) -> ResponseStore:
    """Add ``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{id}`` to ``app`` (the chat endpoint's
    limits: ``names``, ``slots``, ``max_body``, ``max_budget``, ``request_timeout``, ``default_route``, the
    decode ``speed`` behind ``max_latency_s``, ``max_model_len``); returns the store behind
    ``previous_response_id``."""
    store = store or ResponseStore()
    speed = speed or DecodeSpeed(agent.settings.serve_decode_tokens_per_s)

    def validate(data: dict[str, Any]) -> Any:
        """The body as a ``ResponsesRequest`` and vLLM's warnings, or the 4xx to send."""
        try:
            vllm_warnings = take_vllm_fields(data)  # as chat: vLLM's extras honoured (declared) or warned
            return ResponsesRequest.model_validate(data), vllm_warnings
        except RequestError as e:
            return error_for(e)
        except ValidationError as e:
            message, where = explain(e, ResponsesRequest)
            return error_response(400, message, param=where)

    def prepare(req: ResponsesRequest, history: list[dict[str, Any]], warnings: list[str]) -> Any:
        """The conversation to store, the chat request and its run; or the 4xx to send."""
        try:
            body, messages = chat_body(req, history)
            chat = ChatRequest.model_validate(body)
            plan = plan_request(chat, agent, max_budget=max_budget, default_route=default_route, speed=speed,
                                context_cap=max_model_len or agent.policy.context_length, warnings=warnings)
            plan.warnings += ignored(req)
        except ValidationError as e:
            message, where = explain(e, ChatRequest)
            return error_response(400, message, param=responses_param(where))
        except (UserError, BackendError) as e:  # RequestError is a UserError
            return error_for(e, responses_param)
        return messages, chat, plan

    @app.post("/v1/responses")
    async def create_response(request: Request) -> Any:
        raw = await read_json(request, max_body, _Body)  # the same door as /v1/completions
        if isinstance(raw, JSONResponse):
            return raw
        checked = await offload(validate, raw.root)  # the work thread: the cost grows with the input items
        if isinstance(checked, JSONResponse):
            return checked
        req, vllm_warnings = checked
        model = req.model or names[0]
        if model not in names:
            return error_response(404, f"The model `{model}` does not exist; this server serves: {', '.join(names)}",
                                  param="model", code="model_not_found")
        history: list[dict[str, Any]] = []
        if req.previous_response_id is not None:
            stored = store.get(req.previous_response_id)
            if stored is None:
                return _not_found(req.previous_response_id, "previous_response_id", store.ttl_s)
            history = list(stored.messages)
        planned = await offload(prepare, req, history, vllm_warnings)  # the work thread, as chat's
        if isinstance(planned, JSONResponse):
            return planned
        messages, chat, plan = planned
        created = int(time.time())

        def keep(response: dict[str, Any], reply: dict[str, Any]) -> None:
            if req.store is not False and response["status"] in ("completed", "incomplete"):
                store.put(response["id"], [*messages, reply], response)

        if req.stream:  # the route in the headers, as chat's
            return await routed_stream(sse(agent, slots, plan, chat, model, created, request_timeout, tokenizer),
                                       ResponseStream(req, model, created, keep).events)
        result = await run_plan(agent, slots, plan, request_timeout, request)  # cancelled if the client leaves
        if isinstance(result, JSONResponse):
            return result
        response, reply = from_completion(completion(result, plan, model, created, tokenizer), req, model)
        keep(response, reply)
        return JSONResponse(response, headers=route_headers(result.route, plan.route_reason or result.reason))

    @app.get("/v1/responses/{rid}")
    async def get_response(rid: str) -> Any:
        stored = store.get(rid)
        return stored.response if stored is not None else _not_found(rid, None, store.ttl_s)

    @app.delete("/v1/responses/{rid}")
    async def delete_response(rid: str) -> Any:
        if not store.delete(rid):
            return _not_found(rid, None, store.ttl_s)
        return {"id": rid, "object": "response", "deleted": True}

    return store


__all__ = ["ResponseStore", "ResponsesRequest", "chat_body", "input_messages", "register", "responses_param"]
