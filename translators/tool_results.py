"""What a tool call came to as its client saw it (docs/behaviour.md §6 "Tool results").

A client experiences a tool's failure in the body of an answer that is, to HTTP and JSON-RPC, a
success: a `tools/call` result with `isError: true`, a v1 task that ended `failed`, a v2 task
`completed` with `isError`. This module reads those answers, one message at a time, into a
`Seen`: the end it shows (`OK`, `TOOL_ERROR`, `PROTOCOL_ERROR`), or no end yet (a task created,
whose id it gives, or one still running or cancelled by its client). The other outcomes
(`TIMEOUT`, `REFUSED`) are the observer's, from the request's own outcome, never from a body.

`of_bytes` is the relay's: it answers from a bytes search when the answer cannot be anything but
a plain ok, and parses only an answer that may be something else (its last `isError` is not
`false`, it holds `taskId` or `"error"`, or it answers a task request). Sans-IO: no clock, no I/O.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from .errors import McpError
from .jsonrpc import parse_json

OK: Final = "ok"
TOOL_ERROR: Final = "tool_error"
PROTOCOL_ERROR: Final = "protocol_error"
TIMEOUT: Final = "timeout"
REFUSED: Final = "refused"
OUTCOMES: Final = (OK, TOOL_ERROR, PROTOCOL_ERROR, TIMEOUT, REFUSED)
"""Every outcome of a tool call, in the order the page shows them."""

TOOL_METHODS: Final = frozenset({"tools/call", "tasks/get", "tasks/result"})
"""The methods whose answers can end a tool call: the call itself, and a task's status or payload."""


class Seen(NamedTuple):
    """What one answer says of a tool call: `end`, the outcome it shows (None: no end yet), and
    `task_id`, the task a `tools/call` created (its id as the client was given it)."""

    end: str | None
    task_id: str | None = None


NOT_ENDED: Final = Seen(None)
ENDED_OK: Final = Seen(OK)
ENDED_TOOL_ERROR: Final = Seen(TOOL_ERROR)
ENDED_PROTOCOL_ERROR: Final = Seen(PROTOCOL_ERROR)


def _tool_result(result: dict[str, Any]) -> Seen:
    return ENDED_TOOL_ERROR if result.get("isError") is True else ENDED_OK


def of_result(method: str, result: Any, *, v1: bool) -> Seen:
    """What the `result` object of an answer to `method` says, on the session wire of 2025-11-25
    (`v1`) or in the extension's shapes (2026-07-28, and a v2 session).

    * `tools/call`: a created task (v1 `{"task": {...}}`, v2 `resultType: "task"`) is no end yet;
      otherwise the tool's result, `TOOL_ERROR` with `isError: true`.
    * `tasks/result` (v1): the tool's result, as for `tools/call`.
    * `tasks/get`: v1 `completed` is no end yet (its payload, `tasks/result`, is: the `mcp` 1.30
      SDK completes a task whose tool answered `isError`) and `failed` `TOOL_ERROR`; v2
      `completed` is the inlined result's (`TOOL_ERROR` with `isError`) and `failed` (an inlined
      JSON-RPC error) `PROTOCOL_ERROR`. Any other status (working,
      input_required, cancelled) is no end to count: a cancelled task is its client's choice.
    """
    if not isinstance(result, dict):
        return NOT_ENDED
    if method == "tools/call":
        task = result.get("task")
        if isinstance(task, dict) and isinstance(task.get("taskId"), str):
            return Seen(None, task["taskId"])
        if result.get("resultType") == "task":
            task_id = result.get("taskId")
            return Seen(None, task_id if isinstance(task_id, str) else None)
        return _tool_result(result)
    if method == "tasks/result":
        return _tool_result(result)
    if method != "tasks/get":
        return NOT_ENDED
    status = result.get("status")
    if status == "completed":
        if v1:
            return NOT_ENDED  # its payload, `tasks/result`, says how it went (an SDK completes a task whose tool failed)
        inlined = result.get("result")
        return _tool_result(inlined) if isinstance(inlined, dict) else ENDED_OK
    if status == "failed":
        return ENDED_TOOL_ERROR if v1 else ENDED_PROTOCOL_ERROR
    return NOT_ENDED


def of_message(method: str, message: Any, *, v1: bool) -> Seen:
    """What a whole JSON-RPC answer to `method` says: a JSON-RPC error ends a `tools/call` or a
    `tasks/result` (`PROTOCOL_ERROR`; a `tasks/get` refused is no end: the task may be unknown
    here); a result, `of_result`."""
    if not isinstance(message, dict):
        return NOT_ENDED
    if "result" in message:
        return of_result(method, message["result"], v1=v1)
    if "error" in message and method != "tasks/get":
        return ENDED_PROTOCOL_ERROR
    return NOT_ENDED


_FALSE: Final = (b":false", b": false", b" : false", b" :false")
"""How JSON writes `false` after a key (compact, Python's default, and spaced): any other spelling is parsed."""


_HEAD: Final = 128
"""Bytes at the start of a message where its `"error"` member is looked for (JSON-RPC writes the
envelope's few members first); anything else that holds `isError` is parsed."""


def of_bytes(method: str, raw: bytes, *, v1: bool, no_ids: bool = False) -> Seen:
    """`of_message` of the serialized answer `raw`, parsed only when it may be anything but a plain
    result. A `tools/call` answer without `taskId` (`no_ids`: the caller searched for it already)
    is read by its last `"isError"` (servers write it last, `false` on every result): the only one,
    followed by `false`, and no `"error"` member at the start, a result (`OK`); absent, a result
    unless the bytes hold `"error"`; anything else is parsed. Anything that is not one JSON object
    is no end."""
    if method == "tools/call" and (no_ids or raw.find(b"taskId") < 0):
        at = raw.rfind(b'"isError"')
        if at >= 0:
            # the only one (not a nested one after the tool's own), in a result (not an error's data)
            if raw.startswith(_FALSE, at + 9) and raw.find(b'"isError"', 0, at) < 0 and raw.find(b'"error"', 0, _HEAD) < 0:
                return ENDED_OK
        elif raw.find(b'"error"') < 0:  # `find`, not `in`: see `fleet_ids.may_carry_ids`
            return ENDED_OK if raw.find(b'"result"') >= 0 else NOT_ENDED
    try:
        message = parse_json(raw)
    except McpError:
        return NOT_ENDED
    return of_message(method, message, v1=v1)
