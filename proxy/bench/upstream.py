"""The benchmark's fast upstream: a small aiohttp MCP server, so that the proxy is what is measured.

Run it as a process of its own (its CPU seconds are read from the operating system)::

    python -m proxy.bench.upstream [--wire v1|modern] [--port 0] [--poll-interval-ms 100]

It prints one line ``LISTENING http://127.0.0.1:<port>/mcp`` once it accepts connections (the
protocol of `proxy.demo.processes.ServerProcess`) and stops on SIGTERM or SIGINT. Loopback only.

``--wire v1`` (the default) speaks the session wire (Streamable HTTP, 2025-11-25) with v1 tasks:
`initialize` issues an `Mcp-Session-Id`; a request without one gets 400 "Missing session ID" (as
mcp 1.x answers the proxy's `server/discover` probe), an unknown one 404; tasks are bound to the
session that created them; `GET` holds the session's SSE stream, `DELETE` ends the session.
``--wire modern`` speaks the stateless 2026-07-28 wire with the SEP-2663 tasks extension, for the
relay row of modern clients (a legacy `initialize` gets -32022, GET and DELETE 405).
``--wire stdio`` serves the v1 tools on stdin/stdout instead (one session; no readiness line),
for the row of a stdio backend the proxy runs.

Tools:

==========  ===========  ===============================================================
tool        taskSupport  behaviour
==========  ===========  ===============================================================
echo(text)  (none)       ``{"content": [{"type": "text", "text": text}]}``, at once
nowork      required     a task with no work: ``working`` when created, ``completed``
                         (result ``done``) from then on
sleep       required     a task that stays ``working`` for ``seconds``, then ``completed``
(seconds)
progress    (none)       with a ``progressToken``: an SSE answer of ``count`` (default 100)
(count)                  ``notifications/progress``, then the result ``progress done``
ask(text)   required     session wire only: a task that asks one question (``confirm
                         <text>``, an ``elicitation/create`` on the ``tasks/result``
                         stream) and completes with ``<text> -> <reply>``
wait(ms)    (none)       session wire only: a plain call answered ``waited`` after ``ms``
                         milliseconds (the proxy holds it as a task: bench ``--held``)
==========  ===========  ===============================================================

State is bounded: at most `MAX_TASKS` tasks and `MAX_SESSIONS` sessions (oldest dropped first).
Stdlib and aiohttp only.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import secrets
import signal
import sys
import time
from typing import Any

from aiohttp import web

from proxy.demo.servers.loopback_serve import loopback_socket

from .upstream_parts import (
    DONE,
    KEEPALIVE_S,
    LEGACY,
    MAX_SESSIONS,
    MAX_TASKS,
    MODERN,
    RELATED_TASK,
    SERVER_INFO,
    TASK_TOOLS,
    TASKS_EXT,
    TOOLS_MODERN,
    TOOLS_V1,
    Question,
    RpcError,
    Session,
    Task,
    count_of,
    dumps,
    json_response,
    read_message,
)


class FastUpstream:
    """The request handling of both wires; state in bounded ordered dicts."""

    def __init__(self, *, poll_interval_ms: int):
        self.poll_ms = poll_interval_ms
        self.tasks: collections.OrderedDict[str, Task] = collections.OrderedDict()
        self.sessions: collections.OrderedDict[str, Session] = collections.OrderedDict()

    # -- shared ----------------------------------------------------------------------------------

    def _new_task(self, owner: str, name: str, arguments: dict[str, Any], ttl: Any) -> Task:
        delay = 0.0
        if name == "sleep":
            seconds = arguments.get("seconds", 1)
            delay = float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else 1.0
        task = Task(secrets.token_hex(16), owner, time.monotonic() + delay,
                    ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None)
        self.tasks[task.id] = task
        if len(self.tasks) > MAX_TASKS:
            self.tasks.popitem(last=False)
        return task

    def _task(self, owner: str, params: dict[str, Any]) -> Task:
        task = self.tasks.get(params.get("taskId"))  # type: ignore[arg-type]
        if task is None or task.owner != owner:
            raise RpcError(-32602, "Task not found", 400)
        return task

    @staticmethod
    async def _progress(request: web.Request, request_id: Any, token: Any, count: int,
                        headers: dict[str, str], *, modern: bool = False) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers})
        await response.prepare(request)
        for i in range(1, count + 1):
            note = {"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": i, "total": count}}
            await response.write(b"event: message\ndata: " + dumps(note) + b"\n\n")
        result = {"content": [{"type": "text", "text": "progress done"}], "isError": False}
        if modern:
            result["resultType"] = "complete"
        await response.write(b"event: message\ndata: " + dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + b"\n\n")
        await response.write_eof()
        return response

    # -- session wire (v1) -------------------------------------------------------------------------

    async def post_v1(self, request: web.Request) -> web.StreamResponse:
        accept = request.headers.get("Accept", "")
        if "application/json" not in accept or "text/event-stream" not in accept:
            return json_response(RpcError(-32600, "Not Acceptable: Client must accept both application/json and text/event-stream",
                                  406).body("server-error"), 406)
        message = await read_message(request)
        if isinstance(message, web.Response):
            return message
        method = message.get("method")
        request_id = message.get("id")
        session_id = request.headers.get("Mcp-Session-Id")
        if session_id is None:
            if method == "initialize" and request_id is not None:
                return self._initialize(request_id)
            return json_response(RpcError(-32600, "Bad Request: Missing session ID", 400).body("server-error"), 400)
        session = self.sessions.get(session_id)
        if session is None:
            return json_response(RpcError(-32600, "Session not found", 404).body("server-error"), 404)
        if method is None and request_id is not None and ("result" in message or "error" in message):
            session.answered(message)
            return web.Response(status=202)
        if not isinstance(method, str) or request_id is None:
            return web.Response(status=202)
        params = message.get("params") or {}
        try:
            if method == "tools/call" and params.get("name") == "progress":
                token = (params.get("_meta") or {}).get("progressToken")
                if token is not None:
                    return await self._progress(request, request_id, token, count_of(params), {"Mcp-Session-Id": session_id})
            if method == "tasks/result":
                task = self._task(session.id, params)
                if task.question is not None and task.question.reply is None and not task.cancelled:
                    return await self._ask(request, request_id, session, task, task.question)
            result = await self._dispatch_v1(session, method, params)
        except RpcError as exc:
            return json_response(exc.body(request_id), 200)
        return json_response(dumps({"jsonrpc": "2.0", "id": request_id, "result": result}), 200)

    async def _ask(self, request: web.Request, request_id: Any, session: Session, task: Task,
                   question: Question) -> web.StreamResponse:
        """A `tasks/result` of an `ask` task not answered yet: an SSE answer carrying the question
        (again, if an earlier stream carried it), then, once answered, the result."""
        response = web.StreamResponse(status=200, headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "Mcp-Session-Id": session.id})
        await response.prepare(request)
        session.asked(question)
        await response.write(b"event: message\ndata: " + dumps(question.request(task.id)) + b"\n\n")
        await question.answered.wait()
        if task.cancelled:
            answer = RpcError(-32602, "Task was cancelled").body(request_id)
        else:
            answer = dumps({"jsonrpc": "2.0", "id": request_id, "result": question.result(task.id)})
        await response.write(b"event: message\ndata: " + answer + b"\n\n")
        await response.write_eof()
        return response

    def _initialize(self, request_id: Any) -> web.Response:
        session = Session(secrets.token_hex(16))
        self.sessions[session.id] = session
        if len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        result = {"protocolVersion": LEGACY, "serverInfo": SERVER_INFO,
                  "capabilities": {"tools": {}, "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}}}
        return web.Response(body=dumps({"jsonrpc": "2.0", "id": request_id, "result": result}),
                            content_type="application/json", headers={"Mcp-Session-Id": session.id})

    async def _dispatch_v1(self, session: Session, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "tools/call":
            name = params.get("name")
            arguments = params.get("arguments") or {}
            task = params.get("task")
            if name == "echo":
                if task is not None:
                    raise RpcError(-32601, "Tool echo does not support task-augmented invocation")
                return {"content": [{"type": "text", "text": str(arguments.get("text", ""))}], "isError": False}
            if name in TASK_TOOLS:
                if not isinstance(task, dict):
                    raise RpcError(-32601, f"Tool {name} requires task-augmented invocation")
                created = self._new_task(session.id, name, arguments, task.get("ttl"))
                return {"task": created.v1(self.poll_ms, time.monotonic() if name == "sleep" else created.done_at - 1)}
            if name == "ask":
                if not isinstance(task, dict):
                    raise RpcError(-32601, "Tool ask requires task-augmented invocation")
                created = self._new_task(session.id, name, arguments, task.get("ttl"))
                created.question = Question(str(arguments.get("text", "")))
                return {"task": created.v1(self.poll_ms, time.monotonic(), "working")}
            if name == "progress":
                return {"content": [{"type": "text", "text": "progress done"}], "isError": False}
            if name == "wait":
                await asyncio.sleep(float(arguments.get("ms", 0)) / 1000)
                return {"content": [{"type": "text", "text": "waited"}], "isError": False}
            raise RpcError(-32602, f"Unknown tool: {name}")
        if method == "tasks/get":
            return self._task(session.id, params).v1(self.poll_ms, time.monotonic())
        if method == "tasks/result":
            task = self._task(session.id, params)
            if task.question is not None:
                await task.question.answered.wait()  # on stdio: the question went out before (serve_stdio)
            wait = task.done_at - time.monotonic()
            if wait > 0 and not task.cancelled:
                await asyncio.sleep(wait)
            if task.cancelled:
                raise RpcError(-32602, "Task was cancelled")
            if task.question is not None:
                return task.question.result(task.id)
            return {**DONE, "_meta": {RELATED_TASK: {"taskId": task.id}}}
        if method == "tasks/cancel":
            task = self._task(session.id, params)
            if task.status(time.monotonic()) not in ("working", "input_required"):
                raise RpcError(-32602, "Cannot cancel a task in a terminal status")
            task.cancelled = True
            if task.question is not None:
                task.question.answered.set()
            return task.v1(self.poll_ms, time.monotonic())
        if method == "tasks/list":
            now = time.monotonic()
            return {"tasks": [t.v1(self.poll_ms, now) for t in list(self.tasks.values())[-50:] if t.owner == session.id]}
        if method == "tools/list":
            return {"tools": TOOLS_V1}
        if method == "ping":
            return {}
        raise RpcError(-32601, f"Method not found: {method}")

    async def get_v1(self, request: web.Request) -> web.StreamResponse:
        session = self.sessions.get(request.headers.get("Mcp-Session-Id", ""))
        if session is None:
            return json_response(RpcError(-32600, "Session not found", 404).body("server-error"), 404)
        if "text/event-stream" not in request.headers.get("Accept", ""):
            return json_response(RpcError(-32600, "Not Acceptable", 406).body("server-error"), 406)
        if session.stream is not None:
            return json_response(RpcError(-32000, "Conflict: Only one SSE stream is allowed per session", 409).body("server-error"), 409)
        stream = web.StreamResponse(status=200, headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "Mcp-Session-Id": session.id})
        await stream.prepare(request)
        session.stream = stream
        try:
            while session.stream is stream and self.sessions.get(session.id) is session:
                await asyncio.sleep(KEEPALIVE_S)
                await stream.write(b": keep-alive\n\n")
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if session.stream is stream:
                session.stream = None
        return stream

    async def delete_v1(self, request: web.Request) -> web.Response:
        session = self.sessions.pop(request.headers.get("Mcp-Session-Id", ""), None)
        if session is None:
            return json_response(RpcError(-32600, "Session not found", 404).body("server-error"), 404)
        session.stream = None
        return web.Response(status=200)

    # -- modern wire (2026-07-28) --------------------------------------------------------------------

    async def post_modern(self, request: web.Request) -> web.StreamResponse:
        message = await read_message(request)
        if isinstance(message, web.Response):
            return message
        method = message.get("method")
        request_id = message.get("id")
        params = message.get("params") or {}
        meta = params.get("_meta") or {}
        try:
            version = meta.get("io.modelcontextprotocol/protocolVersion")
            if version != MODERN:
                raise RpcError(-32022, "Unsupported protocol version", 400, {"supported": [MODERN], "requested": version})
            if request.headers.get("MCP-Protocol-Version") != MODERN or (
                    isinstance(method, str) and request.headers.get("Mcp-Method") != method):
                raise RpcError(-32020, "Header mismatch", 400)
            if not isinstance(method, str):
                raise RpcError(-32600, "Invalid request", 400)
            if request_id is None:
                return web.Response(status=202)
            capabilities = meta.get("io.modelcontextprotocol/clientCapabilities") or {}
            declared = TASKS_EXT in (capabilities.get("extensions") or {})
            if method == "tools/call" and params.get("name") == "progress":
                token = meta.get("progressToken")
                if token is not None:
                    return await self._progress(request, request_id, token, count_of(params), {}, modern=True)
            result = self._dispatch_modern(method, params, declared)
        except RpcError as exc:
            return json_response(exc.body(request_id), exc.status)
        return json_response(dumps({"jsonrpc": "2.0", "id": request_id, "result": result}), 200)

    def _dispatch_modern(self, method: str, params: dict[str, Any], declared: bool) -> dict[str, Any]:
        if method == "tools/call":
            name = params.get("name")
            arguments = params.get("arguments") or {}
            if name == "echo":
                return {"content": [{"type": "text", "text": str(arguments.get("text", ""))}], "isError": False,
                        "resultType": "complete"}
            if name in TASK_TOOLS:
                if not declared:
                    raise RpcError(-32021, f"Tool {name} needs the tasks extension", 400,
                                   {"requiredCapabilities": {"extensions": {TASKS_EXT: {}}}})
                created = self._new_task("", name, arguments, 3_600_000)
                now = time.monotonic() if name == "sleep" else created.done_at - 1
                return {"resultType": "task", **created.modern(self.poll_ms, now)}
            if name == "progress":
                return {"content": [{"type": "text", "text": "progress done"}], "isError": False, "resultType": "complete"}
            raise RpcError(-32602, f"Unknown tool: {name}", 400)
        if method in ("tasks/get", "tasks/cancel", "tasks/update"):
            if not declared:
                raise RpcError(-32021, "The tasks extension is not declared", 400,
                               {"requiredCapabilities": {"extensions": {TASKS_EXT: {}}}})
            task = self._task("", params)
            if method == "tasks/cancel":
                task.cancelled = task.cancelled or task.status(time.monotonic()) == "working"
                return {"resultType": "complete"}
            if method == "tasks/update":
                return {"resultType": "complete"}
            detailed: dict[str, Any] = {"resultType": "complete", **task.modern(self.poll_ms, time.monotonic())}
            if detailed["status"] == "completed":
                detailed["result"] = DONE
            return detailed
        if method == "server/discover":
            return {"resultType": "complete", "supportedVersions": [MODERN],
                    "capabilities": {"tools": {}, "extensions": {TASKS_EXT: {}}}, "ttlMs": 0, "cacheScope": "private",
                    "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO}}
        if method == "tools/list":
            return {"tools": TOOLS_MODERN, "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
        raise RpcError(-32601, f"Method not found: {method}", 404)

    @staticmethod
    async def not_allowed(_request: web.Request) -> web.Response:
        return json_response(RpcError(-32600, "Method Not Allowed", 405).body(None), 405)


def create_app(wire: str = "v1", *, poll_interval_ms: int = 100) -> web.Application:
    """The fast upstream as an aiohttp application serving `/mcp` (and `/mcp/`)."""
    server = FastUpstream(poll_interval_ms=poll_interval_ms)
    app = web.Application(client_max_size=4 * 1024 * 1024)
    for path in ("/mcp", "/mcp/"):
        if wire == "modern":
            app.router.add_post(path, server.post_modern)
            app.router.add_get(path, server.not_allowed, allow_head=False)
            app.router.add_delete(path, server.not_allowed)
        else:
            app.router.add_post(path, server.post_v1)
            app.router.add_get(path, server.get_v1, allow_head=False)
            app.router.add_delete(path, server.delete_v1)
    return app


async def serve(wire: str, host: str, port: int, poll_interval_ms: int) -> None:
    """Serve until SIGTERM or SIGINT; print the readiness line once listening."""
    sock = loopback_socket(host, port, backlog=1024)
    runner = web.AppRunner(create_app(wire, poll_interval_ms=poll_interval_ms), access_log=None,
                           handler_cancellation=True, shutdown_timeout=1)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    url_host = f"[{host}]" if ":" in host else host
    print(f"LISTENING http://{url_host}:{sock.getsockname()[1]}/mcp", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


async def serve_stdio(poll_interval_ms: int) -> None:
    """``--wire stdio``: the v1 tools on stdin/stdout (one session, newline-delimited JSON-RPC)
    until EOF; each request is answered in a task of its own (a `tasks/result` may wait)."""
    server = FastUpstream(poll_interval_ms=poll_interval_ms)
    session = Session("stdio")
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=16 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout.buffer
    running: set[asyncio.Task[None]] = set()
    initialize_result = json.loads(server._initialize(0).body)["result"]  # type: ignore[arg-type]

    def send(message: dict[str, Any]) -> None:
        out.write(dumps(message) + b"\n")
        out.flush()

    async def answer(message: dict[str, Any]) -> None:
        method, request_id, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": request_id, "result": initialize_result})
            return
        token = (params.get("_meta") or {}).get("progressToken")
        if method == "tools/call" and params.get("name") == "progress" and token is not None:
            count = count_of(params)
            for i in range(1, count + 1):
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": i, "total": count}})
        asking = server.tasks.get(params.get("taskId")) if method == "tasks/result" else None
        if asking is not None and asking.question is not None and asking.question.reply is None:
            session.asked(asking.question)
            send(asking.question.request(asking.id))
        try:
            send({"jsonrpc": "2.0", "id": request_id, "result": await server._dispatch_v1(session, str(method), params)})
        except RpcError as exc:
            send(json.loads(exc.body(request_id)))

    while line := await reader.readline():
        message = json.loads(line)
        if message.get("method") and message.get("id") is not None:
            task = asyncio.ensure_future(answer(message))
            running.add(task)
            task.add_done_callback(running.discard)
        elif "method" not in message and ("result" in message or "error" in message):
            session.answered(message)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The benchmark's fast MCP upstream.")
    parser.add_argument("--wire", choices=["v1", "modern", "stdio"], default="v1")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--poll-interval-ms", type=int, default=100)
    args = parser.parse_args(argv)
    if args.wire == "stdio":
        asyncio.run(serve_stdio(args.poll_interval_ms))
        return
    asyncio.run(serve(args.wire, args.host, args.port, args.poll_interval_ms))


if __name__ == "__main__":
    main()
