"""Production operations: /metrics, /readyz, X-Request-Id, JSON logs, graceful shutdown.

End-to-end tests run a real proxy on 127.0.0.1 in front of the reference v1 server (mcp==1.30.0);
the shutdown test runs `mcp-tasks-proxy serve` as a subprocess and stops it with SIGTERM while a
call is in flight.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from session_support import SessionCaller
from support import Caller, free_port, running_proxy

from proxy.app import STATE
from proxy.config import load
from proxy.keys import new_key_text
from proxy.logs import REQUEST_ID, JsonFormatter, RequestIdFilter, handler, request_id_from
from proxy.metrics import Metrics, method_label
from proxy.state.v1_tasks import V1Follower
from translators.sealing import TaskRef

ROOT = Path(__file__).resolve().parents[2]


def _metric_lines(text: str) -> set[str]:
    return {line for line in text.splitlines() if line and not line.startswith("#")}


async def _scrape(http: aiohttp.ClientSession, base_url: str) -> str:
    async with http.get(base_url + "/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        return await response.text()


def _request_id(headers: dict[str, str]) -> str | None:
    """The X-Request-Id header (names are case-insensitive; `Answer.headers` is a plain dict)."""
    return next((v for k, v in headers.items() if k.lower() == "x-request-id"), None)


# -- /metrics ----------------------------------------------------------------------------------------


@pytest.mark.peers
async def test_metrics_count_each_answered_request_and_time_upstream_requests(reference_v1_server, tmp_path):
    async with running_proxy(reference_v1_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url)
        assert (await client.call("tools/list")).status == 200
        assert (await client.call("tasks/result", {"taskId": "x"})).status == 404
        text = await _scrape(http, proxy.base_url)
    lines = _metric_lines(text)
    requests = {line for line in lines if line.startswith("mcp_tasks_proxy_requests_total")}
    assert requests == {
        'mcp_tasks_proxy_requests_total{backend_dialect="v1",face="v2-modern",method="tools/list",outcome="ok"} 1.0',
        'mcp_tasks_proxy_requests_total{backend_dialect="v1",face="v2-modern",method="tasks/result",outcome="-32601"} 1.0',
    }
    # The probe's tools/list and the client's, each timed on its way upstream.
    (count,) = [
        line for line in lines if line.startswith('mcp_tasks_proxy_upstream_seconds_count{backend="main",method="tools/list"}')
    ]
    assert float(count.rsplit(" ", 1)[1]) >= 1
    assert (
        'mcp_tasks_proxy_upstream_seconds_bucket{backend="main",le="+Inf",method="tools/list"} ' + count.rsplit(" ", 1)[1]
        in lines
    )
    assert 'mcp_tasks_proxy_live_tasks{backend="main"} 0.0' in lines
    assert not any(line.startswith("mcp_tasks_proxy_dropped_fields_total") for line in lines)


@pytest.mark.peers
async def test_metrics_count_refusals_by_code_and_transport_refusals_by_status(reference_v1_server, tmp_path):
    async with running_proxy(reference_v1_server.url, tmp_path, max_body_bytes=64) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url)
        assert (await client.call("tools/list")).status == 413  # the envelope alone is larger than 64 bytes
        assert (await client.raw("{}", {"Content-Type": "text/plain"})).status == 415
        assert (await client.raw("{not json", {"Content-Type": "application/json"})).status == 400
        assert (
            await client.raw('{"jsonrpc":"2.0","id":1,"method":"no/such"}', {"Content-Type": "application/json"})
        ).status == 400
        lines = _metric_lines(await _scrape(http, proxy.base_url))
    requests = {line for line in lines if line.startswith("mcp_tasks_proxy_requests_total")}
    assert requests == {
        'mcp_tasks_proxy_requests_total{backend_dialect="v1",face="unclassified",method="none",outcome="http_413"} 1.0',
        'mcp_tasks_proxy_requests_total{backend_dialect="v1",face="unclassified",method="none",outcome="http_415"} 1.0',
        'mcp_tasks_proxy_requests_total{backend_dialect="v1",face="unclassified",method="none",outcome="-32700"} 1.0',
        'mcp_tasks_proxy_requests_total{backend_dialect="v1",face="unclassified",method="other",outcome="-32600"} 1.0',
    }


@pytest.mark.peers
async def test_live_tasks_gauge_counts_a_task_the_proxy_follows(reference_v1_server, tmp_path):
    async with running_proxy(reference_v1_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url)
        created = await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 5, "label": "g"}})
        assert created.result["resultType"] == "task"
        lines = _metric_lines(await _scrape(http, proxy.base_url))
        await client.call("tasks/cancel", {"taskId": created.result["taskId"]})
    assert 'mcp_tasks_proxy_live_tasks{backend="main"} 1.0' in lines
    assert 'mcp_tasks_proxy_requests_total{backend_dialect="v1",face="v2-modern",method="tools/call",outcome="ok"} 1.0' in lines


@pytest.mark.peers
async def test_v1_session_requests_are_counted_on_the_v1_face(reference_v2_server, tmp_path):
    async with running_proxy(reference_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        assert "result" in await caller.call("tools/list")
        assert (await caller.call("tasks/get", {"taskId": "forged"}))["error"]["code"] == -32602
        lines = _metric_lines(await _scrape(http, proxy.base_url))
    requests = {line for line in lines if line.startswith("mcp_tasks_proxy_requests_total")}
    assert requests == {
        'mcp_tasks_proxy_requests_total{backend_dialect="v2-modern",face="v1",method="initialize",outcome="ok"} 1.0',
        'mcp_tasks_proxy_requests_total{backend_dialect="v2-modern",face="v1",'
        'method="notifications/initialized",outcome="ok"} 1.0',
        'mcp_tasks_proxy_requests_total{backend_dialect="v2-modern",face="v1",method="tools/list",outcome="ok"} 1.0',
        'mcp_tasks_proxy_requests_total{backend_dialect="v2-modern",face="v1",method="tasks/get",outcome="-32602"} 1.0',
    }
    assert any(line.startswith('mcp_tasks_proxy_upstream_seconds_count{backend="main",method="tools/list"}') for line in lines)


def test_each_application_has_its_own_registry():
    first, second = Metrics(), Metrics()
    first.request("v1", "v2-modern", "tools/list", "ok")
    assert b'method="tools/list"' in first.exposition()
    assert b'method="tools/list"' not in second.exposition()


def test_client_chosen_methods_cannot_grow_the_label_space():
    assert method_label("tools/call") == "tools/call"
    assert method_label("x/" + "a" * 100) == "other"
    assert method_label(None) == "none"


class _FakeBackend:
    name = "main"

    def __init__(self, metrics: Metrics):
        self.metrics = metrics


class _FakeSession:
    """Answers `tasks/get` with a v1 task carrying `parentTaskId` (mcpkit's extra field)."""

    session_id = None

    def __init__(self, metrics: Metrics):
        self.backend = _FakeBackend(metrics)

    async def request(self, method: str, params: dict[str, Any], *, headers: Any = None) -> dict[str, Any]:
        assert method == "tasks/get"
        return {
            "taskId": params["taskId"],
            "status": "working",
            "createdAt": "2026-01-01T00:00:00Z",
            "lastUpdatedAt": "2026-01-01T00:00:00Z",
            "ttl": None,
            "parentTaskId": "parent-1",
        }


async def test_dropped_fields_are_counted_and_logged_at_debug_level(caplog):
    metrics = Metrics()
    follower = V1Follower(max_tasks=10, max_task_state_ms=60_000, input_capture_wait_ms=0)
    caplog.set_level(logging.DEBUG, logger="proxy.metrics")
    try:
        task = await follower.status(TaskRef("main", "", "t1"), _FakeSession(metrics), {})  # type: ignore[arg-type]
        assert task.dropped == ("parentTaskId",)
        assert len(follower) == 1
    finally:
        follower.close()
    assert b'mcp_tasks_proxy_dropped_fields_total{field="parentTaskId"} 1.0' in metrics.exposition()
    assert any(r.levelno == logging.DEBUG and "parentTaskId" in r.getMessage() for r in caplog.records)


# -- /readyz and /healthz ----------------------------------------------------------------------------


@pytest.mark.peers
async def test_readyz_is_200_once_the_backend_answered_a_probe(reference_v1_server, tmp_path):
    async with running_proxy(reference_v1_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        async with http.get(proxy.base_url + "/readyz") as response:
            assert (response.status, await response.json()) == (200, {"status": "ready"})
        async with http.get(proxy.base_url + "/healthz") as response:
            assert (response.status, await response.json()) == (200, {"status": "ok"})


async def test_readyz_is_503_in_front_of_a_closed_port(tmp_path):
    async with running_proxy(f"http://127.0.0.1:{free_port()}/mcp", tmp_path) as proxy, aiohttp.ClientSession() as http:
        async with http.get(proxy.base_url + "/readyz") as response:
            body = await response.json()
            assert response.status == 503
        async with http.get(proxy.base_url + "/healthz") as response:
            assert response.status == 200
    assert body["status"] == "not ready"
    assert body["backend"] == "main"
    assert "127.0.0.1" not in json.dumps(body)  # the backend's address stays out of answers


@pytest.mark.peers
async def test_readyz_is_200_while_one_backend_of_several_is_reachable(reference_v1_server, tmp_path):
    upstream = [{"name": "down", "url": f"http://127.0.0.1:{free_port()}/mcp"}, {"name": "up", "url": reference_v1_server.url}]
    async with running_proxy("", tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
        async with http.get(proxy.base_url + "/readyz") as response:
            assert (response.status, await response.json()) == (200, {"status": "ready"})


async def test_readyz_names_the_first_backend_when_none_is_reachable(tmp_path):
    upstream = [
        {"name": "down", "url": f"http://127.0.0.1:{free_port()}/mcp"},
        {"name": "also-down", "url": f"http://127.0.0.1:{free_port()}/mcp"},
    ]
    async with running_proxy("", tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
        async with http.get(proxy.base_url + "/readyz") as response:
            assert (response.status, await response.json()) == (
                503,
                {
                    "status": "not ready",
                    "backend": "down",
                    "reason": "Backend 'down' unavailable: cannot reach it (ClientConnectorError)",
                },
            )


@pytest.mark.peers
async def test_a_pinned_dialect_is_the_only_probe(reference_v1_server, tmp_path):
    pinned_modern = [{"name": "main", "url": reference_v1_server.url, "dialect": "v2-modern"}]
    async with running_proxy("", tmp_path, upstream=pinned_modern) as proxy, aiohttp.ClientSession() as http:
        async with http.get(proxy.base_url + "/readyz") as response:
            assert (response.status, await response.json()) == (
                503,
                {
                    "status": "not ready",
                    "backend": "main",
                    "reason": "Backend 'main' is pinned to v2-modern but did not answer server/discover",
                },
            )
    pinned_v1 = [{"name": "main", "url": reference_v1_server.url, "dialect": "v1"}]
    async with running_proxy("", tmp_path, upstream=pinned_v1) as proxy:
        backend = proxy.runner.app[STATE].fleet.first.backend
        assert (backend.dialect, "slow_compute" in backend.profile.tools) == ("v1", True)


# -- X-Request-Id and logs ---------------------------------------------------------------------------


@pytest.mark.peers
async def test_request_id_is_echoed_when_given_and_generated_otherwise(reference_v1_server, tmp_path):
    async with running_proxy(reference_v1_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url)
        given = await client.call("tools/list", headers={"X-Request-Id": "req-42.abc"})
        generated = await client.call("tools/list")
        unsafe = await client.call("tools/list", headers={"X-Request-Id": "x" * 129})
        async with http.get(proxy.base_url + "/healthz", headers={"X-Request-Id": "probe-1"}) as response:
            health = response.headers.get("X-Request-Id")
    assert _request_id(given.headers) == "req-42.abc"
    assert len(_request_id(generated.headers)) == 32
    assert int(_request_id(generated.headers), 16) >= 0
    assert _request_id(unsafe.headers) != "x" * 129 and len(_request_id(unsafe.headers)) == 32
    assert health == "probe-1"


def test_request_ids_that_are_unsafe_to_log_are_replaced():
    assert request_id_from("a" * 128) == "a" * 128
    for bad in ("", "a" * 129, "has space", "tab\there", "new\nline", "caf\u00e9", "\x7f"):
        replaced = request_id_from(bad)
        assert replaced != bad and len(replaced) == 32


@settings(max_examples=500, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(["!", "~", "a", "-", " ", "\t", "\x00", "\x1f", "\x7f", "\x80", "é"]), max_size=130)
    | st.text()
)
def test_a_request_id_is_kept_exactly_when_it_is_1_to_128_visible_ascii_characters(header):
    kept = request_id_from(header) == header
    assert kept is (1 <= len(header) <= 128 and all("!" <= c <= "~" for c in header))


@pytest.mark.peers
async def test_json_log_lines_carry_the_request_id(reference_v1_server, tmp_path):
    stream = io.StringIO()
    log_handler = handler("json", stream)
    logger = logging.getLogger("proxy")
    previous = logger.level
    logger.addHandler(log_handler)
    logger.setLevel(logging.INFO)
    try:
        async with running_proxy(reference_v1_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
            answer = await Caller(http, proxy.url).call("tasks/result", {"taskId": "x"}, headers={"X-Request-Id": "log-me-1"})
            assert answer.status == 404
    finally:
        logger.removeHandler(log_handler)
        logger.setLevel(previous)
    entries = [json.loads(line) for line in stream.getvalue().splitlines()]
    (refusal,) = [e for e in entries if e.get("request_id") == "log-me-1"]
    assert refusal["level"] == "info"
    assert refusal["logger"] == "proxy.entry"
    assert "refused request" in refusal["msg"] and "-32601" in refusal["msg"]
    assert refusal["ts"].endswith("Z")


def test_json_formatter_outside_a_request_has_no_request_id():
    record = logging.LogRecord("proxy.x", logging.WARNING, __file__, 1, "hello %s", ("world",), None)
    RequestIdFilter().filter(record)
    entry = json.loads(JsonFormatter().format(record))
    assert {k: v for k, v in entry.items() if k != "ts"} == {"level": "warning", "logger": "proxy.x", "msg": "hello world"}
    token = REQUEST_ID.set("r-1")
    try:
        inside = logging.LogRecord("proxy.x", logging.INFO, __file__, 1, "in", (), None)
        RequestIdFilter().filter(inside)
    finally:
        REQUEST_ID.reset(token)
    assert json.loads(JsonFormatter().format(inside))["request_id"] == "r-1"


def test_log_format_and_shutdown_timeout_settings():
    assert (load(None, {}).log_format, load(None, {}).shutdown_timeout_ms) == ("text", 30_000)
    assert load(None, {"log_format": "json", "shutdown_timeout_ms": 5}).log_format == "json"
    with pytest.raises(Exception, match="log_format"):
        load(None, {"log_format": "xml"})


# -- graceful shutdown -------------------------------------------------------------------------------


@pytest.mark.peers
async def test_sigterm_lets_a_call_in_flight_finish_then_exits_0(reference_v1_server, tmp_path):
    config = tmp_path / "proxy.toml"
    config.write_text(f'log_format = "json"\nshutdown_timeout_ms = 20000\nstate_dir = "{tmp_path}"\n')
    env = {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text()}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "serve",
        "--upstream",
        reference_v1_server.url,
        "--listen",
        "127.0.0.1:0",
        "--config",
        str(config),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        banner = json.loads(await asyncio.wait_for(process.stdout.readline(), 30))  # a JSON line too
        url = banner["url"]
        assert (banner["level"], banner["logger"], banner["msg"]) == (
            "info",
            "proxy.cli",
            f"mcp-tasks-proxy listening on {url} (backends: main {reference_v1_server.url})",
        )
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        async with aiohttp.ClientSession() as http:
            client = Caller(http, url, declare=False)  # no tasks extension: slow_compute runs as a plain call
            call = asyncio.ensure_future(
                client.call(
                    "tools/call",
                    {"name": "slow_compute", "arguments": {"seconds": 2, "label": "late"}},
                    headers={"X-Request-Id": "in-flight-1"},
                )
            )
            await asyncio.sleep(0.7)
            assert not call.done()
            process.send_signal(signal.SIGTERM)
            answer = await asyncio.wait_for(call, 20)
        assert answer.status == 200
        assert answer.result["content"] == [{"type": "text", "text": "computed late"}]
        assert _request_id(answer.headers) == "in-flight-1"
        assert await asyncio.wait_for(process.wait(), 20) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    stderr = (await process.stderr.read()).decode()
    entries = [json.loads(line) for line in stderr.splitlines() if line.strip()]  # every line is JSON
    assert any(e["logger"] == "proxy.cli" and "stopping" in e["msg"] for e in entries)


@pytest.mark.peers
async def test_stopping_ends_open_get_streams_instead_of_waiting_for_them(reference_v2_server, tmp_path):
    async with aiohttp.ClientSession() as http:
        async with running_proxy(reference_v2_server.url, tmp_path, shutdown_timeout_ms=20_000) as proxy:
            caller = SessionCaller(http, proxy.url)
            await caller.initialize()
            stream = await http.get(proxy.url, headers=caller.headers({"Accept": "text/event-stream"}))
            assert stream.status == 200
            loop = asyncio.get_running_loop()
            started = loop.time()
        # running_proxy's exit stopped the proxy: the GET stream did not hold it for 20 s.
        assert loop.time() - started < 5
        assert await asyncio.wait_for(stream.content.read(), 5) == b""
        stream.release()


def test_with_json_logs_a_refusal_to_start_is_a_json_line_too(tmp_path):
    """`log_format = "json"`: the line saying why the proxy cannot start (here: its port is taken) is
    one JSON object on stderr, like every log line, and nothing else is written (issue 26)."""
    import subprocess

    config = tmp_path / "proxy.toml"
    config.write_text(f'log_format = "json"\nstate_dir = "{tmp_path}"\n')
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "proxy", "serve", "--upstream", f"http://127.0.0.1:{free_port()}/mcp"]
            + ["--listen", f"127.0.0.1:{port}", "--config", str(config)],
            cwd=ROOT,
            env={**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text()},
            capture_output=True,
            text=True,
            timeout=60,
        )
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
    refusal = lines[-1]
    assert (done.returncode, done.stdout) == (2, "")
    assert (refusal["level"], refusal["logger"], refusal["msg"]) == (
        "error",
        "proxy.cli",
        f"mcp-tasks-proxy: cannot listen on 127.0.0.1:{port}: Address already in use",
    )
