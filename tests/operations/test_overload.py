"""A saturated proxy answers or sheds; it never drops a request it took (issue 44, docs/decisions.md
§176, §177), measured against `serve` processes in front of the benchmark's fast upstream (a process
too), with real faults:

* a request that reaches a kept-alive connection while the proxy is stopped (SIGSTOP) past its
  idle timeout is answered once the proxy runs again, never reset (the kernel resets a connection
  closed with unread bytes: the idle close must see them);
* a storm of concurrent calls against a proxy whose overload bound is 1 ms gets every call either
  answered exactly or refused at once with HTTP 503, `Retry-After: 1` and the JSON-RPC error that
  names the overload; requests that continue admitted work (`tasks/get`) are never refused; each
  refusal is counted on `/metrics` as a `proxy_refused` failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import aiohttp
from support import fast_upstream_fixture, until

from proxy.bench.clients import ECHO_TEXT
from proxy.bench.targets import ChildServer, start_proxy
from proxy.overload import BUSY, CONTINUING, RUN, LoopLag, starts_work

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "overload-test", "version": "1"},
}
IDLE_MS = 300


upstream = fast_upstream_fixture("modern")


def _request(request_id: int, method: str, params: dict, name: str | None) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": META}}).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"MCP-Protocol-Version: {MODERN}\r\nMcp-Method: {method}\r\n"
        + (f"Mcp-Name: {name}\r\n" if name else "")
        + f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _answer(reader: asyncio.StreamReader) -> tuple[bytes, dict]:
    """One answer on a kept-alive connection: its status line and its JSON body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
    return lines[0].encode(), json.loads(await reader.readexactly(length))


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("T", "t")


async def test_a_request_that_arrives_while_the_proxy_is_stopped_past_its_idle_timeout_is_answered(upstream, tmp_path):
    # The default overload bound: five stops in a row are late samples, but not busy ones (decision 177).
    proxy: ChildServer = start_proxy(upstream.url, tmp_path, event_loop="asyncio", idle_timeout_ms=IDLE_MS)
    try:
        pid = proxy.pids()[0]
        port = int(proxy.url.split(":")[2].split("/")[0])
        answers = []
        for _ in range(5):  # before decision 176 about 7 in 10 such requests were reset
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            call = {"name": "echo", "arguments": {"text": ECHO_TEXT}}
            writer.write(_request(1, "tools/call", call, "echo"))
            first = await _answer(reader)
            os.kill(pid, signal.SIGSTOP)
            try:
                await until(lambda: _stopped(pid), f"the proxy (PID {pid}) to be stopped", 10, 0.01)
                await asyncio.sleep(2 * IDLE_MS / 1000)  # its idle deadline passes while it is stopped
                writer.write(_request(2, "tools/call", call, "echo"))  # on loopback: in the proxy's socket once written
                await writer.drain()
            finally:
                os.kill(pid, signal.SIGCONT)
            async with asyncio.timeout(10):
                second = await _answer(reader)
            answers.append((first, second))
            writer.close()
    finally:
        proxy.stop()
    result = {"content": [{"type": "text", "text": ECHO_TEXT}], "isError": False, "resultType": "complete"}
    ok = b"HTTP/1.1 200 OK"
    assert (
        answers
        == [((ok, {"jsonrpc": "2.0", "id": 1, "result": result}), (ok, {"jsonrpc": "2.0", "id": 2, "result": result}))] * 5
    )


def test_the_lag_rule_sheds_after_a_run_of_late_busy_samples_and_stops_at_the_first_that_is_not():
    lag = LoopLag(500)
    seen = []
    samples = [(0.6, 1.0), (0.6, 0.9), (0.4, 1.0), (0.6, 1.0), (0.6, 0.5), (0.6, 0.8), (0.7, 1.0), (0.1, 1.0), (2.0, 1.0)]
    samples += [(0.9, 1.0), (0.9, 0.1), (0.9, 1.0), (0.9, 1.0)]  # a stall (stopped, blocked): late, not busy
    for late_s, busy in samples:
        lag.sample(late_s, busy)
        seen.append(lag.shedding)
    assert (RUN, BUSY) == (3, 0.25)
    assert seen == [False, False, False, False, False, True, True, False, False, False, False, False, False]
    never = LoopLag(0)
    for _ in range(10):
        never.sample(5.0, 1.0)
    assert never.shedding is False


