"""Task ids and MRTR `requestState`s in v2-modern messages relayed to one of several v2-modern backends.

With several backends the proxy rewrites task ids, and nothing else (docs/behaviour.md §6 "Task ids"):
toward the client each backend task id becomes a sealed id naming its backend, and toward the
backend the sealed id becomes the backend's own id again. MRTR `requestState`s get the same
treatment, so that a retry finds its backend. The callables do the sealing; this module only
knows where the values are. Places, on the 2026-07-28 wire with the SEP-2663 tasks extension:

* `params.taskId`: `tasks/get`, `tasks/update`, `tasks/cancel` requests (SEP-2663); the
  `DetailedTask` params of `notifications/tasks` (SEP-2663, TaskStatusNotification).
* `result.taskId`: `CreateTaskResult` (`resultType: "task"`) and `GetTaskResult` (a
  `DetailedTask`) (SEP-2663, tools/call and tasks/get).
* `_meta["io.modelcontextprotocol/related-task"].taskId` in `params._meta` and `result._meta`,
  and in `inputRequests[key].params._meta` of a `params` or `result` (mcpkit keeps it there,
  docs/wire.md §7).
* `params.notifications.taskIds[*]`: `subscriptions/listen` requests and
  `notifications/subscriptions/acknowledged` (SEP-2663, TaskSubscriptionNotifications).
* `params.requestState` (an MRTR retry) and `result.requestState` (`InputRequiredResult`)
  (core 2026-07-28, MRTR).

On the session wire (v1 and v2-session relays with several backends) also the v1 shapes
(core 2025-11-25, Tasks):

* `result.task.taskId`: the v1 `CreateTaskResult`;
* `result.tasks[*].taskId`: `tasks/list`;
* `params.taskId` of `notifications/tasks/status`, `tasks/result` and the others above, and the
  related-task `_meta` of server→client requests and of `tasks/result` results, as above.

Only strings are mapped; anything else (missing, null, a number) is left as it is. A v2-modern
task has no `task` wrapper (docs/wire.md §3.2), and tool arguments, tool results and `inputRequests`
keys are payload, so none of them is touched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .protocol import META_RELATED_TASK

Relabel = Callable[[str], str]


def relabel(message: dict[str, Any], task_id: Relabel, request_state: Relabel) -> dict[str, Any]:
    """A copy of the JSON-RPC message (request, notification, result response or error response) with every
    task id mapped through `task_id` and every requestState through `request_state`; nothing else changes.
    Exceptions raised by the callables propagate unchanged.

    The input is never mutated: the containers on the way to a changed value are copied, every other
    value is shared with the input."""

    out = dict(message)
    for part in ("params", "result"):
        holder = out.get(part)
        if isinstance(holder, dict) and not _BODY_KEYS.isdisjoint(holder):  # most params and results hold none
            out[part] = _body(holder, task_id, request_state)
    return out


_BODY_KEYS = frozenset(("taskId", "requestState", "_meta", "inputRequests", "task", "tasks", "notifications"))
"""The members of `params` or `result` under which `relabel` may change something."""


def _body(holder: dict[str, Any], task_id: Relabel, request_state: Relabel) -> dict[str, Any]:
    """`params` or `result` with every place of a task id or requestState mapped (see the module
    docstring): each member of `_BODY_KEYS` it holds, by the member's own mapping (`_PLACES`).
    A copy is made at the first change; the members keep their order."""
    out: dict[str, Any] | None = None
    for key in _PLACES:  # in a fixed order: of two ids that do not open, the first is the one refused
        if key not in holder:
            continue
        old = holder[key]
        new = _PLACES[key](old, task_id, request_state)
        if new is not old:
            if out is None:
                out = dict(holder)
            out[key] = new
    return holder if out is None else out


def _string(value: Any, fn: Relabel) -> Any:
    """`value` mapped through `fn` when it is a string."""
    return fn(value) if isinstance(value, str) else value


def _object(value: Any, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """`fn(value)` when `value` is an object."""
    return fn(value) if isinstance(value, dict) else value


_PLACES: dict[str, Callable[[Any, Relabel, Relabel], Any]] = {
    "taskId": lambda value, task_id, _state: _string(value, task_id),
    "requestState": lambda value, _task_id, request_state: _string(value, request_state),
    "_meta": lambda value, task_id, _state: _object(value, lambda meta: _related_meta(meta, task_id)),
    "inputRequests": lambda value, task_id, _state: _object(value, lambda requests: _input_requests(requests, task_id)),
    "task": lambda value, task_id, _state: _object(value, lambda task: _mapped(task, "taskId", task_id)),
    "tasks": lambda value, task_id, _state: _listed(value, task_id) if isinstance(value, list) else value,
    "notifications": lambda value, task_id, _state: _object(value, lambda wanted: _task_ids(wanted, task_id)),
}
"""How each member of `_BODY_KEYS` is mapped, in the order `_body` maps them (its value in, its
value out: the same object when nothing in it changes)."""


def listened_task_ids(params: dict[str, Any]) -> list[Any]:
    """The task ids a `subscriptions/listen` request names (`params.notifications.taskIds`, SEP-2663),
    as given (strings or not); [] when it names none."""
    wanted = params.get("notifications")
    ids = wanted.get("taskIds") if isinstance(wanted, dict) else None
    return list(ids) if isinstance(ids, list) else []


def ids_to_client(message: dict[str, Any], task_id: Relabel, request_state: Relabel) -> dict[str, Any]:
    """A backend's message on its way to the client: backend task ids and requestStates mapped to
    sealed ones (`task_id`, `request_state` seal). Inverse: `ids_to_backend`."""
    return relabel(message, task_id, request_state)


def ids_to_backend(message: dict[str, Any], task_id: Relabel, request_state: Relabel) -> dict[str, Any]:
    """A client's message on its way to a backend: sealed task ids and requestStates mapped back to
    the backend's own (`task_id`, `request_state` unseal). Inverse: `ids_to_client`."""
    return relabel(message, task_id, request_state)


