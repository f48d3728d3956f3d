"""`mcp-tasks-proxy restart` (SIGUSR2) on a real `serve` process (proxy/restart.py, docs/decisions.md
§169): the new process takes over the listening socket and the state while modern clients open a
new connection for every call, others run task lifecycles and v1 sessions call tools: no connection
is refused, no call fails or is answered wrongly, the sessions go on. A held call running across a
restart ends with its result, answered by the new process. A restart into a configuration that does
not load is refused, and the old process goes on serving."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from held_support import start_untasked_server
from session_support import SessionCaller
from support import Caller, free_port

from proxy.keys import new_key_text
from translators.held import INTERRUPTED

pytestmark = pytest.mark.peers
ROOT = Path(__file__).resolve().parents[2]


class Served:
    """`serve --config` as a process of its own, whose restarts replace it: the process serving now
    is the one `serve.pid` names, stopped by its own pid at the end."""

    def __init__(self, tmp_path: Path, upstream: str, backend_settings: str = ""):
        self.port = free_port()
        self.state = tmp_path / "state"
        self.config = tmp_path / "proxy.toml"
        self.config.write_text(
            f'state_dir = "{self.state}"\nlisten = "127.0.0.1:{self.port}"\n'
            f'[[upstream]]\nname = "main"\nurl = "{upstream}"\n{backend_settings}'
        )
        self.env = {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text()}
        self.log = tmp_path / "proxy.log"
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.first: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with open(self.log, "ab") as log:  # noqa: ASYNC230 - the log file of a process the test starts
            self.first = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "proxy",
                "serve",
                "--config",
                str(self.config),
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=log,
            )
        await self._serving(lambda pid: True)

    def pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((self.state / "serve.pid").read_text())
        return None

    async def _serving(self, which: Any) -> int:
        """Wait until `serve.pid` names a process `which(pid)` accepts and /healthz answers."""
        deadline = asyncio.get_running_loop().time() + 30
        async with aiohttp.ClientSession() as http:
            while True:
                pid = self.pid()
                if pid is not None and which(pid):
                    with contextlib.suppress(aiohttp.ClientError):
                        async with http.get(f"http://127.0.0.1:{self.port}/healthz") as response:
                            if response.status == 200:
                                return pid
                assert asyncio.get_running_loop().time() < deadline, self.log.read_text()
                await asyncio.sleep(0.05)

    async def restart(self, *extra: str) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "proxy",
            "restart",
            "--state-dir",
            str(self.state),
            "--wait",
            "60",
            *extra,
            cwd=ROOT,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 90)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    async def stop(self) -> None:
        """SIGTERM to the process serving now (and to the first one, if it still runs), each by its own pid."""
        for pid in {self.pid(), self.first.pid if self.first is not None else None} - {None}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)  # type: ignore[arg-type]
        deadline = asyncio.get_running_loop().time() + 30
        while self.pid() is not None and (self.state / "serve.pid").exists():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
        if self.first is not None:
            await asyncio.wait_for(self.first.wait(), 30)


class Traffic:
    """Clients running until told to stop: what each saw."""

    def __init__(self) -> None:
        self.stopping = asyncio.Event()
        self.done: dict[str, int] = {}
        self.failures: list[str] = []

    def ok(self, kind: str) -> None:
        self.done[kind] = self.done.get(kind, 0) + 1

    async def modern_calls(self, url: str, number: int) -> None:
        """`greet` over a new connection for every call."""
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            caller = Caller(http, url)
            while not self.stopping.is_set():
                name = f"m{number}-{self.done.get('modern', 0)}"
                try:
                    answer = await caller.call("tools/call", {"name": "greet", "arguments": {"name": name}})
                except aiohttp.ClientError as exc:
                    self.failures.append(f"modern call: {exc!r}")
                    continue
                if answer.status != 200 or answer.body.get("result", {}).get("content") != [
                    {"type": "text", "text": f"Hello, {name}!"}
                ]:
                    self.failures.append(f"modern call answered {answer.status} {answer.body}")
                else:
                    self.ok("modern")

    async def lifecycles(self, url: str, number: int) -> None:
        """`slow_compute` as a task, polled to its end."""
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            caller = Caller(http, url)
            while not self.stopping.is_set():
                label = f"l{number}-{self.done.get('lifecycle', 0)}"
                try:
                    created = await caller.call(
                        "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.3, "label": label}}
                    )
                    final = await caller.poll(created.result["taskId"])
                except (aiohttp.ClientError, AssertionError, KeyError) as exc:
                    self.failures.append(f"lifecycle: {exc!r}")
                    continue
                if (final["status"], final["result"]["content"][0]["text"]) != ("completed", f"computed {label}"):
                    self.failures.append(f"lifecycle ended {final}")
                else:
                    self.ok("lifecycle")

    async def session_calls(self, url: str, number: int) -> None:
        """A v1 session (its own connection, kept alive) calling `greet` until the end."""
        async with aiohttp.ClientSession() as http:
            session = SessionCaller(http, url)
            await session.initialize()
            opened = session.session_id
            while not self.stopping.is_set():
                name = f"s{number}-{self.done.get('session', 0)}"
                try:
                    answer = await session.call("tools/call", {"name": "greet", "arguments": {"name": name}})
                except (aiohttp.ClientError, AssertionError) as exc:
                    self.failures.append(f"session call: {exc!r}")
                    continue
                if answer.get("result", {}).get("content") != [{"type": "text", "text": f"Hello, {name}!"}]:
                    self.failures.append(f"session call answered {answer}")
                else:
                    self.ok("session")
            assert session.session_id == opened


async def _until(condition: Any) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while not condition():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)


async def _more(traffic: Traffic) -> None:
    """Wait until every kind of client has done three more calls."""
    before = dict(traffic.done)
    await _until(lambda: all(traffic.done.get(k, 0) >= before.get(k, 0) + 3 for k in ("modern", "lifecycle", "session")))


async def test_two_restarts_under_load_refuse_no_connection_and_lose_nothing(reference_v1_server, tmp_path):
    served = Served(tmp_path, reference_v1_server.url)
    await served.start()
    traffic = Traffic()
    try:
        clients = [asyncio.ensure_future(traffic.modern_calls(served.url, n)) for n in range(4)]
        clients += [asyncio.ensure_future(traffic.lifecycles(served.url, n)) for n in range(2)]
        clients += [asyncio.ensure_future(traffic.session_calls(served.url, n)) for n in range(2)]
        pids = [served.pid()]
        for _ in range(2):
            await _more(traffic)
            code, out, err = await served.restart()
            assert (code, err) == (0, ""), (out, err, served.log.read_text())
            new = await served._serving(lambda pid: pid not in pids)
            assert out.splitlines() == [
                f"sent SIGUSR2 to mcp-tasks-proxy (pid {pids[-1]})",
                f"restarted: pid {new} serves (version 0.1.0); pid {pids[-1]} has stopped",
            ]
            pids.append(new)
        await _more(traffic)
        traffic.stopping.set()
        await asyncio.wait_for(asyncio.gather(*clients), 30)
        assert traffic.failures == []
        assert len(set(pids)) == 3
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{served.port}/status.json") as response:
            status = await response.json()
        assert (status["restarted"]["from_pid"], status["restarted"]["version"]) == (pids[1], "0.1.0")
        assert list((served.state / "restarts").iterdir()) == []  # each verdict read by its command, and removed
    finally:
        traffic.stopping.set()
        await served.stop()


async def test_a_restart_into_a_configuration_that_does_not_load_is_refused_and_the_old_process_serves(
    reference_v1_server, tmp_path
):
    served = Served(tmp_path, reference_v1_server.url)
    await served.start()
    try:
        old = served.pid()
        served.config.write_text(served.config.read_text() + "no_such_key = 1\n")
        code, out, err = await served.restart()
        assert code == 1, (out, err)
        assert out == f"sent SIGUSR2 to mcp-tasks-proxy (pid {old})\n"
        assert err.startswith("mcp-tasks-proxy: restart refused: the new process (pid ")
        assert err.endswith(" exited with status 2 before it could serve; its log says why; the old process still serves\n")
        assert served.pid() == old
        async with aiohttp.ClientSession() as http:
            answer = await Caller(http, served.url).call("tools/call", {"name": "greet", "arguments": {"name": "still"}})
        assert answer.result["content"] == [{"type": "text", "text": "Hello, still!"}]
        assert "no_such_key" in served.log.read_text()
    finally:
        await served.stop()


async def test_a_held_call_running_across_a_restart_ends_with_its_result(tmp_path):
    server = start_untasked_server(tmp_path / "events.jsonl")
    served = Served(tmp_path, server.url, "hold_after_ms = 300\n")
    try:
        await served.start()
        old = served.pid()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            caller = Caller(http, served.url)
            created = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 2, "label": "across"}})
            assert created.result["status"] == "working"
            code, out, err = await served.restart()
            assert code == 0, (out, err, served.log.read_text())
            assert served.pid() != old
            final = await caller.poll(created.result["taskId"])
        assert (final["status"], final["result"]["content"]) == ("completed", [{"type": "text", "text": "computed across"}])
        assert "stopping: 1 held call(s) ended\n" in served.log.read_text()
    finally:
        await served.stop()
        server.stop()


async def test_a_held_call_longer_than_the_stop_allows_reads_interrupted_after_a_restart(tmp_path):
    server = start_untasked_server(tmp_path / "events.jsonl")
    served = Served(tmp_path, server.url, "hold_after_ms = 300\n")
    served.config.write_text("shutdown_timeout_ms = 500\n" + served.config.read_text())
    try:
        await served.start()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            caller = Caller(http, served.url)
            created = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "long"}})
            code, out, err = await served.restart()
            assert code == 0, (out, err, served.log.read_text())
            after = (await caller.call("tasks/get", {"taskId": created.result["taskId"]})).result
        assert (after["status"], after["error"]) == ("failed", {"code": -32603, "message": INTERRUPTED})
        assert "stopping: 0 held call(s) ended, 1 still running left interrupted" in served.log.read_text()
    finally:
        await served.stop()
        server.stop()


async def test_serve_with_workers_refuses_a_restart_and_goes_on(reference_v1_server, redis_url, tmp_path):
    served = Served(tmp_path, reference_v1_server.url)
    served.config.write_text(f'workers = 2\nstore = "{redis_url}"\n' + served.config.read_text())
    await served.start()
    try:
        supervisor = served.pid()
        code, out, err = await served.restart()
        assert (code, out) == (1, f"sent SIGUSR2 to mcp-tasks-proxy (pid {supervisor})\n")
        assert err == (
            "mcp-tasks-proxy: restart refused: serve --workers N is not restarted in place yet: restart its replicas "
            "one by one behind the load balancer, or stop and start it; the old process still serves\n"
        )
        assert served.pid() == supervisor
        async with aiohttp.ClientSession() as http:
            answer = await Caller(http, served.url).call("tools/call", {"name": "greet", "arguments": {"name": "workers"}})
        assert answer.result["content"] == [{"type": "text", "text": "Hello, workers!"}]
    finally:
        await served.stop()


async def test_a_sessions_open_event_stream_ends_and_the_restart_goes_through(reference_v1_server, tmp_path):
    """An open GET stream never ends by itself: the old process ends it once it has drained its
    connections (the client opens it again, on the new process), instead of holding its stop, and
    the new process's start, for `shutdown_timeout_ms` and more."""
    served = Served(tmp_path, reference_v1_server.url)
    await served.start()
    try:
        old = served.pid()
        async with aiohttp.ClientSession() as http:
            session = SessionCaller(http, served.url)
            await session.initialize()
            headers = {
                "Accept": "text/event-stream",
                "Mcp-Session-Id": session.session_id or "",
                "MCP-Protocol-Version": "2025-11-25",
            }
            async with http.get(served.url, headers=headers) as stream:
                assert stream.status == 200
                code, out, err = await served.restart()
                assert code == 0, (out, err, served.log.read_text())
                with contextlib.suppress(aiohttp.ClientPayloadError):
                    assert await asyncio.wait_for(stream.content.read(), 30) is not None  # ended: read to its end
            assert served.pid() != old
            again = await session.call("tools/call", {"name": "greet", "arguments": {"name": "again"}})
        assert again["result"]["content"] == [{"type": "text", "text": "Hello, again!"}]
    finally:
        await served.stop()