def test_what_an_overloaded_proxy_sheds():
    shed = {
        m: starts_work(m, "request")
        for m in (
            "initialize",
            "tools/call",
            "tools/list",
            "tasks/get",
            "tasks/result",
            "tasks/update",
            "tasks/cancel",
            "tasks/list",
            "ping",
            "server/discover",
        )
    }
    assert shed == {
        "initialize": True,
        "tools/call": True,
        "tools/list": True,
        "tasks/get": False,
        "tasks/result": False,
        "tasks/update": False,
        "tasks/cancel": False,
        "tasks/list": False,
        "ping": False,
        "server/discover": True,
    }
    assert CONTINUING == frozenset({"ping"})
    assert (starts_work("notifications/initialized", "notification"), starts_work("", "response")) == (False, False)


async def _metric(http: aiohttp.ClientSession, base: str, line_start: str) -> float:
    async with http.get(base + "/metrics") as response:
        text = await response.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start))


async def test_an_overloaded_proxy_answers_or_refuses_at_once_and_counts_each_refusal(upstream, tmp_path):
    proxy = start_proxy(upstream.url, tmp_path, event_loop="asyncio", overload_lag_ms=1)
    base = proxy.url.rsplit("/", 1)[0]
    tally = {"answered": 0, "refused": 0, "tasks_get": 0}
    unexpected: list[str] = []
    refusal = {
        "code": -32603,
        "message": "Service Unavailable: mcp-tasks-proxy is overloaded (its event loop runs more than 1 ms "
        "late); retry after 1 s",
    }
    echo = {"content": [{"type": "text", "text": ECHO_TEXT}], "isError": False, "resultType": "complete"}
    done = asyncio.Event()

    async def client(http: aiohttp.ClientSession, n: int) -> None:
        request_id = 0
        while not done.is_set():
            request_id += 1
            method, name, params = (
                ("tasks/get", f"t-{n}", {"taskId": f"t-{n}"})
                if request_id % 4 == 0
                else ("tools/call", "echo", {"name": "echo", "arguments": {"text": ECHO_TEXT}})
            )
            head, _, body = _request(request_id, method, params, name).partition(b"\r\n\r\n")
            headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:] if not line.startswith("Host"))
            async with http.post(proxy.url, data=body, headers=headers) as response:
                answer = await response.json(content_type=None)
                retry_after = response.headers.get("Retry-After")
            if method == "tasks/get":
                tally["tasks_get"] += 1
                if response.status == 503:
                    unexpected.append(f"tasks/get refused: {answer}")
            elif (response.status, answer) == (200, {"jsonrpc": "2.0", "id": request_id, "result": echo}):
                tally["answered"] += 1
            elif (response.status, retry_after, answer) == (503, "1", {"jsonrpc": "2.0", "id": request_id, "error": refusal}):
                tally["refused"] += 1
            else:
                unexpected.append(f"HTTP {response.status} Retry-After {retry_after}: {answer}")
            if tally["refused"] >= 20 and tally["answered"] >= 20:
                done.set()

    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            async with asyncio.timeout(240):
                await asyncio.gather(*(client(http, n) for n in range(200)))
            counted = [
                await _metric(
                    http,
                    base,
                    'mcp_tasks_proxy_failures_total{backend="main",backend_dialect="v2-modern",by="proxy",'
                    'client_dialect="v2-modern",reason="proxy_refused"}',
                ),
                await _metric(
                    http,
                    base,
                    'mcp_tasks_proxy_requests_total{backend_dialect="v2-modern",face="v2-modern",'
                    'method="tools/call",outcome="-32603"}',
                ),
                await _metric(http, base, 'mcp_tasks_proxy_tool_results_total{backend="main",outcome="refused",tool="echo"}'),
            ]
    finally:
        proxy.stop()
    assert unexpected == []
    assert tally["refused"] >= 20 and tally["answered"] >= 20 and tally["tasks_get"] > 0
    assert counted == [tally["refused"]] * 3


async def test_the_watcher_sheds_while_the_loop_computes_and_stops_once_it_runs_on_time():
    # The watcher itself (a timer that sets the next one), on a real loop: blocks of computation
    # longer than the bound make its samples late and busy; once they stop, the next sample ends it.
    lag = LoopLag(100)
    watcher = asyncio.ensure_future(lag.watch())

    def compute(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    try:
        began = False
        for _ in range(30):  # RUN late busy samples in a row shed new work
            compute(0.3)  # the loop's thread busy past the bound: the sample due meanwhile runs late
            await asyncio.sleep(0.01)  # the loop's turn: the late sample runs
            if began := lag.shedding:
                break
        ended = await until(lambda: not lag.shedding, "the first sample on time to end the shedding")
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    assert (began, ended, watcher.cancelled(), lag._timer.cancelled()) == (True, True, True, True)
