"""OpenTelemetry traces (docs/configuration.md "Traces"; the `otel` extra), off by default.

One server span per client request and one client span per upstream POST made while answering it.
The client's W3C trace context (`traceparent`, `tracestate`) is taken from its HTTP headers, or
else from `params._meta` where a client puts it, and carried to the backend in the upstream
request's headers. Attributes follow the MCP semantic conventions (`mcp.method.name`,
`mcp.protocol.version`, `mcp.session.id`, `gen_ai.tool.name`, `jsonrpc.request.id`, `error.type`)
plus the proxy's own (`pairing`, `backend`, `translated`). The follow-up `tasks/*` requests of a
task created through a translating pairing carry a span link to the span that created it (the
creating span context is remembered per sealed task id, `MAX_TASK_LINKS` at most).

This module imports opentelemetry; only `build` (at start, when traces are on) imports it.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .hooks import TRACE

MAX_TASK_LINKS = 10_000
PROPAGATOR = TraceContextTextMapPropagator()
TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/cancel", "tasks/update"})


def build(settings: Any, provider: Any = None) -> Tracing | None:
    """The tracing of an application: `provider` (a `TracerProvider`, e.g. a test's with an
    in-memory exporter) when given, else, with `traces = "otlp"`, an SDK provider exporting over
    OTLP/HTTP to `traces_endpoint` (or the `OTEL_EXPORTER_OTLP_*` environment); None when off."""
    if provider is None:
        if settings.traces != "otlp":
            return None
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": "mcp-tasks-proxy"}))
        exporter = OTLPSpanExporter(endpoint=settings.traces_endpoint) if settings.traces_endpoint else OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(provider)


class Tracing:
    """The tracer and the span contexts of the tasks created under it."""

    def __init__(self, provider: Any):
        self.provider = provider
        self.tracer = provider.get_tracer("mcp-tasks-proxy")
        self._creators: collections.OrderedDict[str, Any] = collections.OrderedDict()

    def request(self, headers: Mapping[str, str]) -> RequestTrace:
        return RequestTrace(self, headers)

    def created(self, task_id: str, span_context: Any) -> None:
        self._creators[task_id] = span_context
        if len(self._creators) > MAX_TASK_LINKS:
            self._creators.popitem(last=False)

    def creator(self, task_id: Any) -> Any:
        return self._creators.get(task_id) if isinstance(task_id, str) else None

    def shutdown(self) -> None:
        shutdown = getattr(self.provider, "shutdown", None)
        if shutdown is not None:
            shutdown()


class RequestTrace:
    """One client request's server span: `begin` once its JSON-RPC message is read, `end` when
    answered; `answered` and `upstream` are called by the entry and the connectors meanwhile."""

    def __init__(self, tracing: Tracing, headers: Mapping[str, str]):
        self.tracing = tracing
        self.headers = headers
        self.span: Any = None
        self._token: Any = None
        self._method: str | None = None

    def begin(self, method: str | None, params: Mapping[str, Any] | None, request_id: Any) -> None:
        carrier = {k: self.headers[k] for k in ("traceparent", "tracestate") if k in self.headers}
        meta = params.get("_meta") if isinstance(params, Mapping) else None
        if "traceparent" not in carrier and isinstance(meta, dict) and isinstance(meta.get("traceparent"), str):
            carrier = {k: meta[k] for k in ("traceparent", "tracestate") if isinstance(meta.get(k), str)}
        parent = PROPAGATOR.extract(carrier)
        attributes: dict[str, Any] = {}
        if method:
            attributes["mcp.method.name"] = method
        tool = params.get("name") if method == "tools/call" and isinstance(params, Mapping) else None
        if isinstance(tool, str):
            attributes["gen_ai.tool.name"] = tool
        if request_id is not None:
            attributes["jsonrpc.request.id"] = str(request_id)
        version = meta.get("io.modelcontextprotocol/protocolVersion") if isinstance(meta, dict) else None
        version = version if isinstance(version, str) else self.headers.get("MCP-Protocol-Version")
        if version:
            attributes["mcp.protocol.version"] = version
        if "Mcp-Session-Id" in self.headers:
            attributes["mcp.session.id"] = self.headers["Mcp-Session-Id"]
        links = []
        if method in TASK_METHODS and isinstance(params, Mapping):
            creator = self.tracing.creator(params.get("taskId"))
            if creator is not None:
                links.append(Link(creator, {"mcp.task.link": "created by"}))
        name = f"{method} {tool}" if isinstance(tool, str) else (method or "mcp")
        self._method = method
        self.span = self.tracing.tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes, links=links)
        self._token = otel_context.attach(trace.set_span_in_context(self.span, parent))

    def answered(self, backend: str, client_dialect: str, backend_dialect: str, outcome: str) -> None:
        """Who answered and how (called where the request is counted)."""
        if self.span is None:
            return
        self.span.set_attribute("backend", backend)
        self.span.set_attribute("pairing", f"{client_dialect} -> {backend_dialect}")
        self.span.set_attribute("translated", client_dialect != backend_dialect)
        if outcome not in ("ok", "cancelled"):
            self.span.set_attribute("error.type", outcome)
            self.span.set_status(Status(StatusCode.ERROR))

    def result(self, result: Any) -> None:
        """A translated answer's result: a task it created is remembered for its follow-ups' links."""
        if self.span is not None and isinstance(result, dict) and isinstance(result.get("taskId"), str) and self._method == "tools/call":
            self.tracing.created(result["taskId"], self.span.get_span_context())

    async def upstream(self, endpoint: Any, body: bytes, headers: dict[str, str], post: Any) -> Any:
        """An upstream POST inside a client span, with the trace context in its headers."""
        method = headers.get("Mcp-Method")
        request_id = None
        if method is None:
            try:
                message = json.loads(body)
            except ValueError:
                message = None
            if isinstance(message, dict):
                method = message.get("method") if isinstance(message.get("method"), str) else None
                request_id = message.get("id")
        attributes: dict[str, Any] = {"backend": endpoint.name, "server.address": endpoint.url}
        if method:
            attributes["mcp.method.name"] = method
        if request_id is not None:
            attributes["jsonrpc.request.id"] = str(request_id)
        with self.tracing.tracer.start_as_current_span(method or "mcp", kind=SpanKind.CLIENT, attributes=attributes) as span:
            carried = dict(headers)
            PROPAGATOR.inject(carried)
            try:
                response = await post(body, carried)
            except Exception as exc:
                span.set_attribute("error.type", type(exc).__name__)
                raise
            if response.status >= 400:
                span.set_attribute("error.type", str(response.status))
            return response

    def end(self, status: int | None) -> None:
        if self.span is None:
            self.begin(None, None, None)
        if status is not None:
            self.span.set_attribute("http.response.status_code", status)
            if status >= 500 and not self.span.attributes.get("error.type"):
                self.span.set_attribute("error.type", str(status))
        self.span.end()
        if self._token is not None:
            otel_context.detach(self._token)


__all__ = ["TRACE", "Tracing", "RequestTrace", "build"]
