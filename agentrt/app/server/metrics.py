"""``GET /metrics``: the server's counters in Prometheus' text format (``prometheus-client``, extra ``server``).

Every number comes from the real request path, never from a second estimate:

* ``MetricsMiddleware`` (pure ASGI, the outermost middleware, so a 401 from the key gate counts too) sees
  every HTTP request: ``agentrt_http_requests_total{endpoint, method, status}``, the latency histogram
  ``agentrt_http_request_duration_seconds{endpoint}`` (a stream is timed until its last byte) and
  ``agentrt_http_requests_in_progress{endpoint}``. ``endpoint`` is the route's path, or ``other`` for
  paths the server does not serve (a scan of random paths must not grow the label set).
* ``MeteredAgent`` wraps the agent the routes run on and chains an ``on_event`` hook into each run:
  ``RunStarted`` gives the run's budget, ``RunFinished`` its route, status and usage, so
  ``agentrt_runs_total{route, status}``, ``agentrt_budget_granted_tokens_total``,
  ``agentrt_budget_spent_tokens_total`` and the per-run ``agentrt_budget_used_ratio`` histogram are the runs'
  own figures. Their tokens go to ``agentrt_prompt_tokens_total`` / ``agentrt_generation_tokens_total``
  labelled with the endpoint that started the run.
* ``/v1/completions`` and ``/v1/embeddings`` (no agent run) add their backend's usage through ``tokens``.

Each app has its own ``CollectorRegistry`` (two servers in one process never share counts).
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
from typing import Any

from agentrt.core.errors import missing_extra
from agentrt.core.request import RunHooks, RunRequest

try:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
except ImportError as e:  # pragma: no cover - depends on the install
    raise missing_extra("prometheus-client", "server") from e

# the route a request is being served by (set by the middleware; a run started inside inherits it)
_ENDPOINT: contextvars.ContextVar[str] = contextvars.ContextVar("agentrt_endpoint", default="other")
# seconds: a cached direct answer takes ~0.1 s, a plan route on the CPU minutes
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
RATIO_BUCKETS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


class ServerMetrics:
    """One server's metrics (see the module docstring); ``render`` is the ``/metrics`` body."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.requests = Counter("agentrt_http_requests", "HTTP requests by endpoint, method and status code",
                                ["endpoint", "method", "status"], registry=r)
        self.latency = Histogram("agentrt_http_request_duration_seconds", "HTTP request latency (streams: to the "
                                 "last byte)", ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.in_progress = Gauge("agentrt_http_requests_in_progress", "HTTP requests being served",
                                 ["endpoint"], registry=r)
        self.prompt_tokens = Counter("agentrt_prompt_tokens", "prompt tokens processed (every model call of a run)",
                                     ["endpoint"], registry=r)
        self.generation_tokens = Counter("agentrt_generation_tokens", "tokens generated (every model call of a "
                                         "run)", ["endpoint"], registry=r)
        self.runs = Counter("agentrt_runs", "agent runs by the route taken and the run's status",
                            ["route", "status"], registry=r)
        self.budget_granted = Counter("agentrt_budget_granted_tokens", "token budgets given to runs", registry=r)
        self.budget_spent = Counter("agentrt_budget_spent_tokens", "tokens runs spent of their budgets", registry=r)
        self.budget_ratio = Histogram("agentrt_budget_used_ratio", "the share of its budget a run spent",
                                      buckets=RATIO_BUCKETS, registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def tokens(self, prompt: int, generated: int, endpoint: str | None = None) -> None:
        """Count a request's tokens (``endpoint``: the current request's route)."""
        where = endpoint or _ENDPOINT.get()
        self.prompt_tokens.labels(where).inc(prompt)
        self.generation_tokens.labels(where).inc(generated)

    def observer(self, endpoint: str, then: Any = None) -> Any:
        """An ``on_event`` hook that counts one run's budget, route, status and tokens, then calls ``then``."""
        from agentrt.core.events import RunFinished, RunStarted

        granted: list[int] = []

        def hook(event: Any) -> None:
            if isinstance(event, RunStarted):
                granted.append(int(event.budget))
                self.budget_granted.inc(event.budget)
            elif isinstance(event, RunFinished):
                spent = int(event.usage.get("prompt_tokens", 0)) + int(event.usage.get("completion_tokens", 0))
                self.runs.labels(event.route or "none", event.status).inc()
                self.budget_spent.inc(spent)
                if granted and granted[0] > 0:
                    self.budget_ratio.observe(spent / granted[0])
                self.tokens(int(event.usage.get("prompt_tokens", 0)), int(event.usage.get("completion_tokens", 0)),
                            endpoint)
            if then is not None:
                then(event)

        return hook


class MeteredAgent:
    """The agent the server's routes run on: the agent itself, with each run's events counted."""

    def __init__(self, agent: Any, metrics: ServerMetrics) -> None:
        self._agent, self._metrics = agent, metrics

    def __getattr__(self, name: str) -> Any:  # everything but run_request is the agent's own
        return getattr(self._agent, name)

    async def run_request(self, req: RunRequest, hooks: RunHooks | None = None) -> Any:
        hooks = hooks or RunHooks()
        observer = self._metrics.observer(_ENDPOINT.get(), hooks.on_event)
        return await self._agent.run_request(req, dataclasses.replace(hooks, on_event=observer))


class MetricsMiddleware:
    """ASGI middleware: counts and times every HTTP request by endpoint and status (see the module docstring)."""

    def __init__(self, app: Any, metrics: ServerMetrics, paths: Any) -> None:
        self.app, self.metrics, self._paths = app, metrics, paths  # paths(): the served paths, read per request

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        endpoint = path if path in self._paths() else "other"
        status = [500]  # an exception that escapes becomes the 500 the outer error handler sends

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        token = _ENDPOINT.set(endpoint)
        gauge = self.metrics.in_progress.labels(endpoint)
        gauge.inc()
        started = time.perf_counter()
        try:
            await self.app(scope, receive, sending)
        finally:
            gauge.dec()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)
            self.metrics.requests.labels(endpoint, scope.get("method", ""), str(status[0])).inc()
            _ENDPOINT.reset(token)


__all__ = ["MeteredAgent", "MetricsMiddleware", "ServerMetrics"]
