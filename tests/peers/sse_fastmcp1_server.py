"""A legacy server as it was written before March 2025: the official ``mcp==1.30.0`` SDK's FastMCP
on the 2024-11-05 HTTP+SSE transport (``mcp.run(transport="sse")``'s app, ``sse_app()``), no tasks.
GET ``/sse`` opens a session's event stream, whose first event names ``/messages/?session_id=…``
for its POSTs.

Run in the ``mcp-v1`` peer environment (``proxy/demo/peers.py``)::

    python sse_fastmcp1_server.py --host 127.0.0.1 --port 0

It prints ``LISTENING http://127.0.0.1:<port>/mcp`` once it accepts connections (the entry point the
fixture servers share); its stream is at ``/sse`` on that host and port. Tools, with the names and
texts of the task-less fixture server (``untasked_mcp1_server.py``), so the same checks run:

``greet(name)``: ``Hello, {name}!`` at once; ``slow_compute(seconds, label)``: sleeps ``seconds``,
reporting ``step i of n`` progress, then ``computed {label}``; ``failing_job(seconds)``: a tool
error ``failing_job always fails``; ``confirm_delete(filename, delay)``: after ``delay``, asks
(elicitation, boolean ``confirm``) ``Delete {filename}?``, then ``deleted {filename}`` or ``kept {filename}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "proxy" / "demo" / "servers"))
import loopback_serve  # noqa: E402  (the serve-and-announce entry point the fixture servers share)

mcp = FastMCP("sse-legacy")
STEP_S = 0.25


class Confirmation(BaseModel):
    confirm: bool


@mcp.tool()
def greet(name: str) -> str:
    """Hello, name!"""
    return f"Hello, {name}!"


@mcp.tool()
async def slow_compute(seconds: float, label: str, ctx: Context) -> str:
    """Sleeps, reporting progress."""
    steps = max(1, round(seconds / STEP_S))
    for step in range(1, steps + 1):
        await anyio.sleep(seconds / steps)
        if step < steps:
            await ctx.report_progress(step, steps, f"step {step} of {steps}")
    return f"computed {label}"


@mcp.tool()
async def failing_job(seconds: float = 1.5) -> str:
    """Ends with a tool error."""
    await anyio.sleep(seconds)
    raise ToolError("failing_job always fails")


@mcp.tool()
async def confirm_delete(filename: str, ctx: Context, delay: float = 1.0) -> str:
    """Asks before it deletes."""
    await anyio.sleep(delay)
    answer = await ctx.elicit(f"Delete {filename}?", Confirmation)
    confirmed = answer.action == "accept" and answer.data.confirm
    return f"deleted {filename}" if confirmed else f"kept {filename}"


if __name__ == "__main__":
    loopback_serve.main(__doc__, mcp.sse_app)
