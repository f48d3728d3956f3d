"""Reference v2 MCP server (SEP-2663 tasks extension) on ``fastmcp==4.1.4`` + ``fastmcp-tasks==4.1.4``.

Run it with the ``fastmcp4`` peer environment's python (see ``proxy/demo/peers.py``)::

    python v2_server.py --host 127.0.0.1 --port 0

It binds the socket itself (port 0 picks a free port), serves ``FastMCP.http_app(path="/mcp")``
on uvicorn with the tasks extension (``fastmcp_tasks.TasksExtension``, Docket on its in-memory
backend, worker in this process), and prints exactly one line ``LISTENING
http://127.0.0.1:<port>/mcp`` once it accepts connections. Loopback only. Tasks exist only on
2026-07-28 (stateless, ``_meta``-carrying) requests that declare ``io.modelcontextprotocol/tasks``;
over a 2025-11-25 ``initialize`` session the same tools run inline and ``tasks/*`` are
``-32601`` (``docs/wire.md`` §1.2, §7).

Tools (the conformance fixture set, ``docs/wire.md`` §7 "Conformance suite"), with the texts of the reference
v1 server ``v1_server.py``:

========================  =============  ==================================================
tool                      task mode      behaviour
========================  =============  ==================================================
greet(name)               forbidden      ``Hello, {name}!``
slow_compute(seconds,     optional       sleeps ``seconds``, ``computed {label}``
label)
failing_job()             required       after ~1 s, ``ToolError("failing_job always
                                         fails")``: task ``completed``, ``isError`` result
protocol_error_job()      required       after ~0.5 s, a protocol error: task ``failed``,
                                         ``error {-32603, "protocol_error_job: simulated
                                         internal failure"}`` (also the ``statusMessage``)
confirm_delete(filename)  required       in the task, one form question ``Delete
                                         {filename}?`` (boolean ``confirm``) ->
                                         ``deleted {filename}``
multi_input()             required       in the task, two questions at once (``value for
                                         a``, ``value for b``) -> ``got both: a=.., b=..``
test_tool_with_task()     required       asks ``What is your name?`` by MRTR on
                                         ``tools/call`` *before* the task exists (key
                                         ``user_name``), then the task ends with ``Hello,
                                         {name}! test_tool_with_task finished.``
summarize(text)           required       in the task, one ``sampling/createMessage``
                                         request; ends with the model's text
report_progress(count)    forbidden      ``count`` ``notifications/progress`` (with a
                                         ``progressToken``), one log message at each of
                                         debug, info, warning and error (at or above the
                                         request's ``io.modelcontextprotocol/logLevel``;
                                         none without it), ``progress done``
========================  =============  ==================================================

Opt-in, with ``REFERENCE_V2_LIST_CHANGED=1`` in the environment, as the reference v1 server's
``REFERENCE_V1_LIST_CHANGED``: the server serves ``subscriptions/listen`` (the SDK's
``ListenHandler`` on an in-process bus; ``server/discover`` then declares ``listChanged`` for
tools, prompts and resources and ``resources.subscribe``), has one resource
``reference://notes`` (text ``notes``) and two more tools: ``add_tool(name)`` adds a tool ``name``
(no arguments; answers ``{name} added``), publishes ``notifications/tools/list_changed`` to the
listen streams that asked for it and answers ``added {name}``; ``touch_resource(uri)`` publishes
``notifications/resources/updated`` for ``uri`` (to the streams subscribed to it) and answers
``touched {uri}``. Without the variable the tool list and capabilities are exactly those above.

What FastMCP 4.1.4 can and cannot express, and how this server gets the fixture shapes
(checked against ``docs/wire.md`` §7 "FastMCP 4.1.4"):

* **Input inside a task.** ``ctx.elicit()`` raises ``ToolError`` inside a background task
  (FastMCP 4 has no back-channel on 2026-07-28). A task asks by the *guard pattern*: the tool
  returns an ``InputRequiredResult`` whose ``inputRequests`` use the tool's own keys; the leg ends,
  ``tasks/get`` reports ``input_required`` with fresh surfaced keys ``<taskId>:<16 hex>``, and the
  ``tasks/update`` that answers every key re-runs the tool with the answers on
  ``ctx.input_responses`` (under the tool's own keys). Guard tools return a ``ToolResult`` so
  their results carry no ``structuredContent``, as in the trace.
* **Sampling.** There is no ``ctx.sample()`` in FastMCP 4.1.4. The guard pattern carries any
  input request type, so ``summarize`` returns a ``sampling/createMessage`` request and reads the
  ``CreateMessageResult`` on re-entry. FastMCP checks no client ``sampling`` capability for it.
* **MRTR before a task.** The tasks extension decides "task or not" in its ``tools/call``
  interceptor, before the tool body runs, so a required tool's body cannot ask on ``tools/call``.
  :class:`AskNameBeforeTask` (FastMCP middleware, which wraps the extension's interceptor) asks
  instead: round 1 answers ``InputRequiredResult`` (key ``user_name``, a ``requestState`` that
  FastMCP seals), the retry with ``inputResponses`` goes on to the interceptor, which creates the
  task. The name reaches the task's worker through an in-process table keyed by task id (the
  worker runs in this process); the tool waits for its entry briefly, since the worker may start
  before the middleware has seen the ``CreateTaskResult``.
* **Errors.** A ``ToolError`` (any non-protocol exception) ends a task ``completed`` with an
  ``isError`` result; only an ``MCPError`` raised by the tool ends it ``failed`` with ``error``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import loopback_serve  # beside this file, which runs as a script
import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.tools.base import InputRequiredToolResult, Tool, ToolResult
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID, TaskConfig
from fastmcp_tasks import TasksExtension
from fastmcp_tools import add_common_tools  # beside this file, too
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    CreateMessageRequest,
    CreateMessageRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    InputRequiredResult,
    SamplingMessage,
    SubscriptionsListenRequestParams,
    TextContent,
)

SERVER_NAME = "mcp-tasks-proxy-reference-v2"

OPTIONAL = TaskConfig(mode="optional")
REQUIRED = TaskConfig(mode="required")

#: How long ``test_tool_with_task``'s worker waits for the name its middleware recorded.
PRE_TASK_NAME_WAIT_S = 10.0
#: Key of the pre-task question, as in the trace.
NAME_KEY = "user_name"
#: The requestState of the pre-task round (FastMCP seals it on the wire).
NAME_REQUEST_STATE = "test_tool_with_task:asked-name"
#: Bound on the pre-task name table (entries are removed when read).
MAX_PENDING_NAMES = 1000

log = logging.getLogger("mcp_tasks_proxy.v2_server")

mcp: FastMCP = FastMCP(SERVER_NAME)
mcp.add_extension(TasksExtension())


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


CONFIRM_SCHEMA: dict[str, Any] = _object_schema({"confirm": {"type": "boolean"}}, ["confirm"])
VALUE_SCHEMA: dict[str, Any] = _object_schema({"value": {"type": "string"}}, ["value"])
NAME_SCHEMA: dict[str, Any] = _object_schema({"name": {"type": "string"}}, ["name"])


def _text(text: str, *, is_error: bool = False) -> ToolResult:
    return ToolResult(content=[TextContent(type="text", text=text)], is_error=is_error)


def _ask(message: str, schema: dict[str, Any]) -> ElicitRequest:
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


def _accepted_field(answer: Any, field: str) -> Any:
    """``answer.content[field]`` of an accepted ``ElicitResult``, else ``None``."""
    if getattr(answer, "action", None) != "accept":
        return None
    content = getattr(answer, "content", None) or {}
    return content.get(field)


def _action(answer: Any) -> str:
    return str(getattr(answer, "action", "no answer"))


# --------------------------------------------------------------------------------------------
# MRTR before the task: test_tool_with_task
# --------------------------------------------------------------------------------------------

#: task id -> (name or None, reason when None), written by the middleware, read by the worker.
_pre_task_names: dict[str, tuple[str | None, str]] = {}


def _client_capabilities(ctx: Context) -> dict[str, Any]:
    rc = ctx.request_context
    meta = getattr(rc, "meta", None) or {}
    caps = meta.get(mcp_types.CLIENT_CAPABILITIES_META_KEY) if hasattr(meta, "get") else None
    return dict(caps) if isinstance(caps, dict) else {}


class AskNameBeforeTask(Middleware):
    """Ask ``test_tool_with_task``'s question by MRTR before the tasks extension creates its task.

    Only for a client that declared the extension on this request (otherwise the interceptor's
    ``-32021`` comes first, as for any required tool). Round 1 (no ``inputResponses``) answers
    ``InputRequiredResult``; the retry creates the task and records the name for its worker.
    """

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        if context.message.name != "test_tool_with_task":
            return await call_next(context)
        ctx = context.fastmcp_context
        if ctx is None or ctx.client_extension_settings(TASKS_EXTENSION_ID) is None:
            return await call_next(context)
        responses = ctx.input_responses
        if "elicitation" not in _client_capabilities(ctx):
            outcome: tuple[str | None, str] = (None, "the client did not declare the elicitation capability")
        elif not responses or NAME_KEY not in responses:
            return InputRequiredToolResult(
                InputRequiredResult(
                    input_requests={NAME_KEY: _ask("What is your name?", NAME_SCHEMA)},
                    request_state=NAME_REQUEST_STATE,
                )
            )
        else:
            answer = responses[NAME_KEY]
            name = _accepted_field(answer, "name")
            if isinstance(name, str) and name:
                outcome = (name, "")
            else:
                outcome = (None, f"the name question was answered with action '{_action(answer)}' and no name")
        created = await call_next(context)
        task_id = getattr(created, "task_id", None)
        if isinstance(task_id, str):
            while len(_pre_task_names) >= MAX_PENDING_NAMES:
                _pre_task_names.pop(next(iter(_pre_task_names)))
            _pre_task_names[task_id] = outcome
        return created


mcp.add_middleware(AskNameBeforeTask())


async def _name_for_task(task_id: str | None) -> tuple[str | None, str]:
    deadline = time.monotonic() + PRE_TASK_NAME_WAIT_S
    while task_id is not None and time.monotonic() < deadline:
        if task_id in _pre_task_names:
            return _pre_task_names.pop(task_id)
        await asyncio.sleep(0.02)
    return None, "no name was recorded before the task started"


# --------------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------------


add_common_tools(mcp, optional=OPTIONAL, required=REQUIRED)  # greet, slow_compute, failing_job


@mcp.tool(description="Its task fails with an internal error.", task=REQUIRED)
async def protocol_error_job() -> str:
    await asyncio.sleep(0.5)
    raise MCPError(code=INTERNAL_ERROR, message="protocol_error_job: simulated internal failure")


@mcp.tool(
    description="Asks for confirmation before pretending to delete `filename`.",
    task=REQUIRED,
    output_schema=None,
)
async def confirm_delete(filename: str, ctx: Context) -> ToolResult | InputRequiredResult:
    answer = (ctx.input_responses or {}).get("confirm")
    if answer is None:
        return InputRequiredResult(input_requests={"confirm": _ask(f"Delete {filename}?", CONFIRM_SCHEMA)})
    if _accepted_field(answer, "confirm") is True:
        return _text(f"deleted {filename}")
    return _text(f"{filename} was not deleted ({_action(answer)})")


@mcp.tool(description="Asks two questions at the same time.", task=REQUIRED, output_schema=None)
async def multi_input(ctx: Context) -> ToolResult | InputRequiredResult:
    responses = ctx.input_responses or {}
    if "a" not in responses or "b" not in responses:
        return InputRequiredResult(
            input_requests={"a": _ask("value for a", VALUE_SCHEMA), "b": _ask("value for b", VALUE_SCHEMA)}
        )
    a = _accepted_field(responses["a"], "value")
    b = _accepted_field(responses["b"], "value")
    if a is None or b is None:
        return _text(
            f"multi_input needs both values (a: {_action(responses['a'])}, b: {_action(responses['b'])})",
            is_error=True,
        )
    return _text(f"got both: a={a}, b={b}")


@mcp.tool(description="Asks for a name before its task exists, then greets in the task.", task=REQUIRED)
async def test_tool_with_task(ctx: Context) -> str:
    name, reason = await _name_for_task(ctx.task_id)
    await asyncio.sleep(0.5)
    if name is None:
        raise ToolError(f"test_tool_with_task: {reason}")
    return f"Hello, {name}! test_tool_with_task finished."


@mcp.tool(description="Asks the client's model to summarize `text`.", task=REQUIRED, output_schema=None)
async def summarize(text: str, ctx: Context) -> ToolResult | InputRequiredResult:
    answer = (ctx.input_responses or {}).get("summary")
    if answer is None:
        request = CreateMessageRequest(
            params=CreateMessageRequestParams(
                messages=[
                    SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize: {text}"))
                ],
                max_tokens=100,
            )
        )
        return InputRequiredResult(input_requests={"summary": request})
    content = getattr(answer, "content", None)
    blocks = content if isinstance(content, list) else [content]
    texts = [block.text for block in blocks if getattr(block, "type", None) == "text"]
    if not texts:
        return _text("summarize: the model answered without text", is_error=True)
    return _text("".join(texts))


REPORTED_LEVELS = ("debug", "info", "warning", "error")


@mcp.tool(description="Reports `count` steps of progress and logs at four levels, then answers `progress done`.")
async def report_progress(count: int, ctx: Context) -> str:
    # Both go on this request's own response stream; FastMCP sends progress only with a
    # progressToken, and the SDK sends log messages only at or above the request's logLevel.
    for step in range(1, count + 1):
        await ctx.report_progress(step, count, f"step {step}")
    for level in REPORTED_LEVELS:
        await ctx.log(f"report_progress at {level}", level=level, logger_name="report_progress")  # type: ignore[arg-type]
    return "progress done"


# --------------------------------------------------------------------------------------------
# Opt-in: list changes and resource updates on subscriptions/listen
# --------------------------------------------------------------------------------------------

LIST_CHANGED = os.environ.get("REFERENCE_V2_LIST_CHANGED") == "1"
"""The opt-in above: ``subscriptions/listen`` served, ``reference://notes``, ``add_tool`` and ``touch_resource``."""
_bus = InMemorySubscriptionBus()
"""What ``add_tool`` and ``touch_resource`` publish; every open listen stream hears it."""

