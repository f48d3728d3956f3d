"""Every behavioural difference between v1 and v2 tasks, each with both directions side by side.

Field renames (`ttl`↔`ttlMs`, `pollInterval`↔`pollIntervalMs`) live in `translators.fields`,
capabilities and tools' task support in `translators.capabilities`. What lives here are the task
differences of shape and meaning listed in docs/wire.md §6. Each unit is a pair of pure functions
registered in `translators.registry.DIFFERENCES`, from which `docs/translation.md` is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .errors import INTERNAL_ERROR, McpError, for_v1_client, from_backend
from .fields import task_from_wire, task_to_wire
from .model import CanonicalTask, TaskError
from .protocol import META_RELATED_TASK
from .registry import _difference

# --- related-task _meta ----------------------------------------------------------------------


def strip_related_task(result: dict[str, Any]) -> dict[str, Any]:
    """A copy of `result` without `_meta["io.modelcontextprotocol/related-task"]` (and without an
    emptied `_meta`). v2 inlined results must not carry it (SEP-2663, tasks/get)."""
    meta = result.get("_meta")
    if not isinstance(meta, dict) or META_RELATED_TASK not in meta:
        return dict(result)
    stripped = {k: v for k, v in result.items() if k != "_meta"}
    rest = {k: v for k, v in meta.items() if k != META_RELATED_TASK}
    if rest:
        stripped["_meta"] = rest
    return stripped


def add_related_task(result: dict[str, Any], task_id: str) -> dict[str, Any]:
    """A copy of `result` with `_meta["io.modelcontextprotocol/related-task"] = {"taskId": task_id}`,
    as v1 requires on a `tasks/result` result (core 2025-11-25, tasks §Related-task metadata)."""
    meta = dict(result.get("_meta") or {})
    meta[META_RELATED_TASK] = {"taskId": task_id}
    return {**result, "_meta": meta}


_difference(
    "related-task-meta",
    v1="`tasks/result` results and task-related requests carry `_meta[io.modelcontextprotocol/related-task]`",
    v2="not used; must be absent from an inlined `result` and from `inputRequests` params",
    source="core 2025-11-25 tasks §Related-task metadata; SEP-2663 tasks/get",
    to_v2=strip_related_task,
    to_v1=add_related_task,
)


# --- resultType ---------------------------------------------------------------------------------


def add_result_type(
    result: dict[str, Any], result_type: Literal["complete", "task", "input_required"] = "complete"
) -> dict[str, Any]:
    """A copy of `result` with `resultType` set (core 2026-07-28: required on every result)."""
    return {**result, "resultType": result_type}


def strip_result_type(result: dict[str, Any]) -> dict[str, Any]:
    """A copy of `result` without `resultType`, which 2025-11-25 results do not have."""
    return {k: v for k, v in result.items() if k != "resultType"}


_difference(
    "result-type",
    v1="absent",
    v2='required on every result: `"complete"`, `"task"` (created task only) or `"input_required"`',
    source="core 2026-07-28 Result; SEP-2663 CreateTaskResult",
    to_v2=add_result_type,
    to_v1=strip_result_type,
)


# --- creation shape -------------------------------------------------------------------------------


def created_task_from_v1(v1_create_result: dict[str, Any]) -> CanonicalTask:
    """Read a v1 `CreateTaskResult` (`{"task": {...}, "_meta"?: {...}}`) into the hub.

    Raises `McpError(-32603)` when `task` is missing or malformed.
    """
    task = v1_create_result.get("task")
    if not isinstance(task, dict):
        raise McpError(INTERNAL_ERROR, "Backend answered a task-augmented call without a task")
    return task_from_wire(task, "v1")


def created_task_result_v2(task: CanonicalTask) -> dict[str, Any]:
    """The flat v2 `CreateTaskResult`: task fields plus `resultType: "task"`, and never `task`,
    `ttl`, `pollInterval`, `result`, `error`, `inputRequests` or `requestState` (SEP-2663)."""
    return add_result_type(task_to_wire(task, "v2"), "task")


def created_task_result_v1(task: CanonicalTask) -> dict[str, Any]:
    """The nested v1 `CreateTaskResult` `{"task": {...}}`. A v1 task always begins `working`
    (core 2025-11-25: tasks MUST start in `working`), whatever the hub's status."""
    initial = task.evolve(status="working", status_message=None, result=None, error=None, input_requests={})
    return {"task": task_to_wire(initial, "v1")}


