"""Second legacy v1 fixture server (MCP 2025-11-25 tasks) on ``fastmcp[tasks]==3.4.11``.

Run it with the ``fastmcp3`` peer environment's python (see ``proxy/demo/peers.py``)::

    python v1_fastmcp3_server.py --host 127.0.0.1 --port 0

It binds the socket itself (port 0 picks a free port), serves ``FastMCP.http_app(path="/mcp")``
(Streamable HTTP, stateful sessions) on uvicorn, and prints exactly one line
``LISTENING http://127.0.0.1:<port>/mcp`` once it accepts connections. Loopback only. Background
tasks run on Docket with its in-memory backend (``memory://``, the FastMCP default), in this
process; nothing else is needed.

Tools (the conformance fixture set, ``docs/wire.md`` §7 "Conformance suite"), with the texts of the reference
server ``v1_server.py``:

========================  =============  ==================================================
tool                      taskSupport    behaviour
========================  =============  ==================================================
greet(name)               (none)         ``Hello, {name}!``
slow_compute(seconds,     optional       sleeps ``seconds``, ``computed {label}``
label)
failing_job()             required       after ~1 s, raises ``ToolError("failing_job always
                                         fails")``
protocol_error_job()      required       after ~0.5 s, raises ``RuntimeError("protocol_error_job:
                                         simulated internal failure")``
confirm_delete(filename)  required       in the task, one form question (boolean ``confirm``)
multi_input()             required       in the task, two questions (one after the other)
test_tool_with_task()     required       in the task, asks for a name, then greets
========================  =============  ==================================================

This is what FastMCP 3 itself puts on the wire (``docs/wire.md`` §7 "FastMCP 3.4.11"): it is a
deliberately *different* v1 server from the reference one, so the proxy is tested against both.

Where FastMCP 3 cannot express a fixture exactly, and how this server deviates:

* ``failing_job`` and ``protocol_error_job``: FastMCP 3 has no way to end a task ``completed``
  with an ``isError`` result, nor to end it with a JSON-RPC error. Any exception raised by the
  tool ends the Docket execution ``FAILED``; ``tasks/get`` then says ``failed`` with
  ``statusMessage`` ``"Task failed: <message>"`` and ``tasks/result`` answers an ``isError``
  ``CallToolResult`` whose text is the exception message (plus related-task ``_meta``). So both
  tools look alike on the wire: ``failed`` + ``isError`` result; only the text tells them apart
  (the reference server ends ``failing_job`` ``completed``/``isError`` and
  ``protocol_error_job`` ``failed`` with a ``_meta``-only payload).
* ``test_tool_with_task``: FastMCP 3 decides "task or not" before the tool body runs and runs a
  required tool's body only inside the Docket worker, so it cannot ask a question on the
  ``tools/call`` stream before the task exists. The name question (``What is your name?``) is
  asked from inside the task instead, like every other question here: it arrives on the session's
  GET stream, after an ``input_required`` status notification.
* ``multi_input``: FastMCP 3 keeps one elicitation slot per task (its Redis keys are
  ``<task>:elicit:request|response|status``) and relays questions one at a time, so two
  concurrent ``ctx.elicit`` calls in one task would overwrite each other. The two questions
  (``value for a``, ``value for b``) are asked one after the other; the second is sent only
  after the first is answered.
* Questions from a task are plain ``elicitation/create`` requests on the GET stream (integer
  ids, **no** related-task ``_meta``), preceded by an ``input_required``
  ``notifications/tasks/status`` whose ``_meta`` (at the JSON-RPC envelope level) names the
  task. ``tasks/result`` never carries them, and it never blocks: on a running task it answers
  ``-32602 "Task not completed yet (current state: working)"``. ``tasks/get`` never says
  ``input_required`` (Docket has no such state): only the notification does. Without an event
  store (none is configured, as in FastMCP's default), anything for the GET stream sent while the
  session has no GET stream connected is dropped; a question dropped that way is never re-sent,
  and its task then stays ``working`` (the relay waits for an answer, up to an hour). A client
  must therefore hold the GET stream open *before* it creates a task that asks: these tools ask
  within milliseconds of the ``CreateTaskResult``.
* Elicitation schemas are generated from dataclasses, so they carry ``title`` keywords
  (``{"title": "Confirm", "properties": {"confirm": {"title": "Confirm", "type": "boolean"}},
  ...}``) where the reference server sends bare schemas.
* Results are FastMCP's: a ``str`` return value also becomes ``structuredContent``
  ``{"result": ...}`` with ``_meta.fastmcp.wrap_result``; a required tool called without a task,
  or ``greet`` with one, gets FastMCP's ``isError`` text ("... requires task-augmented
  execution" / "... does not support task-augmented execution").
* Other FastMCP 3 quirks (``docs/wire.md`` §7) come along unchanged: ``tasks/list`` is always empty,
  ``ttl`` drifts between create (echoed or 900000) and ``tasks/get`` (60000), ``pollInterval`` is
  5000, ``tasks/cancel`` on a cancelled task succeeds again, and ``tasks/result`` on a cancelled
  task is ``-32602``. A cancelled task's work is really stopped (Docket cancels the asyncio task).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass

import loopback_serve  # beside this file, which runs as a script
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.server.elicitation import AcceptedElicitation
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tools import add_common_tools  # beside this file, too

SERVER_NAME = "tasks-fixture-v1-fastmcp3"

log = logging.getLogger("mcp_tasks_proxy.v1_fastmcp3_server")

mcp: FastMCP = FastMCP(SERVER_NAME)

OPTIONAL = TaskConfig(mode="optional")
REQUIRED = TaskConfig(mode="required")


# --------------------------------------------------------------------------------------------
# Elicitation shapes (FastMCP 3 derives the requested schema from a dataclass)
# --------------------------------------------------------------------------------------------


@dataclass
class Confirm:
    confirm: bool


@dataclass
class Value:
    value: str


@dataclass
class Name:
    name: str


def _action(answer: object) -> str:
    """The action of an elicitation answer: ``accept``, ``decline`` or ``cancel``."""
    return str(getattr(answer, "action", "unknown"))


# --------------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------------


add_common_tools(mcp, optional=OPTIONAL, required=REQUIRED)  # greet, slow_compute, failing_job


@mcp.tool(description="Its task fails with an internal error.", task=REQUIRED)
async def protocol_error_job() -> str:
    await asyncio.sleep(0.5)
    raise RuntimeError("protocol_error_job: simulated internal failure")


@mcp.tool(description="Asks for confirmation before pretending to delete `filename`.", task=REQUIRED)
async def confirm_delete(filename: str, ctx: Context) -> str:
    answer = await ctx.elicit(f"Delete {filename}?", response_type=Confirm)
    if isinstance(answer, AcceptedElicitation) and answer.data.confirm is True:
        return f"deleted {filename}"
    return f"{filename} was not deleted ({_action(answer)})"


@mcp.tool(description="Asks two questions (FastMCP 3: one after the other).", task=REQUIRED)
async def multi_input(ctx: Context) -> str:
    answer_a = await ctx.elicit("value for a", response_type=Value)
    answer_b = await ctx.elicit("value for b", response_type=Value)
    if not isinstance(answer_a, AcceptedElicitation) or not isinstance(answer_b, AcceptedElicitation):
        raise ToolError(f"multi_input needs both values (a: {_action(answer_a)}, b: {_action(answer_b)})")
    return f"got both: a={answer_a.data.value}, b={answer_b.data.value}"


@mcp.tool(description="Asks for a name (FastMCP 3: inside its task), then greets.", task=REQUIRED)
async def test_tool_with_task(ctx: Context) -> str:
    answer = await ctx.elicit("What is your name?", response_type=Name)
    if not isinstance(answer, AcceptedElicitation) or not answer.data.name:
        raise ToolError(
            f"test_tool_with_task: the name question was answered with action '{_action(answer)}' and no name"
        )
    await asyncio.sleep(0.5)
    return f"Hello, {answer.data.name}! test_tool_with_task finished."


# --------------------------------------------------------------------------------------------
# HTTP app and entry point
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Parse ``--host``/``--port`` and serve ``FastMCP.http_app`` (endpoint ``/mcp``) until SIGTERM or SIGINT."""
    if "--stdio" in (sys.argv[1:] if argv is None else argv):
        mcp.run(transport="stdio", show_banner=False)  # one session on stdin/stdout
        return
    # The app's lifespan enters FastMCP's own lifespan, which starts Docket and its worker.
    # Host/Origin protection stays on FastMCP's "auto" default (loopback Host headers only).
    loopback_serve.main(__doc__, lambda: mcp.http_app(path="/mcp", transport="http"), argv)


if __name__ == "__main__":
    main()