if LIST_CHANGED:
    mcp._mcp_server.add_request_handler("subscriptions/listen", SubscriptionsListenRequestParams, ListenHandler(_bus))

    @mcp.resource("reference://notes", description="A text resource for `touch_resource` to announce.")
    def notes() -> str:
        return "notes"

    @mcp.tool(description="Adds a tool `name` and announces it with notifications/tools/list_changed.")
    async def add_tool(name: str) -> str:
        async def added() -> str:
            return f"{name} added"

        mcp.add_tool(Tool.from_function(added, name=name, description=f"Added by add_tool({name!r})."))
        await _bus.publish(ToolsListChanged())
        return f"added {name}"

    @mcp.tool(description="Announces notifications/resources/updated for `uri`.")
    async def touch_resource(uri: str) -> str:
        await _bus.publish(ResourceUpdated(uri=uri))
        return f"touched {uri}"


# --------------------------------------------------------------------------------------------
# HTTP app and entry point
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Parse ``--host``/``--port`` and serve ``FastMCP.http_app`` (endpoint ``/mcp``) until SIGTERM or SIGINT."""
    # The app's lifespan enters FastMCP's, which enters the tasks extension's (Docket + worker).
    # Host/Origin protection stays on FastMCP's "auto" default (loopback Host headers only).
    loopback_serve.main(__doc__, lambda: mcp.http_app(path="/mcp", transport="http"), argv)


if __name__ == "__main__":
    main()
