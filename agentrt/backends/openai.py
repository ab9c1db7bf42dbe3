"""OpenAI-compatible endpoints (vLLM, SGLang, hosted APIs) over async httpx.

Spec: ``openai:URL[,URL...]#MODEL[?option=value&...]``, each URL a ``/v1`` base. Several URLs
serve one model: each request goes to the healthy endpoint with the fewest requests in flight; a
failed endpoint (connection error, timeout, 5xx) is benched for a cool-down that doubles with each
consecutive failure and is tried again after it, and the request fails over at once to another
endpoint. An endpoint benched because it could not be reached has its ``/models`` polled every
``probe_s`` (a cheap GET, not a real request): it stays benched while unreachable, and a restarted
server is back in use within seconds, not after a cool-down grown long while it was down. 429 and errors with no healthy endpoint left back off
exponentially with jitter. Every
request has a per-attempt timeout and an overall deadline: a dead server yields a BackendError in
bounded time, never a hang.

What a server cannot return is None, not invented: token ids come from vLLM's ``return_token_ids``
extension; other servers give text and logprobs only. A request whose ``GenParams.on_token`` is set
streams (SSE, ``stream: true``) and hands each content delta to it as it arrives; a reasoning server's
``reasoning`` / ``reasoning_content`` deltas come as ``<think> ... </think>`` text, as the model wrote
them, so the Completion is the same streamed or not. ``count_tokens`` is exact for a vLLM server
(the model folder's tokenizer when it is local, else the server's ``/tokenize``), and otherwise a
tiktoken estimate plus a safety margin, so a reservation always covers what the server reports.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrt.core.config import Settings
from agentrt.backends._checks import parse_options
from agentrt.backends._loop import BackgroundLoop
from agentrt.backends._openai_wire import (
    StreamRelay, _check_shape, _check_status, _collect_stream, _model_list, _Retryable, _snippet, message_text,
)
from agentrt.core.errors import BackendError, ConfigError, InputError, missing_extra
from agentrt.core.types import Choice, Completion, GenParams, Message, Usage

try:
    import httpx
except ImportError:  # pragma: no cover
    raise missing_extra("httpx", "openai") from None

OPTIONS: dict[str, type] = {
    "timeout_s": float,          # per attempt (connect + response)
    "deadline_s": float,         # per request, over all retries
    "retries": int,              # extra attempts after the first
    "backoff_s": float,          # first back-off; doubles per attempt, with jitter
    "cooldown_s": float,         # bench time of a failed endpoint; doubles per consecutive failure
    "probe_s": float,            # health-check interval of a benched endpoint (0: off, wait out the cool-down)
    "stream": bool,              # stream responses (SSE) instead of one JSON body
    "context_length": int,       # when the server does not say (vLLM does)
    "encoding": str,             # tiktoken encoding for estimates
}
_MAX_COOLDOWN_S = 120.0


@dataclass(slots=True)
class Endpoint:
    """One base URL and its health."""

    url: str
    outstanding: int = 0
    failures: int = 0           # consecutive
    down_until: float = 0.0
    served: int = 0
    last_error: str = ""
    probing: bool = False       # a health check is watching this benched endpoint

    @property
    def root(self) -> str:
        """The server root (vLLM's /tokenize and /health live there, not under /v1)."""
        return self.url[: -len("/v1")] if self.url.endswith("/v1") else self.url


class OpenAIBackend:
    """One model behind one or more OpenAI-compatible base URLs."""

    def __init__(self, urls: list[str], model: str, *, api_key: str | None = None, timeout_s: float = 120.0,
                 deadline_s: float | None = None, retries: int = 3, backoff_s: float = 0.5,
                 cooldown_s: float = 5.0, probe_s: float = 2.0, stream: bool = False, context_length: int = 8192,
                 encoding: str = "o200k_base", probe: bool = True) -> None:
        if not urls or not model:
            raise ConfigError("an openai backend needs at least one URL and a model: openai:URL[,URL]#MODEL")
        self.endpoints = [Endpoint(u.rstrip("/")) for u in urls]
        self.model = model
        self.name = model
        self.timeout_s, self.retries, self.backoff_s, self.cooldown_s = timeout_s, retries, backoff_s, cooldown_s
        self.probe_s = probe_s
        self.deadline_s = deadline_s if deadline_s is not None else timeout_s * (retries + 1)
        self.stream = stream
        self.context_length = context_length
        self.encoding = encoding
        self.supports_thinking = False
        self.is_vllm = False
        self.tokenizer: Any = None        # a local HF tokenizer when the served model folder is here
        self.counting = "estimate"        # "local" | "server" | "estimate"
        self.events: list[dict[str, Any]] = []  # failovers and errors, newest last (bounded)
        key = api_key or os.environ.get("AGENTRT_OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._loop = BackgroundLoop(f"agentrt-openai-{model}")
        self._client: httpx.AsyncClient | None = None
        self._watches: set[Any] = set()  # health checks of benched endpoints (futures on the private loop)
        if probe:
            self._probe()

    # -- set-up ------------------------------------------------------------------------------
    def _probe(self) -> None:
        """Ask each endpoint for its model list: checks reachability and the model name, learns the rest."""
        errors, found = [], False
        with httpx.Client(timeout=httpx.Timeout(min(10.0, self.timeout_s)), headers=self._headers) as client:
            for ep in self.endpoints:
                try:
                    resp = client.get(f"{ep.url}/models")
                except httpx.HTTPError as e:
                    self._unreachable(ep, f"unreachable ({type(e).__name__})")
                    errors.append(f"{ep.url}: {type(e).__name__}")
                    continue
                if resp.status_code in (401, 403):
                    raise ConfigError(f"{ep.url} refused the API key (HTTP {resp.status_code}); set AGENTRT_OPENAI_API_KEY")
                if resp.status_code == 404:  # some servers do not list models; learn nothing, trust the spec
                    found = True
                    continue
                entries = _model_list(resp)
                if entries is None:
                    raise BackendError(f"{ep.url}/models did not return an OpenAI model list "
                                       f"(HTTP {resp.status_code}: {_snippet(resp.text)}); is {ep.url} an OpenAI-compatible /v1 URL?")
                entry = next((m for m in entries if m.get("id") == self.model), None)
                if entry is None:
                    served = ", ".join(str(m.get("id")) for m in entries) or "nothing"
                    raise ConfigError(f"model {self.model!r} is not served at {ep.url} (it serves: {served}); fix #MODEL in the spec")
                found = True
                self._learn(entry, ep)
        if not found:
            raise BackendError(f"no endpoint for {self.model} is reachable ({'; '.join(errors)}); start the server or fix the URL")

    def _learn(self, entry: dict[str, Any], ep: Endpoint) -> None:
        if entry.get("owned_by") != "vllm" or self.is_vllm:
            return
        self.is_vllm = True
        if isinstance(entry.get("max_model_len"), int):
            self.context_length = entry["max_model_len"]
        root = entry.get("root")
        if isinstance(root, str) and (Path(root) / "tokenizer_config.json").is_file():
            try:
                from transformers import AutoTokenizer

                self.tokenizer = AutoTokenizer.from_pretrained(root)
                self.counting = "local"
            except ImportError:
                self.counting = "server"
        else:
            self.counting = "server"
        if self.tokenizer is not None:
            self.supports_thinking = "enable_thinking" in str(self.tokenizer.chat_template or "")

    # -- the protocol ----------------------------------------------------------------------
    def count_tokens(self, messages: list[Message], params: GenParams | None = None) -> int:
        """Prompt tokens as the server will count them (exact for vLLM; else an estimate with margin)."""
        kwargs = params.chat_template_kwargs if params else {}
        prefill = bool(messages) and messages[-1].role == "assistant"
        dicts = [m.to_dict() for m in messages]
        if self.counting == "local":
            text = self.tokenizer.apply_chat_template(dicts, tokenize=False, add_generation_prompt=not prefill,
                                                      continue_final_message=prefill, **kwargs)
            return len(self.tokenizer(text, add_special_tokens=False).input_ids)
        if self.counting == "server" and not self._on_private_loop():
            try:
                return self._loop.run_sync(self._tokenize(dicts, prefill, kwargs), timeout=self.deadline_s)
            except BackendError:
                pass  # no endpoint answered: fall back to a safe estimate rather than fail the count
        from agentrt.core.tokens import count_chat_tokens, estimate_margin

        n = count_chat_tokens(dicts, self.encoding)
        return n + estimate_margin(n)

    def _on_private_loop(self) -> bool:
        """True inside our own loop thread, where a blocking /tokenize call would deadlock."""
        try:
            return asyncio.get_running_loop() is self._loop.loop
        except RuntimeError:
            return False

    async def chat(self, messages: list[Message], params: GenParams) -> Completion:
        if params.n < 1 or params.max_tokens < 0:
            raise InputError("n must be >= 1 and max_tokens >= 0")
        if params.max_tokens == 0:  # servers reject max_tokens=0; nothing to generate
            empty = [Choice("", [], [] if params.logprobs else None, "length") for _ in range(params.n)]
            return Completion(empty, None, Usage(self.count_tokens(messages, params), 0), self.name)
        return await self._loop.run(self._request(self._body(messages, params), params))

    def chat_sync(self, messages: list[Message], params: GenParams) -> Completion:
        return self._loop.run_sync(self._request(self._body(messages, params), params))

    def close(self) -> None:
        for watch in list(self._watches):
            watch.cancel()
        if self._client is not None:
            try:
                self._loop.run_sync(self._client.aclose(), timeout=5)
            except Exception:  # closing must not raise on a dead server
                pass
            self._client = None
        self._loop.close()

    # -- requests ------------------------------------------------------------------------------
    def _body(self, messages: list[Message], params: GenParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model, "messages": [m.to_dict() for m in messages], "max_tokens": params.max_tokens,
            "temperature": params.temperature, "top_p": params.top_p, "n": params.n, "logprobs": params.logprobs,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if params.seed is not None:
            body["seed"] = params.seed
        if self.stream or params.on_token is not None:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if self.is_vllm:
            # vLLM extensions: token ids for trainers, prefill, template switches, structured output.
            body["return_token_ids"] = True
            body.update({k: v for k, v in (("top_k", params.top_k), ("min_p", params.min_p)) if v})
            if params.repetition_penalty != 1.0:
                body["repetition_penalty"] = params.repetition_penalty
            if messages and messages[-1].role == "assistant":
                body["continue_final_message"], body["add_generation_prompt"] = True, False
            if params.chat_template_kwargs:
                body["chat_template_kwargs"] = params.chat_template_kwargs
            if params.json_schema is not None:
                body["structured_outputs"] = {"json": params.json_schema, "disable_any_whitespace": True}
            elif params.choices is not None:
                body["structured_outputs"] = {"choice": list(params.choices)}
        elif params.json_schema is not None or params.choices is not None:
            schema = params.json_schema if params.json_schema is not None else {"type": "string", "enum": list(params.choices or [])}
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": True}}
        return body

    def _pick(self) -> Endpoint:
        """The healthy endpoint with the fewest requests in flight; else the one back soonest."""
        now = time.monotonic()
        healthy = [e for e in self.endpoints if e.down_until <= now]
        if healthy:
            return min(healthy, key=lambda e: (e.outstanding, e.served))
        return min(self.endpoints, key=lambda e: e.down_until)

    def _bench(self, ep: Endpoint, why: str) -> None:
        ep.failures += 1
        ep.last_error = why
        ep.down_until = time.monotonic() + min(_MAX_COOLDOWN_S, self.cooldown_s * 2 ** (ep.failures - 1))
        self._event("endpoint_down", ep, why)

    def _unreachable(self, ep: Endpoint, why: str) -> None:
        """Bench an endpoint that did not answer at all (refused, reset, gone), and watch for its return.
        A slow one (a timeout) or one that answers with errors is only benched: it is up, and unwell."""
        self._bench(ep, why)
        if self.probe_s > 0 and not ep.probing and len(self.endpoints) > 1 and not self._loop.loop.is_closed():
            ep.probing = True  # from any thread (the set-up probe runs on the caller's)
            self._watches.add(self._loop.submit(self._watch(ep)))
            self._watches = {f for f in self._watches if not f.done()}

    async def _watch(self, ep: Endpoint) -> None:
        """Poll a benched, unreachable endpoint's ``/models`` every ``probe_s`` until it answers: a server
        that is back (restarted, reachable again) takes requests at once, and while it stays unreachable
        it stays benched, so no real request waits on it (a black-holed host costs a connect timeout)."""
        try:
            while ep.down_until > time.monotonic():
                await asyncio.sleep(max(0.0, min(self.probe_s, ep.down_until - time.monotonic())))
                client = await self._http()
                try:
                    resp = await client.get(f"{ep.url}/models", timeout=min(5.0, self.timeout_s))
                except httpx.HTTPError:  # still unreachable: keep it benched until the next check
                    ep.down_until = max(ep.down_until, time.monotonic() + self.probe_s + 1.0)
                    continue
                if resp.status_code < 400 or resp.status_code == 404:  # 404: a server that lists no models
                    ep.down_until, ep.failures = 0.0, 0
                    self._event("endpoint_up", ep, f"answered its health check (HTTP {resp.status_code})")
                    return
        finally:
            ep.probing = False

    def _event(self, kind: str, ep: Endpoint, detail: str) -> None:
        self.events.append({"t": time.time(), "event": kind, "url": ep.url, "detail": detail})
        del self.events[:-100]

    async def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            self._client = httpx.AsyncClient(headers=self._headers, limits=limits,
                                             timeout=httpx.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s)))
        return self._client

    async def _request(self, body: dict[str, Any], params: GenParams) -> Completion:
        started = time.perf_counter()
        deadline = time.monotonic() + self.deadline_s
        attempt, errors, events = 0, [], []
        # A retried request streams again from its start: the relay skips what was already handed out.
        relay = StreamRelay(params.on_token) if params.on_token is not None else None
        while True:
            ep = self._pick()
            wait = ep.down_until - time.monotonic()
            if wait > 0:  # every endpoint is benched: wait for the first back, within the deadline
                if time.monotonic() + wait >= deadline:
                    break
                await asyncio.sleep(wait)
            ep.outstanding += 1
            retry_after = 0.0
            try:
                remaining = max(0.1, deadline - time.monotonic())
                if relay is not None:
                    relay.restart()
                data = await asyncio.wait_for(self._send(ep, body, relay), timeout=min(self.timeout_s, remaining))
            except (httpx.TransportError, asyncio.TimeoutError) as e:
                why = f"{type(e).__name__}: {e}".rstrip(": ") if str(e) else type(e).__name__
                if isinstance(e, (asyncio.TimeoutError, httpx.TimeoutException)):
                    self._bench(ep, why)
                else:  # refused, reset, dropped mid-response: the server is gone
                    self._unreachable(ep, why)
                errors.append(f"{ep.url}: {why}")
                events.append({"event": "attempt_failed", "url": ep.url, "error": why})
            except _Retryable as e:
                errors.append(f"{ep.url}: {e}")
                events.append({"event": "attempt_failed", "url": ep.url, "error": str(e)})
                retry_after = e.retry_after
                if e.status != 429:
                    self._bench(ep, str(e))
            else:
                ep.failures, ep.served = 0, ep.served + 1
                completion = self._completion(data, body, params, started)
                if attempt:
                    self._event("failed_over", ep, f"succeeded after {attempt} failed attempt(s)")
                    events.append({"event": "served", "url": ep.url, "attempts": attempt + 1})
                    completion.events = events
                return completion
            finally:
                ep.outstanding -= 1
            attempt += 1
            if attempt > self.retries or time.monotonic() >= deadline:
                break
            if retry_after or not any(e.down_until <= time.monotonic() for e in self.endpoints):
                delay = retry_after or min(8.0, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
                await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        raise BackendError(
            f"{self.model}: request failed on every endpoint after {attempt} attempt(s) "
            f"in {time.perf_counter() - started:.1f}s (last: {errors[-1] if errors else 'deadline passed'}); "
            "check that the server is up"
        )

    async def _send(self, ep: Endpoint, body: dict[str, Any], relay: StreamRelay | None = None) -> dict[str, Any]:
        client = await self._http()
        url = f"{ep.url}/chat/completions"
        if not body.get("stream"):
            resp = await client.post(url, json=body)
            _check_status(resp, ep, self.model)
            try:
                data = resp.json()
            except ValueError:
                raise BackendError(f"{ep.url} returned a body that is not JSON ({_snippet(resp.text)}); "
                                   "is it an OpenAI-compatible /v1 URL?") from None
            return _check_shape(data, ep)
        async with client.stream("POST", url, json=body) as resp:
            if resp.status_code >= 400:
                await resp.aread()
            _check_status(resp, ep, self.model)
            return _check_shape(await _collect_stream(resp, ep, relay), ep)

    async def _tokenize(self, messages: list[dict[str, str]], prefill: bool, kwargs: dict[str, Any]) -> int:
        client = await self._http()
        body: dict[str, Any] = {"model": self.model, "messages": messages, "add_generation_prompt": not prefill,
                                "continue_final_message": prefill}
        if kwargs:
            body["chat_template_kwargs"] = kwargs
        for _ in range(len(self.endpoints)):
            ep = self._pick()
            try:
                resp = await client.post(f"{ep.root}/tokenize", json=body, timeout=min(30.0, self.timeout_s))
                if resp.status_code == 200 and isinstance(resp.json().get("count"), int):
                    return int(resp.json()["count"])
            except (httpx.HTTPError, ValueError) as e:
                self._bench(ep, f"tokenize: {type(e).__name__}")
        raise BackendError(f"{self.model}: no endpoint answered /tokenize")

    def _completion(self, data: dict[str, Any], body: dict[str, Any], params: GenParams, started: float) -> Completion:
        choices = []
        for c in sorted(data["choices"], key=lambda c: c.get("index", 0)):
            text = message_text(c.get("message") or {})
            if params.choices is not None and not self.is_vllm:
                try:
                    text = str(json.loads(text))  # response_format gave a JSON string; return the choice
                except ValueError:
                    pass
            content = (c.get("logprobs") or {}).get("content")
            logprobs = [float(t["logprob"]) for t in content] if params.logprobs and content else None
            ids = c.get("token_ids")
            token_ids = [int(t) for t in ids] if isinstance(ids, list) else None
            finish = {"stop": "stop", "length": "length", "tool_calls": "stop"}.get(c.get("finish_reason"), "error")
            choices.append(Choice(text, token_ids, logprobs, finish))  # type: ignore[arg-type]
        usage = data.get("usage") or {}
        prompt_ids = data.get("prompt_token_ids")
        prompt_tokens = usage.get("prompt_tokens")
        if not isinstance(prompt_tokens, int):  # not reported: fall back to our own (safe) count
            prompt_tokens = len(prompt_ids) if isinstance(prompt_ids, list) else self.count_tokens(
                [Message(m["role"], m["content"]) for m in body["messages"]], params)
        completion_tokens = usage.get("completion_tokens")
        if not isinstance(completion_tokens, int):
            completion_tokens = sum(len(c.token_ids) if c.token_ids is not None else
                                    len(c.logprobs) if c.logprobs is not None else body["max_tokens"] for c in choices)
        return Completion(choices, [int(t) for t in prompt_ids] if isinstance(prompt_ids, list) else None,
                          Usage(prompt_tokens, completion_tokens), self.name, time.perf_counter() - started)


def parse_spec(arg: str) -> tuple[list[str], str, dict[str, Any]]:
    """``URL[,URL]#MODEL[?k=v&...]`` -> (urls, model, options); a ConfigError says what is wrong."""
    urls_part, sep, rest = arg.partition("#")
    model, _, query = rest.partition("?")
    urls = [u.strip() for u in urls_part.split(",") if u.strip()]
    if not sep or not model or not urls:
        raise ConfigError(f"bad openai spec 'openai:{arg}': expected openai:URL[,URL...]#MODEL "
                          "(e.g. openai:http://127.0.0.1:8000/v1#my-model)")
    for u in urls:
        parsed = httpx.URL(u) if u.startswith(("http://", "https://")) else None
        if parsed is None or not parsed.host:
            raise ConfigError(f"bad URL {u!r} in openai spec: use http(s)://HOST[:PORT]/v1")
    options = parse_options(query, OPTIONS, "openai")
    return urls, model, options


def from_spec(arg: str, settings: Settings) -> OpenAIBackend:
    """``openai:http://host:8000/v1,http://host2:8000/v1#model?timeout_s=30&stream=1``."""
    urls, model, options = parse_spec(arg)
    return OpenAIBackend(urls, model, **options)
