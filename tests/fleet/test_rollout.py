"""The proxy runs the rollout (issue 42; docs/configuration.md "Rollout", docs/decisions.md §174):
a `[rollout]` table that appears by reload moves new work from one backend to another step by
step, judging each step on the tool results clients saw, and completes, or rolls back on its own;
the operator pauses, resumes, promotes or aborts it.

Real peers (`tests/rollout_support.py`): plain FastMCP servers on the official `mcp` 1.30 SDK, one
of them failing every second call; 2026-07-28 clients and official mcp 1.30 client sessions
calling throughout. The proxy runs in this process, its store the SQLite file in its own state
directory (restarts and replicas: `test_rollout_restarts.py`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from rollout_support import (
    COMPLETED_IN_THREE,
    Traffic,
    events,
    lookup_servers,
    rollout_command,
    status,
    until_rollout,
    v1_session,
    weights,
)
from support import Caller, free_port, running_proxy

from proxy.config import load
from proxy.demo.processes import ServerProcess

pytestmark = pytest.mark.peers
ROOT = Path(__file__).resolve().parents[2]

ROLLOUT = {
    "from": "old",
    "to": "new",
    "steps": [20, 50, 100],
    "step_ms": 3000,
    "min_calls": 10,
    "max_tool_error_increase": 0.05,
    "then": "drain",
}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    """[healthy, healthy, failing every second call]."""
    yield from lookup_servers(tmp_path_factory.mktemp("lookup"), [0, 0, 2])


def _fleet(old: ServerProcess, new: ServerProcess) -> list[dict[str, Any]]:
    return [{"name": "old", "url": old.url, "weight": 1}, {"name": "new", "url": new.url, "weight": 0}]


def _settings(tmp_path: Path, upstream: list[dict[str, Any]], rollout: dict[str, Any] | None) -> Any:
    return load(
        None,
        {
            "listen": "127.0.0.1:0",
            "upstream": upstream,
            "state_dir": str(tmp_path),
            "probe_interval_ms": 300,
            **({"rollout": rollout} if rollout is not None else {}),
        },
    )


async def _tool_calls(http: aiohttp.ClientSession, base_url: str) -> dict[str, int]:
    """`lookup` calls counted per backend on the status page (the last hour)."""
    tools = (await status(http, base_url))["tools"]
    return {row["backend"]: row["calls"] for entry in tools if entry["tool"] == "lookup" for row in entry["backends"]}


async def test_a_healthy_new_backend_is_rolled_out_step_by_step_and_the_old_one_drained(servers, tmp_path):
    old, new, _bad = servers
    upstream = _fleet(old, new)
    async with (
        running_proxy(old.url, tmp_path, upstream=upstream, probe_interval_ms=300) as running,
        aiohttp.ClientSession() as http,
    ):
        await asyncio.sleep(1.0)  # several probe intervals before the rollout appears
        traffic = Traffic(http, [running.url], modern=3, sessions=1)
        begun = time.monotonic()
        changes = await running.reload(_settings(tmp_path, upstream, ROLLOUT))
        assert changes == ["rollout old -> new set"]
        at_fifty = await until_rollout(http, running.base_url, ("running",), 20, step=1)
        assert weights(at_fifty) == {"old": (0.5, None), "new": (0.5, None)}
        done = await until_rollout(http, running.base_url, ("completed", "rolled_back"), 40)
        took = time.monotonic() - begun
        tally = await traffic.stop()
        rollout = done["rollout"]
        assert rollout["state"] == "completed", rollout
        assert took < 40, took
        assert events(done) == COMPLETED_IN_THREE
        assert [gate["gate"] for gate in rollout["history"][1]["figures"]["gates"]] == ["tool errors", "errors"]
        assert rollout["decides_here"] is True
        assert (
            tally.wrong == [] and tally.lost == [] and tally.tool_errors == 0 and tally.right == tally.calls and tally.calls > 60
        ), tally
        # All new work on the new backend; the old one drained once its last session ended.
        final = await status(http, running.base_url)
        assert weights(final)["new"] == (1.0, None)
        assert weights(final)["old"][0] == 0.0 and weights(final)["old"][1] in ("draining", "drained")
        before = await _tool_calls(http, running.base_url)
        lines = await v1_session(running.url, ["after-0", "after-1"])
        assert lines == [{"texts": ["value of after-0"], "isError": False}, {"texts": ["value of after-1"], "isError": False}]
        after = await _tool_calls(http, running.base_url)
        assert (after["old"] - before["old"], after["new"] - before["new"]) == (0, 2)
        assert weights(await status(http, running.base_url))["old"] == (0.0, "drained")


async def test_a_new_backend_that_fails_every_second_call_is_rolled_back_and_every_later_call_lands_on_the_old(servers, tmp_path):
    old, _new, bad = servers
    upstream = _fleet(old, bad)
    async with (
        running_proxy(old.url, tmp_path, upstream=upstream, probe_interval_ms=300) as running,
        aiohttp.ClientSession() as http,
    ):
        await asyncio.sleep(1.0)
        traffic = Traffic(http, [running.url], modern=3, sessions=1)
        begun = time.monotonic()
        await running.reload(_settings(tmp_path, upstream, ROLLOUT))
        done = await until_rollout(http, running.base_url, ("completed", "rolled_back"), 25)
        took = time.monotonic() - begun
        tally = await traffic.stop()
        rollout = done["rollout"]
        assert rollout["state"] == "rolled_back" and took < 25, (took, rollout)
        assert [(e["event"], e["percent"], e["state"]) for e in rollout["history"]] == [
            ("started", 20, "running"),
            ("failed", 20, "running"),
            ("failed", 20, "rolled_back"),
        ]
        failed = rollout["history"][-1]
        assert failed["reason"].startswith("check 2 of 2: tool errors "), failed["reason"]
        gate = failed["figures"]["gates"][0]
        assert gate["gate"] == "tool errors" and gate["from"] == 0.0 and gate["to"] >= 0.4 and gate["z"] > 2.326, gate
        assert weights(done) == {"old": (1.0, None), "new": (0.0, None)}
        assert tally.wrong == [] and tally.lost == [] and tally.calls > 30, tally
        assert tally.tool_errors < tally.calls / 4, tally
        # Every later call lands on the old backend, and is right.
        before = await _tool_calls(http, running.base_url)
        caller = Caller(http, running.url)
        for index in range(12):
            answer = await caller.call("tools/call", {"name": "lookup", "arguments": {"key": f"later-{index}"}})
            assert answer.result == {
                "content": [{"type": "text", "text": f"value of later-{index}"}],
                "isError": False,
                "resultType": "complete",
                "structuredContent": {"result": f"value of later-{index}"},
            }
        lines = await v1_session(running.url, ["later-v1"])
        assert lines == [{"texts": ["value of later-v1"], "isError": False}]
        after = await _tool_calls(http, running.base_url)
        assert (after["old"] - before["old"], after["new"] - before["new"]) == (13, 0)


async def _shows_completed(http: aiohttp.ClientSession, url: str) -> None:
    """The page, `mcp-tasks-proxy status` and `/metrics` show a completed rollout old -> new."""
    async with http.get(url + "/status") as response:
        page = await response.text()
    assert (
        '<div class="verdict clear" id="rollout-state">Rollout old → new: completed, step 3 of 3 (100 % of new work on new; '
        "steps 20 %, 50 %, 100 %).</div>"
    ) in page
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "status", url, cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate()
    assert "Rollout old -> new: completed, step 3 of 3 (100 % of new work on new)" in out.decode().splitlines()
    async with http.get(url + "/metrics") as response:
        metrics = (await response.text()).splitlines()
    assert [line for line in metrics if line.startswith("mcp_tasks_proxy_rollout_")] == [
        'mcp_tasks_proxy_rollout_state{state="running"} 0.0',
        'mcp_tasks_proxy_rollout_state{state="paused"} 0.0',
        'mcp_tasks_proxy_rollout_state{state="completed"} 1.0',
        'mcp_tasks_proxy_rollout_state{state="rolled_back"} 0.0',
        'mcp_tasks_proxy_rollout_percent{from="old",to="new"} 100.0',
    ]


SLOW = {**ROLLOUT, "step_ms": 600_000}
"""The rollout with ten-minute steps: it stays at its first step while a test acts on it."""


@asynccontextmanager
async def _slow_rollout(
    servers: Any, tmp_path: Path
) -> AsyncIterator[tuple[Any, aiohttp.ClientSession, list[dict[str, Any]], dict[str, Any]]]:
    """A proxy in front of old and new whose rollout stays at its first step (10-minute steps):
    yields the running proxy, a client session, the fleet's tables and the rollout's first status."""
    old, new, _bad = servers
    upstream = _fleet(old, new)
    async with running_proxy(old.url, tmp_path, upstream=upstream, rollout=SLOW) as running, aiohttp.ClientSession() as http:
        yield running, http, upstream, await until_rollout(http, running.base_url, ("running",), 10, step=0)


async def test_pause_resume_promote_and_abort_answer_with_the_state_they_left(servers, tmp_path):
    async with _slow_rollout(servers, tmp_path) as (running, http, upstream, first):
        url = running.base_url
        assert weights(first) == {"old": (0.8, None), "new": (0.2, None)}
        code, paused = await rollout_command(url, "pause")
        assert code == 0 and (paused["state"], paused["done"], paused["step"]) == ("paused", "paused", 0), paused
        assert weights(await status(http, url)) == {"old": (0.8, None), "new": (0.2, None)}
        code, again = await rollout_command(url, "pause")
        assert code == 0 and (again["state"], again["done"]) == ("paused", "nothing to pause: the rollout is paused"), again
        code, resumed = await rollout_command(url, "resume")
        assert code == 0 and (resumed["state"], resumed["done"]) == ("running", "resumed"), resumed
        assert resumed["step_started_ms"] > paused["step_started_ms"]
        code, promoted = await rollout_command(url, "promote")
        assert code == 0 and (promoted["state"], promoted["done"], promoted["percent"]) == ("completed", "promoted", 100), (
            promoted
        )
        assert weights(await status(http, url))["new"] == (1.0, None)
        await _shows_completed(http, url)
        code, late = await rollout_command(url, "abort")
        assert code == 0 and (late["state"], late["done"]) == ("completed", "nothing to abort: the rollout is completed"), late
        # Another table is another rollout; abort sends all new work back to the old backend.
        await running.reload(_settings(tmp_path, upstream, {**SLOW, "steps": [50, 100]}))
        second = await until_rollout(http, url, ("running",), 10, step=0)
        assert weights(second) == {"old": (0.5, None), "new": (0.5, None)}
        code, aborted = await rollout_command(url, "abort")
        assert code == 0 and (aborted["state"], aborted["done"]) == ("rolled_back", "aborted"), aborted
        assert weights(await status(http, url)) == {"old": (1.0, None), "new": (0.0, None)}
        assert [e["event"] for e in aborted["history"]] == ["started", "aborted"]
        code, shown = await rollout_command(url, "status")
        assert code == 0 and (shown["state"], shown["done"]) == ("rolled_back", "status"), shown
        # The table removed: the configured weights stand, and there is no rollout to act on.
        await running.reload(_settings(tmp_path, upstream, None))
        assert weights(await status(http, url)) == {"old": (1, None), "new": (0, None)}
        code, none = await rollout_command(url, "pause")
        assert (code, none) == (1, "mcp-tasks-proxy rollout pause: no rollout is configured (add a [rollout] table and reload)\n")


async def test_a_rollout_gated_on_shadow_comparisons_completes_and_its_candidate_becomes_a_plain_backend_by_reload(
    servers, tmp_path
):
    old, new, _bad = servers
    candidate = {"name": "new", "url": new.url, "shadow_of": "old", "shadow_tools": ["lookup"]}
    upstream = [{"name": "old", "url": old.url, "weight": 1}, candidate]
    gated = {**ROLLOUT, "min_shadow_match": 0.99}
    async with (
        running_proxy(old.url, tmp_path, upstream=upstream, probe_interval_ms=300) as running,
        aiohttp.ClientSession() as http,
    ):
        traffic = Traffic(http, [running.url], modern=3, sessions=0)
        await running.reload(_settings(tmp_path, upstream, gated))
        done = await until_rollout(http, running.base_url, ("completed", "rolled_back"), 40)
        tally = await traffic.stop()
        rollout = done["rollout"]
        assert [(e["event"], e["percent"]) for e in rollout["history"]] == [
            ("started", 20),
            ("passed", 20),
            ("passed", 50),
            ("passed", 100),
        ]
        shadow_gates = [gate for e in rollout["history"][1:] for gate in e["figures"]["gates"] if gate["gate"] == "shadow match"]
        assert len(shadow_gates) == 3 and shadow_gates[0]["to"] == 1.0 and shadow_gates[0]["compared"] > 0, shadow_gates
        assert tally.wrong == [] and tally.lost == [] and tally.tool_errors == 0, tally
        # The end written into the file: the candidate serves with its own weight, the old backend drains.
        final = [{"name": "old", "url": old.url, "weight": 1, "drain": True}, {"name": "new", "url": new.url, "weight": 1}]
        changes = await running.reload(_settings(tmp_path, final, None))
        assert changes == ["backend old: weight 1 -> 1, drain true", "backend new: weight 0 -> 1", "rollout removed"]
        assert weights(await status(http, running.base_url)) == {"old": (1, "drained"), "new": (1, None)}
        assert (await status(http, running.base_url))["shadow"] == []


async def test_a_new_backend_that_cannot_be_reached_fails_its_checks_and_is_rolled_back(servers, tmp_path):
    """A backend that refuses connections answers nothing (the fleet gives its share to the others),
    so no count would judge it: each check fails naming why, and the rollout rolls back."""
    old, _new, _bad = servers
    closed = f"http://127.0.0.1:{free_port()}/mcp"
    upstream = [{"name": "old", "url": old.url, "weight": 1}, {"name": "new", "url": closed, "weight": 0}]
    async with (
        running_proxy(old.url, tmp_path, upstream=upstream, probe_interval_ms=300) as running,
        aiohttp.ClientSession() as http,
    ):
        traffic = Traffic(http, [running.url], modern=2, sessions=0)
        await running.reload(_settings(tmp_path, upstream, {**ROLLOUT, "step_ms": 1000}))
        done = await until_rollout(http, running.base_url, ("completed", "rolled_back"), 25)
        tally = await traffic.stop()
        rollout = done["rollout"]
        assert [(e["event"], e["state"]) for e in rollout["history"]] == [
            ("started", "running"),
            ("failed", "running"),
            ("failed", "rolled_back"),
        ]
        assert rollout["history"][-1]["reason"].startswith("check 2 of 2: new cannot be reached ("), rollout["history"][-1][
            "reason"
        ]
        assert (rollout["percent"], weights(done)) == (0.0, {"old": (1.0, None), "new": (0.0, None)})
        assert tally.wrong == [] and tally.lost == [] and tally.tool_errors == 0 and tally.right == tally.calls > 0, tally


async def test_a_table_removed_and_added_again_is_a_new_rollout_and_rollout_takes_get_and_post_only(servers, tmp_path):
    async with _slow_rollout(servers, tmp_path) as (running, http, upstream, _first):
        url = running.base_url
        code, aborted = await rollout_command(url, "abort")
        assert (code, aborted["state"]) == (0, "rolled_back")
        assert await running.reload(_settings(tmp_path, upstream, None)) == ["rollout removed"]
        assert await running.reload(_settings(tmp_path, upstream, SLOW)) == ["rollout old -> new set"]
        again = await until_rollout(http, url, ("running",), 10, step=0)
        assert [e["event"] for e in again["rollout"]["history"]] == ["started"]
        assert weights(again) == {"old": (0.8, None), "new": (0.2, None)}
        for method in ("PUT", "DELETE", "PATCH"):
            async with http.request(method, url + "/rollout") as response:
                assert response.status == 405, method
        # A body in two writes is read whole.
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        body = b'{"action": "pause"}'
        writer.write(
            b"POST /rollout HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (len(body), body[:9])
        )
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(body[9:])
        answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["state"] == "paused"