# --- helpers: each returns its argument itself when nothing in it changes ------------------------


def _mapped(holder: dict[str, Any], key: str, fn: Relabel) -> dict[str, Any]:
    """`holder` with the string at `key` mapped through `fn`."""
    value = holder.get(key)
    return {**holder, key: fn(value)} if isinstance(value, str) else holder


def _nested(holder: dict[str, Any], key: str, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """`holder` with the object at `key` replaced by `fn(object)`."""
    inner = holder.get(key)
    if not isinstance(inner, dict):
        return holder
    changed = fn(inner)
    return holder if changed is inner else {**holder, key: changed}


def _related_task(holder: dict[str, Any], task_id: Relabel) -> dict[str, Any]:
    """`holder` with `_meta["io.modelcontextprotocol/related-task"].taskId` mapped."""
    return _nested(holder, "_meta", lambda meta: _related_meta(meta, task_id))


def _related_meta(meta: dict[str, Any], task_id: Relabel) -> dict[str, Any]:
    """A `_meta` object with its `["io.modelcontextprotocol/related-task"].taskId` mapped."""
    related = meta.get(META_RELATED_TASK)
    if not isinstance(related, dict) or not isinstance(related.get("taskId"), str):
        return meta
    return {**meta, META_RELATED_TASK: {**related, "taskId": task_id(related["taskId"])}}


def _input_requests(requests: dict[str, Any], task_id: Relabel) -> dict[str, Any]:
    """`inputRequests` (key -> `{method, params}`) with the related-task id in each `params._meta` mapped."""
    changed = {
        key: _nested(entry, "params", lambda params: _related_task(params, task_id)) if isinstance(entry, dict) else entry
        for key, entry in requests.items()
    }
    return requests if all(changed[key] is requests[key] for key in requests) else changed


def _task_ids(wanted: dict[str, Any], task_id: Relabel) -> dict[str, Any]:
    """A subscription filter with each string in `taskIds` mapped."""
    ids = wanted.get("taskIds")
    if not isinstance(ids, list) or not any(isinstance(one, str) for one in ids):
        return wanted
    return {**wanted, "taskIds": [task_id(one) if isinstance(one, str) else one for one in ids]}


def _listed(tasks: list[Any], task_id: Relabel) -> list[Any]:
    """The `tasks` of a v1 `tasks/list` result with the `taskId` of each entry mapped."""
    changed = [_mapped(task, "taskId", task_id) if isinstance(task, dict) else task for task in tasks]
    return tasks if all(a is b for a, b in zip(changed, tasks, strict=True)) else changed


ID_KEYS_BYTES = (b"taskId", b"requestState", b"\\u")
"""What a serialized message must hold for `relabel` to change it: a `taskId` or `taskIds` key, a
`requestState` key, or a JSON escape (through which a key could be spelled without these bytes)."""


def may_carry_ids(raw: bytes) -> bool:
    """Whether the serialized message(s) in `raw` may hold a task id or a requestState, so that
    `ids_to_client` / `ids_to_backend` could change something (a bytes search; no parsing). False
    means they would give the message back unchanged: a relay may pass `raw` on as it is."""
    # ID_KEYS_BYTES, unrolled: on every relayed message. `find`, not `in`: CPython 3.11's
    # `bytes.__contains__` first tries the needle as an integer and makes (and drops) a TypeError.
    return raw.find(b"taskId") >= 0 or raw.find(b"requestState") >= 0 or raw.find(b"\\u") >= 0
