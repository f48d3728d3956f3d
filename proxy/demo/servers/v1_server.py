"""Reference legacy v1 MCP server (MCP 2025-11-25 tasks) on the official SDK ``mcp==1.30.0``.

Run it with the ``mcp-v1`` peer environment's python (see ``proxy/demo/peers.py``)::

    python v1_server.py --host 127.0.0.1 --port 0

It binds the socket itself (port 0 picks a free port), serves the low-level ``Server`` through
``StreamableHTTPSessionManager`` mounted with Starlette ``Mount("/mcp", ...)`` on uvicorn (so
``POST /mcp`` answers 307 to ``/mcp/``, as real Python servers do), and prints exactly one line
``LISTENING http://127.0.0.1:<port>/mcp`` once it accepts connections. Loopback only.
``python v1_server.py --stdio`` serves one session on stdin/stdout instead (a stdio backend).

Tools (the conformance fixture set, ``docs/wire.md`` §7 "Conformance suite"):

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
report_progress(count)    (none)         ``count`` ``notifications/progress`` (with a
                                         ``progressToken``), one log message at each of
                                         debug, info, warning and error (at or above the
                                         session's ``logging/setLevel``), ``progress done``
========================  =============  ==================================================

A required tool called without a task, or a tool without ``execution`` called with one, gets the
SDK's own answer: an ``isError`` ``CallToolResult``.

Opt-in, with ``REFERENCE_V1_LIST_CHANGED=1`` in the environment: the server declares
``tools.listChanged: true`` and has one more tool, ``add_tool(name)``, which adds a tool ``name``
(no arguments; answers ``{name} added``), sends ``notifications/tools/list_changed`` (on the
session's GET stream, as the SDK sends it) and answers ``added {name}``. Without the variable the
tool list and capabilities are exactly those above.

Opt-in, with ``REFERENCE_V1_RESOURCES=1``: the server declares ``resources.subscribe: true``, has
one resource ``reference://notes`` (text ``notes``), answers ``resources/subscribe`` and
``resources/unsubscribe`` per session, and has one more tool, ``touch_resource(uri)``, which sends
``notifications/resources/updated`` for ``uri`` to each session subscribed to it (on its GET
stream) and answers ``touched {uri}``.

The SDK workarounds this server needs (the work of a cancelled task stops without ending its
session, concurrent questions of a task get distinct ids, each session runs its own tasks' work,
``tasks/result`` answers a task that ended while it was not yet waiting) are in ``v1_sdk_fixes.py``, beside
this file; :func:`v1_sdk_fixes.enable_fixed_tasks` applies them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sys
import warnings
from collections.abc import AsyncIterator
from typing import Any

import anyio
import loopback_serve  # beside this file, which runs as a script
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import McpError
from mcp.types import (
    CallToolResult,
    ClientCapabilities,
    CreateTaskResult,
    ElicitationCapability,
    ElicitResult,
    Resource,
    ResourcesCapability,
    TextContent,
    Tool,
    ToolExecution,
)
from starlette.applications import Starlette
from starlette.routing import Mount
from v1_sdk_fixes import Work, enable_fixed_tasks, stop_when_cancelled  # beside this file, too

SERVER_NAME = "mcp-tasks-proxy-reference-v1"
#: How long ``test_tool_with_task`` waits for the answer to its pre-task question.
PRE_TASK_ELICIT_TIMEOUT_S = 60.0

log = logging.getLogger("mcp_tasks_proxy.v1_server")


# --------------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------------

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # the tasks API is deprecated in 1.28+
    server: Server[Any, Any] = Server(SERVER_NAME)
    task_store, task_queue = enable_fixed_tasks(server)


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
        name="report_progress",
        description="Reports `count` steps of progress and logs at four levels, then answers `progress done`.",
        inputSchema=_object_schema({"count": {"type": "integer"}}, ["count"]),
    ),
    Tool(
        name="test_tool_with_task",
        description="Asks for a name before its task exists, then greets in the task.",
        inputSchema=_object_schema({}, []),
        execution=REQUIRED,
    ),
]
TOOLS_BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}

LIST_CHANGED = os.environ.get("REFERENCE_V1_LIST_CHANGED") == "1"
"""The opt-in above: ``tools.listChanged`` declared and ``add_tool`` listed."""
ADD_TOOL = Tool(
    name="add_tool",
    description="Adds a tool `name` and announces it with notifications/tools/list_changed.",
    inputSchema=_object_schema({"name": {"type": "string"}}, ["name"]),
)
_added: dict[str, Tool] = {}
"""Tools ``add_tool`` added, by name (for every session: the list is the server's)."""
if LIST_CHANGED:
    server.create_initialization_options = functools.partial(  # type: ignore[method-assign]
        server.create_initialization_options, NotificationOptions(tools_changed=True))

RESOURCES = os.environ.get("REFERENCE_V1_RESOURCES") == "1"
"""The second opt-in above: ``reference://notes``, resource subscriptions and ``touch_resource``."""
NOTES = "reference://notes"
TOUCH_RESOURCE = Tool(
    name="touch_resource",
    description="Announces notifications/resources/updated for `uri` to the sessions subscribed to it.",
    inputSchema=_object_schema({"uri": {"type": "string"}}, ["uri"]),
)
_subscribers: dict[str, dict[int, Any]] = {}
"""URI → the sessions subscribed to it (by the session object's id)."""
if RESOURCES:
    _declared = server.get_capabilities

    def _with_subscribe(*args: Any, **kwargs: Any) -> Any:
        capabilities = _declared(*args, **kwargs)
        capabilities.resources = ResourcesCapability(subscribe=True, listChanged=False)  # mcp 1.30 always says False
        return capabilities

    server.get_capabilities = _with_subscribe  # type: ignore[method-assign]

    @server.list_resources()
    async def list_resources() -> list[Resource]:
        return [Resource(uri=NOTES, name="notes", mimeType="text/plain")]  # type: ignore[arg-type]

    @server.read_resource()
    async def read_resource(uri: Any) -> str:
        return "notes"

    @server.subscribe_resource()
    async def subscribe_resource(uri: Any) -> None:
        session = server.request_context.session
        _subscribers.setdefault(str(uri), {})[id(session)] = session

    @server.unsubscribe_resource()
    async def unsubscribe_resource(uri: Any) -> None:
        _subscribers.get(str(uri), {}).pop(id(server.request_context.session), None)


async def _touch_resource(uri: str) -> CallToolResult:
    for session in list(_subscribers.get(uri, {}).values()):
        with contextlib.suppress(Exception):  # a session gone meanwhile
            await session.send_resource_updated(uri)  # type: ignore[arg-type]
    return _text(f"touched {uri}")


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


REPORTED_LEVELS = ("debug", "info", "warning", "error")
_SEVERITY = {level: rank for rank, level in enumerate(("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"))}
_session_levels: dict[int, str] = {}
"""``logging/setLevel`` per session (by the session object's id); every level until one is set."""


@server.set_logging_level()
async def set_logging_level(level: Any) -> None:
    """``logging/setLevel``: this session gets log messages at ``level`` or above."""
    _session_levels[id(server.request_context.session)] = str(level)


async def _report_progress(count: int) -> CallToolResult:
    ctx = server.request_context
    token = ctx.meta.progressToken if ctx.meta is not None else None
    if token is not None:
        for step in range(1, count + 1):
            await ctx.session.send_progress_notification(token, step, count, f"step {step}", related_request_id=str(ctx.request_id))
    threshold = _SEVERITY[_session_levels.get(id(ctx.session), "debug")]
    for level in REPORTED_LEVELS:
        if _SEVERITY[level] >= threshold:
            await ctx.session.send_log_message(level, f"report_progress at {level}", "report_progress",  # type: ignore[arg-type]
                                               related_request_id=ctx.request_id)
    return _text("progress done")


@server.list_tools()
async def list_tools() -> list[Tool]:
    """``tools/list``: the fixture tools, with ``execution.taskSupport`` where they have one (and,
    opted in, ``add_tool`` and the tools it added)."""
    return [*TOOLS, *([ADD_TOOL, *_added.values()] if LIST_CHANGED else ()), *([TOUCH_RESOURCE] if RESOURCES else ())]


async def _add_tool(name: str) -> CallToolResult:
    _added[name] = Tool(name=name, description=f"Added by add_tool({name!r}).", inputSchema=_object_schema({}, []))
    await server.request_context.session.send_tool_list_changed()
    return _text(f"added {name}")


@server.call_tool()
async def call_tool(name: str, arguments: dict[str, Any]) -> CallToolResult | CreateTaskResult:
    """``tools/call``: a ``CallToolResult``, or a ``CreateTaskResult`` for a task-augmented call.

    Errors (unknown tool, task-support mismatch) surface as ``isError`` results via the SDK.
    """
    ctx = server.request_context
    if LIST_CHANGED and name == "add_tool":
        return await _add_tool(str(arguments["name"]))
    if LIST_CHANGED and name in _added:
        return _text(f"{name} added")
    if RESOURCES and name == "touch_resource":
        return await _touch_resource(str(arguments["uri"]))
    tool = TOOLS_BY_NAME.get(name)
    if tool is None:
        raise ValueError(f"Unknown tool: {name}")
    # Raises McpError for required-without-task / forbidden-with-task; the SDK's call_tool wrapper
    # turns it into an isError CallToolResult, which is mcp 1.30's wire behaviour.
    ctx.experimental.validate_for_tool(tool)

    work: Work
    if name == "greet":
        return _text(f"Hello, {arguments['name']}!")
    if name == "report_progress":
        return await _report_progress(int(arguments["count"]))
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
    return await ctx.experimental.run_task(stop_when_cancelled(work, task_store, task_queue))


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


async def serve_stdio() -> None:
    """Serve one session on stdin/stdout (the 2025-11-25 stdio transport) until EOF."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main(argv: list[str] | None = None) -> None:
    """Parse ``--host``/``--port`` and serve until SIGTERM or SIGINT; with ``--stdio`` serve one
    session on stdin/stdout instead (logs on stderr)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--stdio" in args:
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
        warnings.simplefilter("ignore", DeprecationWarning)
        anyio.run(serve_stdio)
        return
    loopback_serve.main(__doc__, build_app, argv)


if __name__ == "__main__":
    main()
