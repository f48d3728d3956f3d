"""`SIGHUP` and `mcp-tasks-proxy reload` on a real `serve` process (docs/decisions.md §85, §163): a bad
file is refused with its key named and the proxy goes on serving its running configuration; a good
one is applied without dropping the session opened before; with `--workers 2` both workers reload.
`reload` prints every serving process's verdict and exits 0 applied, 1 refused, 2 nothing sent;
the status page lists the last reloads."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
from session_support import SessionCaller
from support import free_port

from proxy.keys import new_key_text

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 30.0


NOT_DRAINED = (
    "upstream: backend 'a' is removed but was not drained: set drain = true on it, reload, wait for the status "
    "page to say drained, then remove it (or list it in remove_with_work)"
)
"""What the proxy says when a reload removes `a` without draining it first."""


def _config(path: Path, state_dir: Path, port: int, store: str, *upstream: tuple[str, str, int]) -> None:
    tables = "".join(f'\n[[upstream]]\nname = "{name}"\nurl = "{url}"\nweight = {weight}\n' for name, url, weight in upstream)
    path.write_text(f'listen = "127.0.0.1:{port}"\nstate_dir = "{state_dir}"\nstore = "{store}"\n{tables}')


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text()}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", *args, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def _line_with(stream: asyncio.StreamReader, text: str) -> str:
    """The next line of `stream` that contains `text` (within WAIT_S)."""

    async def find() -> str:
        while True:
            line = (await stream.readline()).decode()
            assert line, f"the stream ended before a line with {text!r}"
            if text in line:
                return line.strip()

    return await asyncio.wait_for(find(), WAIT_S)


async def _backends(http: aiohttp.ClientSession, base: str) -> list[tuple[str, int]]:
    async with http.get(base + "/status.json") as response:
        return [(b["name"], b["weight"]) for b in (await response.json())["backends"]]


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), WAIT_S)


async def test_sighup_and_the_reload_command_keep_the_old_configuration_on_a_bad_file(
    reference_v1_server, second_v1_server, tmp_path
):
    port = free_port()
    config = tmp_path / "proxy.toml"
    _config(config, tmp_path, port, "memory", ("a", reference_v1_server.url, 1))
    process = await _spawn("serve", "--config", str(config))
    base = f"http://127.0.0.1:{port}"
    try:
        await _line_with(process.stdout, "listening on")
        assert (tmp_path / "serve.pid").read_text() == f"{process.pid}\n"
        async with aiohttp.ClientSession() as http:
            client = SessionCaller(http, base + "/mcp")
            await client.initialize()

            config.write_text(config.read_text().replace("weight = 1", "weight = -1"))
            checked = await _spawn("reload", "--config", str(config))
            out, err = await asyncio.wait_for(checked.communicate(), WAIT_S)
            assert (checked.returncode, out, err.decode().strip()) == (
                2,
                b"",
                (
                    f"mcp-tasks-proxy: configuration error, nothing reloaded: {config}: "
                    "upstream.0.weight: Input should be greater than or equal to 0 (got -1)"
                ),
            )

            process.send_signal(signal.SIGHUP)  # the bad file reaches the proxy anyway
            refused = await _line_with(process.stderr, "reload refused")
            assert refused.endswith(
                f"reload refused, the running configuration stays: {config}: "
                "upstream.0.weight: Input should be greater than or equal to 0 (got -1)"
            )
            assert await _backends(http, base) == [("a", 1)]
            assert (await client.call("tools/call", {"name": "greet", "arguments": {"name": "A"}}))["result"]["content"] == [
                {"type": "text", "text": "Hello, A!"}
            ]

            _config(config, tmp_path, port, "memory", ("a", reference_v1_server.url, 1), ("b", second_v1_server.url, 3))
            sent = await _spawn("reload", "--config", str(config))
            out, _ = await asyncio.wait_for(sent.communicate(), WAIT_S)
            assert (sent.returncode, out.decode().strip()) == (
                0,
                f"sent SIGHUP to mcp-tasks-proxy (pid {process.pid})\n"
                f"pid {process.pid}: applied: backend b added ({second_v1_server.url}, weight 3)",
            )
            added = await _line_with(process.stderr, "reload: backend b added")
            assert added.endswith(f"reload: backend b added ({second_v1_server.url}, weight 3)")
            assert await _backends(http, base) == [("a", 1), ("b", 3)]
            # The session opened before both reloads is still the same session on its backend.
            assert (await client.call("tools/call", {"name": "greet", "arguments": {"name": "B"}}))["result"]["content"] == [
                {"type": "text", "text": "Hello, B!"}
            ]

            # Issue 39: a removal the proxy refuses (a not drained) exits 1, naming the backend and why.
            _config(config, tmp_path, port, "memory", ("b", second_v1_server.url, 3))
            refusing = await _spawn("reload", "--config", str(config))
            out, err = await asyncio.wait_for(refusing.communicate(), WAIT_S)
            assert (refusing.returncode, out.decode().strip(), err) == (
                1,
                f"sent SIGHUP to mcp-tasks-proxy (pid {process.pid})\n"
                f"pid {process.pid}: refused, the running configuration stays: {NOT_DRAINED}",
                b"",
            )
            assert await _backends(http, base) == [("a", 1), ("b", 3)]
            async with http.get(base + "/status.json") as response:
                reloads = (await response.json())["reloads"]
            assert [(r["reload"], r["pid"], r["applied"], r["changes"], r["reason"]) for r in reloads] == [
                (3, process.pid, False, [], NOT_DRAINED),
                (2, process.pid, True, [f"backend b added ({second_v1_server.url}, weight 3)"], None),
                (
                    1,
                    process.pid,
                    False,
                    [],
                    f"{config}: upstream.0.weight: Input should be greater than or equal to 0 (got -1)",
                ),
            ]
            async with http.get(base + "/status") as response:
                page = await response.text()
            assert page.count("<td>refused</td>") == 2 and "backend b added" in page
    finally:
        await _stop(process)
    assert process.returncode == 0 and not (tmp_path / "serve.pid").exists()
    assert not (tmp_path / "reloads" / f"{process.pid}.json").exists()  # a stopped process's verdicts go with it


async def test_sighup_reloads_every_worker(reference_v1_server, second_v1_server, redis_url, tmp_path):
    port = free_port()
    config = tmp_path / "proxy.toml"
    _config(config, tmp_path, port, redis_url, ("a", reference_v1_server.url, 1))
    process = await _spawn("serve", "--config", str(config), "--workers", "2")
    try:
        for _ in range(2):
            await _line_with(process.stdout, "listening on")
        _config(config, tmp_path, port, redis_url, ("a", reference_v1_server.url, 1), ("b", second_v1_server.url, 1))
        process.send_signal(signal.SIGHUP)
        lines = [await _line_with(process.stderr, "reload: backend b added") for _ in range(2)]
        assert [line.split("reload: ")[1] for line in lines] == [f"backend b added ({second_v1_server.url}, weight 1)"] * 2
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
            # a new connection per request: the kernel spreads them over both workers, and each has both backends
            assert [await _backends(http, f"http://127.0.0.1:{port}") for _ in range(6)] == [[("a", 1), ("b", 1)]] * 6
    finally:
        await _stop(process)


async def test_the_reload_command_prints_the_verdict_of_every_worker(reference_v1_server, second_v1_server, redis_url, tmp_path):
    """Issue 39: with `--workers 2` the command waits for both workers' verdicts (the supervisor
    names them in `serve.workers`): applied by both (exit 0), then a removal refused by both (exit 1)."""
    port = free_port()
    config = tmp_path / "proxy.toml"
    _config(config, tmp_path, port, redis_url, ("a", reference_v1_server.url, 1))
    process = await _spawn("serve", "--config", str(config), "--workers", "2")
    try:
        for _ in range(2):
            await _line_with(process.stdout, "listening on")
        named = json.loads((tmp_path / "serve.workers").read_text())
        workers = named["workers"]
        assert (named["supervisor"], len(workers)) == (process.pid, 2)

        _config(config, tmp_path, port, redis_url, ("a", reference_v1_server.url, 1), ("b", second_v1_server.url, 1))
        sent = await _spawn("reload", "--config", str(config))
        out, err = await asyncio.wait_for(sent.communicate(), WAIT_S)
        assert (sent.returncode, out.decode().splitlines(), err) == (
            0,
            [f"sent SIGHUP to mcp-tasks-proxy (pid {process.pid})"]
            + [f"pid {worker}: applied: backend b added ({second_v1_server.url}, weight 1)" for worker in workers],
            b"",
        )

        _config(config, tmp_path, port, redis_url, ("b", second_v1_server.url, 1))
        refusing = await _spawn("reload", "--config", str(config))
        out, err = await asyncio.wait_for(refusing.communicate(), WAIT_S)
        assert (refusing.returncode, out.decode().splitlines(), err) == (
            1,
            [f"sent SIGHUP to mcp-tasks-proxy (pid {process.pid})"]
            + [f"pid {worker}: refused, the running configuration stays: {NOT_DRAINED}" for worker in workers],
            b"",
        )
    finally:
        await _stop(process)
    assert not (tmp_path / "serve.workers").exists()


async def test_the_reload_command_never_signals_a_process_that_is_not_a_serving_proxy(tmp_path):
    """A stale `serve.pid` naming a process that got the pid since (here a `sleep` this test
    started): nothing is sent, the command says why and exits 2, the process lives on."""
    sleeper = await asyncio.create_subprocess_exec("sleep", "60")
    try:
        state = tmp_path / "state"
        state.mkdir()
        (state / "serve.pid").write_text(f"{sleeper.pid}\n")
        command = await _spawn("reload", "--state-dir", str(state))
        out, err = await asyncio.wait_for(command.communicate(), 30)
        assert (command.returncode, out.decode(), err.decode()) == (
            2,
            "",
            f"mcp-tasks-proxy: {state / 'serve.pid'} names process {sleeper.pid}, which is not a running "
            "`mcp-tasks-proxy serve` (a stale pid file?); nothing sent\n",
        )
        assert sleeper.returncode is None
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(sleeper.wait(), 0.5)  # still running: it got no SIGHUP
    finally:
        sleeper.kill()
        await sleeper.wait()


async def test_a_proxy_started_after_one_killed_unreaped_owns_the_pid_file_and_reloads(reference_v1_server, tmp_path):
    """Issue 37, defect 7: a proxy killed with SIGKILL whose parent has not reaped it yet (a zombie
    still answers kill(pid, 0)); a proxy started on the same state_dir holds the state lock, so it
    owns `serve.pid` whatever the file said, and `mcp-tasks-proxy reload` signals it."""
    import subprocess

    state = tmp_path / "state"
    config = tmp_path / "proxy.toml"
    _config(config, state, free_port(), "sqlite", ("a", reference_v1_server.url, 1))
    env = {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text()}
    # subprocess.Popen: nothing reaps it until this test does (asyncio's child watcher would).
    first = subprocess.Popen(  # noqa: ASYNC220 - started, not waited for
        [sys.executable, "-m", "proxy", "serve", "--config", str(config)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    second = None
    try:
        assert "listening on" in (await asyncio.wait_for(asyncio.to_thread(first.stdout.readline), WAIT_S)).decode()
        assert (state / "serve.pid").read_text() == f"{first.pid}\n"
        first.kill()
        # Until it has exited, without reaping it: it stays a zombie, and the file still names it.
        await asyncio.to_thread(os.waitid, os.P_PID, first.pid, os.WEXITED | os.WNOWAIT)
        assert Path(f"/proc/{first.pid}/stat").read_text().split(") ")[1][0] == "Z"  # noqa: ASYNC240 - one small read of procfs
        os.kill(first.pid, 0)  # a zombie answers as if alive
        assert (state / "serve.pid").read_text() == f"{first.pid}\n"

        _config(config, state, free_port(), "sqlite", ("a", reference_v1_server.url, 1))
        second = await _spawn("serve", "--config", str(config))
        await _line_with(second.stdout, "listening on")
        assert (state / "serve.pid").read_text() == f"{second.pid}\n"
        sent = await _spawn("reload", "--config", str(config))
        out, err = await asyncio.wait_for(sent.communicate(), WAIT_S)
        assert (sent.returncode, out.decode().strip(), err) == (
            0,
            f"sent SIGHUP to mcp-tasks-proxy (pid {second.pid})\npid {second.pid}: applied: no backend changed",
            b"",
        )
        assert (await _line_with(second.stderr, "no backend changed")).endswith("reload: no backend changed")
    finally:
        if first.returncode is None:
            first.kill()
        first.wait()
        if second is not None:
            await _stop(second)
    assert second.returncode == 0 and not (state / "serve.pid").exists()
