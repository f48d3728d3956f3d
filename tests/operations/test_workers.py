"""`serve --workers N`: N processes on one port (SO_REUSEPORT) sharing a Redis store; refused
without a shared store (docs/decisions.md §52)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
from support import Caller, eventually, free_port, shadow_row

from proxy.keys import new_key_text

ROOT = Path(__file__).resolve().parents[2]


async def _spawn(*args: str, tmp_path: Path) -> asyncio.subprocess.Process:
    env = {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text(), "MCP_TASKS_PROXY_STATE_DIR": str(tmp_path / "state")}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", *args, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def _two_workers(upstream: str, port: int, redis_url: str, tmp_path: Path) -> asyncio.subprocess.Process:
    """`serve --workers 2` on 127.0.0.1:`port` in front of `upstream`, sharing `redis_url`."""
    return await _spawn(
        "serve",
        "--upstream",
        upstream,
        "--listen",
        f"127.0.0.1:{port}",
        "--workers",
        "2",
        "--store",
        redis_url,
        tmp_path=tmp_path,
    )


async def _both_listening(process: asyncio.subprocess.Process, port: int) -> None:
    """Wait for both workers' banners, naming the port."""
    assert process.stdout is not None
    lines = [(await asyncio.wait_for(process.stdout.readline(), 30)).decode().split(" (")[0] for _ in range(2)]
    assert lines == [f"mcp-tasks-proxy listening on http://127.0.0.1:{port}/mcp"] * 2


async def _stopped(process: asyncio.subprocess.Process) -> int:
    """SIGTERM to the process (by its own PID) unless it has ended; its exit status (asserted by the
    caller after its `finally`, so that a failure before is not masked)."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(process.wait(), 20)


async def test_workers_without_a_shared_store_are_refused(tmp_path):
    process = await _spawn(
        "serve", "--upstream", "http://127.0.0.1:9/mcp", "--listen", "127.0.0.1:0", "--workers", "2", tmp_path=tmp_path
    )
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert (process.returncode, err.decode().strip()) == (
        2,
        (
            'mcp-tasks-proxy: configuration error: workers = 2 needs a store the processes share: store = "redis://host:port/db" '
            "(the SQLite store belongs to one process, and memory to each)"
        ),
    )


async def test_workers_in_front_of_a_stdio_backend_are_refused(tmp_path):
    """A tester's relayed stdio sessions failed on about half their requests under `--workers 2`:
    each worker ran its own process (docs/decisions.md §139)."""
    port = free_port()
    command = f"{sys.executable} -c pass"
    args = ("--upstream-command", command, "--listen", f"127.0.0.1:{port}", "--workers", "2", "--store", "redis://127.0.0.1:9/0")
    process = await _spawn("serve", *args, tmp_path=tmp_path)
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert (process.returncode, out.decode(), err.decode().strip()) == (
        2,
        "",
        "mcp-tasks-proxy: configuration error: workers > 1 cannot serve a stdio backend (main): each worker would run its "
        "own processes, and a session opened on one would be unknown to the others; run one worker",
    )


@pytest.mark.peers
async def test_two_workers_on_redis_share_one_port_and_each_others_tasks(reference_v1_server, redis_url, tmp_path):
    port = free_port()
    process = await _two_workers(reference_v1_server.url, port, redis_url, tmp_path)
    try:
        await _both_listening(process, port)
        url = f"http://127.0.0.1:{port}/mcp"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            caller = Caller(http, url)  # a new connection per request: the kernel spreads them over both workers
            created = [
                (
                    await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.1, "label": f"w{i}"}})
                ).result
                for i in range(6)
            ]
            finals = [await caller.poll(task["taskId"]) for task in created]
        assert [f["result"]["content"][0]["text"] for f in finals] == [f"computed w{i}" for i in range(6)]
    finally:
        stopped = await _stopped(process)
    assert stopped == 0


def _workers_of(supervisor: int) -> list[int]:
    """The PIDs of the supervisor's worker processes (its children, from /proc)."""
    return sorted(int(pid) for pid in Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split())


async def _stderr_line_with(process: asyncio.subprocess.Process, text: str, seen: list[str]) -> str:
    while True:
        line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode()
        assert line, seen
        seen.append(line.rstrip("\n"))
        if text in line:
            return seen[-1]


