"""Task fields on each wire: one table, read in both directions.

Every field of a task and its name in each dialect lives in `FIELDS`, so "where is `ttl`
renamed?" has one answer. v1: core 2025-11-25 `Task`; v2: SEP-2663 `Task` (ext-tasks schema).
Units are milliseconds on both sides; only the names change (docs/wire.md §6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from .errors import INTERNAL_ERROR, McpError
from .model import CanonicalTask

Dialect = Literal["v1", "v2"]


@dataclass(frozen=True, slots=True)
class Field:
    """One task field: its hub attribute and its key on each wire.

    `null_when_absent`: both schemas require the key (`ttl`/`ttlMs` are `integer | null`), so an
    absent hub value is written as `null` (mcp 1.30 omits `ttl` when none was requested; the
    proxy reads that as unlimited and writes `null`).
    """

    hub: str
    v1: str
    v2: str
    null_when_absent: bool = False


FIELDS: tuple[Field, ...] = (
    Field("task_id", "taskId", "taskId"),
    Field("status", "status", "status"),
    Field("status_message", "statusMessage", "statusMessage"),
    Field("created_at", "createdAt", "createdAt"),
    Field("last_updated_at", "lastUpdatedAt", "lastUpdatedAt"),
    # The renames (docs/wire.md §6 "TTL field", "Poll interval"): same unit, new names.
    Field("ttl_ms", "ttl", "ttlMs", null_when_absent=True),
    Field("poll_interval_ms", "pollInterval", "pollIntervalMs"),
)

KNOWN_LOSSES: dict[Dialect, tuple[str, ...]] = {
    # mcpkit's v1 tasks carry parentTaskId; neither schema has it (docs/wire.md §6).
    "v1": ("parentTaskId",),
    "v2": (),
}
"""Task fields a dialect may send that the hub cannot carry; dropped and counted."""

_OUTCOME_KEYS = {"result", "error", "inputRequests", "resultType", "_meta"}
"""Keys of a task-bearing result that are not task fields (outcome, envelope)."""


def task_from_wire(wire: dict[str, Any], dialect: Dialect) -> CanonicalTask:
    """Read a flat task object (v1 `Task` or v2 `Task`/`DetailedTask` status fields) into the hub.

    Outcome members (`result`, `error`, `inputRequests`) are not read here; see
    `translators.differences`. Raises `McpError(-32603)` when required fields are missing or of
    the wrong type (a backend that answers something that is not a task).
    """
    values: dict[str, Any] = {}
    for field in FIELDS:
        key = getattr(field, dialect)
        if key in wire:
            values[field.hub] = wire[key]
    known = {getattr(f, dialect) for f in FIELDS} | _OUTCOME_KEYS
    losses = KNOWN_LOSSES[dialect]
    values["dropped"] = tuple(k for k in wire if k in losses)
    values["extra"] = {k: v for k, v in wire.items() if k not in known and k not in losses}
    try:
        return CanonicalTask.model_validate(values)
    except ValidationError as exc:
        raise McpError(INTERNAL_ERROR, f"Backend answered a malformed {dialect} task: {_first_error(exc)}") from None


def task_to_wire(task: CanonicalTask, dialect: Dialect) -> dict[str, Any]:
    """Write the hub's status fields as a flat task object of `dialect` (no outcome members).

    Fields the hub does not know (`extra`) pass through unchanged (docs/behaviour.md §4.4).
    """
    wire: dict[str, Any] = dict(task.extra)
    for field in FIELDS:
        value = getattr(task, field.hub)
        key = getattr(field, dialect)
        if value is not None:
            wire[key] = value
        elif field.null_when_absent:
            wire[key] = None
    return wire


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "task"
    return f"{where}: {err.get('msg', 'invalid')}"
