"""One of two replicas on Redis behind nginx in round robin is killed with SIGKILL mid-run, under
continuous v1 and v2 traffic whose tasks ask questions (docs/load-balancing.md "Without affinity"):
no answer is wrong, and the only requests that fail are those in flight at the kill. The backend is
the reference v1 server: `confirm_delete` asks one question inside its task. v2-modern clients
answer it with `tasks/update` (translated); v1 clients on the `tasks/result` stream (relayed)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from session_support import SessionCaller
from support import Caller, free_port

from proxy.bench.targets import start_nginx
from proxy.keys import new_key_text

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 4
"""Clients of each dialect, each running task lifecycles one after another."""
BEFORE_S, AFTER_S = 3.0, 4.0
"""Traffic before the kill and after it."""


@dataclass
class Counts:
    started: int = 0
    finished: int = 0
    unknown: int = 0
    unknown_v1: int = 0
    """Of `unknown`, v1 clients' (relayed: a question sent on a lost `tasks/result` stream is not sent again by mcp 1.30)."""
    wrong: int = 0
    odd: list[str] = field(default_factory=list)
    """What each wrong or unknown task answered last."""
    failed: list[tuple[float, float, str]] = field(default_factory=list)
    """(start, end, what) of each request that failed (monotonic seconds)."""


class Failed(Exception):
    pass


