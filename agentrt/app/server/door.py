"""The server's front door, apart from its routes: OpenAI-shaped errors, hostile-body parsing, the API key.

* ``error_response``: every error the server sends is ``{"error": {"message", "type", "param", "code"}}``.
* ``parse_body``: a request body -> a JSON value, or ``BadBody`` (a 400) when it is not UTF-8, nests
  deeper than ``MAX_DEPTH``, holds an integer longer than ``MAX_INT_DIGITS``, a NaN/Infinity, or a lone
  surrogate (``"\\ud800"``) anywhere. The depth is measured before parsing, in C-speed passes, so a
  200k-deep body costs a scan, never a RecursionError.
* ``ApiKeyGate``: an ASGI middleware; every path but ``/healthz`` needs ``Authorization: Bearer KEY``,
  compared in constant time (digests of both sides, so not even the length leaks); a WebSocket handshake
  too (``refuse``: the 401 as the handshake's answer).
* ``read_object`` / ``read_json``: a request's body, size-capped while it streams, through ``parse_body``, as a JSON
  object / validated as a pydantic model (each refusal the 4xx to send).
* ``is_loopback``: whether a bind address only this machine can reach.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import itertools
import json
import re
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.responses import JSONResponse

from agentrt.app.server.offload import INLINE_BYTES, offload
from agentrt.app.server.specs import request_router
from agentrt.core.request import explain

MAX_DEPTH = 64  # an OpenAI chat body nests 4 deep (body > messages > message > content part)
MAX_INT_DIGITS = 20  # larger than any budget or token count; Python itself refuses > 4300 digits
OPEN_PATHS = frozenset({"/healthz", "/health"})  # liveness probes send no key (vLLM leaves /health open too)

_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.S)  # a JSON string (quotes never occur inside UTF-8 multibyte)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_SIGNED = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 / -1 as signed bytes


# OpenAI's ``code`` is a string: the default one for each status (a caller may name a more precise one)
STATUS_CODES = {400: "invalid_request", 401: "invalid_api_key", 403: "forbidden", 404: "not_found",
                405: "method_not_allowed", 413: "request_too_large", 415: "unsupported_media_type",
                422: "invalid_request", 429: "rate_limit_exceeded", 431: "headers_too_large",
                500: "internal_error", 502: "backend_error", 503: "unavailable", 504: "timeout"}


def error_response(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
                   code: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    """OpenAI's error shape; ``code`` (a string, as OpenAI's) defaults to the status's name in STATUS_CODES."""
    code = code or STATUS_CODES.get(status, f"http_{status}")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


class BadBody(ValueError):
    """A request body the server refuses (400), with the field it concerns when there is one."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


_CLOSE = {"Connection": "close"}  # after a 413 the connection closes: the rest of the body is never read


async def read_object(request: Any, max_body: int, then: Any = None) -> Any:
    """A request's body as a JSON object, or the 4xx ``JSONResponse`` to send instead: over ``max_body``
    (declared or streamed: 413, and no more of it is read), not parseable (``parse_body``: 400), not an object
    (400). Every endpoint's body comes through here. ``then(data)``: more work on the object (validation),
    done with the parsing: a body over ``offload.INLINE_BYTES`` is parsed in the work thread, not the loop."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_body:
        return error_response(413, f"request body is {declared} bytes; the limit is {max_body}", headers=_CLOSE)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_body:
            return error_response(413, f"request body is over the {max_body}-byte limit", headers=_CLOSE)

    def parse(raw: bytes) -> Any:
        try:
            data = parse_body(raw)
        except BadBody as e:
            return error_response(400, str(e), param=e.param)
        if not isinstance(data, dict):
            return error_response(400, "the body must be a JSON object")
        return data if then is None else then(data)

    return parse(bytes(body)) if len(body) <= INLINE_BYTES else await offload(parse, bytes(body))


async def read_json(request: Any, max_body: int, model: type[BaseModel]) -> Any:
    """The request's body as ``model``, or the 4xx ``JSONResponse`` to send instead."""
    def validate(data: dict[str, Any]) -> Any:
        try:
            return model.model_validate(data)
        except ValidationError as e:
            message, where = explain(e, model)
            return error_response(400, message, param=where)

    return await read_object(request, max_body, validate)


