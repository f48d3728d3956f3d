"""Held tasks on the v2-modern face (docs/behaviour.md §9), in front of the task-less mcp 1.30
server over HTTP and on stdio, with the tests' raw 2026-07-28 caller for exact wire shapes; the
proxy runs through several probe intervals (300 ms) during each test."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from held_support import HOLD_AFTER_MS, events_of, held_proxy, wait_for_event
from support import Caller

pytestmark = pytest.mark.peers
TASK_KEYS = {"taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs", "resultType"}


def text(value: str, *, is_error: bool = False) -> dict:
    return {"content": [{"type": "text", "text": value}], "isError": is_error, "resultType": "complete"}


async def warm(caller: Caller) -> None:
    """A first call (on stdio it starts the server's process), so that later ones are timed alone."""
    assert (await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Bo"}})).result == text("Hello, Bo!")


async def test_a_fast_call_is_answered_plainly_without_a_task(untasked, tmp_path):
    table, _ = untasked
    async with held_proxy(table, tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        await warm(caller)
        started = time.monotonic()
        answer = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})
        assert time.monotonic() - started < HOLD_AFTER_MS / 1000
        assert answer.result == text("Hello, Ada!")
        quick = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.05, "label": "q"}})
        assert quick.result == text("computed q")


async def test_a_slow_call_becomes_a_task_and_completes_with_the_exact_result(untasked, tmp_path):
    table, _ = untasked
    async with held_proxy(table, tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        await warm(caller)
        started = time.monotonic()
        created = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 2, "label": "held"}})
        elapsed = time.monotonic() - started
        assert HOLD_AFTER_MS / 1000 <= elapsed < HOLD_AFTER_MS / 1000 + 1.0, elapsed
        result = created.result
        assert set(result) == TASK_KEYS, result
        assert (result["status"], result["resultType"], result["ttlMs"], result["pollIntervalMs"]) == (
            "working",
            "task",
            3_600_000,
            1000,
        )
        task_id = result["taskId"]
        assert created.headers["Mcp-Name"] == task_id
        progress = await caller.poll(task_id, until=("working",))
        assert progress["resultType"] == "complete"
        deadline = time.monotonic() + 10
        while "statusMessage" not in progress:  # the server's progress, as the task's statusMessage
            assert time.monotonic() < deadline, progress
            await asyncio.sleep(0.1)
            progress = (await caller.call("tasks/get", {"taskId": task_id})).result
        assert progress["statusMessage"].startswith("step ") and progress["statusMessage"].endswith(" of 8"), progress
        final = await caller.poll(task_id)
        assert (final["status"], final["result"]) == ("completed", text("computed held"))
        assert (final["taskId"], final["ttlMs"], final["pollIntervalMs"]) == (task_id, 3_600_000, 1000)


async def test_a_tool_error_is_completed_with_is_error_and_a_backend_error_is_failed(untasked, tmp_path):
    table, _ = untasked
    async with held_proxy(table, tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        tool_error = await caller.call("tools/call", {"name": "failing_job", "arguments": {"seconds": 1}})
        protocol_error = await caller.call("tools/call", {"name": "protocol_error_job", "arguments": {"seconds": 1}})
        assert (tool_error.result["status"], protocol_error.result["status"]) == ("working", "working")
        done = await caller.poll(tool_error.result["taskId"])
        assert (done["status"], done["result"]) == ("completed", text("failing_job always fails", is_error=True))
        broken = await caller.poll(protocol_error.result["taskId"])
        assert (broken["status"], broken["error"]) == (
            "failed",
            {"code": -32000, "message": "protocol_error_job: simulated internal failure"},
        )
        assert "result" not in broken


async def test_cancel_reaches_the_server_as_notifications_cancelled(untasked, tmp_path):
    table, events = untasked
    async with held_proxy(table, tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        created = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "stop"}})
        task_id = created.result["taskId"]
        ack = await caller.call("tasks/cancel", {"taskId": task_id})
        assert ack.result == {"resultType": "complete"}
        await wait_for_event(events, {"event": "cancelled", "tool": "slow_compute", "label": "stop"})
        final = await caller.poll(task_id)
        assert final["status"] == "cancelled"
        again = await caller.call("tasks/cancel", {"taskId": task_id})  # a terminal task: the same ack
        assert (again.result, (await caller.poll(task_id))["status"]) == ({"resultType": "complete"}, "cancelled")
    assert [e for e in events_of(events) if e["event"] == "cancelled"] == [
        {"event": "cancelled", "tool": "slow_compute", "label": "stop"}
    ]


async def test_an_elicitation_mid_call_becomes_input_requests_and_its_answer_completes_the_call(untasked, tmp_path):
    table, _ = untasked
    async with held_proxy(table, tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        created = await caller.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "a.txt", "delay": 1.0}})
        task_id = created.result["taskId"]
        asking = await caller.poll(task_id, until=("input_required",))
        [(key, request)] = asking["inputRequests"].items()
        assert request["method"] == "elicitation/create"
        assert request["params"]["message"] == "Delete a.txt?"
        assert request["params"]["requestedSchema"]["properties"] == {"confirm": {"type": "boolean"}}
        ack = await caller.call(
            "tasks/update", {"taskId": task_id, "inputResponses": {key: {"action": "accept", "content": {"confirm": True}}}}
        )
        assert ack.result == {"resultType": "complete"}
        final = await caller.poll(task_id)
        assert (final["status"], final["result"]) == ("completed", text("deleted a.txt"))