def created_task_from_v2(v2_create_result: dict[str, Any]) -> CanonicalTask:
    """Read a flat v2 `CreateTaskResult` into the hub (`resultType` ignored)."""
    return task_from_wire(v2_create_result, "v2")


def creation_to_v2(v1_create_result: dict[str, Any]) -> dict[str, Any]:
    """A v1 `CreateTaskResult` as the v2 one, ids unchanged (the face then seals the id)."""
    return created_task_result_v2(created_task_from_v1(v1_create_result))


def creation_to_v1(v2_create_result: dict[str, Any]) -> dict[str, Any]:
    """A v2 `CreateTaskResult` as the v1 one, ids unchanged."""
    return created_task_result_v1(created_task_from_v2(v2_create_result))


_difference(
    "creation-shape",
    v1='nested `{"task": {...}}`, no discriminator, always `working`',
    v2='flat `Result & Task` with `resultType: "task"`; may start in any status',
    source="core 2025-11-25 CreateTaskResult; SEP-2663 CreateTaskResult",
    to_v2=creation_to_v2,
    to_v1=creation_to_v1,
)


# --- outcome: result folding, tool errors, protocol errors ---------------------------------------


@dataclass(frozen=True, slots=True)
class V1Payload:
    """What a v1 `tasks/result` gave for a terminal task.

    `kind` is "result" (a success response; `body` is the result object), "error" (a JSON-RPC
    error response; `body` is the error object) or "unobtainable" (the backend no longer has it).
    """

    kind: Literal["result", "error", "unobtainable"]
    body: dict[str, Any] | None = None


def _is_tool_result(body: dict[str, Any]) -> bool:
    return isinstance(body.get("content"), list)


def _failure(task: CanonicalTask, message: str | None) -> CanonicalTask:
    return task.evolve(status="failed", error=TaskError(code=INTERNAL_ERROR, message=message or "Task failed"))


def outcome_to_v2(task: CanonicalTask, payload: V1Payload) -> CanonicalTask:
    """Fold a terminal v1 task and its `tasks/result` payload into a v2 outcome (docs/behaviour.md §4.4).

    * completed + result → completed, `result` without related-task `_meta`
    * completed + unobtainable, or an error (the payload is gone, e.g. "-32602 not found": an
      error cannot be a completed task's outcome) → failed, `{-32603, "result no longer available"}`
    * failed + JSON-RPC error → failed, that error unchanged
    * failed + tool result with `content` → completed, `result` with `isError: true`
    * failed + empty, `_meta`-only or unobtainable → failed, `{-32603, statusMessage or "Task failed"}`
    * working, input_required, cancelled → unchanged
    """
    if task.status not in ("completed", "failed"):
        return task
    if task.status == "failed" and payload.kind == "error" and payload.body is not None:
        return task.evolve(error=TaskError.model_validate(_error_object(payload.body)))
    if task.status == "completed":
        if payload.kind == "result" and payload.body is not None:
            return task.evolve(result=strip_related_task(payload.body))
        return _failure(task, "result no longer available")
    if payload.kind == "result" and payload.body is not None and _is_tool_result(payload.body):
        return task.evolve(status="completed", result={**strip_related_task(payload.body), "isError": True})
    return _failure(task, task.status_message)


def _error_object(body: dict[str, Any]) -> dict[str, Any]:
    err = McpError(body.get("code", INTERNAL_ERROR), body.get("message", ""), body.get("data"))
    if not isinstance(err.code, int) or isinstance(err.code, bool) or not isinstance(err.message, str):
        return {"code": INTERNAL_ERROR, "message": "Task failed with a malformed error"}
    return err.to_dict()


