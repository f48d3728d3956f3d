"""`mcp-tasks-proxy bench` stopped with SIGTERM (as `timeout` and service managers stop it) stops
every server it started, each by its own handle, as it does when it ends or is interrupted: before,
SIGTERM ended the benchmark at once and left its upstream, proxies, nginx and Redis running."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import until

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]


def _descendants(pid: int) -> set[int]:
    """Every process below `pid` (Linux /proc), children first found first."""
    found: set[int] = set()
    queue = [pid]
    while queue:
        parent = queue.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except FileNotFoundError:
            continue
        for task in tasks:
            try:
                children = {int(p) for p in (task / "children").read_text(encoding="ascii").split()}
            except FileNotFoundError:  # the thread ended since the directory was listed
                continue
            queue.extend(children - found)
            found |= children
    return found


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not: it has ended and waits to be reaped)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


def test_sigterm_stops_every_server_the_soak_started(tmp_path: Path) -> None:
    log = tmp_path / "bench.err"
    with open(log, "wb") as err:
        bench = subprocess.Popen(
            [sys.executable, "-m", "proxy", "bench", "--soak", "--soak-clients", "20", "--soak-minutes", "2"],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        started = "[bench] soak: 20 clients for 2 min through "

        async def running() -> None:
            await until(lambda: started in log.read_text() or bench.poll() is not None, "the soak's start", 120)

        asyncio.run(running())
        assert bench.poll() is None, log.read_text()
        servers = _descendants(bench.pid)
        # redis-server, the fast upstream, two replicas, nginx's master and its worker (at least)
        assert len(servers) >= 6, servers
        bench.send_signal(signal.SIGTERM)
        code = bench.wait(timeout=90)
        left = sorted(pid for pid in servers if _alive(pid))
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    for pid in left:  # stopped by its own handle, whatever the test found
        os.kill(pid, signal.SIGKILL)
    assert (code, left) == (128 + signal.SIGTERM, []), log.read_text()[-3000:]
