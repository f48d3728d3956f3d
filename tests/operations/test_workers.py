"""`serve --workers N`: N processes on one port (SO_REUSEPORT) sharing a Redis store; refused
without a shared store (docs/decisions.md §52)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest
from support import Caller

from proxy.keys import new_key_text

ROOT = Path(__file__).resolve().parents[2]


async def _spawn(*args: str, tmp_path: Path) -> asyncio.subprocess.Process:
    env = {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text(), "MCP_TASKS_PROXY_STATE_DIR": str(tmp_path / "state")}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", *args, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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


@pytest.mark.peers
async def test_two_workers_on_redis_share_one_port_and_each_others_tasks(reference_v1_server, redis_url, tmp_path):
    port = _free_port()
    process = await _spawn(
        "serve",
        "--upstream",
        reference_v1_server.url,
        "--listen",
        f"127.0.0.1:{port}",
        "--workers",
        "2",
        "--store",
        redis_url,
        tmp_path=tmp_path,
    )
    try:
        lines = [(await asyncio.wait_for(process.stdout.readline(), 30)).decode().split(" (")[0] for _ in range(2)]
        assert lines == [f"mcp-tasks-proxy listening on http://127.0.0.1:{port}/mcp"] * 2
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
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