async def _spawn(upstream: str, port: int, redis_url: str, key: str, state: Path) -> asyncio.subprocess.Process:
    env = {**os.environ, "MCP_TASKS_PROXY_KEY": key, "MCP_TASKS_PROXY_STATE_DIR": str(state)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "serve",
        "--upstream",
        upstream,
        "--listen",
        f"127.0.0.1:{port}",
        "--store",
        redis_url,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await asyncio.wait_for(process.stdout.readline(), 30)  # "listening on"
    return process


async def _request(counts: Counts, what: str, send):
    start = time.monotonic()
    try:
        answer = await send
        if getattr(answer, "status", None) in (502, 503, 504) or (
            isinstance(answer, dict) and answer.get("_status") in (502, 503, 504)
        ):
            raise AssertionError("gateway error")  # nginx: the replica went away with the request
        return answer
    except (TimeoutError, aiohttp.ClientError, KeyError, TypeError, ValueError, AssertionError) as exc:
        counts.failed.append((start, time.monotonic(), f"{what}: {type(exc).__name__}"))
        raise Failed from None


async def _v2_lifecycles(url: str, http: aiohttp.ClientSession, counts: Counts, stop: float, n: int) -> None:
    caller = Caller(http, url)
    i = 0
    while time.monotonic() < stop:
        i += 1
        name = f"v2-{n}-{i}.txt"
        try:
            answer = await _request(
                counts, "v2 tools/call", caller.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": name}})
            )
            task_id = answer.result["taskId"]
            counts.started += 1
            deadline = time.monotonic() + 15
            answered = False
            result: dict = {}
            while True:
                if time.monotonic() > deadline:
                    counts.unknown += 1
                    counts.odd.append(f"unknown {name}: {result}")
                    break
                try:  # a request lost with the killed replica is sent again: the next one reaches the other
                    got = await _request(counts, "v2 tasks/get", caller.call("tasks/get", {"taskId": task_id}))
                    result = got.result or {}
                    status = result.get("status")
                    if status == "input_required" and not answered:
                        ack = await _request(
                            counts,
                            "v2 tasks/update",
                            caller.call(
                                "tasks/update",
                                {
                                    "taskId": task_id,
                                    "inputResponses": {
                                        key: {"action": "accept", "content": {"confirm": True}} for key in result["inputRequests"]
                                    },
                                },
                            ),
                        )
                        answered = ack.status == 200
                except Failed:
                    status = None
                if status in ("completed", "failed", "cancelled"):
                    text = (result.get("result") or {}).get("content", [{}])[0].get("text")
                    if text == f"deleted {name}":
                        counts.finished += 1
                    else:
                        counts.wrong += 1
                        counts.odd.append(f"wrong {name}: {result}")
                    break
                await asyncio.sleep(0.1)
        except Failed:
            await asyncio.sleep(0.1)


async def _confirm(message):
    return {"action": "accept", "content": {"confirm": True}}


async def _v1_lifecycles(url: str, http: aiohttp.ClientSession, counts: Counts, stop: float, n: int) -> None:
    i = 0
    while time.monotonic() < stop:
        i += 1
        name = f"v1-{n}-{i}.txt"
        client = SessionCaller(http, url)

        client.on_request = _confirm
        try:
            await _request(counts, "v1 initialize", client.initialize())
            created = await _request(
                counts,
                "v1 tools/call",
                client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": name}, "task": {"ttl": 60000}}),
            )
            task_id = created["result"]["task"]["taskId"]
            counts.started += 1
            final = None
            for _ in range(3):  # a tasks/result stream lost with the killed replica is asked for again
                try:
                    final = await asyncio.wait_for(
                        _request(counts, "v1 tasks/result", client.call("tasks/result", {"taskId": task_id})), 15
                    )
                    break
                except Failed:
                    await asyncio.sleep(0.1)
                except TimeoutError:
                    break  # no answer in 15 s: the task's outcome is unknown (not a failed request)
            if final is None:
                counts.unknown += 1
                counts.unknown_v1 += 1
                counts.odd.append(f"unknown {name}")
                continue
            text = (final.get("result") or {}).get("content", [{}])[0].get("text")
            if text == f"deleted {name}":
                counts.finished += 1
            else:
                counts.wrong += 1
                counts.odd.append(f"wrong {name}: {final}")
        except Failed:
            await asyncio.sleep(0.1)


async def test_a_replica_killed_mid_run_loses_only_its_requests_in_flight(reference_v1_server, redis_url, tmp_path):
    key = new_key_text()
    ports = [free_port(), free_port()]
    a = await _spawn(reference_v1_server.url, ports[0], redis_url, key, tmp_path / "a")
    b = await _spawn(reference_v1_server.url, ports[1], redis_url, key, tmp_path / "b")
    nginx = await asyncio.to_thread(start_nginx, f"http://127.0.0.1:{ports[0]}/mcp", more=[f"http://127.0.0.1:{ports[1]}/mcp"])
    counts = Counts()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            stop = time.monotonic() + BEFORE_S + AFTER_S
            traffic = [asyncio.ensure_future(_v2_lifecycles(nginx.url, http, counts, stop, n)) for n in range(CLIENTS)]
            traffic += [asyncio.ensure_future(_v1_lifecycles(nginx.url, http, counts, stop, n)) for n in range(CLIENTS)]
            await asyncio.sleep(BEFORE_S)
            killed_at = time.monotonic()
            a.send_signal(signal.SIGKILL)
            await a.wait()
            dead_at = time.monotonic()  # the kill is not instant: a request may reach the replica until it died
            await asyncio.wait_for(asyncio.gather(*traffic), 60)
    finally:
        await asyncio.to_thread(nginx.stop)
        for process in (a, b):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            await process.wait()
    print(
        f"\nreplica killed: tasks started {counts.started}, finished {counts.finished}, unknown {counts.unknown} "
        f"(v1 {counts.unknown_v1}), wrong {counts.wrong}; requests failed {len(counts.failed)}: "
        f"{[(round(start - killed_at, 3), round(end - killed_at, 3), what) for start, end, what in counts.failed]}"
    )
    print("\n".join(counts.odd))
    in_flight = [(start, end, what) for start, end, what in counts.failed if start <= dead_at and end >= killed_at]
    assert (counts.wrong, counts.failed) == (0, in_flight)
    assert counts.started == counts.finished + counts.unknown
