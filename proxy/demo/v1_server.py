"""Reference legacy v1 MCP server (MCP 2025-11-25 tasks) on the official SDK ``mcp==1.30.0``.

Run it with the ``mcp-v1`` peer environment's python (see ``proxy/demo/peers.py``)::

    python v1_server.py --host 127.0.0.1 --port 0

It binds the socket itself (port 0 picks a free port), serves the low-level ``Server`` through
``StreamableHTTPSessionManager`` mounted with Starlette ``Mount("/mcp", ...)`` on uvicorn (so
``POST /mcp`` answers 307 to ``/mcp/``, as real Python servers do), and prints exactly one line
``LISTENING http://127.0.0.1:<port>/mcp`` once it accepts connections. Loopback only.

Tools (the conformance fixture set, ``shared/peers/README.md``):

========================  =============  ==================================================
tool                      taskSupport    behaviour
========================  =============  ==================================================
greet(name)               (none)         ``Hello, {name}!``
slow_compute(seconds,     optional       sleeps ``seconds``, ``computed {label}``
label)
failing_job()             required       after ~1 s, tool error ``failing_job always fails``
protocol_error_job()      required       task ends ``failed``, statusMessage
                                         ``protocol_error_job: simulated internal failure``
confirm_delete(filename)  required       in the task, one form question (boolean ``confirm``)
multi_input()             required       in the task, two questions asked concurrently
test_tool_with_task()     required       asks for a name on the ``tools/call`` stream before
                                         the task exists, then ends with a greeting
========================  =============  ==================================================

A required tool called without a task, or a tool without ``execution`` called with one, gets the
SDK's own answer: an ``isError`` ``CallToolResult``.

The cancel fix. In mcp 1.30, ``tasks/cancel`` (``shared/experimental/tasks/helpers.py:cancel_task``)
only flips the stored status. The work keeps running, and when it returns, the wrapper ``execute()``
inside ``Experimental.run_task`` (``server/experimental/request_context.py``) checks the work's own,
stale copy of the task (``ServerTaskContext.task``, still ``working``), calls
``ServerTaskContext.complete()``, whose ``InMemoryTaskStore.update_task`` raises ``ValueError``
("Cannot transition from terminal status 'cancelled'"); the ``except`` branch then calls
``fail()``, which raises the same ``ValueError`` outside any handler, out of the per-session task
group opened by ``TaskSupport.run()``, and that ends the whole session. Three layers prevent it:

* :class:`FinalStateTaskStore` keeps terminal records frozen: a later status change, status
  message or result for a terminal task is ignored instead of raising, and a task whose work still
  runs is never purged by TTL (a purge would make ``complete()`` raise "not found" the same way).
* :func:`stop_when_cancelled` wraps every work function: a watcher re-reads the task from the
  store and, once it is ``cancelled``, cancels the work, drops its undelivered queued questions,
  and re-syncs the context's copy of the task, so ``execute()`` sees a terminal status and neither
  completes nor fails it (no stray status notification either).
* ``v1_sdk_fixes.unique_task_request_ids`` numbers a task's server→client requests from a counter:
  the SDK derives their ids from ``id()`` of a temporary object, so concurrent questions could share
  one id and one of them would be lost.
* :class:`SessionBoundTaskSupport` starts ``execute()`` through a spawner that logs anything still
  escaping it instead of letting it end the session. It also fixes a second SDK defect: the task
  group is shared by all sessions, so ending any session broke task creation in the others.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import ipaddress
import logging
import socket
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import anyio
import uvicorn
from anyio.abc import TaskGroup
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.experimental.task_support import TaskSupport
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import McpError
from mcp.shared.experimental.tasks.helpers import is_terminal
from mcp.shared.experimental.tasks.in_memory_task_store import InMemoryTaskStore, StoredTask
from mcp.shared.experimental.tasks.message_queue import InMemoryTaskMessageQueue
from mcp.types import (
    TASK_STATUS_CANCELLED,
    CallToolResult,
    ClientCapabilities,
    CreateTaskResult,
    ElicitationCapability,
    ElicitResult,
    Result,
    Task,
    TaskStatus,
    TextContent,
    Tool,
    ToolExecution,
)
from starlette.applications import Starlette
from starlette.routing import Mount
from v1_sdk_fixes import unique_task_request_ids  # beside this file, which runs as a script

SERVER_NAME = "mcp-tasks-proxy-reference-v1"
#: How often a running task's work re-reads its task to notice ``tasks/cancel``.
CANCEL_POLL_S = 0.1
#: How long ``test_tool_with_task`` waits for the answer to its pre-task question.
PRE_TASK_ELICIT_TIMEOUT_S = 60.0

log = logging.getLogger("mcp_tasks_proxy.v1_server")

Work = Callable[[ServerTaskContext], Awaitable[Result]]


# --------------------------------------------------------------------------------------------
# Task store: terminal means final
# --------------------------------------------------------------------------------------------


class FinalStateTaskStore(InMemoryTaskStore):
    """``InMemoryTaskStore`` in which a terminal task never changes and a running one never expires.

    * ``update_task`` on a terminal task returns the stored record unchanged (no status, message
      or ``lastUpdatedAt`` change) instead of raising ``ValueError``.
    * ``store_result`` on a terminal task is ignored, so a cancelled task keeps no payload.
    * TTL purging applies only to terminal tasks (the SDK restarts the TTL clock when a task ends).

    Unknown task ids still raise ``ValueError`` as in the SDK.
    """

    def _is_expired(self, stored: StoredTask) -> bool:
        # Overrides a private hook of InMemoryTaskStore (mcp==1.30.0 is pinned exactly).
        if not is_terminal(stored.task.status):
            return False
        return super()._is_expired(stored)

    async def update_task(
        self,
        task_id: str,
        status: TaskStatus | None = None,
        status_message: str | None = None,
    ) -> Task:
        stored = self._tasks.get(task_id)
        if stored is not None and is_terminal(stored.task.status):
            if status is not None and status != stored.task.status:
                log.debug("ignoring %s -> %s for terminal task %s", stored.task.status, status, task_id)
            return Task(**stored.task.model_dump())
        return await super().update_task(task_id, status=status, status_message=status_message)

    async def store_result(self, task_id: str, result: Result) -> None:
        stored = self._tasks.get(task_id)
        if stored is not None and is_terminal(stored.task.status):
            log.debug("dropping result for terminal task %s", task_id)
            return
        await super().store_result(task_id, result)


# --------------------------------------------------------------------------------------------
# Server and task plumbing
# --------------------------------------------------------------------------------------------

#: The session whose ``Server.run()`` is setting up task support (set and read in its own task).
_configuring_session: contextvars.ContextVar[ServerSession] = contextvars.ContextVar("configuring_session")
#: Task group of each live session, for the work of the tasks that session creates.
_session_groups: dict[ServerSession, TaskGroup] = {}


class _CatchAllSpawner:
    """The ``task_group`` that ``run_task`` sees: ``start_soon`` into the caller's session group.

    An exception escaping a task's wrapper is logged instead of ending the session.
    """

    def __init__(self, group: TaskGroup) -> None:
        self._group = group

    def start_soon(self, func: Callable[..., Awaitable[Any]], *args: Any, name: object = None) -> None:
        async def contained() -> None:
            try:
                await func(*args)
            except Exception:
                log.exception("task work wrapper raised; the task's session stays up")

        self._group.start_soon(contained, name=name)


class SessionBoundTaskSupport(TaskSupport):
    """``TaskSupport`` that runs each task's work in the task group of the session creating it.

    The SDK's ``TaskSupport.run()`` (entered once per session by ``Server.run()``) stores each new
    session's task group in one shared attribute and resets it to ``None`` when *any* session
    ends: later ``run_task`` calls in every other live session then fail with "TaskSupport not
    running", and work lands in, and delays the teardown of, whichever session opened last.
    Here ``configure_session()`` (called just before ``run()``, in the same asyncio task) names
    the session, ``run()`` registers that session's own group and cancels the work still running
    in it when the session ends, and ``task_group`` resolves the requesting session's group.
    """

    def configure_session(self, session: ServerSession, *, stateless: bool = False) -> None:
        super().configure_session(session, stateless=stateless)
        _configuring_session.set(session)

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        session = _configuring_session.get()
        async with anyio.create_task_group() as group:
            _session_groups[session] = group
            try:
                yield
            finally:
                del _session_groups[session]
                group.cancel_scope.cancel()  # the session is gone; so are its tasks

    @property
    def task_group(self) -> TaskGroup:
        group = _session_groups.get(server.request_context.session)
        if group is None:
            raise RuntimeError("the requesting session has no task group (it is shutting down)")
        return cast(TaskGroup, _CatchAllSpawner(group))


with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # the tasks API is deprecated in 1.28+
    server: Server[Any, Any] = Server(SERVER_NAME)
    unique_task_request_ids()
    task_store = FinalStateTaskStore()
    task_queue = InMemoryTaskMessageQueue()
    _support = server.experimental.enable_tasks(store=task_store, queue=task_queue)
    # enable_tasks() builds a plain TaskSupport and its default handlers keep that very object;
    # give it the session-bound behaviour in place (same fields, three methods overridden).
    _support.__class__ = SessionBoundTaskSupport


async def _is_cancelled(task_id: str) -> bool:
    current = await task_store.get_task(task_id)
    return current is None or current.status == TASK_STATUS_CANCELLED


def stop_when_cancelled(work: Work) -> Work:
    """Wrap ``work`` so that it stops, without completing or failing, once its task is cancelled.

    The returned coroutine function runs ``work`` beside a watcher that re-reads the task every
    :data:`CANCEL_POLL_S` seconds. On ``cancelled`` it cancels ``work``, clears the task's queued
    (undelivered) messages and re-syncs ``task.task`` with the store, then returns a placeholder
    that ``run_task`` discards because the task is already terminal. Otherwise ``work``'s result is
    returned and its exception re-raised unchanged (so ``run_task`` fails the task with it).
    """

    async def guarded(task: ServerTaskContext) -> Result:
        outcome: dict[str, Any] = {}

        async with anyio.create_task_group() as group:

            async def run_work() -> None:
                try:
                    outcome["result"] = await work(task)
                except Exception as exc:  # re-raised below, outside the task group
                    outcome["error"] = exc
                finally:
                    group.cancel_scope.cancel()

            async def watch() -> None:
                while not await _is_cancelled(task.task_id):
                    await anyio.sleep(CANCEL_POLL_S)
                group.cancel_scope.cancel()

            group.start_soon(run_work)
            group.start_soon(watch)

        if await _is_cancelled(task.task_id):
            await task_queue.clear(task.task_id)
            # With FinalStateTaskStore this changes nothing in the store; it only refreshes the
            # context's own copy, which run_task's wrapper consults before completing.
            with contextlib.suppress(ValueError):  # only if the record vanished
                await task.update_status("cancelled", notify=False)
            log.info("task %s was cancelled; its work stopped", task.task_id)
            return CallToolResult(content=[], isError=True)
        if "error" in outcome:
            raise outcome["error"]
        result: Result = outcome["result"]
        return result

    return guarded


def _text(text: str, *, is_error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], isError=is_error)


def _object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


OPTIONAL = ToolExecution(taskSupport="optional")
REQUIRED = ToolExecution(taskSupport="required")

TOOLS: list[Tool] = [
    Tool(
        name="greet",
        description="Greets someone by name (no task support).",
        inputSchema=_object_schema({"name": {"type": "string"}}, ["name"]),
    ),
    Tool(
        name="slow_compute",
        description="Sleeps for `seconds`, then reports `computed <label>`.",
        inputSchema=_object_schema(
            {"seconds": {"type": "number"}, "label": {"type": "string"}}, ["seconds", "label"]
        ),
        execution=OPTIONAL,
    ),
    Tool(
        name="failing_job",
        description="After about a second, ends with a tool error.",
        inputSchema=_object_schema({}, []),
        execution=REQUIRED,
    ),
    Tool(
        name="protocol_error_job",
        description="Its task fails with an internal error.",
        inputSchema=_object_schema({}, []),
        execution=REQUIRED,
    ),
    Tool(
        name="confirm_delete",
        description="Asks for confirmation before pretending to delete `filename`.",
        inputSchema=_object_schema({"filename": {"type": "string"}}, ["filename"]),
        execution=REQUIRED,
    ),
    Tool(
        name="multi_input",
        description="Asks two questions at the same time.",
        inputSchema=_object_schema({}, []),
        execution=REQUIRED,
    ),
    Tool(
        name="test_tool_with_task",
        description="Asks for a name before its task exists, then greets in the task.",
        inputSchema=_object_schema({}, []),
        execution=REQUIRED,
    ),
]
TOOLS_BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}

CONFIRM_SCHEMA: dict[str, Any] = _object_schema({"confirm": {"type": "boolean"}}, ["confirm"])
VALUE_SCHEMA: dict[str, Any] = _object_schema({"value": {"type": "string"}}, ["value"])
NAME_SCHEMA: dict[str, Any] = _object_schema({"name": {"type": "string"}}, ["name"])


def _accepted_field(answer: ElicitResult, field: str) -> Any:
    if answer.action != "accept" or not answer.content:
        return None
    return answer.content.get(field)


# --------------------------------------------------------------------------------------------
# Tool behaviour
# --------------------------------------------------------------------------------------------


async def _slow_compute(seconds: float, label: str) -> CallToolResult:
    await anyio.sleep(max(0.0, float(seconds)))
    return _text(f"computed {label}")


async def _failing_job(task: ServerTaskContext) -> CallToolResult:
    await anyio.sleep(1.0)
    return _text("failing_job always fails", is_error=True)


async def _protocol_error_job(task: ServerTaskContext) -> CallToolResult:
    await anyio.sleep(0.5)
    raise RuntimeError("protocol_error_job: simulated internal failure")


def _confirm_delete(filename: str) -> Work:
    async def work(task: ServerTaskContext) -> CallToolResult:
        answer = await task.elicit(message=f"Delete {filename}?", requestedSchema=CONFIRM_SCHEMA)
        if _accepted_field(answer, "confirm") is True:
            return _text(f"deleted {filename}")
        return _text(f"{filename} was not deleted ({answer.action})")

    return work


async def _multi_input(task: ServerTaskContext) -> CallToolResult:
    answer_a, answer_b = await asyncio.gather(
        task.elicit(message="value for a", requestedSchema=VALUE_SCHEMA),
        task.elicit(message="value for b", requestedSchema=VALUE_SCHEMA),
    )
    a = _accepted_field(answer_a, "value")
    b = _accepted_field(answer_b, "value")
    if a is None or b is None:
        return _text(
            f"multi_input needs both values (a: {answer_a.action}, b: {answer_b.action})", is_error=True
        )
    return _text(f"got both: a={a}, b={b}")


async def _ask_name_before_task() -> tuple[str | None, str]:
    """Ask for a name on the tools/call stream; return ``(name, "")`` or ``(None, reason)``."""
    ctx = server.request_context
    session = ctx.session
    if not session.check_client_capability(ClientCapabilities(elicitation=ElicitationCapability())):
        return None, "the client did not declare the elicitation capability"
    try:
        with anyio.fail_after(PRE_TASK_ELICIT_TIMEOUT_S):
            answer = await session.elicit_form(
                message="What is your name?",
                requestedSchema=NAME_SCHEMA,
                related_request_id=ctx.request_id,
            )
    except TimeoutError:
        return None, f"no answer to 'What is your name?' within {PRE_TASK_ELICIT_TIMEOUT_S:g} s"
    except McpError as exc:
        return None, f"the elicitation failed: {exc.error.message}"
    name = _accepted_field(answer, "name")
    if not isinstance(name, str) or not name:
        return None, f"the name question was answered with action '{answer.action}' and no name"
    return name, ""


def _greet_in_task(name: str | None, reason: str) -> Work:
    async def work(task: ServerTaskContext) -> CallToolResult:
        await anyio.sleep(0.5)
        if name is None:
            return _text(f"test_tool_with_task: {reason}", is_error=True)
        return _text(f"Hello, {name}! test_tool_with_task finished.")

    return work


@server.list_tools()
async def list_tools() -> list[Tool]:
    """``tools/list``: the fixture tools, with ``execution.taskSupport`` where they have one."""
    return TOOLS


@server.call_tool()
async def call_tool(name: str, arguments: dict[str, Any]) -> CallToolResult | CreateTaskResult:
    """``tools/call``: a ``CallToolResult``, or a ``CreateTaskResult`` for a task-augmented call.

    Errors (unknown tool, task-support mismatch) surface as ``isError`` results via the SDK.
    """
    ctx = server.request_context
    tool = TOOLS_BY_NAME.get(name)
    if tool is None:
        raise ValueError(f"Unknown tool: {name}")
    # Raises McpError for required-without-task / forbidden-with-task; the SDK's call_tool wrapper
    # turns it into an isError CallToolResult, which is mcp 1.30's wire behaviour.
    ctx.experimental.validate_for_tool(tool)

    work: Work
    if name == "greet":
        return _text(f"Hello, {arguments['name']}!")
    if name == "slow_compute":
        seconds, label = arguments["seconds"], arguments["label"]
        if not ctx.experimental.is_task:
            return await _slow_compute(seconds, label)

        async def slow_work(task: ServerTaskContext) -> CallToolResult:
            return await _slow_compute(seconds, label)

        work = slow_work
    elif name == "failing_job":
        work = _failing_job
    elif name == "protocol_error_job":
        work = _protocol_error_job
    elif name == "confirm_delete":
        work = _confirm_delete(arguments["filename"])
    elif name == "multi_input":
        work = _multi_input
    elif name == "test_tool_with_task":
        person, reason = await _ask_name_before_task()
        work = _greet_in_task(person, reason)
    else:  # pragma: no cover - TOOLS and this dispatch are kept in step
        raise ValueError(f"Unknown tool: {name}")
    return await ctx.experimental.run_task(stop_when_cancelled(work))


# --------------------------------------------------------------------------------------------
# HTTP app and entry point
# --------------------------------------------------------------------------------------------


def build_app() -> Starlette:
    """Return the Starlette app: the session manager mounted at ``/mcp`` with its lifespan."""
    session_manager = StreamableHTTPSessionManager(
        app=server,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        ),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with session_manager.run():
            yield

    return Starlette(routes=[Mount("/mcp", app=session_manager.handle_request)], lifespan=lifespan)


def _loopback_socket(host: str, port: int) -> socket.socket:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise SystemExit(f"--host must be a loopback IP address, not {host!r}") from None
    if not address.is_loopback:
        raise SystemExit(f"--host must be a loopback address, not {host!r}")
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def _serve(host: str, port: int) -> None:
    sock = _loopback_socket(host, port)
    bound_port = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(
        build_app(),
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    uv_server = uvicorn.Server(config)
    serving = asyncio.create_task(uv_server.serve(sockets=[sock]))
    while not uv_server.started:
        if serving.done():
            await serving  # startup failed: surface the error
            raise SystemExit("uvicorn stopped during startup")
        await asyncio.sleep(0.02)
    print(f"LISTENING http://{url_host}:{bound_port}/mcp", flush=True)
    await serving


def main(argv: list[str] | None = None) -> None:
    """Parse ``--host``/``--port`` and serve until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    warnings.simplefilter("ignore", DeprecationWarning)
    asyncio.run(_serve(args.host, args.port))


if __name__ == "__main__":
    main()
