"""`mcp-tasks-proxy restart` (SIGUSR2) on a real `serve` process, alone and with `--workers 2`
(proxy/restart.py, docs/decisions.md §169, §170): the new process takes over the listening sockets
and the state while modern clients open a new connection for every call, others run task
lifecycles and the official `mcp` 1.30 client keeps v1 sessions: no connection is refused, no call
fails or is answered wrongly, the sessions go on. A held call running across a restart ends with
its result. A restart into a configuration that does not load is refused with the reason, and the
old process goes on serving. A restart after `pip install` of other code serves that code."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from held_support import start_untasked_server
from session_support import SessionCaller
from support import Caller, free_port, until

from proxy.demo.peers import ensure_peer_env
from proxy.keys import new_key_text
from translators.held import INTERRUPTED

pytestmark = pytest.mark.peers
ROOT = Path(__file__).resolve().parents[2]
SESSION_LOOP = ROOT / "tests" / "peers" / "mcp1_session_loop.py"
SPACING_S = 12.0
"""Between the two restarts under load (issue 40)."""


class Served:
    """`serve --config` as a process of its own, whose restarts replace it: the process serving now
    is the one `serve.pid` names, stopped by its own pid at the end."""

    def __init__(self, tmp_path: Path, upstream: str, backend_settings: str = "", redis_url: str | None = None):
        self.port = free_port()
        self.state = tmp_path / "state"
        self.config = tmp_path / "proxy.toml"
        workers = f'workers = 2\nstore = "{redis_url}"\n' if redis_url is not None else ""
        self.config.write_text(
            f'state_dir = "{self.state}"\nlisten = "127.0.0.1:{self.port}"\n{workers}'
            f'[[upstream]]\nname = "main"\nurl = "{upstream}"\n{backend_settings}'
        )
        self.env = {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text()}
        self.python = sys.executable
        self.cwd = ROOT
        self.log = tmp_path / "proxy.log"
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.first: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with open(self.log, "ab") as log:  # noqa: ASYNC230 - the log file of a process the test starts
            self.first = await asyncio.create_subprocess_exec(
                self.python,
                "-m",
                "proxy",
                "serve",
                "--config",
                str(self.config),
                cwd=self.cwd,
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

    async def restart(self, *extra: str, command: str = "restart") -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            self.python,
            "-m",
            "proxy",
            command,
            "--state-dir",
            str(self.state),
            "--wait",
            "60",
            *extra,
            cwd=self.cwd,
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
    """Clients running until told to stop (`finish`): what each saw."""

    def __init__(self, tmp_path: Path) -> None:
        self.stopping = asyncio.Event()
        self.stop_file = tmp_path / "clients.stop"
        self.tmp_path = tmp_path
        self.done: dict[str, int] = {}
        self.failures: list[str] = []

    def ok(self, kind: str) -> None:
        self.done[kind] = self.done.get(kind, 0) + 1

    def finish(self) -> None:
        self.stopping.set()
        self.stop_file.touch()

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

    async def official_session(self, url: str, number: int) -> None:
        """A v1 session of the official `mcp` 1.30 client calling `greet` until the end, on one
        connection it keeps (`tests/peers/mcp1_session_loop.py`): every answer right, one session."""
        label = f"s{number}"
        with open(self.tmp_path / f"{label}.err", "wb") as err:  # noqa: ASYNC230 - the log of a process the test starts
            process = await asyncio.create_subprocess_exec(
                str(ensure_peer_env("mcp-v1")),
                str(SESSION_LOOP),
                "--url",
                url,
                "--label",
                label,
                "--stop",
                str(self.stop_file),
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
            )
        assert process.stdout is not None
        last: dict[str, Any] = {}
        while line := await process.stdout.readline():
            last = json.loads(line)
            if "ok" in last:
                self.ok("session")
            elif "failure" in last:
                self.failures.append(f"session {label}: {last['failure']}")
        if await process.wait() != 0 or last.get("same_session") is not True:
            self.failures.append(
                f"session {label} ended {process.returncode}, {last}: {(self.tmp_path / f'{label}.err').read_text()[-2000:]}"
            )


async def _more(traffic: Traffic) -> None:
    """Wait until every kind of client has done three more calls."""
    before = dict(traffic.done)
    await until(
        lambda: all(traffic.done.get(k, 0) >= before.get(k, 0) + 3 for k in ("modern", "lifecycle", "session")),
        "three more calls of each kind",
        30,
        0.05,
    )


@pytest.fixture(params=[1, 2], ids=["one process", "workers 2"])
def workers_redis(request: Any) -> str | None:
    """None: one process (SQLite store); else the Redis URL `--workers 2` share."""
    return None if request.param == 1 else request.getfixturevalue("redis_url")


async def test_two_restarts_under_load_refuse_no_connection_and_lose_nothing(reference_v1_server, workers_redis, tmp_path):
    ensure_peer_env("mcp-v1")
    served = Served(tmp_path, reference_v1_server.url, redis_url=workers_redis)
    await served.start()
    traffic = Traffic(tmp_path)
    loop = asyncio.get_running_loop()
    try:
        clients = [asyncio.ensure_future(traffic.modern_calls(served.url, n)) for n in range(6)]
        clients += [asyncio.ensure_future(traffic.lifecycles(served.url, n)) for n in range(2)]
        clients += [asyncio.ensure_future(traffic.official_session(served.url, n)) for n in range(2)]
        pids = [served.pid()]
        restarted_at = [loop.time() - SPACING_S]
        for _ in range(2):
            await _more(traffic)
            await until(
                lambda: loop.time() >= restarted_at[-1] + SPACING_S, "the spacing", 30, 0.05
            )  # the spacing, not a timing
            restarted_at.append(loop.time())
            code, out, err = await served.restart()
            assert (code, err) == (0, ""), (out, err, served.log.read_text())
            new = served.pid()
            assert new not in pids
            assert out.splitlines() == [
                f"sent SIGUSR2 to mcp-tasks-proxy (pid {pids[-1]})",
                f"restarted: pid {new} serves (version 0.1.0); pid {pids[-1]} has stopped",
            ]
            pids.append(new)
        await _more(traffic)
        traffic.finish()
        await asyncio.wait_for(asyncio.gather(*clients), 60)
        assert traffic.failures == []
        assert len(set(pids)) == 3
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{served.port}/status.json") as response:
            status = await response.json()
        assert (status["restarted"]["from_pid"], status["restarted"]["version"]) == (pids[1], "0.1.0")
        assert list((served.state / "restarts").iterdir()) == []  # each verdict read by its command, and removed
        code, out, err = await served.restart(command="reload")  # the new process (its workers) reload
        reloading = [pids[-1]]
        if workers_redis is not None:  # the new supervisor names its own workers
            named = json.loads((served.state / "serve.workers").read_text())
            assert (named["supervisor"], len(named["workers"])) == (pids[-1], 2)
            reloading = named["workers"]
        assert (code, err) == (0, "")
        assert out.splitlines() == [f"sent SIGHUP to mcp-tasks-proxy (pid {pids[-1]})"] + [
            f"pid {pid}: applied: no backend changed" for pid in reloading
        ]
    finally:
        traffic.finish()
        await served.stop()


async def test_a_restart_into_a_configuration_that_does_not_load_is_refused_and_the_old_process_serves(
    reference_v1_server, workers_redis, tmp_path
):
    served = Served(tmp_path, reference_v1_server.url, redis_url=workers_redis)
    await served.start()
    try:
        old = served.pid()
        served.config.write_text(served.config.read_text() + "no_such_key = 1\n")
        code, out, err = await served.restart()
        assert (code, out) == (1, f"sent SIGUSR2 to mcp-tasks-proxy (pid {old})\n")
        assert err == (
            f"mcp-tasks-proxy: restart refused: configuration error: {served.config}: upstream.0: unknown key 'no_such_key'; "
            "the old process still serves\n"
        )
        assert served.pid() == old
        async with aiohttp.ClientSession() as http:
            answer = await Caller(http, served.url).call("tools/call", {"name": "greet", "arguments": {"name": "still"}})
        assert answer.result["content"] == [{"type": "text", "text": "Hello, still!"}]
    finally:
        await served.stop()


async def test_a_held_call_running_across_a_restart_ends_with_its_result(workers_redis, tmp_path):
    server = start_untasked_server(tmp_path / "events.jsonl")
    served = Served(tmp_path, server.url, "hold_after_ms = 300\n", redis_url=workers_redis)
    release = tmp_path / "release"  # the call runs until this file exists: across the restart by construction
    try:
        await served.start()
        old = served.pid()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            caller = Caller(http, served.url)
            arguments = {"label": "across", "until": str(release)}
            created = await caller.call("tools/call", {"name": "slow_compute", "arguments": arguments})
            assert created.result["status"] == "working"
            restarting = asyncio.ensure_future(served.restart())  # it waits until the old process has stopped
            # The old process (or worker) that holds the call has stopped serving and waits for it.
            await until(lambda: "for 1 held call(s) to end\n" in served.log.read_text(), "the old process's wait", 30)
            release.touch()
            code, out, err = await restarting
            assert code == 0, (out, err, served.log.read_text())
            assert served.pid() != old
            final = await caller.poll(created.result["taskId"])
        assert (final["status"], final["result"]["content"]) == ("completed", [{"type": "text", "text": "computed across"}])
        # It logs the call's end as it stops, which may come after the result is stored.
        await until(lambda: "stopping: 1 held call(s) ended\n" in served.log.read_text(), "the old process's stop", 30)
    finally:
        await served.stop()
        server.stop()


async def test_a_held_call_longer_than_the_stop_allows_reads_interrupted_after_a_restart(workers_redis, tmp_path):
    server = start_untasked_server(tmp_path / "events.jsonl")
    served = Served(tmp_path, server.url, "hold_after_ms = 300\n", redis_url=workers_redis)
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


async def test_a_sessions_open_event_stream_ends_and_the_restart_goes_through(reference_v1_server, workers_redis, tmp_path):
    """An open GET stream never ends by itself: the old process ends it once it has drained its
    connections (the client opens it again, on the new process), instead of holding its stop, and
    the new process's start, for `shutdown_timeout_ms` and more."""
    served = Served(tmp_path, reference_v1_server.url, redis_url=workers_redis)
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


