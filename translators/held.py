"""Held tasks: a plain call to a tool without task support that the proxy turned into a task it
holds itself (docs/behaviour.md §9 "Held tasks"; docs/decisions.md §105-§114).

The backend never sees a task: it answers one plain `tools/call`. What the client sees is built
here from a `HeldState` (the record the proxy keeps, in milliseconds) through the canonical task
(`translators.model.CanonicalTask`) and the existing per-dialect renderers of
`translators.differences` and `translators.results`, so a held task has exactly the shapes of any
other task on each face:

* v2-modern (SEP-2663): `created_v2` (flat `CreateTaskResult`), `get_v2` (`DetailedTask` with
  the inlined `result`, `error` or `inputRequests`, `ttlMs`, `pollIntervalMs`);
* v1 and v2-session (core 2025-11-25): `created_v1` (nested `CreateTaskResult`), `get_v1` (flat
  `Task`, `ttl`, `pollInterval`), `result_v1` (the `tasks/result` payload with related-task
  `_meta`), `list_v1` (`tasks/list`), `cancelled_v1` (`CancelTaskResult`);
* `tools_list_held_v1`: a v1 `tools/list` with each tool the proxy holds shown
  `execution.taskSupport: "optional"`, and `initialize_held_v1`: a v1 `InitializeResult` that
  declares the held tasks (`capabilities.tasks`) in front of a backend that offers none.

Pure: "now" is an argument, ids are the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from .capabilities import task_support, tool_to_v1
from .differences import (
    add_related_task,
    cancel_answer_v1,
    created_task_result_v1,
    created_task_result_v2,
    get_task_result_v1,
    get_task_result_v2,
    outcome_to_v1,
    strip_related_task,
)
from .errors import INTERNAL_ERROR, McpError
from .model import CanonicalTask, InputRequest, TaskError
from .protocol import TERMINAL_STATUSES, TaskStatus
from .results import tasks_list_result_v1

HELD_SESSION = " held"
"""`TaskRef.session` of a held task. A space is no visible ASCII character, so no upstream
`Mcp-Session-Id` (visible ASCII only, core 2025-11-25 transports) can ever be this."""

INTERRUPTED = "The proxy holding this call was interrupted (it stopped or was killed); the call may have run on the backend"
"""The `error.message` of a held task whose holder died (docs/decisions.md §110)."""
HOLD_EXPIRED = "The call ran longer than hold_max_ms ({ms} ms): it was cancelled on the backend"
"""The `error.message` of a held task stopped by `hold_max_ms` (format with `ms`)."""
PROGRESS_TOKEN_PREFIX = "held:"
"""Prefix of the `progressToken` the proxy adds to a held-eligible call that carries none."""


def iso_ms(ms: int) -> str:
    """Milliseconds since the epoch as the ISO 8601 UTC timestamp tasks carry (`…Z`, microseconds)."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class HeldState:
    """What the proxy keeps of one held task (all times in ms since the epoch, durations in ms).

    `task_id` is the client-facing (sealed) id; `status`/`status_message` as on the wire;
    `result` the backend's exact `CallToolResult` (only when `completed`, `isError` kept);
    `error` the JSON-RPC error object (only when `failed`); `input_requests` key → `{method,
    params}` (only when `input_required`); `ttl_ms` retention from creation; `poll_ms` the
    suggested poll interval."""

    task_id: str
    status: TaskStatus
    created_ms: int
    updated_ms: int
    ttl_ms: int
    poll_ms: int
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def expires_ms(self) -> int:
        """When the record may be forgotten: creation + ttl."""
        return self.created_ms + self.ttl_ms


def canonical(state: HeldState) -> CanonicalTask:
    """The held task as the hub task (outcome included). Inverse: `from_canonical`."""
    return CanonicalTask(
        task_id=state.task_id,
        status=state.status,
        status_message=state.status_message,
        created_at=iso_ms(state.created_ms),
        last_updated_at=iso_ms(state.updated_ms),
        ttl_ms=state.ttl_ms,
        poll_interval_ms=state.poll_ms,
        result=state.result if state.status == "completed" else None,
        error=TaskError.model_validate(state.error) if state.status == "failed" and state.error is not None else None,
        input_requests={k: InputRequest.model_validate(v) for k, v in state.input_requests.items()}
        if state.status == "input_required"
        else {},
    )


def _ms(iso: str) -> int:
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def from_canonical(task: CanonicalTask) -> HeldState:
    """A hub task back as a `HeldState` (inverse of `canonical`; a task without ttl or poll
    interval reads 0)."""
    return HeldState(
        task_id=task.task_id,
        status=task.status,
        created_ms=_ms(task.created_at),
        updated_ms=_ms(task.last_updated_at),
        ttl_ms=task.ttl_ms or 0,
        poll_ms=task.poll_interval_ms or 0,
        status_message=task.status_message,
        result=task.result,
        error=task.error.to_wire() if task.error is not None else None,
        input_requests={k: v.to_wire() for k, v in task.input_requests.items()},
    )


