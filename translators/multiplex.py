"""Many sessions over one stdio process: the rewrites of messages that multiplexing needs.

A stdio server has one session (MCP core 2025-11-25 §Transports "stdio"), so the proxy carries
many virtual sessions over one process (docs/behaviour.md §7 "stdio backends"). Toward the
process each request gets an id (and, when it has one, a progress token) unique in the process;
toward the client both are given back. What a message from the process belongs to is read from
it here (`route_of`): the related task of its `_meta`, its progress token, the request it names,
or the task it names. Every function is pure; each rewrite has its inverse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .jsonrpc import RequestId
from .subscriptions import TASK_STATUS_NAMES

RELATED_TASK = "io.modelcontextprotocol/related-task"
"""The `_meta` key naming the task a message belongs to (core 2025-11-25 §Tasks)."""
TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/cancel"})
"""Requests that name one task in `params.taskId`."""
QUIET_METHODS = frozenset(
    {
        "ping",
        "tasks/get",
        "tasks/list",
        "tasks/cancel",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
    }
)
"""Requests during which a server does not ask its client anything: a request in flight of one of
these does not make a server→client request without a related task that client's."""


def with_id(message: dict[str, Any], request_id: RequestId | None) -> dict[str, Any]:
    """`message` (a request or a response) with its `id` replaced. Its own inverse (with the old id)."""
    return {**message, "id": request_id}


_LINE_START = b'{"jsonrpc":"2.0","id":'
"""How a message written by the Python SDK (and by the proxy) begins: its id is its second member."""


def line_with_id(line: bytes, old_id: RequestId, new_id: RequestId) -> bytes | None:
    """`line`, one JSON-RPC message as valid compact JSON on one line (a stdio pipe's, or a POST
    body), with its top-level `id` `old_id` replaced by `new_id` without decoding it: what
    `with_id` does to the decoded message, for the usual shapes; its own inverse (with the ids
    swapped). None when the line's shape does not show that id's place for certain; the caller then
    encodes the decoded message (`with_id`).

    Certain means: the line holds the bytes `"id"` exactly once and no `\\u006` (the escapes of
    `i` and `d`, which would spell another `id` key), and they are either its second
    member after `{"jsonrpc":"2.0",` (as the Python SDK writes) or its last member before the
    closing brace (as `JSON.stringify` of the TypeScript SDK's messages writes), with the value
    `old_id` encoded compactly. A raw `,` or `{` cannot be inside a JSON string followed by `"id":`,
    so that member is the top level's, the one a decoder reads."""
    old, new = _id_bytes(old_id), _id_bytes(new_id)
    if old is None or new is None or line[:1] != b"{" or line.count(b'"id"') != 1 or b"\\u006" in line:
        # Beginning otherwise: a byte order mark, or not UTF-8. `\u006`: a key spelt with escapes
        # (`"\u0069d"` is `"id"` too, unseen by the count, and a decoder reads the last of two).
        return None
    start = len(_LINE_START)
    if line.startswith(_LINE_START) and line.startswith(old + b",", start):
        return _LINE_START + new + line[start + len(old) :]
    tail = b'"id":' + old + b"}"
    if line.endswith(tail) and line[-len(tail) - 1 : -len(tail)] in (b",", b"{"):
        return line[: -len(tail)] + b'"id":' + new + b"}"
    return None


def _id_bytes(request_id: RequestId | None) -> bytes | None:
    """A request id as compact JSON (an integer, or a string of printable ASCII without `"` or
    `\\`, which has one spelling); None for any other value, whose spelling in a line may differ."""
    if type(request_id) is int:  # (not a bool)
        return str(request_id).encode()
    if (
        isinstance(request_id, str)
        and request_id.isascii()
        and request_id.isprintable()
        and '"' not in request_id
        and "\\" not in request_id
    ):
        return b'"' + request_id.encode() + b'"'
    return None


def progress_token(message: dict[str, Any]) -> RequestId | None:
    """The `params._meta.progressToken` of a request, None when it has none."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, (str, int)) and not isinstance(token, bool) else None


def with_progress_token(message: dict[str, Any], token: RequestId) -> dict[str, Any]:
    """A request whose `params._meta.progressToken` (which it has) is replaced by `token`; also
    a `notifications/progress` whose `params.progressToken` is. Inverse: the same with the old token."""
    params = dict(message.get("params") or {})
    if message.get("method") == "notifications/progress":
        params["progressToken"] = token
    else:
        params["_meta"] = {**params.get("_meta", {}), "progressToken": token}
    return {**message, "params": params}


def to_process(message: dict[str, Any], request_id: int, token: int | None) -> dict[str, Any]:
    """A virtual session's request as the process gets it: id `request_id`, and progress token
    `token` when the request carries one (None: it has none). Inverse: `to_client`."""
    out = with_id(message, request_id)
    return with_progress_token(out, token) if token is not None else out


def to_client(response: dict[str, Any], request_id: RequestId | None) -> dict[str, Any]:
    """The process's response as the virtual session's client gets it: its own request id back."""
    return with_id(response, request_id)


def cancelled_to_process(notification: dict[str, Any], request_id: int) -> dict[str, Any]:
    """A client's `notifications/cancelled` naming the process's id for the request. Inverse: the
    same with the client's id."""
    return {**notification, "params": {**notification.get("params", {}), "requestId": request_id}}


