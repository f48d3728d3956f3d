"""Proxy memory with many live tasks, and after many completed ones (`mcp-tasks-proxy bench --memory`).

A fast upstream (v1) and the proxy in front of it (`v1_session_scope = "principal"`, the default)
run as processes of their own; the proxy's RSS is read from `/proc/<pid>/status`.

1. Live tasks: `clients` v2 clients, each with its own `Authorization` (so its own principal and
   upstream session) on one keep-alive connection, first run a few task lifecycles (the baseline
   RSS is read after that), then create `live_tasks` tasks in all that stay `working`, then poll
   each of them with `tasks/get`, aiming at once a second, for `poll_s` seconds. The figure is
   (highest RSS while polling − baseline) ÷ live tasks. The polling rate reached is reported: on 2
   shared cores it is below 10,000 a second.
2. Completed tasks: then `completed` tasks of the no-work tool (created, then `tasks/get` at once,
   which shows it completed with the result inlined) from 20 clients; RSS is read every tenth. "Flat" means
   the second half grew the RSS by at most 2 MiB or 3 %, whichever is more.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from . import targets
from .clients import ModernClient

COMPLETING_CLIENTS = 20
OP_TIMEOUT_S = 30.0


def _sessions(count: int) -> list[aiohttp.ClientSession]:
    return [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), timeout=aiohttp.ClientTimeout(total=OP_TIMEOUT_S))
            for _ in range(count)]


async def _live_phase(proxy: targets.Measured, url: str, *, live_tasks: int, clients: int, poll_s: float,
                      out: dict[str, Any], log: Callable[[str], None]) -> None:
    sessions = _sessions(clients)
    callers = [ModernClient(http, url, authorization=f"Bearer bench-client-{i}") for i, http in enumerate(sessions)]
    try:
        for _ in range(3):
            await asyncio.gather(*(_complete_one(c) for c in callers))
        await asyncio.sleep(0.5)
        out["baseline_rss"] = proxy.rss()
        per_client = max(1, live_tasks // clients)
        # Long enough to stay working through creation and polling, bounded by the ttl the upstream keeps.
        seconds = 3600.0
        ids: list[list[str]] = [[] for _ in callers]
        started = time.monotonic()
        errors = 0

        async def create(i: int) -> None:
            nonlocal errors
            for _ in range(per_client):
                try:
                    ids[i].append(await asyncio.wait_for(callers[i].create_sleeping(seconds), OP_TIMEOUT_S))
                except Exception:  # noqa: BLE001 - counted
                    errors += 1

        log(f"memory: creating {per_client * clients:,} live tasks from {clients} clients")
        await asyncio.gather(*(create(i) for i in range(len(callers))))
        out["live_tasks"] = sum(len(x) for x in ids)
        out["create_s"] = time.monotonic() - started
        out["create_errors"] = errors
        polls = poll_errors = 0
        peak = proxy.rss()
        until = time.monotonic() + poll_s

        async def poll(i: int) -> None:
            nonlocal polls, poll_errors
            while time.monotonic() < until:
                cycle = time.monotonic()
                for task_id in ids[i]:
                    if time.monotonic() >= until:
                        return
                    try:
                        status = await asyncio.wait_for(callers[i].get_task(task_id), OP_TIMEOUT_S)
                        polls += 1
                        if status != "working":
                            poll_errors += 1
                    except Exception:  # noqa: BLE001 - counted
                        poll_errors += 1
                rest = 1.0 - (time.monotonic() - cycle)
                if rest > 0:
                    await asyncio.sleep(min(rest, max(0.0, until - time.monotonic())))

        async def sample() -> None:
            nonlocal peak
            while time.monotonic() < until:
                await asyncio.sleep(1.0)
                peak = max(peak, proxy.rss())

        log(f"memory: polling them for {poll_s:g} s")
        poll_started = time.monotonic()
        await asyncio.gather(sample(), *(poll(i) for i in range(len(callers))))
        out["poll_s"] = time.monotonic() - poll_started
        out["live_rss"] = max(peak, proxy.rss())
        out["polls"] = polls
        out["poll_errors"] = poll_errors
        out["poll_rate"] = polls / out["poll_s"] if out["poll_s"] else 0.0
        if out["live_tasks"]:
            out["per_live_task_bytes"] = (out["live_rss"] - out["baseline_rss"]) / out["live_tasks"]
    finally:
        await asyncio.gather(*(http.close() for http in sessions), return_exceptions=True)


async def _complete_one(caller: ModernClient) -> None:
    """One no-work task created and read back completed, without waiting its poll interval."""
    task, _ = await caller.request("tools/call", {"name": "nowork", "arguments": {}}, name="nowork")
    task_id = task["taskId"]
    for _ in range(100):
        task, _ = await caller.request("tasks/get", {"taskId": task_id}, name=task_id)
        if task.get("status") == "completed" and task.get("result"):
            return
        await asyncio.sleep(0.01)
    raise RuntimeError(f"task still {task.get('status')}")


async def _completed_phase(proxy: targets.Measured, url: str, *, completed: int, out: dict[str, Any],
                           log: Callable[[str], None]) -> None:
    sessions = _sessions(COMPLETING_CLIENTS)
    callers = [ModernClient(http, url, authorization=f"Bearer bench-client-{i}") for i, http in enumerate(sessions)]
    done = errors = 0
    step = max(1, completed // 10)
    checkpoints: list[tuple[int, int]] = []
    next_mark = step
    started = time.monotonic()

    issued = 0

    async def worker(caller: ModernClient) -> None:
        nonlocal done, errors, next_mark, issued
        while issued < completed:
            issued += 1
            try:
                await asyncio.wait_for(_complete_one(caller), OP_TIMEOUT_S)
                done += 1
            except Exception:  # noqa: BLE001 - counted
                errors += 1
            if done >= next_mark:
                next_mark += step
                checkpoints.append((done, proxy.rss()))
                log(f"memory: {done:,} tasks completed, proxy RSS {checkpoints[-1][1] / 1024 / 1024:.1f} MiB")

    try:
        log(f"memory: completing {completed:,} tasks")
        await asyncio.gather(*(worker(c) for c in callers))
    finally:
        await asyncio.gather(*(http.close() for http in sessions), return_exceptions=True)
    out["completed_tasks"] = done
    out["completed_errors"] = errors
    out["completed_s"] = time.monotonic() - started
    out["completed_checkpoints"] = checkpoints
    if len(checkpoints) >= 2:
        half = min(checkpoints, key=lambda c: abs(c[0] - done / 2))
        growth = checkpoints[-1][1] - half[1]
        out["completed_growth_bytes"] = growth
        out["completed_flat"] = growth <= max(2 * 1024 * 1024, 0.03 * half[1])


def run_memory(*, live_tasks: int = 10_000, clients: int = 100, completed: int = 100_000, poll_s: float = 15.0,
               log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Both phases against one proxy; returns the figures (bytes, counts, seconds)."""
    out: dict[str, Any] = {"live_tasks": 0, "completed_tasks": 0}
    workdir = Path(tempfile.mkdtemp(prefix="mcp-tasks-proxy-bench-memory-"))
    upstream = targets.start_fast_upstream("v1", poll_interval_ms=1000)
    proxy: targets.ChildServer | None = None
    started = time.monotonic()
    try:
        proxy = targets.start_proxy(upstream.url, workdir, v1_session_scope="principal")

        async def both() -> None:
            assert proxy is not None
            if live_tasks > 0:
                await _live_phase(proxy, proxy.url, live_tasks=live_tasks, clients=clients, poll_s=poll_s, out=out, log=log)
            if completed > 0:
                await _completed_phase(proxy, proxy.url, completed=completed, out=out, log=log)

        asyncio.run(both())
    finally:
        if proxy is not None:
            proxy.stop()
        upstream.stop()
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    out["elapsed_s"] = time.monotonic() - started
    return out
