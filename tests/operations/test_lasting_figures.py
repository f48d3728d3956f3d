"""Figures that last (issue 23 part 2; docs/operations.md "Status page"): real proxy processes
restarted on the same state dir, `--workers 2` on one Redis, two replicas on one Redis; the page,
`/status.json`, `mcp-tasks-proxy status` and `/metrics` read back."""

from __future__ import annotations

import asyncio
import datetime
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from browser import dump_dom, tables
from session_support import SessionCaller
from support import Caller, free_port

from proxy.keys import new_key_text

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]
LEGACY = {"name": "legacy-cli", "version": "1.2.0"}
HOST = socket.gethostname()


@asynccontextmanager
async def serving(*args: str, env: dict[str, str], banners: int = 1) -> AsyncIterator[asyncio.subprocess.Process]:
    """`python -m proxy serve ARGS` until the block ends (SIGTERM, unless the test ended it; exit
    status 0 asserted), after its
    `banners` listening lines (one per worker)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "serve", *args, cwd=ROOT, env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(banners):
            line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()  # type: ignore[union-attr]
            assert "listening on" in line, line
        yield process
    except BaseException:  # the test's own failure is the one reported: stopped, its status not asserted
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), 30)
        raise
    if process.returncode is None:  # not ended by the test itself
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0


def _env(tmp_path: Path, key: str, name: str = "state") -> dict[str, str]:
    return {"MCP_TASKS_PROXY_KEY": key, "MCP_TASKS_PROXY_STATE_DIR": str(tmp_path / name)}


async def _legacy_session(http: aiohttp.ClientSession, url: str) -> SessionCaller:
    caller = SessionCaller(http, url)
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": LEGACY}
    answer = await caller.call("initialize", params)
    assert answer["_status"] == 200, answer
    async with http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=caller.headers()) as sent:
        assert sent.status == 202
    return caller


async def _greet(caller: SessionCaller, name: str) -> None:
    answer = await caller.call("tools/call", {"name": "greet", "arguments": {"name": name}})
    assert answer["result"]["content"] == [{"type": "text", "text": f"Hello, {name}!"}], answer


async def _status(http: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    async with http.get(base + "/status.json") as response:
        assert response.status == 200
        return await response.json()


async def _status_command(base: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "status", base, cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate()
    assert process.returncode == 0
    return out.decode()


async def test_after_a_restart_the_page_still_names_the_v1_clients_seen_before_it(reference_v1_server, tmp_path):
    """Issue 23: 10 s after a restart, with a v1 client active 12 s earlier, the page said "No v1
    client has spoken for 24 hours (last: never)", and relayed sessions that survived the restart
    showed as client "unknown"."""
    port, env = free_port(), _env(tmp_path, new_key_text())
    base = f"http://127.0.0.1:{port}"
    args = ("--upstream", reference_v1_server.url, "--listen", f"127.0.0.1:{port}")
    async with aiohttp.ClientSession() as http:
        async with serving(*args, env=env):
            legacy = await _legacy_session(http, base + "/mcp")
            for name in ("a", "b", "c"):
                await _greet(legacy, name)
            before = await _status(http, base)
        [seen] = before["v1_clients"]
        assert (seen["name"], seen["version"], seen["requests"], seen["backends"]) == ("legacy-cli", "1.2.0", 5, ["main"])
        assert before["counting"]["covers"] == "proxy"

        async with serving(*args, env=env):
            after = await _status(http, base)
            assert after["v1_clients"] == [{**seen, "replicas": [f"{HOST}:{port}"]}]
            assert after["last_v1_ms"] == seen["last_seen_ms"] == before["last_v1_ms"]
            assert after["started_ms"] > before["started_ms"]
            assert after["counting"]["since_ms"] == before["started_ms"]  # counting since the first start
            assert [
                (r["name"], r["requests_last_day"], r["v1_requests_last_day"], r["last_v1_ms"])
                for r in after["counting"]["replicas"]
            ] == [(f"{HOST}:{port}", 5, 5, seen["last_seen_ms"])]
            assert after["matrix"]["last_day"] == [
                {"client_dialect": "v1", "backend_dialect": "v1", "mode": "relayed", "requests": 5, "errors": 0}
            ]
            dom = await dump_dom(base + "/status")
            assert "v1 clients are still here: 5 requests in the last day" in dom
            rendered = tables(dom)
            assert [row[:3] for row in rendered["v1-clients"]] == [
                ["client", "version", "requests"],
                ["legacy-cli", "1.2.0", "5"],
            ]
            stamp = datetime.datetime.fromtimestamp(seen["last_seen_ms"] / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            last_seen = rendered["v1-clients"][0].index("last seen")
            assert rendered["v1-clients"][1][last_seen].startswith(stamp + " (")  # its last-seen time from before the restart
            printed = await _status_command(base)
            assert "Counts cover this proxy: kept in its store across restarts; counted since " in printed

            await _greet(legacy, "d")  # the relayed session survived the restart: still legacy-cli, never "unknown"
            again = await _status(http, base)
        assert [(c["dialect"], c["name"], c["requests"]) for c in again["clients"]] == [("v1", "legacy-cli", 6)]
        assert again["last_v1_ms"] > seen["last_seen_ms"]


MODERN_APP = {"name": "modern-app", "version": "3.0.0"}


class NamedCaller(Caller):
    """A modern caller that names itself in every request's `_meta`."""

    def body(self, method: str, params: dict[str, Any] | None = None, *, declare: bool | None = None) -> dict[str, Any]:
        body = super().body(method, params, declare=declare)
        body["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = MODERN_APP
        return body


async def _modern_greets(http: aiohttp.ClientSession, url: str, count: int) -> None:
    caller = NamedCaller(http, url)
    for i in range(count):
        greeted = await caller.call("tools/call", {"name": "greet", "arguments": {"name": f"m{i}"}})
        assert greeted.result["content"] == [{"type": "text", "text": f"Hello, m{i}!"}]


def _requests_total(metrics: str) -> dict[tuple[str, str, str], float]:
    """`mcp_tasks_proxy_requests_total` by (face, backend dialect, method); every outcome is "ok" (a
    relayed answer whose client closed its connection once it had it is ok too, issue 37), any other
    is a failure of the test."""
    totals: dict[tuple[str, str, str], float] = {}
    for labels, value in re.findall(r"^mcp_tasks_proxy_requests_total\{(.*)\} (\S+)$", metrics, re.M):
        parsed = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        assert parsed["outcome"] == "ok", labels
        key = (parsed["face"], parsed["backend_dialect"], parsed["method"])
        totals[key] = totals.get(key, 0.0) + float(value)
    return totals


def _row(client: str, backend: str, mode: str, requests: int) -> dict[str, Any]:
    return {"client_dialect": client, "backend_dialect": backend, "mode": mode, "requests": requests, "errors": 0}


async def test_with_two_workers_every_read_gives_the_totals_sent(reference_v1_server, redis_url, tmp_path):
    """Issue 23: with `--workers 2` the page, `status` and `/metrics` showed one worker's numbers,
    alternating between reads (16, 24, 24, 24, 16, 24 of 40 requests sent)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    args = ("--upstream", reference_v1_server.url, "--listen", f"127.0.0.1:{port}", "--workers", "2", "--store", redis_url)
    # A new connection per request: the kernel spreads them over both workers.
    async with (
        serving(*args, env=_env(tmp_path, new_key_text()), banners=2),
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http,
    ):
        legacy = await _legacy_session(http, base + "/mcp")  # 2 requests, then 10 calls: 12 relayed
        for i in range(10):
            await _greet(legacy, f"l{i}")
        await _modern_greets(http, base + "/mcp", 28)  # 28 translated: 40 in all
        expected_matrix = [_row("v1", "v1", "relayed", 12), _row("v2-modern", "v1", "translated", 28)]
        for _ in range(6):
            status = await _status(http, base)
            assert status["matrix"]["last_hour"] == expected_matrix
            assert [(c["dialect"], c["name"], c["requests"]) for c in status["clients"]] == [
                ("v2-modern", "modern-app", 28),
                ("v1", "legacy-cli", 12),  # never "unknown": the session's client is in the store for both workers
            ]
            [replica] = status["counting"]["replicas"]
            assert (replica["name"], replica["processes"], replica["requests_last_hour"]) == (f"{HOST}:{port}", 2, 40)
            assert (status["counting"]["covers"], status["counting"]["late"]) == ("fleet", [])
            assert status["backends"][0]["requests_last_hour"] == 40
            assert [(r["name"], r["requests"], r["leaning"], r["repairs"]) for r in status["leaning"]] == [
                ("modern-app", 28, 28, {"mcp-name": 28})
            ]

            async with http.get(base + "/status") as page:
                rendered = tables(await page.text())
            assert rendered["matrix-hour"][1:] == [
                ["v1", "v1", "relayed", "12", "0"],
                ["v2-modern", "v1", "translated", "28", "0"],
            ]
            assert rendered["replicas"][1][:2] == [f"{HOST}:{port} (this one)", "2"]

            async with http.get(base + "/metrics") as response:
                text = await response.text()
            totals = _requests_total(text)
            # Histograms and gauges are added up too: one upstream call per tools/call, no task live.
            assert re.findall(
                r'^mcp_tasks_proxy_upstream_seconds_count\{backend="main",method="tools/call"\} (\S+)$', text, re.M
            ) == ["38.0"]
            assert re.findall(r'^mcp_tasks_proxy_live_tasks\{backend="main"\} (\S+)$', text, re.M) == ["0.0"]
            # The repairs too: the modern caller leaves Mcp-Name out of each tools/call.
            assert re.findall(
                r'^mcp_tasks_proxy_repairs_total\{client_dialect="v2-modern",repair="mcp-name"\} (\S+)$', text, re.M
            ) == ["28.0"]
            assert totals == {
                ("v1", "v1", "initialize"): 1,
                ("v1", "v1", "notifications/initialized"): 1,
                ("v1", "v1", "tools/call"): 10,
                ("v2-modern", "v1", "tools/call"): 28,
            }

            printed = (await _status_command(base)).splitlines()
            start = printed.index("Migration matrix, last hour")
            assert [line.split() for line in printed[start + 3 : start + 5]] == [
                ["v1", "v1", "relayed", "12", "0"],
                ["v2-modern", "v1", "translated", "28", "0"],
            ]

        # Failures add up over the workers too: six requests of a session the v1 backend does not
        # know, each on a connection of its own (relayed: the backend's session_lost).
        for _ in range(6):
            stray = SessionCaller(http, base + "/mcp")
            stray.session_id = "a-session-no-one-gave"
            assert (await stray.call("tools/list"))["_status"] == 404
        failure = {"backend": "main", "client_dialect": "v1", "backend_dialect": "v1", "mode": "relayed", "reason": "session_lost",
                   "by": "backend", "count": 6}  # fmt: skip
        for _ in range(3):
            status = await _status(http, base)
            assert status["failures"]["last_hour"] == [failure]
            assert [(c["name"], c["errors"], c["failures"]) for c in status["clients"] if c["name"] == "unknown"] == [
                ("unknown", 6, {"session_lost": 6})
            ]
            async with http.get(base + "/metrics") as response:
                text = await response.text()
            assert re.findall(
                r'^mcp_tasks_proxy_failures_total\{backend="main",backend_dialect="v1",by="backend",client_dialect="v1",'
                r'reason="session_lost"\} (\S+)$',
                text,
                re.M,
            ) == ["6.0"]


async def test_two_replicas_on_redis_show_each_replica_and_the_fleet_total(reference_v1_server, redis_url, tmp_path):
    key = new_key_text()  # one fleet: one sealing key
    ports = free_port(), free_port()
    names = [f"{HOST}:{port}" for port in ports]
    bases = [f"http://127.0.0.1:{port}" for port in ports]

    def args(port: int) -> tuple[str, ...]:
        return ("--upstream", reference_v1_server.url, "--listen", f"127.0.0.1:{port}", "--store", redis_url)

    async with (
        serving(*args(ports[0]), env=_env(tmp_path, key, "a")),
        serving(*args(ports[1]), env=_env(tmp_path, key, "b")),
        aiohttp.ClientSession() as http,
    ):
        legacy = await _legacy_session(http, bases[0] + "/mcp")  # 7 on the first replica
        for i in range(5):
            await _greet(legacy, f"l{i}")
        await _modern_greets(http, bases[1] + "/mcp", 4)  # 4 on the second
        for base in bases:
            status = await _status(http, base)
            rows = {
                r["name"]: (r["processes"], r["requests_last_hour"], r["v1_requests_last_day"])
                for r in status["counting"]["replicas"]
            }
            assert rows == {names[0]: (1, 7, 7), names[1]: (1, 4, 0)}
            assert status["counting"]["replica"] == names[bases.index(base)]
            assert status["matrix"]["last_hour"] == [_row("v1", "v1", "relayed", 7), _row("v2-modern", "v1", "translated", 4)]
            assert [(c["name"], c["requests"], c["replicas"]) for c in status["clients"]] == [
                ("modern-app", 4, [names[1]]),
                ("legacy-cli", 7, [names[0]]),
            ]
        rendered = tables(await dump_dom(bases[1] + "/status"))
        assert sorted((row[0], row[1], row[4]) for row in rendered["replicas"][1:-1]) == sorted(
            [(names[0], "1", "7 / 7"), (f"{names[1]} (this one)", "1", "4 / 4")]
        )
        assert rendered["replicas"][-1][:2] + rendered["replicas"][-1][4:5] == ["fleet total", "2", "11 / 11"]
        printed = await _status_command(bases[0])
        assert "Counts cover the fleet (2 replicas): every replica on the shared store, with all their workers;" in printed


async def test_what_was_read_before_a_sigkill_is_there_after_the_restart(reference_v1_server, tmp_path):
    """A read flushes the reading process first: what it showed is in the store's file, and a
    proxy killed right after (no shutdown, no last flush) still shows it when it is back."""
    port, env = free_port(), _env(tmp_path, new_key_text())
    base = f"http://127.0.0.1:{port}"
    args = ("--upstream", reference_v1_server.url, "--listen", f"127.0.0.1:{port}")
    async with aiohttp.ClientSession() as http:
        async with serving(*args, env=env) as process:
            legacy = await _legacy_session(http, base + "/mcp")
            await _greet(legacy, "a")
            before = await _status(http, base)
            process.kill()  # the proxy this test started, by its handle
            assert await process.wait() == -signal.SIGKILL
        async with serving(*args, env=env):
            after = await _status(http, base)
    assert [(c["name"], c["requests"], c["last_seen_ms"]) for c in after["v1_clients"]] == [
        ("legacy-cli", 3, before["v1_clients"][0]["last_seen_ms"])
    ]


async def test_after_a_restart_a_failure_with_its_reason_and_a_leaning_client_are_still_shown(reference_v1_server, tmp_path):
    """Issue 23 parts 3 and 4 kept like the rest (docs/decisions.md §98): a session the v1 backend
    does not know (relayed: its 404 is the backend's `session_lost`) and a client the proxy repaired requests for, read back after a
    restart from the store: `/status.json`, the page and `mcp-tasks-proxy status`."""
    port, env = free_port(), _env(tmp_path, new_key_text())
    base = f"http://127.0.0.1:{port}"
    args = ("--upstream", reference_v1_server.url, "--listen", f"127.0.0.1:{port}")
    failure = {"backend": "main", "client_dialect": "v1", "backend_dialect": "v1", "mode": "relayed", "reason": "session_lost",
               "by": "backend", "count": 1}  # fmt: skip
    async with aiohttp.ClientSession() as http:
        async with serving(*args, env=env):
            await _modern_greets(http, base + "/mcp", 3)  # Mcp-Method sent, Mcp-Name left out: repaired
            stray = SessionCaller(http, base + "/mcp")
            stray.session_id = "a-session-this-proxy-never-gave"
            assert (await stray.call("tools/list"))["_status"] == 404  # relayed to the v1 backend, which does not know it
            before = await _status(http, base)
        assert before["failures"] == {"last_hour": [failure], "last_day": [failure]}
        [leaning] = before["leaning"]
        [modern] = [c for c in before["clients"] if c["name"] == "modern-app"]
        assert {k: v for k, v in leaning.items() if k != "last_leaning_ms"} == {
            "dialect": "v2-modern", "name": "modern-app", "version": "3.0.0", "requests": 3, "leaning": 3, "repairs": {"mcp-name": 3}
        }  # fmt: skip
        assert leaning["last_leaning_ms"] == modern["last_seen_ms"]  # its last request was repaired
        assert [(c["name"], c["errors"], c["failures"]) for c in before["clients"]] == [
            ("unknown", 1, {"session_lost": 1}),
            ("modern-app", 0, {}),
        ]
        assert [(e["client_dialect"], e["method"], e["reason"], e["by"]) for e in before["recent_errors"]] == [
            ("v1", "tools/list", "session_lost", "backend")
        ]

        async with serving(*args, env=env):
            after = await _status(http, base)
            assert after["started_ms"] > before["started_ms"]
            assert after["failures"] == before["failures"]
            assert after["leaning"] == before["leaning"]
            assert [(c["name"], c["errors"], c["failures"], c["leaning"], c["repairs"]) for c in after["clients"]] == [
                ("unknown", 1, {"session_lost": 1}, 0, {}),
                ("modern-app", 0, {}, 3, {"mcp-name": 3}),
            ]
            assert [(e["client_dialect"], e["method"], e["reason"], e["by"]) for e in after["recent_errors"]] == [
                ("v1", "tools/list", "session_lost", "backend")
            ]
            assert (after["backends"][0]["errors_last_hour"], after["backends"][0]["refusals_last_hour"]) == (1, 0)
            rendered = tables(await dump_dom(base + "/status"))
            assert rendered["failures-day"][1:] == [["main", "v1", "v1", "relayed", "session_lost", "backend", "1"]]
            assert rendered["leaning"][1][:6] == ["v2-modern", "modern-app", "3.0.0", "3", "3", "mcp-name 3"]
            printed = (await _status_command(base)).splitlines()
            start = printed.index("Clients leaning on the proxy")
            assert printed[start + 3].split() == ["v2-modern", "modern-app", "3.0.0", "3", "3", "mcp-name=3"]
