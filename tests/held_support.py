"""Plumbing for the held-task tests (docs/behaviour.md §9): the task-less mcp 1.30 server
(`tests/peers/untasked_mcp1_server.py`) on HTTP or as a stdio backend, the proxy in front of it
with a short `hold_after_ms` and probe interval, and its events file."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from support import TEST_KEY

from proxy.app import RunningProxy, start
from proxy.config import load
from proxy.demo.processes import ServerProcess
from translators.sealing import Keyring

UNTASKED_SERVER = Path(__file__).resolve().parent / "peers" / "untasked_mcp1_server.py"
HOLD_AFTER_MS = 400
PROBE_INTERVAL_MS = 300
"""Short, so that every test runs through several probe intervals."""


def untasked_command() -> list[str]:
    from proxy.demo.peers import ensure_peer_env

    return [str(ensure_peer_env("mcp-v1")), str(UNTASKED_SERVER)]


def start_untasked_server(events: Path) -> ServerProcess:
    """The task-less server on HTTP (127.0.0.1, ephemeral port), its events to `events`."""
    return ServerProcess.start([*untasked_command(), "--host", "127.0.0.1", "--port", "0"], env={"UNTASKED_EVENTS": str(events)})


def backend(kind: str, url: str | None, events: Path, **extra: Any) -> dict[str, Any]:
    """The `[[upstream]]` table of the task-less server: over HTTP at `url`, or run on stdio."""
    table: dict[str, Any] = {"name": "main", "hold_after_ms": HOLD_AFTER_MS, **extra}
    if kind == "http":
        table["url"] = url
    else:
        table["command"] = [*untasked_command(), "--stdio"]
        table["env"] = {"UNTASKED_EVENTS": str(events)}
    return table


@contextlib.asynccontextmanager
async def held_proxy(
    upstream: dict[str, Any] | list[dict[str, Any]], state_dir: Path, **overrides: Any
) -> AsyncIterator[RunningProxy]:
    """The proxy on 127.0.0.1:<ephemeral> in front of `upstream`, with the test key."""
    tables = upstream if isinstance(upstream, list) else [upstream]
    settings = load(
        None,
        {
            "listen": "127.0.0.1:0",
            "upstream": tables,
            "state_dir": str(state_dir),
            "probe_interval_ms": PROBE_INTERVAL_MS,
            **overrides,
        },
    )
    running = await start(settings, keyring=Keyring(TEST_KEY))
    try:
        yield running
    finally:
        await running.stop()


def events_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def wait_for_event(path: Path, wanted: dict[str, Any], timeout: float = 20) -> None:
    """Wait until the server wrote the event `wanted` (checked every 50 ms)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while wanted not in events_of(path):
        assert asyncio.get_running_loop().time() < deadline, f"no event {wanted}: {events_of(path)}"
        await asyncio.sleep(0.05)
