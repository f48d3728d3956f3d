"""The fixture tools the two FastMCP servers define alike: ``greet``, ``slow_compute``, ``failing_job``.

Imported by plain name by ``v1_fastmcp3_server.py`` (``fastmcp[tasks]==3.4.11``) and
``v2_server.py`` (``fastmcp==4.1.4``), which run as scripts in their own peer environments
(``proxy/demo/peers.py``); what it uses of FastMCP is the same in both versions. The texts are the
reference v1 server's (``v1_server.py``, ``docs/wire.md`` §7 "Conformance suite").
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastmcp.exceptions import ToolError


def add_common_tools(mcp: Any, *, optional: Any, required: Any) -> None:
    """Register ``greet`` (no task support), ``slow_compute`` (task mode ``optional``) and
    ``failing_job`` (``required``) on ``mcp``, in that order (``tools/list`` keeps it)."""

    @mcp.tool(description="Greets someone by name (no task support).")
    async def greet(name: str) -> str:
        return f"Hello, {name}!"

    @mcp.tool(description="Sleeps for `seconds`, then reports `computed <label>`.", task=optional)
    async def slow_compute(seconds: float, label: str) -> str:
        await asyncio.sleep(max(0.0, float(seconds)))
        return f"computed {label}"

    @mcp.tool(description="After about a second, ends with a tool error.", task=required)
    async def failing_job() -> str:
        await asyncio.sleep(1.0)
        raise ToolError("failing_job always fails")