async def test_a_worker_killed_with_sigkill_is_replaced_and_logged(redis_url, tmp_path):
    """Issue 20 item 14: a worker that died was not replaced (one worker fewer until the restart of all)."""
    port = free_port()
    process = await _two_workers("http://127.0.0.1:9/mcp", port, redis_url, tmp_path)
    try:
        listening = f"mcp-tasks-proxy listening on http://127.0.0.1:{port}/mcp"
        await _both_listening(process, port)
        first = _workers_of(process.pid)
        assert len(first) == 2
        victim = first[0]
        os.kill(victim, signal.SIGKILL)  # a worker of the supervisor this test started
        third = (await asyncio.wait_for(process.stdout.readline(), 30)).decode().split(" (")[0]
        assert third == listening
        logged = await _stderr_line_with(process, "started again as pid", [])
        replaced = [pid for pid in _workers_of(process.pid) if pid not in first]
        assert len(replaced) == 1
        assert logged.endswith(f"worker 1 (pid {victim}) was killed by SIGKILL; started again as pid {replaced[0]}")
        assert _workers_of(process.pid) == sorted([first[1], replaced[0]])
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            for _ in range(4):  # a new connection each: both workers answer
                async with http.get(f"http://127.0.0.1:{port}/healthz") as response:
                    assert (response.status, await response.json()) == (200, {"status": "ok"})
    finally:
        stopped = await _stopped(process)
    assert stopped == 0


async def test_workers_that_keep_dying_at_start_stop_the_proxy_after_five_replacements(tmp_path):
    """A worker that cannot start (its Redis is not there) is replaced at most 5 times a minute;
    then the proxy exits 1 instead of forking for ever (before: it exited 2 once both had died, and
    would now loop without the bound)."""
    port, nowhere = free_port(), f"redis://127.0.0.1:{free_port()}/0"
    process = await _spawn(
        "serve",
        "--upstream",
        "http://127.0.0.1:9/mcp",
        "--listen",
        f"127.0.0.1:{port}",
        "--workers",
        "2",
        "--store",
        nowhere,
        tmp_path=tmp_path,
    )
    _, err = await asyncio.wait_for(process.communicate(), 60)
    lines = err.decode().splitlines()
    replaced = [line for line in lines if "; started again as pid " in line]
    stopping = [line for line in lines if "stopping the proxy" in line]
    assert (process.returncode, len(replaced), len(stopping)) == (1, 5, 1), lines
    refusals = {line for line in lines if "refusing to start" in line}
    assert refusals == {f"mcp-tasks-proxy: refusing to start: store: cannot reach {nowhere}: connection refused"}
    assert stopping[0].endswith("exited with status 2; workers were replaced 5 times within 60 s: stopping the proxy")


async def test_shadow_comparisons_on_the_status_page_add_up_over_the_workers(fast_modern_upstream_url, redis_url, tmp_path):
    """Each worker compares the requests it answered; the page and the rollout's gate read them
    added up over the replica's workers (docs/decisions.md §181). Before, the page showed the
    comparisons of whichever worker answered it: about half of them here."""
    port = free_port()
    config = tmp_path / "proxy.toml"
    config.write_text(
        f'listen = "127.0.0.1:{port}"\nworkers = 2\nstore = "{redis_url}"\n'
        f'[[upstream]]\nname = "main"\nurl = "{fast_modern_upstream_url}"\n'
        f'[[upstream]]\nname = "next"\nurl = "{fast_modern_upstream_url}"\nshadow_of = "main"\nshadow_percent = 100\n'
    )
    process = await _spawn("serve", "--config", str(config), tmp_path=tmp_path)
    try:
        await _both_listening(process, port)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            caller = Caller(http, f"http://127.0.0.1:{port}/mcp")  # a new connection per request: both workers answer
            for _ in range(40):
                assert (await caller.call("tools/list", {})).status == 200

            async def shadow() -> list[dict]:
                async with http.get(f"http://127.0.0.1:{port}/status.json") as response:
                    return (await response.json())["shadow"]

            def compared(entries: list[dict]) -> int:
                return sum(row["match"] + row["differ"] for row in entries[0]["rows"])

            seen = await eventually(shadow, lambda entries: compared(entries) >= 40, "40 comparisons on the page", 30, 0.2)
            async with http.get(f"http://127.0.0.1:{port}/status") as response:
                page = await response.text()
        assert (
            "<h2>Shadow comparison (this replica&#x27;s workers)</h2>" in page,
            [(e["backend"], e["counted_by"]) for e in seen],
            seen[0]["rows"],
        ) == (
            True,
            [("next", "workers")],
            [shadow_row("tools/list", match=40)],
        )
    finally:
        stopped = await _stopped(process)
    assert stopped == 0


async def test_a_second_serve_with_workers_on_a_port_one_serves_is_refused(fast_modern_upstream_url, redis_url, tmp_path):
    """`SO_REUSEPORT` sockets of one user may share a port: a second `serve --workers` on the port
    of a running one would silently take half its connections. It is refused as one process is."""
    port = free_port()
    first = await _two_workers(fast_modern_upstream_url, port, redis_url, tmp_path / "first")
    try:
        await _both_listening(first, port)
        second = await _two_workers(fast_modern_upstream_url, port, redis_url, tmp_path / "second")
        try:
            _, err = await asyncio.wait_for(second.communicate(), 30)
        finally:
            await _stopped(second)  # it serves if the refusal did not come
        assert (second.returncode, err.decode().splitlines()[-1:]) == (
            2,
            [f"mcp-tasks-proxy: cannot listen on 127.0.0.1:{port}: Address already in use"],
        )
    finally:
        stopped = await _stopped(first)
    assert stopped == 0
