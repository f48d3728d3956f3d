"""The primary of the shadow tests: a plain v1 server on the official ``mcp==1.30.0`` SDK (the
low-level ``Server`` with tasks, as ``plain_mcp1_server.py``), with the tools, resource and prompt
``shadow_v2_server.py`` has too. Every ``tools/call`` it receives is appended to the file named by
``SHADOW_CALL_LOG`` (one line: ``<tool> <arguments as JSON>``), when set.

Run in the ``mcp-v1`` peer environment (``proxy/demo/peers.py``)::

    python shadow_mcp1_server.py --host 127.0.0.1 --port 0

tool               readOnlyHint  taskSupport  answer
``lookup(key)``    true          forbidden    ``value of <key>``
``forecast(city)`` true          forbidden    ``sunny in <city>`` (the candidate: ``rainy in <city>``)
``slow_lookup``    true          optional     after 0.2 s, ``slow value of <key>`` (a task when asked as one)
``remember(note)`` (none)        forbidden    ``remembered <note>``

Resource ``notes://readme`` (text ``read me``), prompt ``greeting(name)`` (one user message ``Hello, <name>``).
Tool titles and schemas are written as FastMCP 4 derives them from the candidate's functions, so that
only ``forecast`` differs (and the prompt argument's description FastMCP writes, which the tests ignore).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.types import (
    CallToolResult,
    CreateTaskResult,
    GetPromptResult,
    Prompt,
    PromptArgument,
    PromptMessage,
    Resource,
    TextContent,
    Tool,
    ToolAnnotations,
    ToolExecution,
)
from starlette.applications import Starlette
from starlette.routing import Mount

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "proxy" / "demo" / "servers"))
import loopback_serve  # noqa: E402  (the serve-and-announce entry point the reference servers share)

server: Server[Any, Any] = Server("shadow-primary")
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    server.experimental.enable_tasks()


def _schema(name: str) -> dict[str, Any]:
    return {"type": "object", "properties": {name: {"type": "string"}}, "required": [name], "additionalProperties": False}


READ_ONLY = ToolAnnotations(readOnlyHint=True)
TOOLS = [
    Tool(name="lookup", title="Lookup", description="Looks a key up.", inputSchema=_schema("key"), annotations=READ_ONLY),
    Tool(
        name="forecast",
        title="Forecast",
        description="The forecast for a city.",
        inputSchema=_schema("city"),
        annotations=READ_ONLY,
    ),
    Tool(
        name="slow_lookup",
        title="Slow Lookup",
        description="Looks a key up, slowly.",
        inputSchema=_schema("key"),
        annotations=READ_ONLY,
        execution=ToolExecution(taskSupport="optional"),
    ),
    Tool(name="remember", title="Remember", description="Remembers a note.", inputSchema=_schema("note")),
]


def _log_call(name: str, arguments: dict[str, Any]) -> None:
    path = os.environ.get("SHADOW_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{name} {json.dumps(arguments, sort_keys=True)}\n")


def _text(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)])


@server.list_tools()
async def list_tools() -> list[Tool]:
    return TOOLS


@server.call_tool()
async def call_tool(name: str, arguments: dict[str, Any]) -> CallToolResult | CreateTaskResult:
    _log_call(name, arguments)
    ctx = server.request_context
    if name == "lookup":
        return _text(f"value of {arguments['key']}")
    if name == "forecast":
        return _text(f"sunny in {arguments['city']}")
    if name == "remember":
        return _text(f"remembered {arguments['note']}")
    if name != "slow_lookup":
        raise ValueError(f"Unknown tool: {name}")
    ctx.experimental.validate_for_tool(TOOLS[2])

    async def slow() -> CallToolResult:
        await anyio.sleep(0.2)
        return _text(f"slow value of {arguments['key']}")

    if not ctx.experimental.is_task:
        return await slow()

    async def work(task: ServerTaskContext) -> CallToolResult:
        return await slow()

    return await ctx.experimental.run_task(work)


@server.list_resources()
async def list_resources() -> list[Resource]:
    return [Resource(uri="notes://readme", name="readme", mimeType="text/plain")]


@server.read_resource()
async def read_resource(uri: Any) -> list[ReadResourceContents]:
    return [ReadResourceContents(content="read me", mime_type="text/plain")]


@server.list_prompts()
async def list_prompts() -> list[Prompt]:
    return [Prompt(name="greeting", description="Greets someone.", arguments=[PromptArgument(name="name", required=True)])]


@server.get_prompt()
async def get_prompt(name: str, arguments: dict[str, str] | None) -> GetPromptResult:
    who = (arguments or {}).get("name", "")
    return GetPromptResult(
        description="Greets someone.",
        messages=[PromptMessage(role="user", content=TextContent(type="text", text=f"Hello, {who}"))],
    )


def build_app() -> Starlette:
    session_manager = StreamableHTTPSessionManager(app=server)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with session_manager.run():
            yield

    return Starlette(routes=[Mount("/mcp", app=session_manager.handle_request)], lifespan=lifespan)


if __name__ == "__main__":
    loopback_serve.main(__doc__, build_app)
