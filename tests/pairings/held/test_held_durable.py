"""Held tasks are durable (docs/behaviour.md §9 "Durable"): a client away for 30 s gets the result
afterwards; two replicas on Redis serve the same lifecycles (behind nginx in round robin, and asked
alternately, a cancel and an answer handed to the replica holding the call); `kill -9` of the proxy
mid-call leaves the task `failed` "interrupted, may have run" after the restart, never `working`."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import aiohttp
import pytest
from held_support import PROBE_INTERVAL_MS, backend, held_proxy, start_untasked_server, wait_for_event
from peer_checks import run_script
from state.test_restart import ProxyProcess
from support import Caller

from proxy.bench.targets import start_nginx
from proxy.demo.peers import ensure_peer_env
from translators.held import INTERRUPTED

pytestmark = pytest.mark.peers
PEERS = Path(__file__).resolve().parents[2] / "peers"
FASTMCP4_CHECKS = ["greet", "slow_compute", "task_lifecycle", "tool_error", "protocol_error", "elicitation", "cancel"]


@pytest.fixture
def untasked(tmp_path):
    events = tmp_path / "events.jsonl"
    server = start_untasked_server(events)
    try:
        yield server, events
    finally:
        server.stop()


def text(value: str) -> dict:
    return {"content": [{"type": "text", "text": value}], "isError": False, "resultType": "complete"}


async def test_a_client_away_for_thirty_seconds_gets_the_result(untasked, tmp_path):
    server, events = untasked
    async with held_proxy(backend("http", server.url, events), tmp_path / "state") as proxy:
        async with aiohttp.ClientSession() as http:
            created = await Caller(http, proxy.url).call(
                "tools/call", {"name": "slow_compute", "arguments": {"seconds": 5, "label": "away"}}
            )
            task_id = created.result["taskId"]
        await asyncio.sleep(30)  # the client is gone (its connections closed) for 30 s: the scenario itself
        async with aiohttp.ClientSession() as http:
            final = await Caller(http, proxy.url).poll(task_id, timeout=5)
    assert (final["status"], final["result"]) == ("completed", text("computed away"))


@contextlib.asynccontextmanager
async def _held_call_on_a_proxy_process(tmp_path, upstream: str, seconds: float, label: str, *, settings: str = ""):
    """`serve` as a process of its own (SQLite in its state directory; `settings`: TOML lines put
    first in its config) with a held `slow_compute` of `seconds` on it: (the process, a caller,
    the call's answer). The process is stopped at the end."""
    proxy = ProxyProcess(tmp_path, upstream)
    proxy.config.write_text(settings + proxy.config.read_text())
    await proxy.start()
    try:
        async with aiohttp.ClientSession() as http:
            caller = Caller(http, proxy.url)
            created = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": seconds, "label": label}})
            yield proxy, caller, created
    finally:
        await proxy.stop()


async def test_kill_9_mid_call_leaves_the_task_failed_interrupted_after_the_restart(untasked, tmp_path):
    server, _ = untasked
    # hold_after_ms at its default (1000)
    async with _held_call_on_a_proxy_process(tmp_path, server.url, 60, "killed") as (proxy, caller, created):
        task_id = created.result["taskId"]
        assert (await caller.call("tasks/get", {"taskId": task_id})).result["status"] == "working"
        await proxy.kill()
        await proxy.start()
        after = (await caller.call("tasks/get", {"taskId": task_id})).result
        again = (await caller.call("tasks/get", {"taskId": task_id})).result
    assert (after["status"], after["error"]) == ("failed", {"code": -32603, "message": INTERRUPTED})
    assert again == after
    assert "may have run" in INTERRUPTED
    assert "held task: slow_compute on main promoted to a task after 1000 ms" in proxy.log.read_text()


async def test_sigterm_mid_call_lets_the_held_call_end_and_the_restarted_proxy_answers_its_result(untasked, tmp_path):
    """A graceful stop waits (within `shutdown_timeout_ms`) for a held call to end and write its
    result, rather than leaving it "interrupted, may have run" (docs/behaviour.md §9)."""
    server, _ = untasked
    # shutdown_timeout_ms at its default (30000)
    async with _held_call_on_a_proxy_process(tmp_path, server.url, 3, "drained") as (proxy, caller, created):
        task_id = created.result["taskId"]
        assert created.result["status"] == "working"
        await proxy.stop()
        assert proxy.process is not None and proxy.process.returncode == 0
        await proxy.start()
        after = (await caller.call("tasks/get", {"taskId": task_id})).result
    assert (after["status"], after["result"]) == ("completed", text("computed drained"))
    log = proxy.log.read_text()
    assert "stopping: waiting up to " in log and " ms for 1 held call(s) to end" in log
    assert "stopping: 1 held call(s) ended\n" in log


async def test_a_held_call_longer_than_the_stop_allows_is_left_interrupted(untasked, tmp_path):
    server, _ = untasked
    shorter = "shutdown_timeout_ms = 500\n"
    async with _held_call_on_a_proxy_process(tmp_path, server.url, 60, "long", settings=shorter) as (proxy, caller, created):
        await proxy.stop()
        assert proxy.process is not None and proxy.process.returncode == 0
        await proxy.start()
        after = (await caller.call("tasks/get", {"taskId": created.result["taskId"]})).result
    assert (after["status"], after["error"]) == ("failed", {"code": -32603, "message": INTERRUPTED})
    assert "stopping: 0 held call(s) ended, 1 still running left interrupted" in proxy.log.read_text()


@pytest.fixture
async def replicas(untasked, redis_url, tmp_path):
    server, events = untasked
    table = backend("http", server.url, events)
    async with (
        held_proxy(table, tmp_path / "a", store=redis_url) as a,
        held_proxy(table, tmp_path / "b", store=redis_url) as b,
    ):
        yield a, b, events


async def test_two_replicas_asked_alternately_serve_one_held_task(replicas):
    a, b, events = replicas
    async with aiohttp.ClientSession() as http:
        on_a, on_b = Caller(http, a.url), Caller(http, b.url)
        created = await on_a.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "r.txt", "delay": 1.0}})
        task_id = created.result["taskId"]
        asking = await on_b.poll(task_id, until=("input_required",))  # B reads what A holds from the store
        [key] = asking["inputRequests"]
        update = {"taskId": task_id, "inputResponses": {key: {"action": "accept", "content": {"confirm": True}}}}
        assert (await on_b.call("tasks/update", update)).result == {"resultType": "complete"}  # handed to A
        final = await on_a.poll(task_id)
        assert (final["status"], final["result"]) == ("completed", text("deleted r.txt"))
        assert (await on_b.call("tasks/get", {"taskId": task_id})).result == final

        slow = await on_a.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "via-b"}})
        slow_id = slow.result["taskId"]
        assert (await on_b.call("tasks/cancel", {"taskId": slow_id})).result == {"resultType": "complete"}
        await wait_for_event(events, {"event": "cancelled", "tool": "slow_compute", "label": "via-b"})
        assert (await on_a.poll(slow_id))["status"] == "cancelled"
        assert (await on_b.poll(slow_id))["status"] == "cancelled"
        await asyncio.sleep(3 * PROBE_INTERVAL_MS / 1000)  # both replicas probe meanwhile; nothing changes
        assert (await on_b.call("tasks/get", {"taskId": task_id})).result == final


