"""Failures where they belong during an in-place upgrade (issue 23 parts 3 and 4; docs/configuration.md
"Status page"): the reference v1 server behind the proxy is replaced on its port by the reference
v2 server while an official `mcp` 1.30 client (a relayed session, tests/peers/mcp1_stepped_client.py)
and a 2026-07-28 client each hold a task on it. Every failure a client sees is on the page, in
`/status.json` and in `/metrics` under that client, its dialect and the pairing that answered it,
with its reason; the tasks the proxy knows are not finished ("live tasks") go back to 0 when the
clients stop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import support
from browser import dump_dom, tables
from session_support import SessionCaller
from support import eventually, free_port, running_proxy

from proxy.demo.peers import ensure_peer_env
from proxy.demo.processes import start_reference_v1_server, start_reference_v2_server
from translators.errors import ELSEWHERE, FORGOTTEN, UNKNOWN_TASK

pytestmark = pytest.mark.peers

SCRIPT = Path(__file__).resolve().parents[1] / "peers" / "mcp1_stepped_client.py"
SDK = {"name": "billing-worker", "version": "1.30.0"}
MODERN = {"name": "modern-app", "version": "3.0.0"}
LEGACY = {"name": "legacy-cli", "version": "1.2.0"}


class NamedCaller(support.NamedCaller):
    """A named modern caller that sends every header a v2 server requires (`named`)."""

    def headers(self, method: str) -> dict[str, str]:
        return {**super().headers(method), "Mcp-Name": self.name}

    async def named(self, method: str, params: dict[str, Any], name: str) -> Any:
        self.name = name  # every header a v2 server requires: this client leans on nothing
        return await self.call(method, params)


class SteppedClient:
    """The SDK client's script: one command in, one JSON answer out."""

    def __init__(self, process: asyncio.subprocess.Process):
        self.process = process

    async def step(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command.encode() + b"\n")
        await self.process.stdin.drain()
        line = await asyncio.wait_for(self.process.stdout.readline(), 90)
        assert line, f"the SDK client ended at {command!r}"
        return json.loads(line)


async def _status(http: aiohttp.ClientSession, base_url: str) -> dict[str, Any]:
    async with http.get(base_url + "/status.json") as response:
        return await response.json()


async def _done(caller: NamedCaller, task_id: str) -> dict[str, Any]:
    for _ in range(300):
        answer = await caller.named("tasks/get", {"taskId": task_id}, task_id)
        if answer.result["status"] == "completed":
            return answer.result
        await asyncio.sleep(0.1)
    raise AssertionError(f"task stayed {answer.result['status']}")


