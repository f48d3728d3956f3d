"""Drive the real v2 client (FastMCP 4.1.4 + fastmcp-tasks 4.1.4) against a tasks endpoint.

Run it with the ``fastmcp4`` peer environment's python (see ``proxy/demo/peers.py``)::

    python fastmcp4_client_checks.py --url http://127.0.0.1:<port>/mcp [--check NAME ...]

The endpoint is normally the proxy in front of a v1 fixture server (the reference server on
mcp 1.30, or the FastMCP 3 one); any v2-modern server with the fixture tools works too. Every
check opens its own ``fastmcp.Client`` (mode ``auto``: it probes ``server/discover`` and speaks
the stateless 2026-07-28 wire) with an ``elicitation_handler``, so one broken check cannot
poison the next. ``import fastmcp_tasks`` registers the tasks extension on every client: a
tasked ``tools/call`` is then awaited transparently by ``client.call_tool``, and
``fastmcp_tasks.call_tool_task`` returns a ``ToolTask`` handle (``status``, ``wait``, ``result``,
``cancel``).

Output: one JSON line per check on stdout, ``{"check": name, "ok": bool, "detail": ...}``, in
the order of :data:`CHECKS`. Exit status 0 iff every selected check is ok (2 for bad arguments).
Each check is bounded by ``--timeout`` seconds (default 45).

Checks:

=====================  ======================================================================
check                  what must happen
=====================  ======================================================================
greet                  ``call_tool("greet", {"name": "World"})`` -> ``Hello, World!``
slow_compute           ``call_tool("slow_compute", {"seconds": 1, ...})`` waits for the task
                       transparently -> ``computed transparent``
task_lifecycle         ``call_tool_task(slow_compute 1 s)``: ``status()`` is ``working``,
                       ``wait()`` ends ``completed``, ``result()`` -> ``computed lifecycle``
tool_error             ``failing_job``: ``call_tool(raise_on_error=False)`` gives
                       ``is_error`` with ``failing_job always fails``, and ``call_tool``
                       raises ``ToolError`` with that text
protocol_error         ``call_tool_task(protocol_error_job)``: it ends, and ``result()``
                       raises ``ToolError`` with ``protocol_error_job: simulated internal
                       failure`` (the final ``tasks/get`` is reported in the detail)
elicitation            ``call_tool("confirm_delete", {"filename": "probe.txt"})``: the
                       client's handler is asked ``Delete probe.txt?`` and answers
                       ``confirm: true`` -> ``deleted probe.txt``
cancel                 ``call_tool_task(slow_compute 60 s)``, ``cancel()``, then ``wait()``
                       ends ``cancelled`` well before 60 s
=====================  ======================================================================
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import check_lines  # beside this file, which runs as a script
import fastmcp_tasks  # registers the tasks extension on every fastmcp.Client
from check_lines import Check, CheckFailed, Detail, expect, form_answer, texts
from fastmcp import Client
from fastmcp.exceptions import ToolError

#: Default bound for one check, seconds.
CHECK_TIMEOUT_S = 45.0
#: Bound for one transparent call or one handle drive inside a check, seconds.
CALL_TIMEOUT_S = 30.0


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


class ElicitationLog:
    """The client's elicitation handler: answers every form question and records it.

    A boolean property is answered ``True``, a number ``1``, anything else ``"Alice"``.
    """

    def __init__(self) -> None:
        self.questions: list[dict[str, Any]] = []

    async def __call__(self, message: str, response_type: Any, params: Any, context: Any) -> dict[str, Any]:
        schema = getattr(params, "requested_schema", None) or {}
        self.questions.append({"message": message, "requestedSchema": schema})
        return form_answer(schema, "Alice")


def _result_detail(result: Any) -> Detail:
    return {
        "is_error": bool(getattr(result, "is_error", False)),
        "texts": texts(getattr(result, "content", None)),
        "structured_content": getattr(result, "structured_content", None),
    }


def _task_detail(task: Any) -> Detail:
    """A ``ClientGetTaskResult`` / ``ClientCreateTaskResult`` as plain JSON (wire names)."""
    return task.model_dump(mode="json", by_alias=True, exclude_none=True)


def _exc_detail(exc: BaseException) -> Detail:
    return {"type": type(exc).__name__, "message": str(exc)}


def _client(url: str, elicitation: ElicitationLog | None = None) -> Client[Any]:
    return Client(url, name="fastmcp4-client-checks", elicitation_handler=elicitation or ElicitationLog())


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------


async def check_greet(url: str) -> tuple[bool, Detail]:
    async with _client(url) as client:
        result = await client.call_tool("greet", {"name": "World"}, timeout=CALL_TIMEOUT_S)
    detail = _result_detail(result)
    expect(not detail["is_error"] and detail["texts"] == ["Hello, World!"], "unexpected greet result", detail)
    return True, detail


async def check_slow_compute(url: str) -> tuple[bool, Detail]:
    started = time.monotonic()
    async with _client(url) as client:
        result = await client.call_tool("slow_compute", {"seconds": 1, "label": "transparent"}, timeout=CALL_TIMEOUT_S)
    detail = {**_result_detail(result), "elapsed_s": round(time.monotonic() - started, 2)}
    expect(not detail["is_error"] and detail["texts"] == ["computed transparent"], "unexpected slow_compute result", detail)
    return True, detail


async def check_task_lifecycle(url: str) -> tuple[bool, Detail]:
    async with _client(url) as client:
        handle = await fastmcp_tasks.call_tool_task(client, "slow_compute", {"seconds": 1, "label": "lifecycle"})
        detail: Detail = {"created": _task_detail(handle.create_result)}
        first = await handle.status()
        detail["first_status"] = _task_detail(first)
        final = await handle.wait(timeout=CALL_TIMEOUT_S)
        detail["final_status"] = _task_detail(final)
        result = await handle.result()
        detail["result"] = _result_detail(result)
    expect(detail["created"].get("resultType") == "task", "CreateTaskResult without resultType 'task'", detail)
    expect(first.task_id == handle.task_id, "tasks/get answered another task id", detail)
    expect(first.status == "working", f"first status is {first.status!r}, not 'working'", detail)
    expect(final.status == "completed", f"final status is {final.status!r}", detail)
    expect(
        not detail["result"]["is_error"] and detail["result"]["texts"] == ["computed lifecycle"],
        "unexpected task result",
        detail,
    )
    return True, detail


async def check_tool_error(url: str) -> tuple[bool, Detail]:
    expected = "failing_job always fails"
    async with _client(url) as client:
        result = await client.call_tool("failing_job", {}, timeout=CALL_TIMEOUT_S, raise_on_error=False)
        detail: Detail = {"result": _result_detail(result)}
        try:
            await client.call_tool("failing_job", {}, timeout=CALL_TIMEOUT_S)
        except ToolError as exc:
            detail["raised"] = _exc_detail(exc)
        else:
            detail["raised"] = None
    expect(detail["result"]["is_error"], "failing_job did not end as a tool error", detail)
    expect(any(expected in text for text in detail["result"]["texts"]), f"no text with {expected!r}", detail)
    expect(
        detail["raised"] is not None and expected in detail["raised"]["message"],
        f"call_tool did not raise ToolError with {expected!r}",
        detail,
    )
    return True, detail


async def check_protocol_error(url: str) -> tuple[bool, Detail]:
    expected = "protocol_error_job: simulated internal failure"
    async with _client(url) as client:
        handle = await fastmcp_tasks.call_tool_task(client, "protocol_error_job", {})
        detail: Detail = {"created": _task_detail(handle.create_result)}
        final = await handle.wait(timeout=CALL_TIMEOUT_S)
        detail["final_status"] = _task_detail(final)
        try:
            result = await handle.result()
        except ToolError as exc:
            detail["raised"] = _exc_detail(exc)
        else:
            detail["raised"] = None
            detail["result"] = _result_detail(result)
    expect(final.status in ("failed", "completed"), f"final status is {final.status!r}", detail)
    expect(
        detail["raised"] is not None and expected in detail["raised"]["message"],
        f"result() did not raise ToolError with {expected!r}",
        detail,
    )
    return True, detail


async def check_elicitation(url: str) -> tuple[bool, Detail]:
    questions = ElicitationLog()
    detail: Detail = {"questions": questions.questions}
    try:
        async with _client(url, questions) as client:
            result = await client.call_tool(
                "confirm_delete", {"filename": "probe.txt"}, timeout=CALL_TIMEOUT_S, raise_on_error=False
            )
    except Exception as exc:
        detail["raised"] = _exc_detail(exc)
        raise CheckFailed(f"confirm_delete raised {type(exc).__name__}", detail) from exc
    detail["result"] = _result_detail(result)
    expect(
        [q["message"] for q in questions.questions] == ["Delete probe.txt?"],
        "the handler was not asked exactly 'Delete probe.txt?'",
        detail,
    )
    expect(
        not detail["result"]["is_error"] and detail["result"]["texts"] == ["deleted probe.txt"],
        "unexpected confirm_delete result",
        detail,
    )
    return True, detail


async def check_cancel(url: str) -> tuple[bool, Detail]:
    started = time.monotonic()
    async with _client(url) as client:
        handle = await fastmcp_tasks.call_tool_task(client, "slow_compute", {"seconds": 60, "label": "cancel"})
        detail: Detail = {"created": _task_detail(handle.create_result)}
        before = await handle.status()
        detail["before_cancel"] = _task_detail(before)
        await handle.cancel()
        final = await handle.wait(timeout=15)
        detail["final_status"] = _task_detail(final)
        detail["elapsed_s"] = round(time.monotonic() - started, 2)
    expect(before.status == "working", f"status before cancel is {before.status!r}", detail)
    expect(final.status == "cancelled", f"final status is {final.status!r}", detail)
    return True, detail


#: Every check, in run order.
CHECKS: dict[str, Check] = {
    "greet": check_greet,
    "slow_compute": check_slow_compute,
    "task_lifecycle": check_task_lifecycle,
    "tool_error": check_tool_error,
    "protocol_error": check_protocol_error,
    "elicitation": check_elicitation,
    "cancel": check_cancel,
}


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    url, names, timeout_s = check_lines.parse_args(__doc__, CHECKS, sorted(CHECKS), CHECK_TIMEOUT_S, argv)
    return 0 if asyncio.run(check_lines.run(CHECKS, url, names, timeout_s, _exc_detail)) else 1


if __name__ == "__main__":
    sys.exit(main())