def outcome_to_v1(task: CanonicalTask) -> tuple[CanonicalTask, V1Payload | None]:
    """Split a terminal hub task into the v1 status and its `tasks/result` payload (§5.3, §5.4).

    * completed with `result.isError` → `failed`, statusMessage = the task's or the first text
    * completed → `completed`, payload the result
    * failed → `failed`, statusMessage = the task's or `error.message`, payload the error
    * cancelled → `cancelled`, payload an `isError` tool result "Task was cancelled"
    Non-terminal tasks come back unchanged with no payload.
    """
    bare = task.evolve(result=None, error=None, input_requests={})
    if task.status == "completed" and task.result is not None:
        if task.result.get("isError") is True:
            message = task.status_message or _first_text(task.result)
            return bare.evolve(status="failed", status_message=message), V1Payload("result", task.result)
        return bare, V1Payload("result", task.result)
    if task.status == "failed":
        error = task.error or TaskError(code=INTERNAL_ERROR, message=task.status_message or "Task failed")
        return bare.evolve(status_message=task.status_message or error.message), V1Payload("error", error.to_wire())
    if task.status == "cancelled":
        cancelled = {"content": [{"type": "text", "text": "Task was cancelled"}], "isError": True}
        return bare, V1Payload("result", cancelled)
    return bare, None


def _first_text(result: dict[str, Any]) -> str | None:
    for block in result.get("content") or ():
        text = block.get("text") if isinstance(block, dict) and block.get("type") == "text" else None
        if isinstance(text, str):
            return text
    return None


_difference(
    "result-folding",
    v1="`tasks/get` has status only; the payload comes from blocking `tasks/result`",
    v2="`tasks/get` inlines `result` (completed) or `error` (failed); `tasks/result` removed",
    source="core 2025-11-25 tasks/result; SEP-2663 tasks/get, DetailedTask",
    to_v2=outcome_to_v2,
    to_v1=outcome_to_v1,
)
_difference(
    "tool-error-status",
    v1="a tool result with `isError: true` ends the task `failed` (lowercase should)",
    v2="`completed` with `result.isError: true`; `failed` only for JSON-RPC errors",
    source="core 2025-11-25 tasks §Task status; SEP-2663 FailedTask",
    to_v2=outcome_to_v2,
    to_v1=outcome_to_v1,
)


# --- detailed tasks/get ---------------------------------------------------------------------------


def get_task_result_v2(task: CanonicalTask) -> dict[str, Any]:
    """The v2 `GetTaskResult`: a `DetailedTask` plus `resultType: "complete"` (SEP-2663 tasks/get).

    A completed task's inlined `result` carries `resultType: "complete"` too: it is a 2026-07-28
    `CallToolResult`, and every 2026-07-28 result has one (core 2026-07-28 Result).
    `input_required` with no outstanding request is reported `working`, because an
    `InputRequiredTask` must carry at least one input request (docs/behaviour.md §4.4).
    """
    if task.status == "input_required" and not task.input_requests:
        task = task.evolve(status="working")
    wire = task_to_wire(task, "v2")
    if task.status == "completed":
        wire["result"] = add_result_type(task.result if task.result is not None else {})
    elif task.status == "failed":
        wire["error"] = (task.error or TaskError(code=INTERNAL_ERROR, message=task.status_message or "Task failed")).to_wire()
    elif task.status == "input_required":
        wire["inputRequests"] = {key: req.to_wire() for key, req in task.input_requests.items()}
    return add_result_type(wire)


def task_from_get_result_v2(wire: dict[str, Any]) -> CanonicalTask:
    """Read a v2 `GetTaskResult` (`DetailedTask` + `resultType`) into the hub, outcome included:
    `result` (its own `resultType` removed), `error`, `inputRequests` (inverse of
    `get_task_result_v2`). Raises `McpError(-32603)` for a malformed task."""
    task = task_from_wire(wire, "v2")
    status = task.status
    changes: dict[str, Any] = {}
    if status == "completed" and isinstance(wire.get("result"), dict):
        changes["result"] = strip_result_type(wire["result"])
    elif status == "failed" and isinstance(wire.get("error"), dict):
        changes["error"] = TaskError.model_validate(_error_object(wire["error"]))
    elif status == "input_required" and isinstance(wire.get("inputRequests"), dict):
        changes["input_requests"] = {
            key: req for key, req in wire["inputRequests"].items() if isinstance(req, dict) and isinstance(req.get("method"), str)
        }
    return task.evolve(**changes) if changes else task


def inline_result_type(get_result: dict[str, Any]) -> dict[str, Any]:
    """A copy of a v2 `GetTaskResult` whose inlined `result` (a completed task's) has `resultType`
    (`"complete"` where the sender left it out, as session-wire v2 backends do); any other
    `GetTaskResult` unchanged. Inverse: `task_from_get_result_v2` removes it again."""
    inlined = get_result.get("result")
    if get_result.get("status") != "completed" or not isinstance(inlined, dict) or "resultType" in inlined:
        return dict(get_result)
    return {**get_result, "result": add_result_type(inlined)}


