"""Minimal v2-session MCP server: SEP-2663 tasks on the 2025-11-25 session wire (docs/wire.md §1, §3, §5).

No public v2-session server runs here, so this is a minimal peer written for mcp-tasks-proxy's tests.
Pure aiohttp, no MCP SDK; it runs in the proxy's own venv and binds loopback only::

    python tests/peers/v2_session_server.py --host 127.0.0.1 --port 0   # prints LISTENING http://127.0.0.1:<port>/mcp

Tests may run it in-process with :func:`build_app` or :func:`start`.

* Session wire: ``initialize`` mints ``Mcp-Session-Id``; notifications and POSTed responses get 202; answers are
  JSON (SSE only for the ``tools/call`` that asks first); no session id: 400, unknown or deleted: 404; GET opens an
  idle session stream (one per session, else 409); DELETE ends the session. JSON-RPC errors travel on HTTP 200.
* Tasks only in sessions whose ``initialize`` declared ``capabilities.extensions["io.modelcontextprotocol/tasks"]``;
  other sessions get -32021 on ``tasks/*`` and required tools, and optional tools run inline. With the extension the
  server makes every optional or required tool a task: a flat ``CreateTaskResult`` (``resultType:"task"``).
  ``tasks/get``: ``DetailedTask`` with ``result``/``error``/``inputRequests`` and ``resultType:"complete"``;
  ``tasks/update`` (``inputResponses``; a subset is fine, unknown keys are ignored) and ``tasks/cancel`` answer the
  ack ``{"resultType":"complete"}``; ``tasks/result``, ``tasks/list`` and unknown methods: -32601. Task ids: 32
  url-safe random characters bound to the session (another session: -32602). ``ttlMs`` 300000, ``pollIntervalMs``
  200. Tools that ask need the client's ``elicitation`` capability (-32021). No ``notifications/tasks``.

Tools (the texts of ``v1_server.py``); taskSupport in brackets:

* ``greet(name)`` [none]: ``Hello, {name}!``
* ``slow_compute(seconds, label)`` [optional]: sleeps, ``computed {label}``; cancellable (ends ``cancelled``)
* ``failing_job()`` [required]: after ~0.5 s ``completed`` with an ``isError`` result ``failing_job always fails``
* ``protocol_error_job()`` [required]: ``failed``, error {-32603, ``protocol_error_job: simulated internal failure``}
* ``confirm_delete(filename)`` [required]: ``input_required`` ``Delete {filename}?`` (boolean ``confirm``), then
  ``deleted {filename}`` or ``{filename} was not deleted ({action})``
* ``multi_input()`` [required]: two questions at once, ``value for a``/``value for b``, then ``got both: a=.., b=..``
* ``test_tool_with_task()`` [required]: *before* the task exists, asks ``What is your name?`` as a server→client
  ``elicitation/create`` on the ``tools/call`` SSE stream (the answer comes in its own POST, 202); the task then
  ends ``Hello, {name}! test_tool_with_task finished.``

Opt-in, in-process only (``start(lists=True)``): list changes, resource subscriptions and logging as session state,
with notifications on the session's GET stream (``v2_session_lists.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import secrets
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

Json = dict[str, Any]
PROTOCOL_VERSION = "2025-11-25"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
SERVER_INFO: Json = {"name": "mcp-tasks-proxy-v2-session-peer", "version": "0.1.0"}
TTL_MS, POLL_INTERVAL_MS = 300_000, 200
PRE_TASK_ELICIT_TIMEOUT_S = 60.0  # how long test_tool_with_task waits for its answer
TERMINAL = frozenset({"completed", "failed", "cancelled"})
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class McpError(Exception):
    """A JSON-RPC error to answer; raised by a task's work, the task's ``error``."""

    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def to_json(self) -> Json:
        return {"code": self.code, "message": self.message, **({} if self.data is None else {"data": self.data})}


def _missing_capability(required: Json) -> McpError:
    return McpError(-32021, "Missing required client capability", {"requiredCapabilities": required})


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _text(text: str, *, is_error: bool = False) -> Json:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def _schema(properties: Json) -> Json:
    return {"type": "object", "properties": properties, "required": list(properties)}


def _tool(name: str, description: str, properties: Json, task_support: str | None = None) -> Json:
    execution = {"execution": {"taskSupport": task_support}} if task_support else {}
    return {"name": name, "description": description, "inputSchema": _schema(properties), **execution}


def _form(message: str, schema: Json) -> Json:
    return {"mode": "form", "message": message, "requestedSchema": schema}


def _accepted(answer: Json, key: str) -> Any:
    content = answer.get("content")
    return content.get(key) if answer.get("action") == "accept" and isinstance(content, dict) else None


STRING: Json = {"type": "string"}
TOOLS: list[Json] = [
    _tool("greet", "Greets someone by name (no task support).", {"name": STRING}),
    _tool(
        "slow_compute",
        "Sleeps for `seconds`, then reports `computed <label>`.",
        {"seconds": {"type": "number"}, "label": STRING},
        "optional",
    ),
    _tool("failing_job", "After about half a second, ends with a tool error.", {}, "required"),
    _tool("protocol_error_job", "Its task fails with an internal error.", {}, "required"),
    _tool("confirm_delete", "Asks for confirmation before pretending to delete `filename`.", {"filename": STRING}, "required"),
    _tool("multi_input", "Asks two questions at the same time.", {}, "required"),
    _tool("test_tool_with_task", "Asks for a name before its task exists, then greets in the task.", {}, "required"),
]
TASK_SUPPORT: dict[str, str] = {t["name"]: t.get("execution", {}).get("taskSupport", "forbidden") for t in TOOLS}
ASKING_TOOLS = frozenset({"confirm_delete", "multi_input", "test_tool_with_task"})
CONFIRM_SCHEMA, VALUE_SCHEMA = _schema({"confirm": {"type": "boolean"}}), _schema({"value": STRING})
NAME_SCHEMA = _schema({"name": STRING})


@dataclass
class Task:
    """One task: its state, its outstanding input requests and the work running it."""

    task_id: str
    status: str = "working"
    status_message: str | None = None
    created_at: str = field(default_factory=_now)
    last_updated_at: str = ""
    expires: float = field(default_factory=lambda: time.monotonic() + TTL_MS / 1000)
    outcome: tuple[str, Json] | None = None  # ("result" | "error", value) once completed or failed
    input_requests: dict[str, Json] = field(default_factory=dict)
    answers: dict[str, asyncio.Future[Json]] = field(default_factory=dict)
    asked: int = 0
    worker: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        self.last_updated_at = self.created_at

    def set_status(self, status: str, message: str | None = None) -> None:
        self.status, self.status_message, self.last_updated_at = status, message, _now()
        if status in TERMINAL:
            self.input_requests.clear()

    def handle(self) -> Json:
        """The ``Task`` fields, without ``resultType``."""
        message = {} if self.status_message is None else {"statusMessage": self.status_message}
        return {
            "taskId": self.task_id,
            "status": self.status,
            **message,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttlMs": TTL_MS,
            "pollIntervalMs": POLL_INTERVAL_MS,
        }

    def detailed(self) -> Json:
        """The ``GetTaskResult``: ``resultType:"complete"`` and the ``DetailedTask``."""
        body = {"resultType": "complete", **self.handle()}
        if self.outcome is not None and self.status in ("completed", "failed"):
            body[self.outcome[0]] = self.outcome[1]
        elif self.status == "input_required":
            body["inputRequests"] = dict(self.input_requests)
        return body

    def ask(self, message: str, schema: Json) -> asyncio.Future[Json]:
        """Register one form question under a fresh key; the future gets its ``ElicitResult``."""
        self.asked += 1
        key = f"elicit-{self.asked}"
        self.input_requests[key] = {"method": "elicitation/create", "params": _form(message, schema)}
        self.answers[key] = asyncio.get_running_loop().create_future()
        if self.status == "working":
            self.set_status("input_required")
        return self.answers[key]

    def answer(self, responses: Json) -> None:
        """Deliver answers to outstanding keys (others are ignored); ``working`` again once none is left."""
        for key, value in responses.items():
            future = self.answers.pop(key, None)
            if future is not None and not future.done() and self.status not in TERMINAL:
                del self.input_requests[key]
                future.set_result(value if isinstance(value, dict) else {"action": "cancel"})
        if self.status == "input_required" and not self.input_requests:
            self.set_status("working")

    def cancel(self) -> None:
        if self.status not in TERMINAL:
            self.set_status("cancelled", "Cancelled by request.")
        if self.worker is not None:
            self.worker.cancel()

    async def run(self, work: Work) -> None:
        try:
            outcome, status, message = ("result", await work(self)), "completed", None
        except Exception as exc:  # an McpError from the tool; anything else is an internal error
            error = exc if isinstance(exc, McpError) else McpError(-32603, f"internal error: {exc}")
            outcome, status, message = ("error", error.to_json()), "failed", error.message
        if self.status not in TERMINAL:  # a cancelled task stays cancelled
            self.outcome = outcome
            self.set_status(status, message)


Work = Callable[[Task], Awaitable[Json]]


@dataclass
class Session:
    """One session: whether it declared the tasks extension, its tasks, its open server requests."""

    session_id: str
    declares_tasks: bool
    can_elicit: bool
    tasks: dict[str, Task] = field(default_factory=dict)
    pending: dict[str, asyncio.Future[Json]] = field(default_factory=dict)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    get_stream_open: bool = False
    get_request: web.Request | None = None
    get_queue: asyncio.Queue[Json | None] | None = None

    def push(self, message: Json) -> None:
        """Send a notification on the session's GET stream; dropped while none is open."""
        if self.get_queue is not None:
            self.get_queue.put_nowait(message)

    def start_task(self, work: Work) -> Task:
        task = Task(secrets.token_urlsafe(24))  # 24 random bytes: 32 url-safe characters
        self.tasks[task.task_id] = task  # stored before the CreateTaskResult goes out
        task.worker = asyncio.create_task(task.run(work))
        return task

    def task(self, task_id: Any) -> Task:
        task = self.tasks.get(task_id) if isinstance(task_id, str) else None
        if task is not None and time.monotonic() > task.expires:
            self.tasks.pop(task_id).cancel()
            task = None
        if task is None:
            raise McpError(-32602, f"Task not found: {task_id}")
        return task

    def close(self) -> None:
        self.closed.set()
        if self.get_queue is not None:
            self.get_queue.put_nowait(None)
        for task in self.tasks.values():
            if task.worker is not None:
                task.worker.cancel()
        for future in self.pending.values():
            if not future.done():
                future.set_result({"error": {"code": -32600, "message": "the session ended"}})


