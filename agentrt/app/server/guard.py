"""The server's guards against clients it did not mean to have: browsers, hostile headers, slow senders.

* ``BrowserGate`` (ASGI middleware, every path, WebSocket handshakes too): at most ``MAX_HEADERS`` headers
  (431); a ``Host`` that is the bind address (a loopback name when bound to loopback; anything when bound
  to all interfaces, where the API key is the lock) and an ``Origin``, when sent, that is the bind host, a
  loopback page, or one of ``--allowed-origins``, else 403 (DNS rebinding, cross-site pages); a
  POST/PUT/PATCH body must be ``application/json`` (415): a browser sends a cross-site ``text/plain`` or
  form POST without asking.
* ``GuardedH11``: uvicorn's h11 protocol with a deadline on reading a request: a connection that has not
  sent a whole request (head and body) ``READ_TIMEOUT`` seconds after it opened or after its previous
  response is closed (an idle keep-alive, a slowloris). The head's size is capped by
  ``h11_max_incomplete_event_size`` (``MAX_HEAD_BYTES``), see ``uvicorn_options``.
* ``BodyCap``: the body cap as middleware, for routes that read bodies themselves (``agentrt env serve``).
* ``log_disconnect``: a client that went away mid-request is one log line, not a traceback.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from agentrt.app.server.door import error_response, is_loopback, refuse

MAX_HEAD_BYTES = 16 * 1024  # request line + headers; far above any client's (an OpenAI SDK request's is ~600 B)
MAX_HEADERS = 100
READ_TIMEOUT = 30.0  # seconds to send a whole request (head and body) once the connection is idle
KEEP_ALIVE = 5  # seconds an idle keep-alive connection is kept after a response
SHUTDOWN_GRACE_S = 2  # a stop waits this long for requests in flight, then cancels them (the whole stop <= 5 s)
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
JSON_TYPES = ("application/json",)

log = logging.getLogger("agentrt.server")


def _host_of(value: str) -> str:
    """The host part of a ``Host`` header or URL netloc, lowercase, without port, brackets or a trailing dot."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    host, sep, port = value.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        value = host
    return value.rstrip(".")


_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_ALL_INTERFACES = frozenset({"", "0.0.0.0", "::"})


def _origin(value: str) -> str:
    return value.strip().lower().rstrip("/")


class BrowserGate:
    """ASGI middleware: header count, ``Host``, ``Origin`` and JSON content type, on every path (see module).

    ``host``: the bind address (None: the app is mounted by someone else; the ``Host`` check is off and
    an ``Origin`` must be a loopback page or an allowed origin); ``allowed_origins``: pages (``scheme://host
    [:port]``, or ``*``) whose requests are accepted."""

    def __init__(self, app: Any, host: str | None = None, allowed_origins: list[str] | None = None) -> None:
        self.app = app
        self.origins = {_origin(o) for o in allowed_origins or []}
        bind = _host_of(host) if host is not None else None
        origin_hosts = {_host_of(urlsplit(o).netloc) for o in self.origins if o != "*"}
        self.page_hosts = set(_LOOPBACK_NAMES) | ({bind} if bind else set())
        # None: any Host (bound to all interfaces, or not ours to check); else the names this server is reached by
        self.hosts: set[str] | None = None
        if bind is not None and bind not in _ALL_INTERFACES:
            self.hosts = ({bind} | (set(_LOOPBACK_NAMES) if is_loopback(bind) else set())) | origin_hosts

    def refusal(self, scope: dict[str, Any]) -> Any:
        """The error response for this request, or None to let it through."""
        headers = scope.get("headers") or []
        if len(headers) > MAX_HEADERS:
            return error_response(431, f"the request has {len(headers)} headers; the limit is {MAX_HEADERS}",
                                  code="too_many_headers")
        size = sum(len(k) + len(v) + 4 for k, v in headers)  # h11 caps a head that arrives in pieces; this, one read
        if size > MAX_HEAD_BYTES:
            return error_response(431, f"the request's headers are {size} bytes; the limit is {MAX_HEAD_BYTES}",
                                  code="headers_too_large")
        found: dict[bytes, bytes] = {}
        for k, v in headers:
            found.setdefault(k, v)
        host = found.get(b"host")
        if self.hosts is not None and host is not None:
            name = _host_of(host.decode("latin-1"))
            if name not in self.hosts:
                return error_response(403, f"this server does not answer to the host name {name[:100]!r} (a page "
                                      "that rebinds a name to this address); connect to its bind address",
                                      kind="permission_error", code="host_not_allowed")
        origin = found.get(b"origin")
        if origin is not None and not self.origin_ok(origin.decode("latin-1")):
            return error_response(403, f"requests from the web page at {origin.decode('latin-1')[:100]!r} are not "
                                  "accepted; the server's operator can allow it with --allowed-origins",
                                  kind="permission_error", code="origin_not_allowed")
        if scope.get("method") in BODY_METHODS and _has_body(found):
            kind = found.get(b"content-type", b"").decode("latin-1").partition(";")[0].strip().lower()
            if kind not in JSON_TYPES:
                shown = kind or "none"
                return error_response(415, f"the body must be JSON sent with 'Content-Type: application/json' "
                                      f"(got {shown[:100]!r})", param="content-type", code="unsupported_media_type")
        return None

    def origin_ok(self, origin: str) -> bool:
        value = _origin(origin)
        if "*" in self.origins or value in self.origins:
            return True
        parts = urlsplit(value)
        return parts.scheme in ("http", "https") and _host_of(parts.netloc) in self.page_hosts

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):  # a WebSocket handshake: Host, Origin and header caps
            response = self.refusal(scope)
            if response is not None:
                await refuse(response, scope, receive, send)
                return
        await self.app(scope, receive, send)