async def test_fastmcp4_client_through_two_replicas_in_round_robin(replicas):
    a, b, events = replicas
    nginx = await asyncio.to_thread(start_nginx, a.url, more=[b.url])
    try:
        code, out, err = await run_script(ensure_peer_env("fastmcp4"), _checks_script(), nginx.url, 420)
    finally:
        await asyncio.to_thread(nginx.stop)
    lines = {line["check"]: line["ok"] for line in map(json.loads, filter(str.strip, out.splitlines())) if "check" in line}
    assert {name: lines.get(name) for name in FASTMCP4_CHECKS} == dict.fromkeys(FASTMCP4_CHECKS, True), (lines, err[-3000:])
    await wait_for_event(events, {"event": "cancelled", "tool": "slow_compute", "label": "cancel"})


def _checks_script():
    return PEERS / "fastmcp4_client_checks.py"


MCP1_CHECKS = ["create_task_shape", "get_is_flat", "result_related_meta", "cancel", "list_tasks", "elicitation_in_task"]


async def test_mcp1_client_through_two_replicas_in_round_robin(replicas):
    """The relayed v1 session's requests alternate between the replicas: a question of a call the
    other replica holds is shown from the record, and its answer is handed to the holder."""
    a, b, events = replicas
    nginx = await asyncio.to_thread(start_nginx, a.url, more=[b.url])
    script = PEERS / "mcp1_client_checks.py"
    try:
        argv = [str(ensure_peer_env("mcp-v1")), str(script), "--url", nginx.url]
        for name in MCP1_CHECKS:
            argv += ["--check", name]
        process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 400)
    finally:
        await asyncio.to_thread(nginx.stop)
    lines = {line["check"]: line for line in map(json.loads, out.decode().splitlines()) if "check" in line}
    assert {name: line["ok"] for name, line in lines.items()} == dict.fromkeys(MCP1_CHECKS, True), (lines, err.decode()[-2000:])
    await wait_for_event(events, {"event": "cancelled", "tool": "slow_compute", "label": "cancel"})
    async with aiohttp.ClientSession() as http:
        for replica in (a, b):  # round robin: both replicas served the sessions' requests
            async with http.get(replica.base_url + "/status.json") as response:
                [main] = (await response.json())["backends"]
            assert main["requests_last_hour"] > 10, main


async def test_a_replica_killed_mid_call_leaves_the_task_failed_interrupted_for_the_other(untasked, redis_url, tmp_path):
    """With Redis the holder's heartbeat decides: once the killed replica's has expired, the other
    replica reads its held task as interrupted."""
    from fleet.test_replica_killed import _spawn
    from support import TEST_KEY, free_port

    from proxy.keys import encode_key

    server, events = untasked
    port = free_port()
    killed = await _spawn(server.url, port, redis_url, encode_key(TEST_KEY), tmp_path / "killed")
    try:
        async with held_proxy(backend("http", server.url, events), tmp_path / "other", store=redis_url) as other:
            async with aiohttp.ClientSession() as http:
                on_killed, on_other = Caller(http, f"http://127.0.0.1:{port}/mcp"), Caller(http, other.url)
                created = await on_killed.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "k"}})
                task_id = created.result["taskId"]
                assert (await on_other.call("tasks/get", {"taskId": task_id})).result["status"] == "working"
                killed.kill()
                await killed.wait()
                final = await on_other.poll(task_id, timeout=20)  # working until the heartbeat key expires (5 s)
    finally:
        if killed.returncode is None:
            killed.kill()
            await killed.wait()
    assert (final["status"], final["error"]) == ("failed", {"code": -32603, "message": INTERRUPTED})
