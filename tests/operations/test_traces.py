"""OpenTelemetry traces through the bridge (docs/configuration.md "Traces"), with the SDK's
in-memory exporter: one translated task (a modern client, the reference v1 server behind a
recording tap) — its create, get and result spans, their attributes, parents and links, and the
client's trace context arriving at the backend."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402
from support import TEST_KEY, Answer, Caller, eventually  # noqa: E402
from tap import RecordingTap  # noqa: E402

from proxy.app import start  # noqa: E402
from proxy.config import load  # noqa: E402
from translators.sealing import Keyring  # noqa: E402

pytestmark = pytest.mark.peers

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
META_SPAN = "b7ad6b7169203331"


class HeaderTap(RecordingTap):
    """A recording tap that also keeps each POST's `traceparent` header (None without one)."""

    def __init__(self, target: str):
        super().__init__(target)
        self.traceparents: list[tuple[str, str | None]] = []

    async def _relay(self, request):  # type: ignore[no-untyped-def]
        if request.method == "POST":
            body = await request.json()
            self.traceparents.append((body.get("method", "response"), request.headers.get("traceparent")))
        return await super()._relay(request)


async def test_one_translated_task_is_one_trace_with_links(reference_v1_server, tmp_path):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tap = await HeaderTap.start(reference_v1_server.url)
    settings = load(
        None,
        {
            "listen": "127.0.0.1:0",
            "upstream": [{"name": "old", "url": tap.url}],
            "state_dir": str(tmp_path),
            "store": "memory",
            "probe_interval_ms": 3_600_000,
        },
    )
    proxy = await start(settings, keyring=Keyring(TEST_KEY), tracer_provider=provider)
    try:
        async with aiohttp.ClientSession() as http:
            caller = Caller(http, proxy.url)
            exporter.clear()  # the start-up probes are no request's
            mark = len(tap.traceparents)
            created = await caller.call(
                "tools/call",
                {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": "t"}},
                headers={"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01", "tracestate": "vendor=1"},
            )
            task_id = created.result["taskId"]

            async def get() -> Answer:  # the follow-ups carry the trace context in _meta instead
                body = caller.body("tasks/get", {"taskId": task_id})
                body["params"]["_meta"]["traceparent"] = f"00-{TRACE_ID}-{META_SPAN}-01"
                return await caller.raw(json.dumps(body), {**caller.headers("tasks/get"), "Content-Type": "application/json"})

            answer = await eventually(get, lambda a: a.body["result"]["status"] == "completed", f"task {task_id} to complete")
            assert answer.body["result"]["result"]["content"][0]["text"] == "computed t"
    finally:
        await proxy.stop()
        await tap.stop()

    spans = exporter.get_finished_spans()
    servers = [s for s in spans if s.kind == SpanKind.SERVER]
    clients = [s for s in spans if s.kind == SpanKind.CLIENT]
    create, *gets = servers
    assert create.name == "tools/call slow_compute"
    assert dict(create.attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "slow_compute",
        "jsonrpc.request.id": "1",
        "mcp.protocol.version": "2026-07-28",
        "backend": "old",
        "pairing": "v2-modern -> v1",
        "translated": True,
        "http.response.status_code": 200,
    }
    assert (format(create.context.trace_id, "032x"), format(create.parent.span_id, "016x")) == (TRACE_ID, CLIENT_SPAN)
    assert list(create.links) == []
    assert create.context.trace_state.get("vendor") == "1"
    assert [g.name for g in gets] == ["tasks/get"] * len(gets) and gets
    for number, get in enumerate(gets, 2):
        assert dict(get.attributes) == {
            "mcp.method.name": "tasks/get",
            "jsonrpc.request.id": str(number),
            "mcp.protocol.version": "2026-07-28",
            "backend": "old",
            "pairing": "v2-modern -> v1",
            "translated": True,
            "http.response.status_code": 200,
        }
        assert (format(get.context.trace_id, "032x"), format(get.parent.span_id, "016x")) == (TRACE_ID, META_SPAN)
        assert [(link.context.span_id, dict(link.attributes)) for link in get.links] == [
            (create.context.span_id, {"mcp.task.link": "created by"})
        ]

    def children(parent: Any) -> list[str]:
        return [c.attributes["mcp.method.name"] for c in clients if c.parent.span_id == parent.context.span_id]

    # The create span's upstream work: the v1 session's initialize (and its notification) and the call itself.
    assert children(create)[-1] == "tools/call" and set(children(create)) <= {
        "initialize",
        "notifications/initialized",
        "tools/call",
    }
    assert all(children(get) == ["tasks/get"] for get in gets[:-1])
    assert children(gets[-1]) == ["tasks/get", "tasks/result"]
    assert all(c.context.trace_id == create.context.trace_id and c.attributes["backend"] == "old" for c in clients)
    # The backend received the client's trace, each upstream POST as a child of its client span.
    received = tap.traceparents[mark:]
    assert [m for m, _ in received] == [c.attributes["mcp.method.name"] for c in clients]
    assert [tp for _, tp in received] == [f"00-{TRACE_ID}-{format(c.context.span_id, '016x')}-01" for c in clients]
