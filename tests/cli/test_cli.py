"""`mcp-tasks-proxy serve`: probes its backend at start and refuses dialects it cannot serve."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from support import Caller

from proxy.keys import new_key_text

ROOT = Path(__file__).resolve().parents[2]


async def _spawn(*args: str, tmp_path: Path) -> asyncio.subprocess.Process:
    """`python -m proxy ARGS` with a key of its own and its default `state_dir` in `tmp_path`
    (issue 20 item 19: it used `~/.local/state/mcp-tasks-proxy`, whose SQLite store a proxy running
    on the machine holds)."""
    env = {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text(), "MCP_TASKS_PROXY_STATE_DIR": str(tmp_path / "state")}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.mark.peers
async def test_serve_runs_in_front_of_a_v1_server_and_stops_on_sigterm(reference_v1_server, tmp_path):
    process = await _spawn("serve", "--upstream", reference_v1_server.url, "--listen", "127.0.0.1:0", tmp_path=tmp_path)
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert line.startswith("mcp-tasks-proxy listening on http://127.0.0.1:")
        url = line.split()[3]
        async with aiohttp.ClientSession() as http:
            answer = await Caller(http, url).call("tools/call", {"name": "greet", "arguments": {"name": "CLI"}})
        assert answer.result["content"] == [{"type": "text", "text": "Hello, CLI!"}]
    finally:
        if process.returncode is None:  # it may have exited already (the assertion above says why)
            process.send_signal(signal.SIGTERM)
        stopped = await asyncio.wait_for(process.wait(), 15)  # asserted after the block: a failure above is not masked
    assert stopped == 0


async def test_serve_with_default_settings_keeps_its_state_in_the_state_dir_the_environment_names(tmp_path):
    """Issue 20 item 19: with `state_dir` unset, `serve` opened `~/.local/state/mcp-tasks-proxy`,
    refused ("in use by another process") while a proxy with default settings ran on the machine."""
    process = await _spawn("serve", "--upstream", "http://127.0.0.1:1/mcp", "--listen", "127.0.0.1:0", tmp_path=tmp_path)
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert line.startswith("mcp-tasks-proxy listening on http://127.0.0.1:"), line
        assert (tmp_path / "state" / "tasks.sqlite3").is_file()
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        stopped = await asyncio.wait_for(process.wait(), 15)  # asserted after the block: a failure above is not masked
    assert stopped == 0


async def test_serve_names_a_v2_session_backend_and_serves_it(tmp_path):
    """A minimal v2-session peer (no public one runs here): a session-wire server whose initialize
    declares the tasks extension. Every dialect is served now; the start-up line says which one."""

    async def v2_session(request: web.Request) -> web.Response:
        if request.method == "DELETE":
            return web.Response(status=200)
        body = await request.json()
        if body.get("method") == "server/discover":
            return web.json_response(
                {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, "message": "Bad Request: Missing session ID"}},
                status=400,
            )
        if body.get("method") == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "serverInfo": {"name": "s", "version": "1"},
                "capabilities": {"tools": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
            }
            return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": result}, headers={"Mcp-Session-Id": "s1"})
        if "id" not in body:
            return web.Response(status=202)
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {"tools": []}})

    app = web.Application()
    app.router.add_route("*", "/mcp", v2_session)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        process = await _spawn("serve", "--upstream", f"http://{host}:{port}/mcp", "--listen", "127.0.0.1:0", tmp_path=tmp_path)
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    finally:
        await runner.cleanup()
    assert line.startswith("mcp-tasks-proxy listening on http://127.0.0.1:")
    assert process.returncode == 0
    assert f"backend probed: main at http://{host}:{port}/mcp: v2-session (2025-11-25; tool tasks)" in stderr.decode()


async def test_serve_reports_configuration_errors_by_key(tmp_path):
    process = await _spawn("serve", "--upstream", "http://127.0.0.1:1/mcp", "--listen", "nohost", tmp_path=tmp_path)
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert "listen: Value error, must be HOST:PORT" in stderr.decode()


@pytest.mark.parametrize("kind", ["v1", "v2", "fastmcp3"])
async def test_every_reference_server_on_a_busy_port_says_so_before_it_starts(kind, tmp_path):
    """The port is checked before the server's environment is even looked at: the answer comes
    at once (FastMCP 4 used to import for about 20 s before finding the port taken)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        process = await _spawn("reference-server", kind, "--port", str(port), tmp_path=tmp_path)
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert (process.returncode, stdout.decode(), stderr.decode()) == (
        1,
        "",
        f"error: reference {kind} server did not start: cannot listen on 127.0.0.1:{port}: Address already in use\n",
    )


async def test_serve_never_prints_a_status_token_it_refuses(tmp_path):
    """Issue 20 item 17: the start-up error repeated a too short `status_token`."""
    config = tmp_path / "proxy.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nstatus_token = "tok-9f3c2a"\n')
    process = await _spawn("serve", "--upstream", "http://127.0.0.1:1/mcp", "--config", str(config), tmp_path=tmp_path)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert (process.returncode, stdout.decode()) == (2, "")
    refusal = "String should have at least 16 characters (got a string of 10 characters, not shown)"
    assert stderr.decode() == f"mcp-tasks-proxy: configuration error: {config}: status_token: {refusal}\n"


@pytest.mark.peers
async def test_reference_server_on_a_busy_port_says_so_in_one_line(reference_v1_server, tmp_path):
    # reference_v1_server: the mcp-v1 environment exists, so nothing is installed here.
    busy = int(reference_v1_server.url.rsplit(":", 1)[1].split("/", 1)[0])
    process = await _spawn("reference-server", "v1", "--port", str(busy), tmp_path=tmp_path)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert (process.returncode, stdout.decode()) == (1, "")
    assert (
        stderr.decode()
        == f"error: reference v1 server did not start: cannot listen on 127.0.0.1:{busy}: Address already in use\n"
    )


@pytest.mark.peers
async def test_reference_server_names_its_own_pid_and_ends_when_its_server_is_killed(reference_v1_server, tmp_path):
    """A new user signalled the pid the command printed (its server's): the server went, the
    command stayed. It now prints its own pid to signal, and ends (status 1) when its server does."""
    # reference_v1_server: the mcp-v1 environment exists, so nothing is installed here.
    process = await _spawn("reference-server", "v1", "--port", "0", tmp_path=tmp_path)
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        own = f"(this command is pid {process.pid}, its server pid "
        assert (line.startswith("reference v1 server listening on http://127.0.0.1:"), own in line) == (True, True), line
        server = int(line.split(own, 1)[1].split(")", 1)[0])
        assert line.endswith(f"pid {server}); Ctrl-C or SIGTERM to pid {process.pid} stops both\n")
        os.kill(server, signal.SIGKILL)
        stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert (process.returncode, stdout.decode(), stderr.decode()) == (
        1,
        "",
        f"error: the reference v1 server (pid {server}) exited with status -9\n",
    )
