"""OpenTelemetry tracing of runs, following the GenAI semantic conventions (extra ``tracing``).

Off by default. ``Settings.tracing`` picks the exporter: ``console``, ``otlp`` (gRPC, endpoint from
``OTEL_EXPORTER_OTLP_ENDPOINT``) or ``memory`` (an in-memory exporter, for tests: ``memory_exporter()``).
Spans: ``invoke_agent agentrt`` per run, with children ``chat {model}`` per model call,
``execute_tool {name}`` per tool call and ``plan`` per plan. The trajectory and the trace share ids:
the span carries ``agentrt.run_id`` and the trajectory's ``metadata.trace_id`` is the trace id.

Spans are built from the run's events (``RunContext.on_event``), so routes need no tracing code.
This module is imported only when tracing is on: ``import agentrt`` never loads opentelemetry.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from typing import Any, Callable

from agentrt.core.config import Settings
from agentrt.core.errors import missing_extra
from agentrt.core.events import Event, Plan, RouteDecided, RunFinished, RunStarted, StepFinished, StepStarted, ToolCall

try:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as e:  # pragma: no cover - depends on the install
    raise missing_extra("opentelemetry-sdk", "tracing") from e

AGENT_NAME = "agentrt"
_providers: dict[str, TracerProvider] = {}
_memory = InMemorySpanExporter()
_lock = threading.Lock()


def memory_exporter() -> InMemorySpanExporter:
    """The exporter behind ``tracing = "memory"`` (``get_finished_spans()``, ``clear()``)."""
    return _memory


def provider(exporter: str) -> TracerProvider:
    """The tracer provider for ``exporter`` (one per process and exporter name)."""
    with _lock:
        if exporter not in _providers:
            tp = TracerProvider(resource=Resource.create({"service.name": AGENT_NAME}))
            if exporter == "memory":
                tp.add_span_processor(SimpleSpanProcessor(_memory))
            elif exporter == "console":
                from opentelemetry.sdk.trace.export import ConsoleSpanExporter

                tp.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
            elif exporter == "otlp":
                try:
                    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
                    from opentelemetry.sdk.trace.export import BatchSpanProcessor
                except ImportError as e:
                    raise missing_extra("opentelemetry-exporter-otlp-proto-grpc", "tracing") from e
                tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            _providers[exporter] = tp
        return _providers[exporter]


class RunTracer:
    """Turns one run's events into spans. Concurrent model calls of the same name are matched FIFO."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self.root: Any = None
        self.parent_ctx: Any = None
        self.model = ""
        self.open_calls: dict[str, deque] = defaultdict(deque)

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.model = event.model
            self.root = self.tracer.start_span(
                f"invoke_agent {AGENT_NAME}", kind=SpanKind.INTERNAL,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT_NAME,
                            "gen_ai.agent.id": event.run_id, "gen_ai.request.model": self.model,
                            "agentrt.run_id": event.run_id, "agentrt.route": event.route,
                            "agentrt.budget": event.budget})
            self.parent_ctx = trace.set_span_in_context(self.root)
            sc = self.root.get_span_context()
            event.metadata["trace_id"] = format(sc.trace_id, "032x")
            event.metadata["span_id"] = format(sc.span_id, "016x")
        elif self.root is None:
            return
        elif isinstance(event, StepStarted):
            span = self.tracer.start_span(
                f"chat {self.model or event.backend}", context=self.parent_ctx, kind=SpanKind.CLIENT,
                attributes={"gen_ai.operation.name": "chat", "gen_ai.provider.name": event.backend,
                            "gen_ai.request.model": self.model, "gen_ai.request.max_tokens": event.max_tokens,
                            "agentrt.step": event.name})
            self.open_calls[event.name].append(span)
        elif isinstance(event, StepFinished):
            self._step(event.step)
        elif isinstance(event, ToolCall):
            self._instant(f"execute_tool {event.name}", event.latency_s, {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": event.name,
                "gen_ai.tool.call.id": event.call_id or "", "gen_ai.tool.type": "function"}, error=event.error)
        elif isinstance(event, Plan):
            self._instant("plan", event.latency_s, {"gen_ai.operation.name": "plan", "agentrt.planner": event.planner})
        elif isinstance(event, RouteDecided):
            self.root.set_attribute("agentrt.route", event.route)
            self.root.set_attribute("agentrt.route.reason", event.reason)
        elif isinstance(event, RunFinished):
            usage = event.usage or {}
            self.root.set_attribute("gen_ai.usage.input_tokens", usage.get("prompt_tokens", 0))
            self.root.set_attribute("gen_ai.usage.output_tokens", usage.get("completion_tokens", 0))
            self.root.set_attribute("agentrt.status", event.status)
            if event.status in ("failed", "cancelled"):
                self.root.set_status(Status(StatusCode.ERROR, event.error or event.status))
            for spans in self.open_calls.values():  # calls cut by a cancel or an error
                while spans:
                    spans.popleft().end()
            self.root.end()

    def _step(self, step: dict[str, Any]) -> None:
        """Close the span of a finished model call (matched FIFO by its name)."""
        spans = self.open_calls.get(step.get("name", ""))
        if step.get("kind") != "model_call" or not spans:
            return
        span = spans.popleft()
        usage = step.get("usage") or {}
        span.set_attribute("gen_ai.response.model", step.get("model", "") or self.model)
        span.set_attribute("gen_ai.usage.input_tokens", usage.get("prompt_tokens", 0))
        span.set_attribute("gen_ai.usage.output_tokens", usage.get("completion_tokens", 0))
        span.set_attribute("gen_ai.response.finish_reasons", list(step.get("finish_reasons") or []))
        span.end()

    def _instant(self, name: str, latency_s: float, attributes: dict[str, Any], error: str | None = None) -> None:
        """A span for a step that is reported when done: back-dated by its latency."""
        end = time.time_ns()
        start = end - int(float(latency_s) * 1e9)
        span = self.tracer.start_span(name, context=self.parent_ctx, kind=SpanKind.INTERNAL,
                                      attributes=attributes, start_time=start)
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end)


def traced(settings: Settings, on_event: Callable[[Event], None] | None) -> Callable[[Event], None]:
    """``on_event`` plus a RunTracer for this run (the exporter from ``settings.tracing``)."""
    tracer = RunTracer(provider(settings.tracing).get_tracer("agentrt"))

    def both(event: Event) -> None:
        tracer(event)
        if on_event is not None:
            on_event(event)

    return both


__all__ = ["RunTracer", "traced", "provider", "memory_exporter"]