class PostReply:
    """The answer to one POSTed request: JSON, or SSE once the server sent a request on it."""

    def __init__(self, request: web.Request, session: Session):
        self.request, self.session = request, session
        self.stream: web.StreamResponse | None = None

    async def send(self, message: Json) -> None:
        if self.stream is None:
            self.stream = web.StreamResponse(headers=SSE_HEADERS)
            await self.stream.prepare(self.request)
        await self.stream.write(f"event: message\ndata: {json.dumps(message)}\n\n".encode())

    async def ask(self, method: str, params: Json) -> Json:
        """Send a server→client request (string id) on this stream; the client's response message (it arrives
        in its own POST). Raises ``TimeoutError``."""
        request_id = f"srv-{secrets.token_hex(8)}"
        future = self.session.pending[request_id] = asyncio.get_running_loop().create_future()
        try:
            await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            return await asyncio.wait_for(future, PRE_TASK_ELICIT_TIMEOUT_S)
        finally:
            self.session.pending.pop(request_id, None)

    async def finish(self, message: Json) -> web.StreamResponse:
        if self.stream is None:
            return web.json_response(message)
        await self.send(message)
        await self.stream.write_eof()
        return self.stream


async def _slow_compute(seconds: float, label: str) -> Json:
    await asyncio.sleep(max(0.0, seconds))
    return _text(f"computed {label}")


