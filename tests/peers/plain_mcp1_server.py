"""A plain v1 server on the official ``mcp==1.30.0`` SDK, as deployments run it: the low-level
``Server`` with ``server.experimental.enable_tasks()`` and nothing else (none of the workarounds of
``proxy/demo/servers/v1_sdk_fixes.py``), served by ``StreamableHTTPSessionManager`` under Starlette on
uvicorn.

Run in the ``mcp-v1`` peer environment (``proxy/demo/peers.py``)::

    python plain_mcp1_server.py --host 127.0.0.1 --port 0

It prints ``LISTENING http://127.0.0.1:<port>/mcp`` once it accepts connections. Its one tool:

tool                          taskSupport   behaviour
``slow_echo(text, seconds)``  optional      sleeps ``seconds`` (default 0.2), then answers the text ``echo <text>``

In this SDK every session shares one task group, and it is cleared whenever any session ends:
from then on a task-augmented call answers ``isError`` "TaskSupport not running".
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.types import CallToolResult, CreateTaskResult, TextContent, Tool, ToolExecution
from starlette.applications import Starlette
from starlette.routing import Mount

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "proxy" / "demo" / "servers"))
import loopback_serve  # noqa: E402  (the serve-and-announce entry point the reference servers share)

server: Server[Any, Any] = Server("plain-mcp1")
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    server.experimental.enable_tasks()

SLOW_ECHO = Tool(
    name="slow_echo",
    description="Sleeps for `seconds`, then answers `echo <text>`.",
    inputSchema={
        "type": "object",
        "properties": {"text": {"type": "string"}, "seconds": {"type": "number"}},
        "required": ["text"],
    },
    execution=ToolExecution(taskSupport="optional"),
)


async def _slow_echo(text: str, seconds: float) -> CallToolResult:
    await anyio.sleep(seconds)
    return CallToolResult(content=[TextContent(type="text", text=f"echo {text}")])


@server.list_tools()
async def list_tools() -> list[Tool]:
    return [SLOW_ECHO]


@server.call_tool()
async def call_tool(name: str, arguments: dict[str, Any]) -> CallToolResult | CreateTaskResult:
    if name != SLOW_ECHO.name:
        raise ValueError(f"Unknown tool: {name}")
    ctx = server.request_context
    ctx.experimental.validate_for_tool(SLOW_ECHO)
    text, seconds = arguments["text"], float(arguments.get("seconds", 0.2))
    if not ctx.experimental.is_task:
        return await _slow_echo(text, seconds)

    async def work(task: ServerTaskContext) -> CallToolResult:
        return await _slow_echo(text, seconds)

    return await ctx.experimental.run_task(work)


def build_app() -> Starlette:
    session_manager = StreamableHTTPSessionManager(app=server)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with session_manager.run():
            yield

    return Starlette(routes=[Mount("/mcp", app=session_manager.handle_request)], lifespan=lifespan)


if __name__ == "__main__":
    loopback_serve.main(__doc__, build_app)
