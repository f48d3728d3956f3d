"""The real reference v1 server paused (SIGSTOP), resumed, killed (-9) and started again on its
port, behind a proxy translating for a modern client (docs/behaviour.md §9 held tasks, §8
readiness): while it is paused a sync call to `greet` (named in `hold_tools`: the server has tasks and
keeps its declarations otherwise, decision 151) is held as a task after `hold_after_ms`, `/readyz`
says why it is not ready, and nothing is lost; once resumed both the held call and the task
created before the pause complete with their exact results; killed, a call fails 502 after
`reconnect_wait_ms`; started again, calls are served."""

from __future__ import annotations

import asyncio
import os
import signal

import aiohttp
import pytest
from support import Caller, free_port, running_proxy

from proxy.demo.processes import start_reference_v1_server
from proxy.upstream.endpoint import Endpoint

pytestmark = pytest.mark.peers

PROBE_INTERVAL_MS = 300
DEADLINE_S = 20.0
"""How long an awaited event may take before the test fails (an event that never comes: the fault)."""


def text(value: str) -> dict:
    return {"content": [{"type": "text", "text": value}], "isError": False, "resultType": "complete"}


async def _readyz_until(http: aiohttp.ClientSession, base_url: str, status: int) -> tuple[int, dict]:
    """`/readyz` every 50 ms until it answers `status`; fails after `DEADLINE_S`."""
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while True:
        async with http.get(base_url + "/readyz") as response:
            answer = response.status, await response.json()
        if answer[0] == status:
            return answer
        assert asyncio.get_running_loop().time() < deadline, answer
        await asyncio.sleep(0.05)


async def test_a_paused_backend_holds_calls_loses_nothing_and_a_killed_one_is_served_again(tmp_path, monkeypatch):
    monkeypatch.setattr(Endpoint, "PROBE_TIMEOUT_S", 1.0)
    port = free_port()
    server = await asyncio.to_thread(start_reference_v1_server, port)
    try:
        async with (
            running_proxy(
                f"http://127.0.0.1:{port}/mcp",
                tmp_path,
                main_keys={"hold_tools": ["greet"]},
                probe_interval_ms=PROBE_INTERVAL_MS,
                reconnect_wait_ms=1000,
            ) as proxy,
            aiohttp.ClientSession() as http,
        ):
            caller = Caller(http, proxy.url)
            assert (await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Bo"}})).result == text("Hello, Bo!")
            before = await caller.call(
                "tools/call", {"name": "slow_compute", "arguments": {"seconds": 1, "label": "before"}, "task": {"ttl": 60000}}
            )
            assert (before.result["resultType"], before.result["status"]) == ("task", "working")

            os.kill(server.pid, signal.SIGSTOP)
            try:
                held = await asyncio.wait_for(
                    caller.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}}), DEADLINE_S
                )
                assert (held.result["resultType"], held.result["status"]) == ("task", "working")
                down = await _readyz_until(http, proxy.base_url, 503)
                assert down == (
                    503,
                    {
                        "status": "not ready",
                        "backend": "main",
                        "reason": "Backend 'main' unavailable: did not answer the probe within 1 s",
                    },
                )
            finally:
                os.kill(server.pid, signal.SIGCONT)
            assert await _readyz_until(http, proxy.base_url, 200) == (200, {"status": "ready"})
            done = await caller.poll(held.result["taskId"], timeout=DEADLINE_S)
            assert (done["status"], done["result"]) == ("completed", text("Hello, Ada!"))
            done = await caller.poll(before.result["taskId"], timeout=DEADLINE_S)
            assert (done["status"], done["result"]["content"]) == ("completed", [{"type": "text", "text": "computed before"}])

            os.kill(server.pid, signal.SIGKILL)
            await asyncio.to_thread(server.stop)  # reaps it
            refused = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "gone"}})
            assert (refused.status, refused.error) == (
                502,
                {"code": -32603, "message": "Backend 'main' unavailable: cannot reach it (ClientConnectorError)"},
            )
            server = await asyncio.to_thread(start_reference_v1_server, port)
            assert await _readyz_until(http, proxy.base_url, 200) == (200, {"status": "ready"})
            again = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "again"}})
            assert again.result == text("Hello, again!")
    finally:
        server.stop()