async def _failing_job(task: Task) -> Json:
    await asyncio.sleep(0.5)
    return _text("failing_job always fails", is_error=True)


async def _protocol_error_job(task: Task) -> Json:
    await asyncio.sleep(0.5)
    raise McpError(-32603, "protocol_error_job: simulated internal failure")


def _confirm_delete(filename: str) -> Work:
    async def work(task: Task) -> Json:
        answer = await task.ask(f"Delete {filename}?", CONFIRM_SCHEMA)
        if _accepted(answer, "confirm") is True:
            return _text(f"deleted {filename}")
        return _text(f"{filename} was not deleted ({answer.get('action')})")

    return work


async def _multi_input(task: Task) -> Json:
    answer_a, answer_b = await asyncio.gather(task.ask("value for a", VALUE_SCHEMA), task.ask("value for b", VALUE_SCHEMA))
    a, b = _accepted(answer_a, "value"), _accepted(answer_b, "value")
    if a is None or b is None:
        actions = f"a: {answer_a.get('action')}, b: {answer_b.get('action')}"
        return _text(f"multi_input needs both values ({actions})", is_error=True)
    return _text(f"got both: a={a}, b={b}")


async def _greet_after_asking(reply: PostReply) -> Work:
    """``test_tool_with_task``: ask for the name on the ``tools/call`` stream, then the task's work."""
    try:
        response = await reply.ask("elicitation/create", _form("What is your name?", NAME_SCHEMA))
    except TimeoutError:
        response = {"error": {"message": f"no answer within {PRE_TASK_ELICIT_TIMEOUT_S:g} s"}}
    answer = response.get("result") if isinstance(response.get("result"), dict) else {}
    name = _accepted(answer, "name")
    if "error" in response:
        problem = f"the elicitation failed: {response['error'].get('message')}"
    else:
        problem = f"the name question was answered with action '{answer.get('action')}' and no name"

    async def work(task: Task) -> Json:
        await asyncio.sleep(0.5)
        if isinstance(name, str) and name:
            return _text(f"Hello, {name}! test_tool_with_task finished.")
        return _text(f"test_tool_with_task: {problem}", is_error=True)

    return work