def get_task_result_v1(task: CanonicalTask) -> dict[str, Any]:
    """The v1 `GetTaskResult`: the flat `Task`, status only, no related-task `_meta` (§5.3)."""
    status_only, _ = outcome_to_v1(task)
    return task_to_wire(status_only, "v1")


_difference(
    "detailed-task",
    v1="`tasks/get` answers a flat `Task`",
    v2='`tasks/get` answers a `DetailedTask` with `resultType: "complete"`, on the inlined `result` too',
    source="core 2025-11-25 GetTaskResult; SEP-2663 GetTaskResult",
    to_v2=get_task_result_v2,
    to_v1=task_from_get_result_v2,
)


# --- cancel answer ----------------------------------------------------------------------------------


def cancel_answer_v2(_v1_answer: Any = None) -> dict[str, Any]:
    """The v2 cancel acknowledgement `{"resultType": "complete"}` and nothing else (SEP-2663
    tasks/cancel). Whatever a v1 backend answered (the task, or -32602) becomes this."""
    return {"resultType": "complete"}


def cancel_answer_v1(task: CanonicalTask) -> dict[str, Any]:
    """The v1 `CancelTaskResult`: the flat task, already `cancelled` (core 2025-11-25 tasks/cancel)."""
    return task_to_wire(task.evolve(status="cancelled", result=None, error=None, input_requests={}), "v1")


_difference(
    "cancel-answer",
    v1="the full `Task`, already `cancelled`; a terminal task gets -32602",
    v2='empty ack `{resultType: "complete"}`, also for a terminal task',
    source="core 2025-11-25 tasks/cancel; SEP-2663 tasks/cancel; conformance tasks-cancel-terminal-idempotent-ack",
    to_v2=cancel_answer_v2,
    to_v1=cancel_answer_v1,
)


def update_ack_v2() -> dict[str, Any]:
    """The v2 `tasks/update` acknowledgement `{"resultType": "complete"}` (SEP-2663 tasks/update)."""
    return {"resultType": "complete"}


# --- task request parameter ------------------------------------------------------------------------


def task_param_v1(ttl_ms: int | None) -> dict[str, Any]:
    """The v1 `params.task` (`TaskMetadata`) the proxy sends upstream: `{"ttl": ttl_ms}`, or `{}`
    when `ttl_ms` is None or 0 (config `task_ttl_ms = 0` means "send no ttl")."""
    return {"ttl": ttl_ms} if ttl_ms else {}


def drop_task_param(params: dict[str, Any]) -> dict[str, Any]:
    """A copy of v2 request params without the legacy `task` member, which SEP-2663 says MUST be
    ignored (neither an opt-in nor an error)."""
    return {k: v for k, v in params.items() if k != "task"}


_difference(
    "who-decides",
    v1="the client asks for a task with `params.task {ttl?}`",
    v2="the server decides; `params.task` is ignored",
    source="core 2025-11-25 tools/call; SEP-2663 §Negotiation",
    to_v2=drop_task_param,
    to_v1=task_param_v1,
)


_difference(
    "missing-capability-code",
    v1="-32601 (a required tool called without a task; method unknown)",
    v2="-32021 with `data.requiredCapabilities` (HTTP 400); -32003 in drafts",
    source="core 2026-07-28 errors; SEP-2663 §Errors; docs/behaviour.md §6",
    to_v2=from_backend,
    to_v1=for_v1_client,
)


def with_client_outcome(task: CanonicalTask, failure: TaskError | None, cancelled: bool) -> CanonicalTask:
    """A task as the proxy's v1 client sees it (docs/behaviour.md §5.4, §5.6): `failed` with the
    proxy's own `failure` (a client error answer ended it), else `cancelled` once the client
    cancelled it, whatever the backend reports since (sticky cancel); otherwise unchanged."""
    if failure is not None:
        return task.evolve(status="failed", error=failure, result=None, input_requests={})
    if cancelled and task.status != "cancelled":
        return task.evolve(status="cancelled", result=None, error=None, input_requests={})
    return task
