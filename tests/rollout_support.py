"""Peers and traffic for the rollout tests (issue 42; docs/configuration.md "Rollout").

Backends: a plain server on the official `mcp` 1.30 SDK (`FastMCP`, one tool, no tasks, written as a
user writes one: `LOOKUP_SERVER`), started as many times as a test needs; with
`LOOKUP_FAIL_EVERY=N` in its environment every N-th `lookup` raises, which FastMCP answers as a
result with `isError: true`.

Clients, calling throughout (`Traffic`): 2026-07-28 clients (the proxy translates them to the v1
backends; every call is new work, spread by the weights), and the official `mcp` 1.30 client
(`tests/peers/mcp1_tool_calls.py`), one session of a few calls after another (relayed; a session's
calls go where its `initialize` went). Every answer is checked: a right one is the text
`value of <key>` without `isError`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from peer_checks import mcp1_tool_calls
from support import Caller

from proxy.demo.peers import ensure_peer_env
from proxy.demo.processes import ServerProcess

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "tests" / "peers"
SERVERS = ROOT / "proxy" / "demo" / "servers"  # loopback_serve, the fixture servers' shared entry point

LOOKUP_SERVER = '''"""A plain MCP server on the official mcp 1.30 SDK: FastMCP, one tool, no tasks.

