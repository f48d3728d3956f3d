"""Helpers of the stdio tests: the proxy in front of a stdio server it runs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from proxy.app import RunningProxy, start
from proxy.config import load
from proxy.demo.processes import stdio_commands
from translators.sealing import KEY_BYTES, Keyring

TEST_KEY = bytes(range(KEY_BYTES))


@contextlib.asynccontextmanager
async def running_stdio_proxy(
    kind: str, state_dir: Path, *, upstream: dict[str, Any] | None = None, **overrides: Any
) -> AsyncIterator[RunningProxy]:
    """The proxy on 127.0.0.1:<ephemeral> in front of the stdio server `kind` (a key of
    `proxy.demo.processes.stdio_commands`), run by the proxy, with a fixed test key."""
    backend = {"name": "main", "command": stdio_commands()[kind], **(upstream or {})}
    settings = load(None, {"listen": "127.0.0.1:0", "upstream": [backend], "state_dir": str(state_dir), **overrides})
    running = await start(settings, keyring=Keyring(TEST_KEY))
    try:
        yield running
    finally:
        await running.stop()


def gone(pid: int) -> bool:
    """Whether no process (not even a zombie) has this pid any more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
