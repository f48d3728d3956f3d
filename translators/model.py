"""The canonical task: the hub every dialect is converted to and from.

A version-free view of one task (docs/behaviour.md §1 "canonical task"): identity, status,
timestamps, retention and polling hints in milliseconds, the outcome once terminal, and the
input requests still outstanding. The v1 and v2 codecs (`translators.v1`, `translators.v2`) are
its spokes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .protocol import TERMINAL_STATUSES, TaskStatus


class TaskError(BaseModel):
    """A JSON-RPC error object that ended a task: `{code, message, data?}`."""

    model_config = ConfigDict(frozen=True)

    code: int
    message: str
    data: Any = None

    def to_wire(self) -> dict[str, Any]:
        """`{"code": int, "message": str, "data"?: any}`."""
        wire: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            wire["data"] = self.data
        return wire


class InputRequest(BaseModel):
    """One request for input from the client: `{method, params}` (SEP-2663 `InputRequest`)."""

    model_config = ConfigDict(frozen=True)

    method: str
    params: dict[str, Any] = Field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {"method": self.method, "params": self.params}


class CanonicalTask(BaseModel):
    """A task, independent of dialect.

    * `ttl_ms`: retention from creation in milliseconds, `None` = unlimited (or not reported).
    * `poll_interval_ms`: suggested polling interval in milliseconds, `None` = not given.
    * `result`: the final result payload (e.g. a `CallToolResult`, `isError` included), only
      when `status == "completed"`; never carries related-task `_meta`.
    * `error`: the JSON-RPC error, only when `status == "failed"`.
    * `input_requests`: key → request, only meaningful when `status == "input_required"`.
    * `extra`: task fields neither dialect defines, passed through unchanged.
    * `dropped`: names of wire fields the source dialect had and the hub cannot carry
      (e.g. `parentTaskId`), for the dropped-field counters; never put on a wire.
    """

    model_config = ConfigDict(frozen=True)

    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: TaskError | None = None
    input_requests: dict[str, InputRequest] = Field(default_factory=dict)
    extra: dict[str, Any] = Field(default_factory=dict)
    dropped: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _outcome_matches_status(self) -> CanonicalTask:
        if self.result is not None and self.status != "completed":
            raise ValueError("only a completed task carries a result")
        if self.error is not None and self.status != "failed":
            raise ValueError("only a failed task carries an error")
        if self.input_requests and self.status != "input_required":
            raise ValueError("only an input_required task carries input requests")
        return self

    @property
    def terminal(self) -> bool:
        """True for `completed`, `failed` and `cancelled`, which never change again."""
        return self.status in TERMINAL_STATUSES

    def evolve(self, **changes: Any) -> CanonicalTask:
        """A copy with `changes` applied and validated (the model is immutable).

        Built from the fields as they are (a shallow copy: nested models are taken as they are,
        not dumped and validated again), so only what changed costs validation
        (docs/decisions.md §120)."""
        return CanonicalTask.model_validate({**self.__dict__, **changes})