With LOOKUP_FAIL_EVERY=N in its environment, every N-th call of `lookup` raises (FastMCP answers a tool error)."""

import os

import loopback_serve
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("lookup-server")
FAIL_EVERY = int(os.environ.get("LOOKUP_FAIL_EVERY", "0"))
calls = 0


@mcp.tool()
def lookup(key: str) -> str:
    """Looks a key up."""
    global calls
    calls += 1
    if FAIL_EVERY and calls % FAIL_EVERY == 0:
        raise ValueError(f"the lookup of {key} failed")
    return f"value of {key}"


if __name__ == "__main__":
    loopback_serve.main(__doc__, mcp.streamable_http_app)
'''


def lookup_servers(directory: Path, fail_every: list[int]) -> Iterator[list[ServerProcess]]:
    """For a fixture to `yield from`: one `LOOKUP_SERVER` per entry of `fail_every` (0: healthy),
    each stopped by its own handle at the end."""
    script = directory / "lookup_server.py"
    script.write_text(LOOKUP_SERVER)
    argv = [str(ensure_peer_env("mcp-v1")), str(script), "--host", "127.0.0.1", "--port", "0"]
    servers: list[ServerProcess] = []
    try:
        for every in fail_every:
            servers.append(ServerProcess.start(argv, env={"PYTHONPATH": str(SERVERS), "LOOKUP_FAIL_EVERY": str(every)}))
        yield servers
    finally:
        for server in servers:
            server.stop()


@dataclass
class Tally:
    right: int = 0
    tool_errors: int = 0
    wrong: list[str] = field(default_factory=list)
    """Every answer that was neither right nor a tool error (what it was)."""
    lost: list[str] = field(default_factory=list)
    """Calls whose connection failed, or sessions whose client failed (a proxy killed under them)."""

    @property
    def calls(self) -> int:
        return self.right + self.tool_errors + len(self.wrong)


def judge_text(tally: Tally, key: str, texts: list[str], is_error: bool) -> None:
    if is_error:
        tally.tool_errors += 1
    elif texts == [f"value of {key}"]:
        tally.right += 1
    else:
        tally.wrong.append(f"{key}: {texts}")


class Traffic:
    """`modern` 2026-07-28 clients and `sessions` official mcp 1.30 clients calling `lookup` on each
    of `urls` (round robin) until `stop`; every answer counted in `tally`."""

    def __init__(self, http: aiohttp.ClientSession, urls: list[str], *, modern: int = 3, sessions: int = 1):
        self.http = http
        self.urls = urls
        self.tally = Tally()
        self._stop = asyncio.Event()
        self._tasks = [asyncio.ensure_future(self._modern(n)) for n in range(modern)]
        self._tasks += [asyncio.ensure_future(self._sessions(n)) for n in range(sessions)]

    async def _modern(self, number: int) -> None:
        index = 0
        while not self._stop.is_set():
            key = f"m{number}-{index}"
            caller = Caller(self.http, self.urls[index % len(self.urls)])
            index += 1
            try:
                answer = await caller.call("tools/call", {"name": "lookup", "arguments": {"key": key}})
            except (aiohttp.ClientError, OSError) as exc:
                self.tally.lost.append(f"{key}: {type(exc).__name__}")
                await asyncio.sleep(0.1)
                continue
            if answer.status != 200 or "result" not in answer.body:
                self.tally.wrong.append(f"{key}: HTTP {answer.status} {answer.body}")
                continue
            result = answer.result
            judge_text(self.tally, key, [c.get("text") for c in result.get("content", [])], bool(result.get("isError")))

    async def _sessions(self, number: int) -> None:
        index = 0
        while not self._stop.is_set():
            keys = [f"s{number}-{index}-{call}" for call in range(4)]
            url = self.urls[index % len(self.urls)]
            index += 1
            try:
                lines = await v1_session(url, keys)
            except AssertionError as exc:
                self.tally.lost.append(f"session {keys[0]}: {str(exc)[-200:]}")
                await asyncio.sleep(0.1)
                continue
            for key, line in zip(keys, lines, strict=True):
                if "error" in line:
                    self.tally.wrong.append(f"{key}: {line['error']}")
                else:
                    judge_text(self.tally, key, line["texts"], line["isError"])

    async def stop(self) -> Tally:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        return self.tally


async def v1_session(url: str, keys: list[str]) -> list[dict[str, Any]]:
    """One session of the official mcp 1.30 client calling `lookup` with each of `keys`; its lines:
    `{"texts", "isError"}` or `{"error"}` per call (`peer_checks.mcp1_tool_calls`)."""
    return await mcp1_tool_calls(url, [{"name": "lookup", "arguments": {"key": key}} for key in keys])


async def status(http: aiohttp.ClientSession, base_url: str) -> dict[str, Any]:
    async with http.get(base_url + "/status.json") as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def until_rollout(
    http: aiohttp.ClientSession, base_url: str, states: tuple[str, ...], timeout_s: float, step: int | None = None
) -> dict[str, Any]:
    """The proxy's `status.json` once its rollout is in one of `states` (and at `step`, when given);
    fails after `timeout_s` naming what it was."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    seen: Any = None
    while loop.time() < deadline:
        data = await status(http, base_url)
        seen = data["rollout"]
        if seen is not None and seen["state"] in states and (step is None or seen["step"] == step):
            return data
        await asyncio.sleep(0.2)
    raise AssertionError(f"the rollout did not reach {states} (step {step}) in {timeout_s} s: {json.dumps(seen)[:3000]}")


COMPLETED_IN_THREE = [
    ("started", 20, "running"),
    ("passed", 20, "running"),
    ("passed", 50, "running"),
    ("passed", 100, "completed"),
]
"""The history of a rollout with steps [20, 50, 100] that passed each: (event, percent, state after)."""


def events(data: dict[str, Any]) -> list[tuple[str, float, str]]:
    """`status.json`'s rollout history as (event, percent, state after) tuples."""
    return [(e["event"], e["percent"], e["state"]) for e in data["rollout"]["history"]]


def weights(data: dict[str, Any]) -> dict[str, Any]:
    """Each backend's (weight, drain) on the status page."""
    return {b["name"]: (b["weight"], b["drain"]) for b in data["backends"]}


async def rollout_command(url: str, action: str) -> tuple[int, dict[str, Any] | str]:
    """`mcp-tasks-proxy rollout ACTION URL --json`: (exit status, its JSON answer or its stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "rollout",
        action,
        url,
        "--json",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, json.loads(out) if process.returncode == 0 else err.decode()