async def test_an_in_place_upgrade_puts_each_failure_under_its_client_and_live_tasks_return_to_zero(tmp_path):
    port = free_port()
    old = await asyncio.to_thread(start_reference_v1_server, port)
    new = None
    python = await asyncio.to_thread(ensure_peer_env, "mcp-v1")
    sdk_process = None
    try:
        async with (
            running_proxy(f"http://127.0.0.1:{port}/mcp", tmp_path, probe_interval_ms=300, reconnect_wait_ms=200) as proxy,
            aiohttp.ClientSession() as http,
        ):
            sdk_process = await asyncio.create_subprocess_exec(
                str(python),
                str(SCRIPT),
                "--url",
                proxy.url,
                "--name",
                SDK["name"],
                "--version",
                SDK["version"],
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            sdk = SteppedClient(sdk_process)
            modern = NamedCaller(http, proxy.url, MODERN)
            # Before: the SDK client's session is relayed to the v1 server, the modern client's
            # tasks translated; each holds a task of a minute and finishes a short one.
            assert await sdk.step("open") == {"ok": True, "server": "mcp-tasks-proxy-reference-v1"}
            assert await sdk.step("task long 60") == {"ok": True}
            assert await sdk.step("task short 0.2") == {"ok": True}
            assert await sdk.step("result short") == {"ok": True, "texts": ["computed short"]}
            args = {"name": "slow_compute", "arguments": {"seconds": 60, "label": "m-long"}}
            held = (await modern.named("tools/call", args, "slow_compute")).result["taskId"]
            args = {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": "m-short"}}
            short = (await modern.named("tools/call", args, "slow_compute")).result["taskId"]
            assert (await _done(modern, short))["result"]["content"][0]["text"] == "computed m-short"
            legacy = SessionCaller(http, proxy.url, client_info=LEGACY)  # a raw v1 session, relayed too
            assert (await legacy.initialize())["_status"] == 200
            before = await _status(http, proxy.base_url)
            # The modern client's long task is followed; the relayed session's tasks are the backend's.
            assert [b["live_tasks"] for b in before["backends"]] == [1]
            assert before["failures"]["last_hour"] == []

            await asyncio.to_thread(old.stop)
            # While no server listens, a relayed session's request waits 200 ms (reconnect_wait_ms), then fails.
            assert (await legacy.call("tools/list"))["_status"] == 502
            new = await asyncio.to_thread(start_reference_v2_server, port)

            async def upgraded() -> bool:
                return (await _status(http, proxy.base_url))["backends"][0]["dialect"] == "v2-modern"

            await eventually(upgraded, what="the proxy to notice the upgrade", timeout_s=60)
            # After: the relayed session is gone with the v1 server; the modern client's task too.
            lost = await sdk.step("get long")
            assert (lost["ok"], lost["error"]["type"]) == (False, "McpError"), lost
            gone = await modern.named("tasks/get", {"taskId": held}, held)
            assert (gone.status, gone.error["code"], gone.error["message"]) == (400, -32602, f"{UNKNOWN_TASK}: {ELSEWHERE}")
            stray = SessionCaller(http, proxy.url)
            stray.session_id = "a-session-this-proxy-never-gave"
            assert (await stray.call("tools/list"))["_status"] == 404  # "Session not found", the proxy's own answer
            # The clients carry on: the SDK client on a new session (translated now), the modern one relayed.
            assert await sdk.step("open") == {"ok": True, "server": "mcp-tasks-proxy"}
            assert await sdk.step("task after 2") == {"ok": True}
            args = {"name": "slow_compute", "arguments": {"seconds": 2, "label": "m-after"}}
            after = (await modern.named("tools/call", args, "slow_compute")).result["taskId"]

            async def running_tasks() -> int:
                return (await _status(http, proxy.base_url))["backends"][0]["live_tasks"]

            assert await running_tasks() == 1  # the SDK client's task, followed by the translating pairing
            assert await sdk.step("result after") == {"ok": True, "texts": ["computed after"]}
            assert (await _done(modern, after))["result"]["content"][0]["text"] == "computed m-after"
            assert await sdk.step("close") == {"ok": True}
            sdk_process.stdin.write(b"quit\n")
            await asyncio.wait_for(sdk_process.wait(), 30)
            status = await _status(http, proxy.base_url)
            async with http.get(proxy.base_url + "/metrics") as response:
                metrics = await response.text()
            dom = await dump_dom(proxy.base_url + "/status")
    finally:
        if sdk_process is not None and sdk_process.returncode is None:
            sdk_process.kill()
            await sdk_process.wait()
        old.stop()
        if new is not None:
            new.stop()

    assert [b["live_tasks"] for b in status["backends"]] == [0]
    assert 'mcp_tasks_proxy_live_tasks{backend="main"} 0.0' in metrics
    failures = [
        {"backend": "main", "client_dialect": "v1", "backend_dialect": "v1", "mode": "relayed", "reason": "backend_unreachable",
         "by": "backend", "count": 1},
        {"backend": "main", "client_dialect": "v1", "backend_dialect": "v1", "mode": "relayed", "reason": "session_lost",
         "by": "backend", "count": 1},
        {"backend": "main", "client_dialect": "v1", "backend_dialect": "v2-modern", "mode": "translated",
         "reason": "session_lost", "by": "proxy", "count": 1},
        {"backend": "main", "client_dialect": "v2-modern", "backend_dialect": "v2-modern", "mode": "relayed",
         "reason": "task_unknown", "by": "proxy", "count": 1},
    ]  # fmt: skip
    assert status["failures"] == {"last_hour": failures, "last_day": failures}
    clients = {(c["dialect"], c["name"]): (c["errors"], c["failures"]) for c in status["clients"]}
    assert clients == {
        ("v1", "billing-worker"): (1, {"session_lost": 1}),
        ("v2-modern", "modern-app"): (1, {"task_unknown": 1}),
        ("v1", "unknown"): (1, {"session_lost": 1}),
        ("v1", "legacy-cli"): (1, {"backend_unreachable": 1}),
    }
    errors = [(e["client"], e["client_dialect"], e["backend_dialect"], e["method"], e["code"], e["reason"], e["by"])
              for e in reversed(status["recent_errors"])]  # fmt: skip
    assert errors == [
        ("legacy-cli", "v1", "v1", "tools/list", "-32603", "backend_unreachable", "backend"),
        ("billing-worker", "v1", "v1", "tasks/get", "http_404", "session_lost", "backend"),
        ("modern-app", "v2-modern", "v2-modern", "tasks/get", "-32602", "task_unknown", "proxy"),
        ("unknown", "v1", "v2-modern", "tools/list", "-32600", "session_lost", "proxy"),
    ]
    backend = status["backends"][0]
    assert (backend["errors_last_hour"], backend["refusals_last_hour"]) == (2, 2)
    assert status["leaning"] == []  # both clients sent every header
    # "Session not found" is counted in /metrics too (it was in neither before).
    assert (
        'mcp_tasks_proxy_requests_total{backend_dialect="v2-modern",face="v1",method="tools/list",outcome="-32600"} 1.0'
        in metrics
    )
    lines = sorted(line for line in metrics.splitlines() if line.startswith("mcp_tasks_proxy_failures_total"))
    assert lines == [
        'mcp_tasks_proxy_failures_total{backend="main",backend_dialect="v1",by="backend",client_dialect="v1",'
        'reason="backend_unreachable"} 1.0',
        'mcp_tasks_proxy_failures_total{backend="main",backend_dialect="v1",by="backend",client_dialect="v1",reason="session_lost"} 1.0',
        'mcp_tasks_proxy_failures_total{backend="main",backend_dialect="v2-modern",by="proxy",client_dialect="v1",reason="session_lost"} 1.0',
        'mcp_tasks_proxy_failures_total{backend="main",backend_dialect="v2-modern",by="proxy",client_dialect="v2-modern",'
        'reason="task_unknown"} 1.0',
    ]
    # The page as a browser renders it.
    rendered = tables(dom)
    assert rendered["failures-hour"] == [
        ["backend", "client dialect", "backend dialect", "how", "reason", "by", "count"],
        ["main", "v1", "v1", "relayed", "backend_unreachable", "backend", "1"],
        ["main", "v1", "v1", "relayed", "session_lost", "backend", "1"],
        ["main", "v1", "v2-modern", "translated", "session_lost", "proxy", "1"],
        ["main", "v2-modern", "v2-modern", "relayed", "task_unknown", "proxy", "1"],
    ]
    # Most recently seen first; the columns after "requests" (which polling makes vary): errors, by reason.
    assert [row[1:3] + row[4:6] for row in rendered["clients"][1:]] == [
        ["modern-app", "3.0.0", "1", "task_unknown 1"],
        ["billing-worker", "1.30.0", "1", "session_lost 1"],
        ["unknown", "—", "1", "session_lost 1"],
        ["legacy-cli", "1.2.0", "1", "backend_unreachable 1"],
    ]
    assert rendered["errors"][0][1:] == ["replica", "backend", "client", "client dialect", "backend dialect", "method", "code", "reason", "by",
                                         "detail"]  # fmt: skip
    assert [row[3:10] for row in rendered["errors"][1:]] == [
        ["unknown", "v1", "v2-modern", "tools/list", "-32600", "session_lost", "proxy"],
        ["modern-app 3.0.0", "v2-modern", "v2-modern", "tasks/get", "-32602", "task_unknown", "proxy"],
        ["billing-worker 1.30.0", "v1", "v1", "tasks/get", "http_404", "session_lost", "backend"],
        ["legacy-cli 1.2.0", "v1", "v1", "tools/list", "-32603", "backend_unreachable", "backend"],
    ]


async def test_tasks_of_a_backend_that_forgot_them_are_no_longer_live(tmp_path):
    """A v1 server restarted on its port forgets its sessions: the first poll that meets the lost
    session ends every task the proxy followed on it (live tasks 0), and is counted as the
    backend's `task_unknown` under the modern client that polled."""
    port = free_port()
    server = await asyncio.to_thread(start_reference_v1_server, port)
    try:
        async with running_proxy(f"http://127.0.0.1:{port}/mcp", tmp_path) as proxy, aiohttp.ClientSession() as http:
            modern = NamedCaller(http, proxy.url, MODERN)
            held = []
            for label in ("a", "b", "c"):
                args = {"name": "slow_compute", "arguments": {"seconds": 60, "label": label}}
                held.append((await modern.named("tools/call", args, "slow_compute")).result["taskId"])
            assert [b["live_tasks"] for b in (await _status(http, proxy.base_url))["backends"]] == [3]
            await asyncio.to_thread(server.stop)
            server = await asyncio.to_thread(start_reference_v1_server, port)
            gone = await modern.named("tasks/get", {"taskId": held[0]}, held[0])
            assert (gone.status, gone.error["code"], gone.error["message"]) == (400, -32602, f"{UNKNOWN_TASK}: {FORGOTTEN}")
            status = await _status(http, proxy.base_url)
            async with http.get(proxy.base_url + "/metrics") as response:
                metrics = await response.text()
    finally:
        server.stop()
    assert [b["live_tasks"] for b in status["backends"]] == [0]  # the two not polled went with their session
    assert 'mcp_tasks_proxy_live_tasks{backend="main"} 0.0' in metrics
    assert status["failures"]["last_hour"] == [
        {"backend": "main", "client_dialect": "v2-modern", "backend_dialect": "v1", "mode": "translated",
         "reason": "task_unknown", "by": "backend", "count": 1},
    ]  # fmt: skip
    assert (status["backends"][0]["errors_last_hour"], status["backends"][0]["refusals_last_hour"]) == (1, 0)
