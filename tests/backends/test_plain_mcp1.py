"""The proxy in front of a plain server on the official `mcp` 1.30 SDK (`tests/peers/`), which,
unlike the reference v1 server, keeps the SDK's one task group for all sessions: ending any
session, or a sessionless POST it refuses, stops task creation in every other session of the
process (docs/decisions.md §2). The proxy's timed probes must never do either to a live backend.
"""

from __future__ import annotations

import json

import aiohttp
import pytest
from support import Caller, running_proxy, until
from tap import RecordingTap

from proxy.sse import SseParser

pytestmark = pytest.mark.peers

PROBE_INTERVAL_MS = 300


async def _run_task(caller: Caller, text: str) -> dict:
    created = await caller.call("tools/call", {"name": "slow_echo", "arguments": {"text": text, "seconds": 0.2}})
    assert created.status == 200, created.body
    assert created.result["resultType"] == "task", created.result
    return await caller.poll(created.result["taskId"])


async def _probed(tap: RecordingTap, mark: int, times: int) -> None:
    """Wait (30 s at most) until the backend has been probed `times` times (`tools/list`) since `mark`."""
    await until(lambda: tap.methods[mark:].count("tools/list") >= times, f"{times} probes of the backend", 30, 0.05)


async def test_tasks_still_run_after_ten_probe_intervals(plain_mcp1_server, tmp_path):
    tap = await RecordingTap.start(plain_mcp1_server.url + "/")  # Starlette serves /mcp/ (no 307 to count twice)
    try:
        async with (
            running_proxy(tap.url, tmp_path, probe_interval_ms=PROBE_INTERVAL_MS) as proxy,
            aiohttp.ClientSession() as http,
        ):
            caller = Caller(http, proxy.url)
            first = await _run_task(caller, "one")
            assert (first["status"], first["result"]["content"]) == ("completed", [{"type": "text", "text": "echo one"}])
            mark = len(tap.methods)
            await _probed(tap, mark, 10)  # ten timed re-probes, no client request (issue 46: it checked one)
            second = await _run_task(caller, "two")
            assert (second["status"], second["result"]["content"]) == ("completed", [{"type": "text", "text": "echo two"}])
    finally:
        await tap.stop()
    # One session for the probes and one pooled session, each opened once; one sessionless probe (at start).
    assert (tap.methods.count("initialize"), tap.methods.count("server/discover")) == (2, 1), tap.methods
    assert tap.deletes == 0


async def test_a_listen_opened_and_closed_after_ten_probe_intervals_leaves_tasks_running(plain_mcp1_server, tmp_path):
    """A modern `subscriptions/listen` through a proxy that has lived through ten probe intervals:
    it opens the principal's pooled session with its GET stream held from before
    `notifications/initialized` (decision 66), is acknowledged (the plain server offers no list
    changes: an empty filter), and, closed, lets that GET stream go (decision 69); the plain SDK's
    shared task group must survive all of it, so tasks still run on the same session."""
    tap = await RecordingTap.start(plain_mcp1_server.url + "/")
    try:
        async with (
            running_proxy(tap.url, tmp_path, probe_interval_ms=PROBE_INTERVAL_MS) as proxy,
            aiohttp.ClientSession() as http,
        ):
            caller = Caller(http, proxy.url)
            await _probed(tap, 0, 10)
            body = caller.body("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
            headers = {**caller.headers("subscriptions/listen"), "Content-Type": "application/json"}
            async with http.post(caller.url, data=json.dumps(body), headers=headers) as response:
                assert response.headers["Content-Type"] == "text/event-stream"
                parser, events = SseParser(), []
                while not events:
                    events += parser.feed(await response.content.readany())
            assert [json.loads(event.data) for event in events] == [
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/subscriptions/acknowledged",
                    "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": body["id"]}, "notifications": {}},
                }
            ]
            for text in ("one", "two"):
                done = await _run_task(caller, text)
                assert (done["status"], done["result"]["content"]) == ("completed", [{"type": "text", "text": f"echo {text}"}])
    finally:
        await tap.stop()
    assert (tap.methods.count("initialize"), tap.methods.count("server/discover")) == (2, 1), tap.methods
    assert tap.deletes == 0
