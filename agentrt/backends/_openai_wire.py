"""The OpenAI wire format for ``agentrt.backends.openai``: HTTP status -> error, response shape checks,
folding a streamed (SSE) response into the shape of a non-streamed one."""

from __future__ import annotations

import json
from typing import Any

import httpx

from agentrt.core.errors import BackendError, ConfigError

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


async def _collect_stream(resp: httpx.Response, ep: Any) -> dict[str, Any]:
    """Fold SSE chunks into the shape of a non-streamed response."""
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
            m = merged.setdefault(c.get("index", 0), {"index": c.get("index", 0), "message": {"content": ""},
                                                      "logprobs": {"content": []}, "token_ids": None})
            m["message"]["content"] += (c.get("delta") or {}).get("content") or ""
            m["logprobs"]["content"] += (c.get("logprobs") or {}).get("content") or []
            if isinstance(c.get("token_ids"), list):
                m["token_ids"] = (m["token_ids"] or []) + c["token_ids"]
            if c.get("finish_reason"):
                m["finish_reason"] = c["finish_reason"]
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
