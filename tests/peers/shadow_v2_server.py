"""The candidate of the shadow tests: a v2 server on ``fastmcp==4.1.4`` + ``fastmcp-tasks`` with the
tools, resource and prompt of ``shadow_mcp1_server.py``; ``forecast`` answers differently
(``rainy in <city>``). Every ``tools/call`` its tools run is appended to the file named by
``SHADOW_CALL_LOG`` (one line: ``<tool> <arguments as JSON>``), when set: the candidate's own record
of what it was asked.

Run in the ``fastmcp4`` peer environment (``proxy/demo/peers.py``)::

    python shadow_v2_server.py --host 127.0.0.1 --port 0
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "proxy" / "demo" / "servers"))
import loopback_serve  # noqa: E402  (the serve-and-announce entry point the reference servers share)
from fastmcp import FastMCP  # noqa: E402
from fastmcp.tools.base import ToolResult  # noqa: E402
from fastmcp.utilities.tasks import TaskConfig  # noqa: E402
from fastmcp_tasks import TasksExtension  # noqa: E402
from mcp_types import TextContent, ToolAnnotations  # noqa: E402

mcp: FastMCP = FastMCP("shadow-candidate")
mcp.add_extension(TasksExtension())
READ_ONLY = ToolAnnotations(readOnlyHint=True)


def _log_call(name: str, arguments: dict[str, Any]) -> None:
    path = os.environ.get("SHADOW_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{name} {json.dumps(arguments, sort_keys=True)}\n")


def _text(text: str) -> ToolResult:
    return ToolResult(content=[TextContent(type="text", text=text)])


@mcp.tool(description="Looks a key up.", annotations=READ_ONLY)
async def lookup(key: str) -> ToolResult:
    _log_call("lookup", {"key": key})
    return _text(f"value of {key}")


@mcp.tool(description="The forecast for a city.", annotations=READ_ONLY)
async def forecast(city: str) -> ToolResult:
    _log_call("forecast", {"city": city})
    return _text(f"rainy in {city}")


@mcp.tool(description="Looks a key up, slowly.", annotations=READ_ONLY, task=TaskConfig(mode="optional"))
async def slow_lookup(key: str) -> ToolResult:
    _log_call("slow_lookup", {"key": key})
    await asyncio.sleep(0.2)
    return _text(f"slow value of {key}")


@mcp.tool(description="Remembers a note.")
async def remember(note: str) -> ToolResult:
    _log_call("remember", {"note": note})
    return _text(f"remembered {note}")


@mcp.resource("notes://readme", name="readme", mime_type="text/plain")
def readme() -> str:
    return "read me"


@mcp.prompt(description="Greets someone.")
def greeting(name: str) -> str:
    return f"Hello, {name}"


if __name__ == "__main__":
    loopback_serve.main(__doc__, lambda: mcp.http_app(path="/mcp", transport="http"))