def new_held(task_id: str, now_ms: int, ttl_ms: int, poll_ms: int, status_message: str | None = None) -> HeldState:
    """A held task at its promotion: `working`."""
    return HeldState(task_id, "working", now_ms, now_ms, ttl_ms, poll_ms, status_message)


# --- changes ----------------------------------------------------------------------------------


def with_progress(state: HeldState, message: str, now_ms: int) -> HeldState:
    """A progress message as the task's `statusMessage` (unchanged once terminal)."""
    if state.terminal or state.status_message == message:
        return state
    return replace(state, status_message=message, updated_ms=now_ms)


def asking(state: HeldState, requests: Mapping[str, InputRequest], now_ms: int) -> HeldState:
    """The backend asks the client mid-call: `input_required` with these `inputRequests`
    (related-task `_meta` removed, SEP-2663); none left: `working` again."""
    if state.terminal:
        return state
    wire = {key: {"method": r.method, "params": strip_related_task(r.params)} for key, r in requests.items()}
    status: TaskStatus = "input_required" if wire else "working"
    if (status, wire) == (state.status, state.input_requests):
        return state
    return replace(state, status=status, input_requests=wire, updated_ms=now_ms)


def completed(state: HeldState, result: Mapping[str, Any], now_ms: int) -> HeldState:
    """The upstream call answered: `completed` with its exact result (`isError` kept; v2
    `resultType` and related-task `_meta` are the renderers', so they are removed here)."""
    if state.terminal:
        return state
    body = {k: v for k, v in strip_related_task(dict(result)).items() if k != "resultType"}
    return replace(state, status="completed", result=body, error=None, input_requests={}, updated_ms=now_ms)


def failed(state: HeldState, error: McpError | TaskError | Mapping[str, Any], now_ms: int) -> HeldState:
    """The upstream call ended with a JSON-RPC error (or the proxy ended it): `failed` with it."""
    if state.terminal:
        return state
    if isinstance(error, McpError):
        wire = error.to_dict()
    elif isinstance(error, TaskError):
        wire = error.to_wire()
    else:
        wire = TaskError.model_validate({"code": INTERNAL_ERROR, "message": "Task failed", **dict(error)}).to_wire()
    return replace(
        state, status="failed", error=wire, result=None, input_requests={}, status_message=state.status_message, updated_ms=now_ms
    )


def cancelled(state: HeldState, now_ms: int) -> HeldState:
    """The client cancelled: `cancelled` (a terminal task stays as it is)."""
    if state.terminal:
        return state
    return replace(state, status="cancelled", result=None, error=None, input_requests={}, updated_ms=now_ms)


def interrupted(state: HeldState, now_ms: int) -> HeldState:
    """The holder died mid-call: `failed` with `INTERRUPTED` (never `working` forever)."""
    return failed(state, TaskError(code=INTERNAL_ERROR, message=INTERRUPTED), now_ms)


# --- v2-modern (SEP-2663) ---------------------------------------------------------------------


def created_v2(state: HeldState) -> dict[str, Any]:
    """The flat v2 `CreateTaskResult` of a held task (`resultType: "task"`, `ttlMs`, `pollIntervalMs`)."""
    return created_task_result_v2(canonical(state).evolve(result=None, error=None, input_requests={}))


def get_v2(state: HeldState) -> dict[str, Any]:
    """The v2 `GetTaskResult`: `DetailedTask` with `result` (completed, `resultType: "complete"`),
    `error` (failed) or `inputRequests` (input_required) inlined."""
    return get_task_result_v2(canonical(state))


# --- v1 and v2-session (core 2025-11-25) ------------------------------------------------------


def created_v1(state: HeldState) -> dict[str, Any]:
    """The nested v1 `CreateTaskResult` `{"task": {...}}` (always `working`, `ttl`, `pollInterval`)."""
    return created_task_result_v1(canonical(state))


def get_v1(state: HeldState) -> dict[str, Any]:
    """The v1 `GetTaskResult` (flat `Task`; a tool error reads `failed`, core 2025-11-25)."""
    return get_task_result_v1(canonical(state))


def result_v1(state: HeldState) -> dict[str, Any] | McpError:
    """What a blocking v1 `tasks/result` answers once the task is terminal: the tool result with
    related-task `_meta`, or the JSON-RPC error (as an `McpError` to raise). Raises nothing;
    call only for a terminal state."""
    _, payload = outcome_to_v1(canonical(state))
    if payload is None or payload.body is None:
        return McpError(INTERNAL_ERROR, "Task has no result yet")
    if payload.kind == "error":
        body = payload.body
        return McpError(int(body.get("code", INTERNAL_ERROR)), str(body.get("message", "")), body.get("data"))
    return add_related_task(payload.body, state.task_id)


