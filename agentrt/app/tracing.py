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

from agentrt.core.errors import missing_extra

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
    """Turns one run's raw events into spans. Concurrent model calls of the same name are matched FIFO."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self.root: Any = None
        self.parent_ctx: Any = None
        self.model = ""
        self.open_calls: dict[str, deque] = defaultdict(deque)

    def __call__(self, raw: dict[str, Any]) -> None:
        kind = raw.get("type")
        if kind == "run_started":
            self.model = raw.get("model", "")
            self.root = self.tracer.start_span(
                f"invoke_agent {AGENT_NAME}", kind=SpanKind.INTERNAL,
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT_NAME,
                            "gen_ai.agent.id": raw["run_id"], "gen_ai.request.model": self.model,
                            "agentrt.run_id": raw["run_id"], "agentrt.route": raw["route"],
                            "agentrt.core.budget": raw["budget"]})
            self.parent_ctx = trace.set_span_in_context(self.root)
            sc = self.root.get_span_context()
            raw["metadata"]["trace_id"] = format(sc.trace_id, "032x")
            raw["metadata"]["span_id"] = format(sc.span_id, "016x")
        elif self.root is None:
            return
        elif kind == "model_call_started":
            span = self.tracer.start_span(
                f"chat {self.model or raw.get('backend', '')}", context=self.parent_ctx, kind=SpanKind.CLIENT,
                attributes={"gen_ai.operation.name": "chat", "gen_ai.provider.name": raw.get("backend", ""),
                            "gen_ai.request.model": self.model, "gen_ai.request.max_tokens": raw.get("max_tokens", 0),
                            "agentrt.step": raw["name"]})
            self.open_calls[raw["name"]].append(span)
        elif kind == "step":
            self._step(raw["step"])
        elif kind == "run_finished":
            usage = raw.get("usage") or {}
            self.root.set_attribute("gen_ai.usage.input_tokens", usage.get("prompt_tokens", 0))
            self.root.set_attribute("gen_ai.usage.output_tokens", usage.get("completion_tokens", 0))
            self.root.set_attribute("agentrt.status", raw["status"])
            if raw["status"] in ("failed", "cancelled"):
                self.root.set_status(Status(StatusCode.ERROR, raw.get("error") or raw["status"]))
            for spans in self.open_calls.values():  # calls cut by a cancel or an error
                while spans:
                    spans.popleft().end()
            self.root.end()

    def _step(self, step: dict[str, Any]) -> None:
        kind = step.get("kind")
        if kind == "model_call":
            spans = self.open_calls.get(step.get("name", ""))
            if not spans:
                return
            span = spans.popleft()
            usage = step.get("usage") or {}
            span.set_attribute("gen_ai.response.model", step.get("model", "") or self.model)
            span.set_attribute("gen_ai.usage.input_tokens", usage.get("prompt_tokens", 0))
            span.set_attribute("gen_ai.usage.output_tokens", usage.get("completion_tokens", 0))
            span.set_attribute("gen_ai.response.finish_reasons", list(step.get("finish_reasons") or []))
            span.end()
        elif kind == "tool_call":
            self._instant(f"execute_tool {step.get('name', '')}", step, {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": step.get("name", ""),
                "gen_ai.tool.call.id": step.get("call_id") or "", "gen_ai.tool.type": "function"},
                error=step.get("error"))
        elif kind == "plan":
            self._instant("plan", step, {"gen_ai.operation.name": "plan", "agentrt.planner": step.get("planner", "")})
        elif kind == "route_decision":
            self.root.set_attribute("agentrt.route.reason", step.get("reason", ""))

    def _instant(self, name: str, step: dict[str, Any], attributes: dict[str, Any], error: str | None = None) -> None:
        """A span for a step that is reported when done: back-dated by its latency."""
        end = time.time_ns()
        start = end - int(float(step.get("latency_s") or 0.0) * 1e9)
        span = self.tracer.start_span(name, context=self.parent_ctx, kind=SpanKind.INTERNAL,
                                      attributes=attributes, start_time=start)
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end)


def traced(settings: Any, on_event: Callable[[dict[str, Any]], None] | None) -> Callable[[dict[str, Any]], None]:
    """``on_event`` plus a RunTracer for this run (the exporter from ``settings.tracing``)."""
    tracer = RunTracer(provider(settings.tracing).get_tracer("agentrt"))

    def both(raw: dict[str, Any]) -> None:
        tracer(raw)
        if on_event is not None:
            on_event(raw)

    return both


__all__ = ["RunTracer", "traced", "provider", "memory_exporter"]
