"""Faults at the stdio face (`mcp-tasks-proxy stdio`, issue 20 items 8–10; docs/decisions.md §74, §75).

The face runs as a subprocess with real stdin and stdout; the host is this test, writing and
reading JSON-RPC lines. The backend is the reference v1 server (`mcp==1.30.0`), over HTTP (killed
with SIGKILL and started again on its port) or as a stdio process the face's proxy runs (its
process killed with SIGKILL, restarted by the proxy).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from support import until

from proxy.demo.peers import ensure_peer_env
from proxy.demo.processes import V1_SERVER_SCRIPT, ServerProcess, start_reference_v1_server

pytestmark = pytest.mark.peers
PROXY = Path(sys.executable).with_name("mcp-tasks-proxy")
LIMIT = 64 * 1024 * 1024  # proxy/faces/stdio_lines.py MAX_LINE_BYTES
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}},
}
RENEWED = {
    "jsonrpc": "2.0",
    "method": "notifications/message",
    "params": {
        "level": "warning",
        "logger": "mcp-tasks-proxy",
        "data": {
            "event": "upstream session renewed",
            "reason": "the backend does not know the session (HTTP 404)",
            "lost": ["requests in flight", "tasks"],
        },
    },
}


def greet(request_id: int, name: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "greet", "arguments": {"name": name}}}


def greeted(request_id: int, name: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"content": [{"type": "text", "text": f"Hello, {name}!"}], "isError": False},
    }


class Face:
    """`mcp-tasks-proxy stdio` as a child process: `send` a line, `read` the next one."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: Path):
        self.process = process
        self.stderr = stderr

    @classmethod
    async def start(cls, tmp_path: Path, *upstream: str) -> Face:
        config = tmp_path / "proxy.toml"
        config.write_text(f'state_dir = "{tmp_path}"\nlog_level = "info"\n', encoding="utf-8")
        stderr = tmp_path / "face.stderr"
        with stderr.open("wb") as sink:
            process = await asyncio.create_subprocess_exec(
                str(PROXY), "stdio", *upstream, "--config", str(config),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=sink, limit=1 << 20,
            )  # fmt: skip
        return cls(process, stderr)

    async def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    async def read(self, timeout_s: float = 60) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout_s)
        assert line, f"the face ended its stdout (exit {await self.process.wait()}): {self.log()[-3000:]}"
        return json.loads(line)

    async def initialize(self, message: dict[str, Any] = INITIALIZE) -> dict[str, Any]:
        await self.send(message)
        answer = await self.read()
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def log(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")

    async def stop(self) -> int:
        """EOF on stdin, then the exit status (SIGKILL by its PID after 30 s)."""
        if self.process.stdin is not None and not self.process.stdin.is_closing():
            self.process.stdin.close()
        try:
            return await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError:
            self.process.kill()
            return await self.process.wait()


def children(pid: int) -> set[int]:
    """The PIDs of `pid`'s child processes (Linux /proc)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            with open(task / "children", encoding="ascii") as f:
                found.update(int(p) for p in f.read().split())
        except FileNotFoundError:  # the thread ended since the directory was listed
            continue
    return found


async def test_errors_answer_the_id_of_their_request(reference_v1_server: ServerProcess, tmp_path: Path) -> None:
    """Item 8: the proxy's 413 for a line over its 4 MiB body limit, and the face's own refusal
    of an invalid request, used to be written without the request's id."""
    face = await Face.start(tmp_path, "--upstream", reference_v1_server.url)
    try:
        assert (await face.initialize())["id"] == 1
        big = json.dumps(greet(8, "x" * (5 * 1024 * 1024))).encode() + b"\n"
        await face.send(big)
        assert await face.read() == {
            "jsonrpc": "2.0",
            "id": 8,
            "error": {"code": -32600, "message": "Request body larger than 4194304 bytes"},
        }
        await face.send({"jsonrpc": "2.0", "id": 9, "method": ""})
        assert await face.read() == {
            "jsonrpc": "2.0",
            "id": 9,
            "error": {"code": -32600, "message": 'Invalid request: "method" must be a non-empty string'},
        }
        await face.send(b'{"jsonrpc": "2.0", "id": "ten", "method": "tools/call", "params": {"name": \n')
        assert await face.read() == {
            "jsonrpc": "2.0",
            "id": "ten",
            "error": {"code": -32700, "message": "Parse error: Expecting value at line 1, column 76"},
        }
        await face.send(greet(11, "after"))
        assert await face.read() == greeted(11, "after")
    finally:
        stopped = await face.stop()  # asserted after the block: a failure above is not masked
    assert stopped == 0


async def test_before_initialize_a_ping_is_answered_and_a_request_refused_in_order(
    reference_v1_server: ServerProcess, tmp_path: Path
) -> None:
    """Before, a request sent before `initialize` went to the proxy without a session and its
    refusal, in HTTP words ("Missing session ID … MCP-Protocol-Version header"), came after the
    `initialize` answer that followed it (docs/decisions.md §142)."""
    face = await Face.start(tmp_path, "--upstream", reference_v1_server.url)
    try:
        await face.send({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})
        await face.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
        await face.send({"jsonrpc": "2.0", "id": 8, "method": "ping"})
        await face.send(INITIALIZE)
        refused = {"code": -32600, "message": "Invalid request: the session is not initialized (send initialize first)"}
        assert await face.read() == {"jsonrpc": "2.0", "id": 7, "error": refused}
        assert await face.read() == {"jsonrpc": "2.0", "id": 8, "result": {}}
        answer = await face.read()
        assert (answer["id"], answer["result"]["serverInfo"]["name"]) == (1, "mcp-tasks-proxy-reference-v1")
        await face.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await face.send(greet(9, "after"))
        assert await face.read() == greeted(9, "after")
    finally:
        stopped = await face.stop()  # asserted after the block: a failure above is not masked
    assert stopped == 0
    assert "stdio face: a notification before initialize was dropped (notifications/roots/list_changed)" in face.log()


async def test_a_request_goes_on_the_session_it_was_read_under_and_only_a_request_is_initialize(
    reference_v1_server: ServerProcess, tmp_path: Path
) -> None:
    """Before, a request followed by `initialize` in one read was sent with no session (the
    proxy's HTTP-worded "Missing session ID"), and a notification named `initialize` ended the
    live session (a tester's findings, docs/decisions.md §142)."""
    face = await Face.start(tmp_path, "--upstream", reference_v1_server.url)
    try:
        await face.send({"jsonrpc": "2.0", "method": "initialize", "params": INITIALIZE["params"]})  # no id: dropped
        assert (await face.initialize())["id"] == 1
        await face.send({"jsonrpc": "2.0", "method": "initialize", "params": INITIALIZE["params"]})
        await face.send(greet(2, "still"))
        assert await face.read() == greeted(2, "still")
        again = {**INITIALIZE, "id": "re"}
        await face.send(json.dumps(greet(3, "before")).encode() + b"\n" + json.dumps(again).encode() + b"\n")
        answers = {answer["id"]: answer for answer in (await face.read(), await face.read())}
        assert (answers[3], answers["re"]["result"]["serverInfo"]["name"]) == (
            greeted(3, "before"),
            "mcp-tasks-proxy-reference-v1",
        )
        await face.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await face.send(greet(4, "after"))
        assert await face.read() == greeted(4, "after")
    finally:
        stopped = await face.stop()  # asserted after the block: a failure above is not masked
    assert stopped == 0
    assert "stdio face: a notification before initialize was dropped (initialize)" in face.log()


async def test_a_line_over_64_mib_is_refused_and_the_next_is_answered(reference_v1_server: ServerProcess, tmp_path: Path) -> None:
    """Item 10: a line over 64 MiB used to end the process (`ValueError: Separator is not found`)."""
    face = await Face.start(tmp_path, "--upstream", reference_v1_server.url)
    try:
        assert (await face.initialize())["id"] == 1
        head = b'{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "greet", "arguments": {"name": "'
        first = head + b"y" * (LIMIT + 1 - len(head)) + b'"}}}\n'
        await face.send(first)
        refused = "Request line longer than 67108864 bytes (the stdio face's limit): skipped"
        assert await face.read() == {"jsonrpc": "2.0", "id": 12, "error": {"code": -32600, "message": refused}}
        # the id after the long member: not found in the line's first 64 KiB, so the error has none
        second = b'{"jsonrpc": "2.0", "method": "ping", "params": {"x": "' + b"z" * LIMIT + b'"}, "id": 13}\n'
        await face.send(second)
        assert await face.read() == {"jsonrpc": "2.0", "error": {"code": -32600, "message": refused}}
        await face.send(greet(14, "next"))
        assert await face.read() == greeted(14, "next")
    finally:
        stopped = await face.stop()  # asserted after the block: a failure above is not masked
    assert stopped == 0
    refusals = [line.split("WARNING proxy.faces.stdio: ")[1] for line in face.log().splitlines() if "stdin line" in line]
    assert refusals == [f"stdin line of {len(line) - 1} bytes refused: longer than {LIMIT} bytes" for line in (first, second)]


async def test_a_restarted_http_backend_gets_a_new_session_and_the_host_is_told(tmp_path: Path) -> None:
    """Item 9, HTTP: after the backend is killed (SIGKILL) and started again on its port, the
    request in flight is answered with an error, the next one used to get "Session not found"
    (id "server-error") for good; now the face opens a new session, says so, and answers it."""
    backend = start_reference_v1_server()
    port = urlparse(backend.url).port
    assert port is not None
    face = await Face.start(tmp_path, "--upstream", backend.url)
    initialize = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": {"elicitation": {}}}}
    restarted: ServerProcess | None = None
    try:
        assert (await face.initialize(initialize))["id"] == 1
        await face.send(greet(2, "before"))
        assert await face.read() == greeted(2, "before")
        # a call that asks the host a question before its task exists: in flight at the backend
        await face.send(
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "test_tool_with_task", "task": {}}}
        )
        assert (await face.read())["method"] == "elicitation/create"
        os.kill(backend.pid, signal.SIGKILL)
        backend.stop()  # reaps it
        assert await face.read() == {
            "jsonrpc": "2.0",
            "id": 3,
            "error": {"code": -32603, "message": "No answer from the backend: its answer (HTTP 200) ended without a response"},
        }
        restarted = start_reference_v1_server(port=port)
        await face.send(greet(4, "after"))
        assert [await face.read(), await face.read()] == [RENEWED, greeted(4, "after")]
        # the host's own initialize opens a session too (it used to be sent with the lost one's id)
        await face.send({**initialize, "id": 5})
        assert (await face.read())["result"]["serverInfo"]["name"] == "mcp-tasks-proxy-reference-v1"
        await face.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await face.send(greet(6, "again"))
        assert await face.read() == greeted(6, "again")
    finally:
        stopped = await face.stop()
        backend.stop()
        if restarted is not None:
            restarted.stop()
    assert stopped == 0
    assert "lost (the backend does not know the session (HTTP 404)); opened" in face.log()


async def test_a_crashed_stdio_backend_gets_a_new_session_and_the_host_is_told(tmp_path: Path) -> None:
    """Item 9, stdio: the backend's process is killed (SIGKILL); the proxy starts it again and
    forgets its sessions (decision 59), which used to leave the host with "Session not found"."""
    command = f"{ensure_peer_env('mcp-v1')} {V1_SERVER_SCRIPT} --stdio"
    face = await Face.start(tmp_path, "--upstream-command", command)
    try:
        assert (await face.initialize())["id"] == 1
        await face.send(greet(2, "before"))
        assert await face.read() == greeted(2, "before")
        (first,) = await until(lambda: children(face.process.pid) or None, "the stdio backend's process", 60)
        os.kill(first, signal.SIGKILL)
        (second,) = await until(
            lambda: (c := children(face.process.pid)) and first not in c and c, "the process started again", 60
        )
        await until(lambda: f"(pid {second})" in face.log(), "the proxy's log of its start", 60)
        await face.send(greet(3, "after"))
        assert [await face.read(), await face.read()] == [RENEWED, greeted(3, "after")]
    finally:
        stopped = await face.stop()  # asserted after the block: a failure above is not masked
    assert stopped == 0
