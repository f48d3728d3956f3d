"""A stdio backend whose command will not start (issue 37, defect 8): the proxy refuses to start,
exit 2 naming the command, rather than retrying for ever while every request waits 5 s and gets a
502. The rule: the command cannot be run, or the first start's process exits before answering the
probe's `initialize` (its exit status and last stderr lines named). Real launches of `serve`,
`stdio` and a reload that adds such a backend (refused; the proxy goes on serving)."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from pathlib import Path

import aiohttp
from session_support import SessionCaller
from support import free_port

from proxy.keys import new_key_text

ROOT = Path(__file__).resolve().parents[2]
NOTES = [sys.executable, str(ROOT / "tests" / "peers" / "notes_stdio_server.py")]
WAIT_S = 30.0
MISSING = "/nonexistent/mcp-stdio-server"


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text(), "MCP_TASKS_PROXY_STATE_DIR": str(tmp_path / "state")}


async def _run(tmp_path: Path, *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        *args,
        cwd=ROOT,
        env=_env(tmp_path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin), WAIT_S)
    finally:
        if process.returncode is None:  # still serving: the refusal did not come
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def _refusal(err: str) -> str:
    [line] = [line for line in err.splitlines() if "refusing to start" in line]
    return line


async def test_serve_refuses_a_command_that_does_not_exist(tmp_path):
    status, out, err = await _run(
        tmp_path, "serve", "--listen", "127.0.0.1:0", "--store", "memory", "--upstream-command", MISSING
    )
    assert (status, out) == (2, "")
    assert _refusal(err) == (
        f"mcp-tasks-proxy: refusing to start: backend 'main': its command '{MISSING}' cannot be run: No such file or directory"
    )


async def test_serve_refuses_a_command_not_found_on_path(tmp_path):
    command = "no-such-mcp-server-here --stdio"
    status, out, err = await _run(
        tmp_path, "serve", "--listen", "127.0.0.1:0", "--store", "memory", "--upstream-command", command
    )
    assert (status, out) == (2, "")
    assert _refusal(err) == (
        f"mcp-tasks-proxy: refusing to start: backend 'main': its command {command!r} cannot be run: No such file or directory"
    )


async def test_serve_refuses_a_command_that_exits_at_once_naming_its_status_and_stderr(tmp_path):
    command = shlex.join(["sh", "-c", "echo 'config file missing' >&2; echo 'giving up' >&2; exit 3"])
    status, out, err = await _run(
        tmp_path, "serve", "--listen", "127.0.0.1:0", "--store", "memory", "--upstream-command", command
    )
    assert (status, out) == (2, "")
    assert _refusal(err) == (
        f"mcp-tasks-proxy: refusing to start: backend 'main': its command {command!r} exited with status 3 before answering "
        "initialize; its last stderr lines: config file missing | giving up"
    )


async def test_serve_refuses_a_python_server_that_exits_before_answering(tmp_path):
    argv = [sys.executable, "-c", "import sys; sys.stdin.readline(); sys.exit(4)"]
    status, out, err = await _run(
        tmp_path, "serve", "--listen", "127.0.0.1:0", "--store", "memory", "--upstream-command", shlex.join(argv)
    )
    assert (status, out) == (2, "")
    assert _refusal(err) == (
        f"mcp-tasks-proxy: refusing to start: backend 'main': its command {shlex.join(argv)!r} exited with status 4 before "
        "answering initialize; it wrote nothing to stderr"
    )


async def test_the_stdio_face_refuses_a_command_that_does_not_exist(tmp_path):
    """`mcp-tasks-proxy stdio` (what a desktop host launches): exit 2 on stderr, nothing on the wire."""
    status, out, err = await _run(tmp_path, "stdio", "--upstream-command", MISSING, stdin=b"")
    assert (status, out) == (2, "")
    assert _refusal(err) == (
        f"mcp-tasks-proxy: refusing to start: backend 'main': its command '{MISSING}' cannot be run: No such file or directory"
    )


def _config(path: Path, port: int, *backends: tuple[str, list[str]]) -> None:
    tables = "".join(f'\n[[upstream]]\nname = "{name}"\ncommand = {argv!r}\n'.replace("'", '"') for name, argv in backends)
    path.write_text(f'listen = "127.0.0.1:{port}"\nstore = "memory"\n{tables}')


async def _line_with(stream: asyncio.StreamReader, text: str) -> str:
    async def find() -> str:
        while True:
            line = (await stream.readline()).decode()
            assert line, f"the stream ended before a line with {text!r}"
            if text in line:
                return line.strip()

    return await asyncio.wait_for(find(), WAIT_S)


async def test_a_reload_adding_a_command_that_cannot_start_is_refused_and_the_proxy_serves_on(tmp_path):
    port = free_port()
    config = tmp_path / "proxy.toml"
    _config(config, port, ("a", NOTES))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "serve",
        "--config",
        str(config),
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await _line_with(process.stdout, "listening on")
        _config(config, port, ("a", NOTES), ("b", [MISSING]))
        sent = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy", "reload", "--config", str(config), cwd=ROOT, env=_env(tmp_path)
        )
        assert await asyncio.wait_for(sent.wait(), WAIT_S) == 1  # refused by the proxy (issue 39: the command says so)
        refused = await _line_with(process.stderr, "reload refused")
        assert refused.endswith(
            "reload refused, the running configuration stays: upstream: backend 'b': "
            f"its command '{MISSING}' cannot be run: No such file or directory"
        )
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/status.json") as response:
                assert [b["name"] for b in (await response.json())["backends"]] == ["a"]
            client = SessionCaller(http, f"http://127.0.0.1:{port}/mcp")
            await client.initialize()
            answer = await client.call("tools/call", {"name": "remember", "arguments": {"text": "still serving"}})
            assert answer["result"]["content"] == [{"type": "text", "text": "kept"}], answer
        assert process.returncode is None
    finally:
        if process.returncode is None:
            process.terminate()
        stopped = await asyncio.wait_for(process.wait(), WAIT_S)  # asserted after the block: a failure above is not masked
    assert stopped == 0
