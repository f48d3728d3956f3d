"""The session face (v1 clients, the proxy's own sessions) in front of the reference v2 server
(FastMCP 4) when the network misbehaves: a gateway in front of the backend answering 502 for a
while (docs/decisions.md §29), and a client whose GET stream dropped resuming it with
`Last-Event-ID` (docs/decisions.md §35). Real sockets throughout: the gateway is a loopback
`ShapingTap` (`tests/tap.py`), the dropped stream a raw socket the test closes.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from session_support import SessionCaller
from support import running_proxy
from tap import ShapingTap

from proxy.sse import SseParser

pytestmark = pytest.mark.peers

BAD_GATEWAY_S = 2.0
"""How long the gateway answers 502 (well within the default `reconnect_wait_ms`, 5 s)."""


@pytest.fixture
async def gateway(reference_v2_server):
    tap = await ShapingTap.start(reference_v2_server.url)
    yield tap
    await tap.stop()


async def _bad_gateway_for(tap: ShapingTap, seconds: float) -> None:
    tap.bad_gateway = True
    try:
        await asyncio.sleep(seconds)
    finally:
        tap.bad_gateway = False


async def test_a_blocking_tasks_result_rides_out_a_gateways_502s(gateway, tmp_path):
    async with running_proxy(gateway.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url)
        await client.initialize()
        made = await client.call(
            "tools/call", {"name": "slow_compute", "arguments": {"seconds": 1, "label": "through"}, "task": {"ttl": 60000}}
        )
        task_id = made["result"]["task"]["taskId"]
        outage = asyncio.ensure_future(_bad_gateway_for(gateway, BAD_GATEWAY_S))
        await asyncio.sleep(0.1)
        answer = await client.call("tasks/result", {"taskId": task_id})
        await outage
    assert answer["_status"] == 200
    assert answer["result"]["content"] == [{"type": "text", "text": "computed through"}]
    assert answer["result"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    assert gateway.refused >= 2


async def test_tasks_get_rides_out_a_gateways_502s(gateway, tmp_path):
    async with running_proxy(gateway.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url)
        await client.initialize()
        made = await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "g"}, "task": {}})
        task_id = made["result"]["task"]["taskId"]
        outage = asyncio.ensure_future(_bad_gateway_for(gateway, BAD_GATEWAY_S))
        await asyncio.sleep(0.1)
        answer = await client.call("tasks/get", {"taskId": task_id})
        await outage
    assert (answer["_status"], answer["result"]["taskId"], answer["result"]["status"]) == (200, task_id, "completed")
    assert gateway.refused >= 2


class SilentDrop:
    """A loopback TCP forwarder in front of the proxy whose `drop()` closes the client's side of
    every connection but leaves the proxy's side open and silent: a connection lost in the network
    (a NAT or load balancer forgetting it), which the proxy cannot see until it writes."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.port = 0
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self._pumps: set[asyncio.Task] = set()
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> SilentDrop:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._pairs.append((writer, up_writer))
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.ensure_future(self._pump(source, sink))
            self._pumps.add(pump)

    @staticmethod
    async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()

    def drop(self) -> None:
        for pump in self._pumps:
            pump.cancel()
        for client_side, _proxy_side in self._pairs:
            client_side.transport.abort()

    async def stop(self) -> None:
        self.drop()
        for _client_side, proxy_side in self._pairs:
            proxy_side.transport.abort()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()


async def _open_get(port: int, path: str, session_id: str, last_event_id: str | None = None):
    """A GET stream on a raw loopback socket: (reader, writer, status line)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Accept: text/event-stream",
        f"Mcp-Session-Id: {session_id}",
        "MCP-Protocol-Version: 2025-11-25",
    ]
    if last_event_id is not None:
        lines.append(f"Last-Event-ID: {last_event_id}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    return reader, writer, head.split(b"\r\n", 1)[0].decode()


async def _events(reader: asyncio.StreamReader, count: int) -> list[tuple[str | None, dict]]:
    """The first `count` events of a chunked SSE body: (id, JSON data)."""
    parser = SseParser()
    events: list[tuple[str | None, dict]] = []
    while len(events) < count:
        size = int((await asyncio.wait_for(reader.readline(), 5)).strip(), 16)
        chunk = await asyncio.wait_for(reader.readexactly(size + 2), 5)
        events.extend((e.id, json.loads(e.data)) for e in parser.feed(chunk[:-2]))
    return events


async def test_a_dropped_get_stream_is_resumed_at_once_with_last_event_id(reference_v2_server, tmp_path):
    async with running_proxy(reference_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url)
        await client.initialize()
        url = aiohttp.client.URL(proxy.url)
        network = await SilentDrop(url.host, url.port).start()
        try:
            reader, _writer, status = await _open_get(network.port, url.path, client.session_id)
            assert status == "HTTP/1.1 200 OK"
            made = await client.call(
                "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "s"}, "task": {}}
            )
            task_id = made["result"]["task"]["taskId"]
            for _ in range(50):  # each tasks/get that sees a new status announces it on the GET stream
                if (await client.call("tasks/get", {"taskId": task_id}))["result"]["status"] == "completed":
                    break
                await asyncio.sleep(0.1)
            [(first_id, first)] = await _events(reader, 1)
            network.drop()  # the client's connection is lost; the proxy's side stays open, silent
            again, rewriter, status = await _open_get(url.port, url.path, client.session_id, last_event_id="0")
            try:
                assert status == "HTTP/1.1 200 OK"
                [(replayed_id, replayed)] = await _events(again, 1)
            finally:
                rewriter.close()
        finally:
            await network.stop()
    assert first["method"] == "notifications/tasks/status"
    assert (replayed_id, replayed) == (first_id, first)
    assert replayed["params"]["taskId"] == task_id


async def test_a_second_get_stream_beside_a_live_one_is_still_409(reference_v2_server, tmp_path):
    async with running_proxy(reference_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url)
        await client.initialize()
        url = aiohttp.client.URL(proxy.url)
        _reader, writer, status = await _open_get(url.port, url.path, client.session_id)
        try:
            _r2, second, second_status = await _open_get(url.port, url.path, client.session_id)
            second.close()
        finally:
            writer.close()
    assert (status, second_status) == ("HTTP/1.1 200 OK", "HTTP/1.1 409 Conflict")