def list_v1(states: list[HeldState], next_cursor: str | None = None) -> dict[str, Any]:
    """The v1 `tasks/list` result of held tasks (flat `Task`s)."""
    return tasks_list_result_v1([get_v1(state) for state in states], next_cursor)


def cancelled_v1(state: HeldState) -> dict[str, Any]:
    """The v1 `CancelTaskResult` (flat task, `cancelled`)."""
    return cancel_answer_v1(canonical(state))


def tools_list_held_v1(result: Mapping[str, Any], named: frozenset[str] | None = None) -> dict[str, Any]:
    """A v1 `tools/list` result while holding is on: each tool the proxy holds shown with
    `execution.taskSupport: "optional"`. `named` None (a backend that offers no tasks): every tool
    without task support (absent or `forbidden`); else (a backend with tasks: docs/decisions.md
    §151) only the `forbidden` tools whose names the operator listed in `hold_tools`.
    `optional`/`required` tools and entries that are not objects are unchanged. Inverse:
    `tools_list_unheld_v1`."""
    tools = result.get("tools")
    if not isinstance(tools, list):
        return dict(result)

    def held(tool: Any) -> bool:
        return isinstance(tool, dict) and task_support(tool) == "forbidden" and (named is None or tool.get("name") in named)

    return {**result, "tools": [tool_to_v1(t, "optional") if held(t) else t for t in tools]}


def tools_list_unheld_v1(result: Mapping[str, Any], held: frozenset[str]) -> dict[str, Any]:
    """Inverse of `tools_list_held_v1` for the tools named in `held` (their `execution` as the
    backend had it: none)."""
    tools = result.get("tools")
    if not isinstance(tools, list):
        return dict(result)
    out = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("name") in held:
            rest = {k: v for k, v in (tool.get("execution") or {}).items() if k != "taskSupport"}
            tool = {k: v for k, v in tool.items() if k != "execution"} | ({"execution": rest} if rest else {})
        out.append(tool)
    return {**result, "tools": out}


HELD_TASKS_CAPABILITY_V1: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
"""What the proxy serves of a held task to a v1 client (`tasks/list`, `tasks/cancel`, and
`params.task` on `tools/call`), declared as a 2025-11-25 `ServerCapabilities.tasks`."""


def initialize_held_v1(result: Mapping[str, Any]) -> dict[str, Any]:
    """A v1 backend's `InitializeResult` on a relayed session while the proxy holds its calls for
    v1 clients (a backend that offers no tasks; docs/behaviour.md §9): `capabilities.tasks` declares
    the held tasks, since a client MUST NOT send `params.task` to a server that does not declare
    them (docs/wire.md §2.2). A result that already has `capabilities.tasks`, or that is not an
    `InitializeResult`, is unchanged. Inverse: `initialize_unheld_v1`."""
    capabilities = result.get("capabilities")
    if not isinstance(capabilities, dict) or "tasks" in capabilities:
        return dict(result)
    return {**result, "capabilities": {**capabilities, "tasks": HELD_TASKS_CAPABILITY_V1}}


def initialize_unheld_v1(result: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of `initialize_held_v1`: the `InitializeResult` without the held tasks' capability."""
    capabilities = result.get("capabilities")
    if not isinstance(capabilities, dict) or capabilities.get("tasks") != HELD_TASKS_CAPABILITY_V1:
        return dict(result)
    return {**result, "capabilities": {k: v for k, v in capabilities.items() if k != "tasks"}}


# --- the upstream call ------------------------------------------------------------------------


def with_progress_token(params: Mapping[str, Any], token: str) -> dict[str, Any]:
    """Call params with `_meta.progressToken`: the client's own when it gave one, else `token`
    (so the backend's progress can become the task's `statusMessage`); `is_held_token` tells them apart."""
    meta = dict(params.get("_meta") or {})
    meta.setdefault("progressToken", token)
    return {**params, "_meta": meta}


def progress_message(notification: Mapping[str, Any]) -> str | None:
    """The `message` of a `notifications/progress` (core 2025-11-25), else None."""
    if notification.get("method") != "notifications/progress":
        return None
    params = notification.get("params")
    message = params.get("message") if isinstance(params, Mapping) else None
    return message if isinstance(message, str) else None


def is_held_token(token: Any) -> bool:
    """Whether a `progressToken` is one the proxy added (`with_progress_token`), not the client's."""
    return isinstance(token, str) and token.startswith(PROGRESS_TOKEN_PREFIX)