def _arg(arguments: Json, key: str, kind: type | tuple[type, ...]) -> Any:
    value = arguments.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise McpError(-32602, f"Invalid arguments: '{key}' is missing or has the wrong type")
    return value


async def _call_tool(session: Session, params: Json, reply: PostReply) -> Json:
    """``tools/call``: a ``CallToolResult`` or, with the extension, a ``CreateTaskResult``."""
    name, arguments = params.get("name"), params.get("arguments") or {}
    support = TASK_SUPPORT.get(name) if isinstance(name, str) else None
    if support is None or not isinstance(arguments, dict):
        raise McpError(-32602, f"Unknown tool: {name}" if support is None else "arguments must be an object")
    if support == "required" and not session.declares_tasks:
        raise _missing_capability({"extensions": {TASKS_EXTENSION: {}}})
    if name in ASKING_TOOLS and not session.can_elicit:
        raise _missing_capability({"elicitation": {"form": {}}})
    complete = {"resultType": "complete"} if session.declares_tasks else {}  # a v2 synchronous answer
    work: Work
    if name == "greet":
        return {**_text(f"Hello, {_arg(arguments, 'name', str)}!"), **complete}
    if name == "slow_compute":
        seconds, label = float(_arg(arguments, "seconds", (int, float))), _arg(arguments, "label", str)
        if not session.declares_tasks:
            return await _slow_compute(seconds, label)
        work = lambda task: _slow_compute(seconds, label)  # noqa: E731
    elif name == "confirm_delete":
        work = _confirm_delete(_arg(arguments, "filename", str))
    elif name == "test_tool_with_task":  # MRTR before the task, as a real request on this POST's stream
        work = await _greet_after_asking(reply)
    else:
        work = {"failing_job": _failing_job, "protocol_error_job": _protocol_error_job, "multi_input": _multi_input}[name]
    return {"resultType": "task", **session.start_task(work).handle()}


