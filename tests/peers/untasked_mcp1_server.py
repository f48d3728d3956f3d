"""A plain server on the official ``mcp==1.30.0`` SDK with no task support at all, as most
deployments run one: the low-level ``Server``, no ``enable_tasks()``, no tools' ``execution``, no
tasks capability. For the held-task tests (docs/behaviour.md §9): the proxy must turn its slow
calls into tasks it holds itself.

Run in the ``mcp-v1`` peer environment (``proxy/demo/peers.py``), on HTTP or on stdio::

    python untasked_mcp1_server.py --host 127.0.0.1 --port 0     # prints LISTENING http://127.0.0.1:<port>/mcp
    python untasked_mcp1_server.py --stdio

Tools (each duration an argument, so a test chooses it; the names and texts are those of the
project's fixture servers, so the peers' client check scripts run against it unchanged):

=============================================  ==================================================
tool                                           behaviour
=============================================  ==================================================
``greet(name)``                                ``Hello, {name}!`` at once
``slow_compute(seconds, label, until?)``       sleeps ``seconds``, reporting ``step i of n`` as
                                               progress (every 0.25 s; when the call has a
                                               ``progressToken``), then ``computed {label}``;
                                               with ``until`` (a path), runs until that file
                                               exists instead (a test ends the call at its event)
``failing_job(seconds=1.5)``                   after ``seconds``, a tool error (``isError``)
                                               ``failing_job always fails``
``protocol_error_job(seconds=1.5)``            after ``seconds``, a JSON-RPC error -32000
                                               ``protocol_error_job: simulated internal failure``
``confirm_delete(filename, delay=1.0)``        after ``delay``, asks (elicitation, form, boolean
                                               ``confirm``) ``Delete {filename}?``; then
                                               ``deleted {filename}`` or ``kept {filename}``
=============================================  ==================================================

With ``UNTASKED_EVENTS=<file>`` in its environment it appends one JSON line per event there:
``{"event": "cancelled", "tool": ..., "label": ...}`` when a call is cancelled
(``notifications/cancelled``), ``{"event": "started", ...}`` when a call starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import McpError
from starlette.applications import Starlette
from starlette.routing import Mount

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "proxy" / "demo" / "servers"))
import loopback_serve  # noqa: E402  (the serve-and-announce entry point the reference servers share)

server: Server[Any, Any] = Server("untasked-mcp1")
STEP_S = 0.25


def _schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


TOOLS = [
    types.Tool(name="greet", description="Hello, name!", inputSchema=_schema(name={"type": "string"})),
    types.Tool(
        name="slow_compute",
        description="Sleeps, reporting progress.",
        inputSchema=_schema(seconds={"type": "number"}, label={"type": "string"}, until={"type": "string"}),
    ),
    types.Tool(name="failing_job", description="Ends with a tool error.", inputSchema=_schema(seconds={"type": "number"})),
    types.Tool(
        name="protocol_error_job", description="Ends with a JSON-RPC error.", inputSchema=_schema(seconds={"type": "number"})
    ),
    types.Tool(
        name="confirm_delete",
        description="Asks before it deletes.",
        inputSchema=_schema(filename={"type": "string"}, delay={"type": "number"}),
    ),
]


def _event(**fields: Any) -> None:
    path = os.environ.get("UNTASKED_EVENTS")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(fields) + "\n")


def _text(text: str, *, is_error: bool = False) -> types.ServerResult:
    return types.ServerResult(types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=is_error))


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    return TOOLS


async def _slow_compute(seconds: float, label: str, until: str | None) -> types.ServerResult:
    if until is not None:
        while not await anyio.Path(until).exists():
            await anyio.sleep(0.02)
        return _text(f"computed {label}")
    ctx = server.request_context
    token = ctx.meta.progressToken if ctx.meta is not None else None
    steps = max(1, round(seconds / STEP_S))
    for step in range(1, steps + 1):
        await anyio.sleep(seconds / steps)
        if token is not None and step < steps:
            await ctx.session.send_progress_notification(
                token, step, steps, f"step {step} of {steps}", related_request_id=str(ctx.request_id)
            )
    return _text(f"computed {label}")


async def _confirm_delete(filename: str, delay: float) -> types.ServerResult:
    await anyio.sleep(delay)
    ctx = server.request_context
    schema = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
    answer = await ctx.session.elicit_form(f"Delete {filename}?", schema, related_request_id=ctx.request_id)
    confirmed = answer.action == "accept" and bool((answer.content or {}).get("confirm"))
    return _text(f"deleted {filename}" if confirmed else f"kept {filename}")


async def call_tool(request: types.CallToolRequest) -> types.ServerResult:
    """The handler of `tools/call`, registered directly, so that a raised `McpError` is the
    JSON-RPC error answer (the SDK's `call_tool` decorator turns every exception into `isError`)."""
    name, arguments = request.params.name, request.params.arguments or {}
    label = str(arguments.get("label", arguments.get("filename", "")))
    _event(event="started", tool=name, label=label)
    try:
        if name == "greet":
            return _text(f"Hello, {arguments.get('name', '')}!")
        if name == "slow_compute":
            until = arguments.get("until")
            return await _slow_compute(float(arguments.get("seconds", 1)), label, None if until is None else str(until))
        if name == "failing_job":
            await anyio.sleep(float(arguments.get("seconds", 1.5)))
            return _text("failing_job always fails", is_error=True)
        if name == "protocol_error_job":
            await anyio.sleep(float(arguments.get("seconds", 1.5)))
            raise McpError(types.ErrorData(code=-32000, message="protocol_error_job: simulated internal failure"))
        if name == "confirm_delete":
            return await _confirm_delete(str(arguments.get("filename", "")), float(arguments.get("delay", 1.0)))
    except anyio.get_cancelled_exc_class():
        _event(event="cancelled", tool=name, label=label)
        raise
    raise McpError(types.ErrorData(code=-32602, message=f"Unknown tool: {name}"))


server.request_handlers[types.CallToolRequest] = call_tool


def build_app() -> Starlette:
    session_manager = StreamableHTTPSessionManager(app=server)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with session_manager.run():
            yield

    return Starlette(routes=[Mount("/mcp", app=session_manager.handle_request)], lifespan=lifespan)


async def run_stdio() -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    if "--stdio" in sys.argv:
        anyio.run(run_stdio)
    else:
        loopback_serve.main(__doc__, build_app)