def _install(tmp_path: Path, site: Path, version: str, version_function: str | None = None) -> None:
    """`pip install --target site` of this project's code as version `version` (another commit:
    `version_function` replaces `proxy/version.py`'s `version()` body's last line when given)."""
    source = tmp_path / f"source-{version}"
    for part in ("proxy", "translators"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    project = (source / "pyproject.toml").read_text()
    (source / "pyproject.toml").write_text(project.replace('\nversion = "0.1.0"\n', f'\nversion = "{version}"\n', 1))
    if version_function is not None:
        code = (source / "proxy" / "version.py").read_text()
        (source / "proxy" / "version.py").write_text(code.replace('return installed("mcp-tasks-proxy")', version_function))
    for installed in site.glob("mcp_tasks_proxy-*.dist-info"):  # what an uninstall removes (`--target` keeps it)
        shutil.rmtree(installed)
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade", "--target", str(site), str(source)]
    subprocess.run(command, check=True, capture_output=True, timeout=300)


async def _status(port: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/status.json") as response:
        return dict(await response.json())


async def test_a_restart_after_pip_install_of_other_code_serves_that_code(reference_v1_server, tmp_path):
    """An upgrade is a restart: the proxy runs from a `pip install --target` directory; another
    version of the code installed there over it is what the restart's new process serves."""
    site = tmp_path / "site"
    await asyncio.to_thread(_install, tmp_path, site, "0.1.1.dev1")
    served = Served(tmp_path, reference_v1_server.url)
    served.env["PYTHONPATH"] = str(site)
    served.cwd = tmp_path  # not this checkout's own `proxy` directory
    await served.start()
    try:
        old = served.pid()
        assert ((await _status(served.port))["version"], (await _status(served.port))["restarted"]) == ("0.1.1.dev1", None)
        changed = 'return installed("mcp-tasks-proxy") + " (upgraded code)"'
        await asyncio.to_thread(_install, tmp_path, site, "0.1.1.dev2", changed)
        code, out, err = await served.restart()
        assert (code, err) == (0, ""), (out, err, served.log.read_text())
        new = served.pid()
        assert out.splitlines()[1] == f"restarted: pid {new} serves (version 0.1.1.dev2 (upgraded code)); pid {old} has stopped"
        status = await _status(served.port)
        assert (status["version"], status["restarted"]["from_pid"]) == ("0.1.1.dev2 (upgraded code)", old)
        async with aiohttp.ClientSession() as http:
            answer = await Caller(http, served.url).call("tools/call", {"name": "greet", "arguments": {"name": "upgraded"}})
        assert answer.result["content"] == [{"type": "text", "text": "Hello, upgraded!"}]
    finally:
        await served.stop()