def related_task(message: dict[str, Any]) -> str | None:
    """The task id in `params._meta["io.modelcontextprotocol/related-task"]`, None without one."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    related = meta.get(RELATED_TASK) if isinstance(meta, dict) else None
    task = related.get("taskId") if isinstance(related, dict) else None
    return task if isinstance(task, str) else None


def task_param(message: dict[str, Any]) -> str | None:
    """`params.taskId` of a task request (`TASK_METHODS`), None for any other message."""
    if message.get("method") not in TASK_METHODS:
        return None
    params = message.get("params")
    task = params.get("taskId") if isinstance(params, dict) else None
    return task if isinstance(task, str) else None


def created_task(result: Any) -> str | None:
    """The `task.taskId` of a `CreateTaskResult`, None for any other result."""
    task = result.get("task") if isinstance(result, dict) else None
    task_id = task.get("taskId") if isinstance(task, dict) else None
    return task_id if isinstance(task_id, str) else None


def created_task_ttl_ms(result: Any) -> int | None:
    """The `task.ttl` of a `CreateTaskResult` (ms the server keeps the task from its creation, core
    2025-11-25 §Tasks), None when it is null, absent or not a non-negative integer."""
    task = result.get("task") if isinstance(result, dict) else None
    ttl = task.get("ttl") if isinstance(task, dict) else None
    return ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0 else None


TERMINAL = frozenset({"completed", "failed", "cancelled"})


def terminal(task: Any) -> bool:
    """Whether a task (a `tasks/get` or `tasks/cancel` result, a status notification's params,
    a `CreateTaskResult`'s `task`) is in a terminal status."""
    return isinstance(task, dict) and task.get("status") in TERMINAL


def own_tasks(result: dict[str, Any], owned: Callable[[str], bool]) -> dict[str, Any]:
    """A `tasks/list` result keeping only the tasks `owned` says are the caller's (`nextCursor`
    kept: a page may come back shorter, even empty, before the last)."""
    tasks = result.get("tasks")
    if not isinstance(tasks, list):
        return result
    kept = [t for t in tasks if isinstance(t, dict) and isinstance(t.get("taskId"), str) and owned(t["taskId"])]
    return {**result, "tasks": kept}


RouteKind = Literal["task", "progress", "request", "server-request", "resource", "broadcast", "in-flight"]


@dataclass(frozen=True, slots=True)
class Route:
    """What a message from the process belongs to: `kind` and its `key` (a task id, progress token,
    request id, resource URI; None for "broadcast" and "in-flight")."""

    kind: RouteKind
    key: RequestId | None = None


BROADCAST_NOTIFICATIONS = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
    }
)
"""Notifications about the server as a whole, for every virtual session."""


def route_of(message: dict[str, Any]) -> Route:
    """What a request or notification from the process belongs to. In order: its related task;
    for `notifications/progress` its token; for `notifications/cancelled` the server→client
    request it names; for `notifications/tasks/status` (or `notifications/tasks`) its task; for
    `notifications/resources/updated` its URI; list changes are for everyone; anything else
    (a server→client request, a log line) belongs to the request in flight it came during."""
    task = related_task(message)
    if task is not None:
        return Route("task", task)
    method = message.get("method")
    raw_params = message.get("params")
    params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
    if method == "notifications/progress" and isinstance(params.get("progressToken"), (str, int)):
        return Route("progress", params["progressToken"])
    if method == "notifications/cancelled" and isinstance(params.get("requestId"), (str, int)):
        return Route("server-request", params["requestId"])
    if method in TASK_STATUS_NAMES and isinstance(params.get("taskId"), str):
        return Route("task", params["taskId"])
    if method == "notifications/resources/updated" and isinstance(params.get("uri"), str):
        return Route("resource", params["uri"])
    if method in BROADCAST_NOTIFICATIONS:
        return Route("broadcast")
    return Route("in-flight")
