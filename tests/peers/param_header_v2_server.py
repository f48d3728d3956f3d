"""A v2 server on ``fastmcp==4.1.4`` + ``fastmcp-tasks`` whose tools mark arguments with
``x-mcp-header`` (core 2026-07-28, docs/wire.md §4.3): its SDK refuses a ``tools/call`` whose
``Mcp-Param-*`` headers are missing or disagree with the body, with HTTP 400 and ``-32020``.

* ``route(region, shard, note)``: ``region`` is ``Mcp-Param-Region``, ``shard`` (an integer)
  ``Mcp-Param-Shard``; answers ``routed <region>/<shard>: <note>``.
* ``route_later(region)``: the same header, task mode ``optional``; answers ``later <region>``.


``subscriptions/listen`` stream goes out under that method name instead (``notifications/tasks/status``
is what servers on the C# SDK send; docs/wire.md §3.7).

Run in the ``fastmcp4`` peer environment (``proxy/demo/peers.py``)::

    python param_header_v2_server.py --host 127.0.0.1 --port 0
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "proxy" / "demo" / "servers"))
import loopback_serve  # noqa: E402  (the serve-and-announce entry point the reference servers share)
from fastmcp import FastMCP  # noqa: E402
from fastmcp.tools.base import ToolResult  # noqa: E402
from fastmcp.utilities.tasks import TaskConfig  # noqa: E402
from fastmcp_tasks import TasksExtension  # noqa: E402
from mcp_types import TextContent  # noqa: E402
from pydantic import Field  # noqa: E402

mcp: FastMCP = FastMCP("param-header-server")
mcp.add_extension(TasksExtension())

Region = Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]
Shard = Annotated[int, Field(json_schema_extra={"x-mcp-header": "Shard"})]


def _text(text: str) -> ToolResult:
    return ToolResult(content=[TextContent(type="text", text=text)])


@mcp.tool(description="Routes a note to a region's shard.")
async def route(region: Region, shard: Shard, note: str = "") -> ToolResult:
    return _text(f"routed {region}/{shard}: {note}")


@mcp.tool(description="Routes later, as a task.", task=TaskConfig(mode="optional"))
async def route_later(region: Region) -> ToolResult:
    return _text(f"later {region}")


if __name__ == "__main__":
    loopback_serve.main(__doc__, lambda: mcp.http_app(path="/mcp", transport="http"))