def nesting_depth(raw: bytes) -> int:
    """The deepest ``[``/``{`` nesting outside JSON strings (an unterminated string counts as text)."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS).translate(_SIGNED)
    return max(itertools.accumulate(memoryview(brackets).cast("b")), default=0)


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise BadBody(f"the body holds a {digits}-digit integer; numbers are limited to {MAX_INT_DIGITS} digits")
    return int(text)


def _constant(name: str) -> Any:
    raise BadBody(f"the body holds {name}, which is not JSON; send a finite number")


def parse_body(raw: bytes) -> Any:
    """``raw`` as a JSON value with no lone surrogate in any string, or ``BadBody``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadBody(f"the body is not valid UTF-8 (byte {e.start}: {raw[e.start:e.start + 1]!r}); "
                      "send UTF-8 encoded JSON") from None
    depth = nesting_depth(raw)
    if depth > MAX_DEPTH:
        raise BadBody(f"the body nests {depth} levels deep; the limit is {MAX_DEPTH}")
    try:
        value = json.loads(text, parse_int=_int, parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise BadBody(f"the body is not valid JSON: {e}") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise BadBody(f"the body nests too deep; the limit is {MAX_DEPTH}") from None
    except BadBody:
        raise
    except ValueError as e:  # anything else json's number parsing refuses
        raise BadBody(f"the body is not valid JSON: {e}") from None
    where = _surrogate_at(value)
    if where is not None:
        shown = where or "(the body)"
        raise BadBody(f"the text at '{shown}' is not valid Unicode (it holds a lone surrogate escape such as "
                      "\\ud800); send UTF-8 text", param=where or None)
    refused = request_router(value.get("router")) if isinstance(value, dict) else None
    if refused:  # every endpoint's body comes through here: no request names a server-side file
        raise BadBody(refused, param="router")
    return value


def _bad_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _surrogate_at(value: Any, path: str = "") -> str | None:
    """The dotted path of the first string (or key) holding a lone surrogate, else None."""
    if isinstance(value, str):
        return path if _bad_text(value) else None
    items: Any = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    for key, item in items:
        if isinstance(key, str) and _bad_text(key):
            key = ascii(key)[1:-1]  # the path goes into the error message, which must be valid text
            return f"{path}.{key}" if path else key
        here = f"{path}.{key}" if path else str(key)
        found = _surrogate_at(item, here)
        if found is not None:
            return found
    return None


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


class ApiKeyGate:
    """ASGI middleware: a request to any path but ``OPEN_PATHS`` (and ``also_open``: ``/metrics`` when an
    operator opens it to a scraper, ``agentrt serve --metrics-open``) needs ``Authorization: Bearer <key>``."""

    def __init__(self, app: Any, key: str, also_open: frozenset[str] = frozenset()) -> None:
        self.app = app
        self._key = _digest(key.encode("utf-8"))
        self._open = OPEN_PATHS | also_open

    def allowed(self, headers: list[tuple[bytes, bytes]]) -> bool | None:
        """True for the right key, False for a wrong one, None when no bearer key was sent."""
        value = next((v for k, v in headers if k == b"authorization"), None)
        if value is None:
            return None
        scheme, _, token = value.strip().partition(b" ")
        if scheme.lower() != b"bearer" or not token.strip():
            return None
        return hmac.compare_digest(_digest(token.strip()), self._key)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and scope["path"] not in self._open:
            verdict = self.allowed(scope.get("headers") or [])
            if not verdict:
                message = ("incorrect API key provided" if verdict is False else
                           "missing API key: send the header 'Authorization: Bearer <key>'")
                response = error_response(401, message + " (the key this server was started with: --api-key or "
                                          "AGENTRT_API_KEY)", kind="authentication_error", code="invalid_api_key",
                                          headers={"WWW-Authenticate": "Bearer"})
                await refuse(response, scope, receive, send)
                return
        await self.app(scope, receive, send)


async def refuse(response: JSONResponse, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Send ``response`` instead of running the app: an HTTP request gets it as is; a WebSocket handshake gets
    it as the handshake's answer where the server can send one (ASGI's denial-response extension, uvicorn's),
    else a close before accepting, which the server turns into a 403."""
    if scope["type"] == "websocket" and "websocket.http.response" not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    await response(scope, receive, send)


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach: 127.0.0.0/8, ::1, localhost."""
    host = host.strip().strip("[]")
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["ApiKeyGate", "BadBody", "MAX_DEPTH", "MAX_INT_DIGITS", "error_response", "is_loopback", "nesting_depth",
           "parse_body", "refuse"]