async def _dispatch(session: Session, method: Any, params: Json, reply: PostReply) -> Json:
    lists = reply.request.app[LISTS]
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS + (lists.tools() if lists is not None else [])}
    if lists is not None and (answer := await lists.dispatch(session, method, params, reply)) is not None:
        return answer
    if method == "tools/call":
        return await _call_tool(session, params, reply)
    if method not in ("tasks/get", "tasks/update", "tasks/cancel"):
        raise McpError(-32601, f"Method not found: {method}")  # also tasks/result and tasks/list
    if not session.declares_tasks:
        raise _missing_capability({"extensions": {TASKS_EXTENSION: {}}})
    task = session.task(params.get("taskId"))
    if method == "tasks/get":
        return task.detailed()
    if method == "tasks/cancel":
        task.cancel()
    elif isinstance(params.get("inputResponses"), dict):
        task.answer(params["inputResponses"])
    else:
        raise McpError(-32602, "inputResponses must be an object")
    return {"resultType": "complete"}


SESSIONS = web.AppKey("sessions", dict[str, Session])
LISTS = web.AppKey("lists", Any)
"""The opt-in's ``v2_session_lists.Lists``, or None."""


def _http_error(status: int, code: int, message: str) -> web.Response:
    return web.json_response({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, status=status)


def _initialize(request: web.Request, message: Json) -> web.Response:
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    capabilities = params.get("capabilities") if isinstance(params.get("capabilities"), dict) else {}
    extensions = capabilities.get("extensions")
    declares = isinstance(extensions, dict) and TASKS_EXTENSION in extensions
    session = Session(secrets.token_hex(16), declares, can_elicit=isinstance(capabilities.get("elicitation"), dict))
    request.app[SESSIONS][session.session_id] = session
    lists = request.app[LISTS]
    result = {
        "protocolVersion": PROTOCOL_VERSION,
        "serverInfo": SERVER_INFO,
        "capabilities": {"tools": {}, "extensions": {TASKS_EXTENSION: {}}} if lists is None else lists.capabilities(),
    }
    return web.json_response(
        {"jsonrpc": "2.0", "id": message.get("id"), "result": result}, headers={"Mcp-Session-Id": session.session_id}
    )


async def _get_stream(request: web.Request, session: Session) -> web.StreamResponse:
    """The session's GET stream: open, with keep-alive comments and what is pushed to the session, until the
    session ends. A second one while the first's connection is up: 409 (one whose client went away is replaced)."""
    held = session.get_request
    if session.get_stream_open and held is not None and held.transport is not None and not held.transport.is_closing():
        return _http_error(409, -32000, "Conflict: Only one SSE stream is allowed per session")
    if session.get_queue is not None:
        session.get_queue.put_nowait(None)  # the stream whose client went away ends
    queue: asyncio.Queue[Json | None] = asyncio.Queue()
    session.get_stream_open, session.get_request, session.get_queue = True, request, queue
    stream = web.StreamResponse(headers=SSE_HEADERS)
    try:
        await stream.prepare(request)
        while not session.closed.is_set():
            try:
                message = await asyncio.wait_for(queue.get(), 15)
            except TimeoutError:
                await stream.write(b": keep-alive\n\n")
                continue
            if message is None:
                break
            await stream.write(f"event: message\ndata: {json.dumps(message)}\n\n".encode())
    except ConnectionResetError:
        pass
    finally:
        if session.get_queue is queue:
            session.get_stream_open, session.get_request, session.get_queue = False, None, None
    return stream


async def handle_mcp(request: web.Request) -> web.StreamResponse:
    """POST, GET and DELETE on ``/mcp``."""
    message: Any = None
    if request.method == "POST":
        try:
            message = json.loads(await request.text())
        except ValueError:
            return _http_error(400, -32700, "Parse error")
        if not isinstance(message, dict):
            return _http_error(400, -32600, "Invalid Request: one JSON-RPC message per POST")
        if message.get("method") == "initialize":
            return _initialize(request, message)
    session_id = request.headers.get("Mcp-Session-Id")
    session = request.app[SESSIONS].get(session_id or "")
    if session is None:
        return (
            _http_error(404, -32600, "Session not found")
            if session_id
            else _http_error(400, -32600, "Bad Request: Missing session ID")
        )
    version = request.headers.get("MCP-Protocol-Version", PROTOCOL_VERSION)
    if version != PROTOCOL_VERSION:
        return _http_error(400, -32600, f"Bad Request: Unsupported protocol version: {version}")
    if request.method == "GET":
        return await _get_stream(request, session)
    if request.method == "DELETE":
        request.app[SESSIONS].pop(session.session_id).close()
        return web.Response(status=200)
    if "method" not in message:  # a response to one of our requests
        future = session.pending.get(str(message.get("id")))
        if future is not None and not future.done():
            future.set_result(message)
        return web.Response(status=202)
    if "id" not in message:  # a notification
        return web.Response(status=202)
    reply = PostReply(request, session)
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    try:
        answer: Json = {"result": await _dispatch(session, message["method"], params, reply)}
    except McpError as exc:
        answer = {"error": exc.to_json()}
    return await reply.finish({"jsonrpc": "2.0", "id": message["id"], **answer})


async def _close_sessions(app: web.Application) -> None:
    for session in app[SESSIONS].values():
        session.close()


def build_app(*, lists: bool = False) -> web.Application:
    """The aiohttp app serving ``/mcp`` (``lists``: the opt-in of ``v2_session_lists.py``)."""
    app = web.Application()
    app[SESSIONS] = {}
    app[LISTS] = None
    if lists:
        from peers.v2_session_lists import Lists  # in-process only: it imports this module as peers.v2_session_server

        app[LISTS] = Lists(app[SESSIONS])
    for method in ("POST", "GET", "DELETE"):
        app.router.add_route(method, "/mcp", handle_mcp)
    app.on_shutdown.append(_close_sessions)
    return app


async def start(host: str = "127.0.0.1", port: int = 0, *, lists: bool = False) -> tuple[web.AppRunner, str]:
    """Serve :func:`build_app` on ``host:port`` (a loopback IP; port 0 picks a free one). Returns the runner
    (``await runner.cleanup()`` stops it) and the ``/mcp`` URL."""
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"host must be a loopback address, not {host!r}")
    runner = web.AppRunner(build_app(lists=lists), access_log=None, shutdown_timeout=2)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    url_host = f"[{host}]" if ":" in host else host
    return runner, f"http://{url_host}:{runner.addresses[0][1]}/mcp"


async def _serve(host: str, port: int) -> None:
    runner, url = await start(host, port)
    print(f"LISTENING {url}", flush=True)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    """Parse ``--host``/``--port`` and serve until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="loopback IP address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default)")
    args = parser.parse_args(argv)
    try:
        if not ipaddress.ip_address(args.host).is_loopback:
            raise ValueError
    except ValueError:
        parser.error(f"--host must be a loopback IP address, not {args.host!r}")
    asyncio.run(_serve(args.host, args.port))


if __name__ == "__main__":
    main()
