"""The OpenAI wire format for ``agentrt.backends.openai``: HTTP status -> error, response shape checks,
folding a streamed (SSE) response into the shape of a non-streamed one, handing its text on as it comes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from agentrt.core.errors import BackendError, ConfigError

# Where servers put a reasoning model's thinking: vLLM's reasoning parsers (``reasoning``; older
# releases and DeepSeek's API ``reasoning_content``).
REASONING_KEYS = ("reasoning", "reasoning_content")


class StreamRelay:
    """``on_token`` for a request that may be retried: each attempt streams from the start again, so the
    text of a choice already handed out is skipped (a greedy retry repeats it)."""

    def __init__(self, on_token: Callable[[int, str], None]) -> None:
        self.on_token = on_token
        self.sent: dict[int, int] = {}  # characters handed out per choice, over all attempts
        self.seen: dict[int, int] = {}  # characters this attempt has streamed per choice

    def restart(self) -> None:
        self.seen = {}

    def __call__(self, index: int, text: str) -> None:
        seen, sent = self.seen.get(index, 0), self.sent.get(index, 0)
        self.seen[index] = seen + len(text)
        if seen + len(text) > sent:
            self.sent[index] = seen + len(text)
            try:
                self.on_token(index, text[max(0, sent - seen):])
            except Exception:  # noqa: BLE001 - the caller's hook; the completion still arrives
                pass


def message_text(message: dict[str, Any]) -> str:
    """A chat message's text, a reasoning server's thinking put back in front as ``<think>...</think>``
    (left open when no answer follows it, as when the thought was cut by ``max_tokens``)."""
    content = message.get("content") or ""
    reasoning = next((message[k] for k in REASONING_KEYS if isinstance(message.get(k), str) and message[k]), "")
    if not reasoning:
        return content
    return f"<think>{reasoning}</think>{content}" if content else f"<think>{reasoning}"


class _Retryable(Exception):
    def __init__(self, message: str, status: int, retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


def _check_status(resp: httpx.Response, ep: Any, model: str) -> None:
    status = resp.status_code
    if status < 400:
        return
    message = _error_message(resp)
    if status == 429 or status >= 500:
        retry_after = resp.headers.get("retry-after", "")
        raise _Retryable(f"HTTP {status}: {message}", status, min(30.0, float(retry_after)) if retry_after.replace(".", "", 1).isdigit() else 0.0)
    if status in (401, 403):
        raise ConfigError(f"{ep.url} refused the API key (HTTP {status}); set AGENTRT_OPENAI_API_KEY")
    if status == 404:
        raise ConfigError(f"{ep.url}: model {model!r} or the chat endpoint was not found (HTTP 404: {message}); check the spec")
    raise BackendError(f"{ep.url} rejected the request (HTTP {status}): {message}")


def _error_message(resp: httpx.Response) -> str:
    try:
        err = resp.json().get("error", resp.json())
        return _snippet(str(err.get("message", err) if isinstance(err, dict) else err))
    except (ValueError, AttributeError):
        return _snippet(resp.text)


def _check_shape(data: Any, ep: Any) -> dict[str, Any]:
    ok = isinstance(data, dict) and isinstance(data.get("choices"), list) and data["choices"] and all(
        isinstance(c, dict) and isinstance(c.get("message"), dict) for c in data["choices"])
    if not ok:
        raise BackendError(f"{ep.url} returned something that is not an OpenAI chat completion "
                           f"({_snippet(json.dumps(data) if not isinstance(data, str) else data)}); "
                           "is it an OpenAI-compatible /v1 URL?")
    return data


async def _collect_stream(resp: httpx.Response, ep: Any, relay: Callable[[int, str], None] | None = None
                          ) -> dict[str, Any]:
    """Fold SSE chunks into the shape of a non-streamed response; ``relay(index, text)`` gets each new piece
    of a choice's text (thinking deltas wrapped in ``<think>...</think>``, as ``message_text`` does)."""
    merged: dict[int, dict[str, Any]] = {}
    out: dict[str, Any] = {}
    async for line in resp.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            chunk = json.loads(payload)
        except ValueError:
            raise BackendError(f"{ep.url} streamed a chunk that is not JSON ({_snippet(payload)})") from None
        if chunk.get("usage"):
            out["usage"] = chunk["usage"]
        if chunk.get("prompt_token_ids"):
            out["prompt_token_ids"] = chunk["prompt_token_ids"]
        for c in chunk.get("choices") or []:
            index = c.get("index", 0)
            m = merged.setdefault(index, {"index": index, "message": {"content": ""}, "logprobs": {"content": []},
                                          "token_ids": None, "thinking": False})
            delta = c.get("delta") or {}
            piece = next((delta[k] for k in REASONING_KEYS if isinstance(delta.get(k), str) and delta[k]), "")
            if piece and not m["thinking"]:
                piece, m["thinking"] = "<think>" + piece, True
            content = delta.get("content") or ""
            if content and m["thinking"]:
                content, m["thinking"] = "</think>" + content, False
            piece += content
            if piece:
                m["message"]["content"] += piece
                if relay is not None:
                    relay(index, piece)
            m["logprobs"]["content"] += (c.get("logprobs") or {}).get("content") or []
            if isinstance(c.get("token_ids"), list):
                m["token_ids"] = (m["token_ids"] or []) + c["token_ids"]
            if c.get("finish_reason"):
                m["finish_reason"] = c["finish_reason"]
    for m in merged.values():
        del m["thinking"]  # a stream that ends inside the thought leaves it open, as the model did
    out["choices"] = list(merged.values())
    return out


def _model_list(resp: httpx.Response) -> list[dict[str, Any]] | None:
    try:
        data = resp.json()
    except ValueError:
        return None
    entries = data.get("data") if isinstance(data, dict) else None
    return entries if isinstance(entries, list) and all(isinstance(m, dict) for m in entries) else None


def _snippet(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."
