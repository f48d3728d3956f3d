"""Held tasks in the benchmark (`mcp-tasks-proxy bench --held`; docs/performance.md "Held tasks").

The fast upstream (v1, `proxy.bench.upstream`) and the proxy in front of it run as processes of
their own; the upstream's `wait(ms)` is a plain call without task support, which the proxy holds
as a task once it has run `hold_after_ms` (docs/behaviour.md §9): the upstream has tasks, so `wait` is
named in the backend's `hold_tools` (decision 151). A 2026-07-28 client declaring
the tasks extension drives it.

0. Fast calls: `calls` plain `wait(0)` calls (answered within `hold_after_ms`, no task) through
   a proxy with `hold_tasks = "off"` and one with `"auto"`: proxy CPU per call and wall time per
   round of `clients` concurrent calls, both ways (what holding adds to a call that is not held).
1. Lifecycle CPU: `clients` clients run `calls` held lifecycles in all (a `wait` of `wait_ms`:
   promoted after `hold_after_ms`, then `tasks/get` every `poll_ms` until `completed` with the
   result inlined). The figure is the proxy's CPU seconds over those calls ÷ calls, and the
   polls a lifecycle took.
2. Memory per held task: `live` held calls are opened (a `wait` of ten minutes, from `clients`
   principals) and left running; the figure is (RSS with them − RSS before) ÷ live. Each held
   call keeps one upstream request (and its connection) open, which is counted in.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from . import targets
from .clients import BenchError, ModernClient

OP_TIMEOUT_S = 60.0


def start_held_proxy(upstream_url: str, workdir: Path, *, hold_after_ms: int, live: int, hold: str = "auto") -> targets.ChildServer:
    """`python -m proxy serve` in front of `upstream_url` with `hold_after_ms` on its backend and
    bounds that leave room for `live` held calls (`hold`: its `hold_tasks`)."""
    from proxy.keys import new_key_text

    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "proxy.toml"
    config.write_text(f'state_dir = "{workdir / "state"}"\nlisten = "127.0.0.1:0"\nmax_held_calls = {live + 100}\n'
                      f'max_held_per_principal = {live + 100}\n[[upstream]]\nname = "main"\nurl = "{upstream_url}"\n'
                      f'hold_after_ms = {hold_after_ms}\nhold_tasks = "{hold}"\nhold_tools = ["wait"]\n')
    argv = [sys.executable, "-m", "proxy", "serve", "--config", str(config)]
    return targets.ChildServer("mcp-tasks-proxy", targets.AnnouncingProcess.start(argv, env={"MCP_TASKS_PROXY_KEY": new_key_text()},
                                                                                   ready_timeout_s=60))


async def _held_lifecycle(client: ModernClient, wait_ms: int, poll_s: float) -> int:
    """One held lifecycle; returns the number of `tasks/get` it took."""
    task, _ = await client.request("tools/call", {"name": "wait", "arguments": {"ms": wait_ms}}, name="wait")
    if task.get("resultType") != "task":
        raise BenchError(f"wait({wait_ms}) was not held: {str(task)[:200]}")
    polls = 0
    while task.get("status") not in ("completed", "failed", "cancelled"):
        await asyncio.sleep(poll_s)
        task, _ = await client.request("tasks/get", {"taskId": task["taskId"]}, name=task["taskId"])
        polls += 1
    if task.get("status") != "completed" or (task.get("result") or {}).get("content") != [{"type": "text", "text": "waited"}]:
        raise BenchError(f"held task ended {task.get('status')!r}: {str(task)[:200]}")
    return polls


async def _plain(client: ModernClient) -> None:
    result, _ = await client.request("tools/call", {"name": "wait", "arguments": {"ms": 0}}, name="wait")
    if result.get("resultType") != "complete":
        raise BenchError(f"wait(0) was held or failed: {str(result)[:200]}")


async def _sync_only(proxy: targets.ChildServer, *, calls: int, clients: int, out: dict[str, Any], prefix: str) -> None:
    """`calls` plain `wait(0)` calls from `clients` clients: proxy CPU and wall time per call."""
    sessions = [aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=OP_TIMEOUT_S)) for _ in range(clients)]
    callers = [ModernClient(http, proxy.url, authorization=f"Bearer bench-held-{i}") for i, http in enumerate(sessions)]
    try:
        for caller in callers:
            await _plain(caller)
        per_client = max(1, calls // clients)
        started, wall = proxy.cpu(), time.monotonic()
        for _ in range(per_client):
            await asyncio.gather(*(_plain(c) for c in callers))
        done = per_client * clients
        out[prefix + "cpu_ms_per_call"] = (proxy.cpu() - started) * 1000 / done
        out[prefix + "wall_ms_per_round"] = (time.monotonic() - wall) * 1000 / per_client
    finally:
        for http in sessions:
            await http.close()


async def _phases(proxy: targets.ChildServer, *, calls: int, clients: int, live: int, hold_after_ms: int, wait_ms: int,
                  poll_ms: int, out: dict[str, Any], log: Callable[[str], None]) -> None:
    sessions = [aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=OP_TIMEOUT_S)) for _ in range(clients)]
    callers = [ModernClient(http, proxy.url, authorization=f"Bearer bench-held-{i}") for i, http in enumerate(sessions)]
    try:
        for caller in callers:  # warm up: upstream sessions, code paths
            await _plain(caller)
            await _held_lifecycle(caller, wait_ms, poll_ms / 1000)
        per_client = max(1, calls // clients)
        out["sync_calls"] = per_client * clients
        started, wall = proxy.cpu(), time.monotonic()
        polls = 0
        for _ in range(per_client):
            polls += sum(await asyncio.gather(*(_held_lifecycle(c, wait_ms, poll_ms / 1000) for c in callers)))
        out["held_calls"] = per_client * clients
        out["held_cpu_ms_per_call"] = (proxy.cpu() - started) * 1000 / out["held_calls"]
        out["polls_per_call"] = polls / out["held_calls"]
        out["held_wall_s"] = time.monotonic() - wall
        log(f"held lifecycles: {out['held_calls']}, {out['held_cpu_ms_per_call']:.2f} ms CPU each")
        if live <= 0:
            return
        await asyncio.sleep(0.5)
        before = proxy.rss()
        per_principal = max(1, live // clients)

        async def open_many(caller: ModernClient) -> None:
            for _ in range(per_principal):
                task, _ = await caller.request("tools/call", {"name": "wait", "arguments": {"ms": 600_000}}, name="wait")
                if task.get("resultType") != "task":
                    raise BenchError(f"a long wait was not held: {str(task)[:200]}")

        await asyncio.gather(*(open_many(c) for c in callers))
        await asyncio.sleep(1.0)
        out["live_held"] = per_principal * clients
        out["rss_before"] = before
        out["rss_with_held"] = proxy.rss()
        out["bytes_per_held_task"] = (out["rss_with_held"] - before) / out["live_held"]
        log(f"held tasks open: {out['live_held']}, {out['bytes_per_held_task'] / 1024:.1f} KiB each")
    finally:
        for http in sessions:
            await http.close()


def run_held(*, calls: int = 200, clients: int = 10, live: int = 1000, hold_after_ms: int = 200, wait_ms: int = 400,
             poll_ms: int = 100, log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Both phases against one proxy; returns the figures (ms, bytes, counts, seconds)."""
    out: dict[str, Any] = {"hold_after_ms": hold_after_ms, "wait_ms": wait_ms, "poll_ms": poll_ms, "clients": clients}
    workdir = Path(tempfile.mkdtemp(prefix="mcp-tasks-proxy-bench-held-"))
    upstream = targets.start_fast_upstream("v1")
    proxy: targets.ChildServer | None = None
    started = time.monotonic()
    try:
        unheld = start_held_proxy(upstream.url, workdir / "off", hold_after_ms=hold_after_ms, live=live, hold="off")
        try:
            asyncio.run(_sync_only(unheld, calls=calls, clients=clients, out=out, prefix="sync_off_"))
        finally:
            unheld.stop()
        proxy = start_held_proxy(upstream.url, workdir / "auto", hold_after_ms=hold_after_ms, live=live)
        asyncio.run(_sync_only(proxy, calls=calls, clients=clients, out=out, prefix="sync_"))
        asyncio.run(_phases(proxy, calls=calls, clients=clients, live=live, hold_after_ms=hold_after_ms, wait_ms=wait_ms,
                            poll_ms=poll_ms, out=out, log=log))
    finally:
        if proxy is not None:
            proxy.stop()
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    out["elapsed_s"] = time.monotonic() - started
    return out


def format_held(held: dict[str, Any]) -> str:
    """The held-task row of the report."""
    lines = ["Held tasks (a plain upstream call held as a task by the proxy, docs/behaviour.md §9):",
             f"  sync call answered within hold_after_ms ({held['hold_after_ms']} ms): "
             f"{held.get('sync_cpu_ms_per_call', float('nan')):.2f} ms proxy CPU per call "
             f"(holding off: {held.get('sync_off_cpu_ms_per_call', float('nan')):.2f}); "
             f"{held.get('sync_wall_ms_per_round', float('nan')):.2f} ms per round of {held['clients']} concurrent calls "
             f"(off: {held.get('sync_off_wall_ms_per_round', float('nan')):.2f})",
             f"  held lifecycle (wait {held['wait_ms']} ms, polled every {held['poll_ms']} ms, "
             f"{held.get('polls_per_call', float('nan')):.1f} polls): {held.get('held_cpu_ms_per_call', float('nan')):.2f} ms "
             "proxy CPU per call"]
    if "bytes_per_held_task" in held:
        lines.append(f"  memory: {held['live_held']} held calls open, {held['bytes_per_held_task'] / 1024:.1f} KiB RSS per held task")
    return "\n".join(lines)