class BodyCap:
    """ASGI middleware: an HTTP request body over ``max_body`` bytes is a 413, for apps whose routes read
    bodies themselves (OpenEnv's). A declared ``Content-Length`` over it is answered before a byte of the body
    is read; a streamed (chunked) body is read up to the cap, then refused. The app gets the body as one
    message (what it would have read whole anyway)."""

    def __init__(self, app: Any, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope.get("headers") or [] if k == b"content-length"), b"").strip()
        if declared.isdigit() and int(declared) > self.max_body:
            await error_response(413, f"request body is {int(declared)} bytes; the limit is {self.max_body}",
                                 headers={"Connection": "close"})(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending it all
                log_disconnect(scope.get("method", ""), scope.get("path", ""))
                return
            body += message.get("body", b"")
            if len(body) > self.max_body:
                await error_response(413, f"request body is over the {self.max_body}-byte limit",
                                     headers={"Connection": "close"})(scope, receive, send)
                return
            if not message.get("more_body"):
                break
        whole: list[dict[str, Any]] = [{"type": "http.request", "body": bytes(body), "more_body": False}]

        async def replay() -> dict[str, Any]:
            return whole.pop() if whole else await receive()

        await self.app(scope, replay, send)


def _has_body(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length")
    return b"transfer-encoding" in headers or (length is not None and length.strip() not in (b"", b"0"))


def log_disconnect(method: str, path: str) -> None:
    """One line for a client that went away before its request was read (not a traceback)."""
    log.warning("agentrt serve: client disconnected before sending the whole request (%s %s)", method, path[:200])


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection that takes over ``READ_TIMEOUT`` s to send a request."""

    read_timeout = READ_TIMEOUT

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: Any = None
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def handle_websocket_upgrade(self, event: Any) -> None:
        """A WebSocket takes the connection over (its own pings bound it): no request deadline from here on."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.read_timeout, self._expired, self.cycle)

    def _expired(self, cycle: Any) -> None:
        """Close unless a request came in whole since the timer started (its run may take as long as it needs)."""
        self._deadline = None
        if self.transport.is_closing():
            return
        waiting_for_head = self.cycle is cycle and (cycle is None or cycle.response_complete)
        waiting_for_body = self.conn.their_state is h11.SEND_BODY
        if waiting_for_head or waiting_for_body:
            what = "its request's body" if waiting_for_body and not waiting_for_head else "a request"
            log.warning("agentrt serve: closed a connection that sent no complete request in %.0f s (waiting for %s)",
                        self.read_timeout, what)
            self.transport.close()


def guard_door(app: Any, host: str | None, allowed_origins: list[str] | None) -> None:
    """Install the guards on a FastAPI ``app``: CORS for ``allowed_origins`` only (none: no CORS headers at
    all), ``BrowserGate`` outermost, and the one-line handler of client disconnects."""
    from starlette.requests import ClientDisconnect

    if allowed_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(allowed_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(BrowserGate, host=host, allowed_origins=allowed_origins)

    async def disconnected(request: Any, _exc: Exception) -> Any:
        log_disconnect(request.method, request.url.path)
        return error_response(400, "the client disconnected before sending the whole request",
                              code="client_disconnected")

    app.add_exception_handler(ClientDisconnect, disconnected)


def uvicorn_options() -> dict[str, Any]:
    """The uvicorn settings that bound what one connection can hold (see the module docstring), and how long a
    stop (SIGTERM, Ctrl-C) waits for requests in flight: ``SHUTDOWN_GRACE_S``, then they are cancelled (a run
    is saved as cancelled) and the server exits."""
    return {"http": GuardedH11, "h11_max_incomplete_event_size": MAX_HEAD_BYTES, "timeout_keep_alive": KEEP_ALIVE,
            "timeout_graceful_shutdown": SHUTDOWN_GRACE_S}


__all__ = ["BodyCap", "BrowserGate", "GuardedH11", "guard_door", "MAX_HEADERS", "MAX_HEAD_BYTES", "READ_TIMEOUT",
           "log_disconnect", "uvicorn_options"]