async def test_holding_off_keeps_the_call_synchronous(untasked, tmp_path):
    table, _ = untasked
    async with held_proxy({**table, "hold_tasks": "off"}, tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        answer = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 1, "label": "sync"}})
        assert answer.result == text("computed sync")


async def test_a_client_without_the_extension_gets_the_plain_result(untasked, tmp_path):
    table, _ = untasked
    async with held_proxy(table, tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url, declare=False)
        answer = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 1, "label": "plain"}})
        assert answer.result == text("computed plain")


async def test_hold_max_ms_cancels_the_call_upstream_and_fails_the_task(untasked, tmp_path):
    table, events = untasked
    async with held_proxy(table, tmp_path / "state", hold_max_ms=1500) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        created = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "long"}})
        final = await caller.poll(created.result["taskId"], timeout=20)
        assert (final["status"], final["error"]) == (
            "failed",
            {"code": -32603, "message": "The call ran longer than hold_max_ms (1500 ms): it was cancelled on the backend"},
        )
        await wait_for_event(events, {"event": "cancelled", "tool": "slow_compute", "label": "long"})


async def test_beyond_the_bounds_a_slow_call_stays_synchronous_and_metrics_count_it(untasked, tmp_path):
    table, _ = untasked
    async with held_proxy(table, tmp_path / "state", max_held_per_principal=1) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        await warm(caller)
        first = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 3, "label": "one"}})
        assert first.result["resultType"] == "task"
        second = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 1, "label": "two"}})
        assert second.result == text("computed two")  # no room for a second held call of this principal: synchronous
        other = Caller(http, proxy.url, authorization="Bearer someone-else")
        third = await other.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 1, "label": "three"}})
        assert third.result["resultType"] == "task"  # another principal has room
        async with http.get(proxy.base_url + "/metrics") as response:
            metrics = await response.text()
        assert 'mcp_tasks_proxy_held_tasks{backend="main"} 2.0' in metrics
        assert 'mcp_tasks_proxy_held_tasks_promoted_total{backend="main"} 2.0' in metrics
        assert 'mcp_tasks_proxy_held_tasks_refused_total{backend="main"} 1.0' in metrics
        await caller.poll(first.result["taskId"])
        await other.poll(third.result["taskId"])
        async with http.get(proxy.base_url + "/metrics") as response:
            metrics = await response.text()
        assert 'mcp_tasks_proxy_held_tasks{backend="main"} 0.0' in metrics
        assert 'mcp_tasks_proxy_held_tasks_ended_total{backend="main",outcome="completed"} 2.0' in metrics


async def test_server_everythings_long_running_operation_on_stdio_is_held(tmp_path):
    """server-everything (npm, on stdio) runs v1 tasks for its own task tool; its
    `trigger-long-running-operation` has no task support and takes 10 s. A backend with tasks keeps its
    declarations unless the operator names the tool in `hold_tools` (decision 151): named, it is held,
    polled to its exact result."""
    from proxy.demo.processes import stdio_commands

    table = {
        "name": "main",
        "command": stdio_commands()["everything"],
        "hold_after_ms": HOLD_AFTER_MS,
        "hold_tools": ["trigger-long-running-operation"],
    }
    async with held_proxy(table, tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        created = await caller.call(
            "tools/call", {"name": "trigger-long-running-operation", "arguments": {"duration": 10, "steps": 5}}
        )
        assert (created.result["resultType"], created.result["status"]) == ("task", "working")
        final = await caller.poll(created.result["taskId"], timeout=40)
    assert (final["status"], final["result"]) == (
        "completed",
        {
            "content": [{"type": "text", "text": "Long running operation completed. Duration: 10 seconds, Steps: 5."}],
            "resultType": "complete",
        },
    )


async def test_a_held_call_keeps_its_backend_draining_until_it_ends(untasked, tmp_path):
    """Issue 39, part 4: a held call is work bound to its backend. Drained by a reload while one
    runs (its client only polls now: no session, no request in flight), the backend stays
    "draining", one held call left, until the call ends; then "drained"."""
    from proxy.config import load

    table, _ = untasked
    other = {**table, "name": "other", "weight": 0}  # a second backend to take the new work once main drains
    async with held_proxy([table, other], tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        await warm(caller)
        created = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 2, "label": "drain"}})
        assert created.result["status"] == "working"
        drained = {"listen": "127.0.0.1:0", "state_dir": str(tmp_path / "state"), "probe_interval_ms": 300}
        upstream = [{**table, "drain": True}, {**other, "weight": 1}]
        assert await proxy.reload(load(None, {**drained, "upstream": upstream})) == [
            "backend main: weight 1 -> 1, drain true",
            "backend other: weight 0 -> 1",
        ]

        async def drain() -> tuple[str, dict]:
            async with http.get(proxy.base_url + "/status.json") as response:
                backend = (await response.json())["backends"][0]  # main
            return backend["drain"], backend["remaining"]

        assert await drain() == ("draining", {"sessions": 0, "requests": 0, "tasks": 0, "held": 1})
        final = await caller.poll(created.result["taskId"])
        assert (final["status"], final["result"]) == ("completed", text("computed drain"))
        deadline = time.monotonic() + 10
        while (state := await drain())[0] != "drained":  # the held call's driver ends once its result is kept
            assert time.monotonic() < deadline, state
            await asyncio.sleep(0.05)
        assert state == ("drained", {"sessions": 0, "requests": 0, "tasks": 0, "held": 0})
