"""A rollout outlives the processes that run it (issue 42; docs/decisions.md §174): its record is in
the store, so a proxy killed with SIGKILL and started again resumes it at the step it had reached,
with its weights applied before the first request; on Redis with two replicas one decides (the
lease) and both apply the same weights, and when the deciding one is killed the other takes over
and the rollout goes on to its end.

Real peers (`tests/rollout_support.py`): two plain FastMCP servers on the official `mcp` 1.30 SDK;
2026-07-28 clients and official mcp 1.30 client sessions calling throughout. Each proxy is
`mcp-tasks-proxy serve --config` as a process of its own, stopped by its pid."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from rollout_support import COMPLETED_IN_THREE, Traffic, events, lookup_servers, status, until_rollout, weights
from support import free_port

from proxy.demo.processes import ServerProcess
from proxy.keys import new_key_text

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]
KEY = new_key_text()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    yield from lookup_servers(tmp_path_factory.mktemp("lookup"), [0, 0])


def _config(path: Path, old: ServerProcess, new: ServerProcess, port: int, extra: str) -> Path:
    path.write_text(
        f'listen = "127.0.0.1:{port}"\nprobe_interval_ms = 300\n{extra}'
        f'[[upstream]]\nname = "old"\nurl = "{old.url}"\n'
        f'[[upstream]]\nname = "new"\nurl = "{new.url}"\nweight = 0\n'
        '[rollout]\nfrom = "old"\nto = "new"\nsteps = [20, 50, 100]\nstep_ms = 5000\nmin_calls = 10\nthen = "drain"\n'
    )
    return path


@contextlib.asynccontextmanager
async def _proxy(config: Path, state: Path, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """`serve --config config` until the block ends (SIGTERM by its pid, unless the test killed it)."""
    env = {**os.environ, "MCP_TASKS_PROXY_KEY": KEY, "MCP_TASKS_PROXY_STATE_DIR": str(state)}
    with open(log, "ab") as out:  # noqa: ASYNC230 - the log of a process the test starts
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy", "serve", "--config", str(config), cwd=ROOT, env=env, stdout=out, stderr=out
        )
    try:
        yield process
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
            await asyncio.wait_for(process.wait(), 30)


async def _serving(http: aiohttp.ClientSession, base_url: str, log: Path) -> dict[str, Any]:
    """The first `status.json` the proxy answers."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        with contextlib.suppress(aiohttp.ClientError):
            return await status(http, base_url)
        assert asyncio.get_running_loop().time() < deadline, log.read_text()[-3000:]  # noqa: ASYNC240 - a failing test's message
        await asyncio.sleep(0.05)


def _kill(process: asyncio.subprocess.Process) -> None:
    os.kill(process.pid, signal.SIGKILL)


async def test_a_rollout_killed_mid_step_resumes_at_that_step_after_a_restart(servers, tmp_path):
    old, new = servers
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    config = _config(tmp_path / "proxy.toml", old, new, port, "")
    state, log = tmp_path / "state", tmp_path / "proxy.log"
    async with aiohttp.ClientSession() as http:
        async with _proxy(config, state, log) as first:
            await _serving(http, base, log)
            # Modern clients only before the kill: an official client's session cut by SIGKILL retries for minutes.
            traffic = Traffic(http, [base + "/mcp"], modern=3, sessions=0)
            before = await until_rollout(http, base, ("running",), 30, step=1)
            _kill(first)
            await first.wait()
            await traffic.stop()  # the calls in flight at the kill failed; they are not what this test judges
        async with _proxy(config, state, log):
            resumed = await _serving(http, base, log)
            assert resumed["rollout"]["state"] == "running" and resumed["rollout"]["step"] == 1, resumed["rollout"]
            assert resumed["rollout"]["started_ms"] == before["rollout"]["started_ms"]
            assert resumed["rollout"]["history"][:2] == before["rollout"]["history"][:2]
            assert weights(resumed) == {"old": (0.5, None), "new": (0.5, None)}  # applied before the first request
            traffic = Traffic(http, [base + "/mcp"], modern=3, sessions=1)
            done = await until_rollout(http, base, ("completed", "rolled_back"), 60)
            tally = await traffic.stop()
            assert events(done) == COMPLETED_IN_THREE
            assert tally.wrong == [] and tally.lost == [] and tally.tool_errors == 0 and tally.calls > 20, tally
            assert weights(await status(http, base))["new"] == (1.0, None)


async def test_two_replicas_on_redis_one_decides_both_apply_and_a_killed_decider_is_replaced(servers, tmp_path, redis_url):
    old, new = servers
    ports = [free_port(), free_port()]
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    configs = [
        _config(tmp_path / f"r{n}.toml", old, new, ports[n], f'store = "{redis_url}"\nreplica_name = "r{n}"\n') for n in (0, 1)
    ]
    logs = [tmp_path / f"r{n}.log" for n in (0, 1)]
    async with aiohttp.ClientSession() as http:
        async with _proxy(configs[0], tmp_path / "s0", logs[0]) as decider:
            first = await _serving(http, bases[0], logs[0])
            assert first["rollout"]["decides_here"] is True, first["rollout"]
            async with _proxy(configs[1], tmp_path / "s1", logs[1]):
                await _serving(http, bases[1], logs[1])
                traffic = Traffic(http, [bases[1] + "/mcp"], modern=3, sessions=1)  # counted by r1, judged by r0
                at_fifty = [await until_rollout(http, base, ("running",), 30, step=1) for base in bases]
                assert [view["rollout"]["decides_here"] for view in at_fifty] == [True, False]
                assert at_fifty[0]["rollout"]["decider"] == at_fifty[1]["rollout"]["decider"]
                assert [weights(view) for view in at_fifty] == [{"old": (0.5, None), "new": (0.5, None)}] * 2
                _kill(decider)
                await decider.wait()
                taken = await until_rollout(http, bases[1], ("running", "completed"), 30)
                done = await until_rollout(http, bases[1], ("completed", "rolled_back"), 60)
                tally = await traffic.stop()
                assert done["rollout"]["decides_here"] is True, done["rollout"]
                assert done["rollout"]["decider"] != at_fifty[0]["rollout"]["decider"]
                assert taken["rollout"]["started_ms"] == at_fifty[0]["rollout"]["started_ms"]
                assert events(done) == COMPLETED_IN_THREE
                assert tally.wrong == [] and tally.lost == [] and tally.tool_errors == 0 and tally.calls > 30, tally
                assert weights(await status(http, bases[1]))["new"] == (1.0, None)
