"""Outcomes through the hub: hub → `outcome_to_v1` → `outcome_to_v2` → hub.

Also docs/behaviour.md §5.3/§5.4 (the v1 side of an outcome: status, statusMessage and the
`tasks/result` payload) and what cannot survive the trip (known losses and gains).
"""

from __future__ import annotations

from typing import Any

import pytest

from translators.differences import (
    V1Payload,
    add_related_task,
    get_task_result_v1,
    outcome_to_v1,
    outcome_to_v2,
)
from translators.model import CanonicalTask, TaskError

TASK_ID = "kArGLyOKq3Vd9x0fXbR2mT7yQe1sLw8ZcN4uJhP6aDo"
TS_CREATED = "2026-11-30T04:12:47.344727+00:00"
TS_UPDATED = "2026-11-30T04:12:48.101010+00:00"
RELATED = "io.modelcontextprotocol/related-task"


def hub(status: str, **fields: Any) -> CanonicalTask:
    return CanonicalTask.model_validate(
        {
            "task_id": TASK_ID,
            "status": status,
            "created_at": TS_CREATED,
            "last_updated_at": TS_UPDATED,
            "ttl_ms": 900000,
            "poll_interval_ms": 5000,
            **fields,
        }
    )


def through_v1(task: CanonicalTask) -> CanonicalTask:
    """hub → v1 status + payload (payload carrying related-task `_meta` as on the wire) → hub."""
    v1_task, payload = outcome_to_v1(task)
    if payload is not None and payload.kind == "result" and payload.body is not None:
        payload = V1Payload("result", add_related_task(payload.body, task.task_id))
    return outcome_to_v2(v1_task, payload) if payload is not None else v1_task


COMPLETED = hub("completed", result={"content": [{"type": "text", "text": "computed probe"}], "isError": False})
TOOL_ERROR = hub(
    "completed",
    status_message="Error calling tool 'boom': kaboom",
    result={"content": [{"type": "text", "text": "Error calling tool 'boom': kaboom"}], "isError": True},
)
FAILED = hub(
    "failed",
    status_message="protocol_error_job: simulated internal failure",
    error=TaskError(code=-32603, message="protocol_error_job: simulated internal failure", data={"where": "step 2"}),
)
CANCELLED = hub("cancelled")


@pytest.mark.parametrize(
    "task", [COMPLETED, TOOL_ERROR, FAILED, CANCELLED], ids=["completed", "completed-isError", "failed", "cancelled"]
)
def test_outcome_round_trip_through_v1_returns_the_hub_task(task):
    assert through_v1(task) == task


@pytest.mark.parametrize("status", ["working", "input_required"])
def test_non_terminal_task_has_no_v1_payload(status):
    task = hub(status)
    assert outcome_to_v1(task) == (task, None)


def test_input_requests_are_not_part_of_the_v1_status():
    task = hub("input_required", input_requests={"k": {"method": "roots/list", "params": {}}})
    assert outcome_to_v1(task) == (hub("input_required"), None)


# --- the v1 side of each outcome (§5.3, §5.4) ------------------------------------------------------


def test_completed_is_completed_on_v1_with_result_payload():
    assert outcome_to_v1(COMPLETED) == (hub("completed"), V1Payload("result", COMPLETED.result))


def test_tool_error_on_v2_completed_becomes_failed_on_v1_with_successful_payload():
    assert outcome_to_v1(TOOL_ERROR) == (
        hub("failed", status_message="Error calling tool 'boom': kaboom"),
        V1Payload("result", TOOL_ERROR.result),
    )


def test_tool_error_without_status_message_takes_the_first_text_on_v1():
    task = hub(
        "completed",
        result={
            "content": [
                {"type": "image", "data": "AA==", "mimeType": "image/png"},
                {"type": "text", "text": "first"},
                {"type": "text", "text": "second"},
            ],
            "isError": True,
        },
    )
    v1_task, payload = outcome_to_v1(task)
    assert v1_task == hub("failed", status_message="first")
    assert payload == V1Payload("result", task.result)


def test_failed_is_failed_on_v1_with_the_error_as_payload():
    assert outcome_to_v1(FAILED) == (
        hub("failed", status_message="protocol_error_job: simulated internal failure"),
        V1Payload(
            "error", {"code": -32603, "message": "protocol_error_job: simulated internal failure", "data": {"where": "step 2"}}
        ),
    )


def test_failed_without_status_message_takes_error_message_on_v1():
    task = hub("failed", error=TaskError(code=-32603, message="simulated internal failure"))
    assert outcome_to_v1(task) == (
        hub("failed", status_message="simulated internal failure"),
        V1Payload("error", {"code": -32603, "message": "simulated internal failure"}),
    )


def test_cancelled_on_v1_gets_is_error_tool_result_task_was_cancelled():
    assert outcome_to_v1(CANCELLED) == (
        CANCELLED,
        V1Payload("result", {"content": [{"type": "text", "text": "Task was cancelled"}], "isError": True}),
    )


# --- known losses and gains ------------------------------------------------------------------------


def test_v1_cancelled_payload_is_a_known_loss():
    # v2 has no payload for a cancelled task: whatever v1 `tasks/result` said is dropped.
    _, payload = outcome_to_v1(CANCELLED)
    assert payload is not None
    back = outcome_to_v2(CANCELLED, payload)
    assert back == CANCELLED
    assert back.result is None and back.error is None


def test_tool_error_without_status_message_gains_the_first_text_through_v1():
    # v1 must explain a failed task (§5.3) and §4.4 keeps statusMessage: the message sticks.
    task = hub("completed", result={"content": [{"type": "text", "text": "kaboom"}], "isError": True})
    assert through_v1(task) == task.evolve(status_message="kaboom")


def test_failed_without_status_message_gains_error_message_through_v1():
    task = hub("failed", error=TaskError(code=-32000, message="upstream exploded"))
    assert through_v1(task) == task.evolve(status_message="upstream exploded")


# --- v1 tasks/get (§5.3) ------------------------------------------------------------------------


def _v1_get(status: str, **fields: Any) -> dict[str, Any]:
    return {
        "taskId": TASK_ID,
        "status": status,
        **fields,
        "createdAt": TS_CREATED,
        "lastUpdatedAt": TS_UPDATED,
        "ttl": 900000,
        "pollInterval": 5000,
    }


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        (hub("working"), _v1_get("working")),
        (hub("input_required", input_requests={"k": {"method": "roots/list", "params": {}}}), _v1_get("input_required")),
        (COMPLETED, _v1_get("completed")),
        (TOOL_ERROR, _v1_get("failed", statusMessage="Error calling tool 'boom': kaboom")),
        (
            hub("completed", result={"content": [{"type": "text", "text": "failing_job always fails"}], "isError": True}),
            _v1_get("failed", statusMessage="failing_job always fails"),
        ),
        (FAILED, _v1_get("failed", statusMessage="protocol_error_job: simulated internal failure")),
        (hub("failed", error=TaskError(code=-32603, message="boom")), _v1_get("failed", statusMessage="boom")),
        (CANCELLED, _v1_get("cancelled")),
    ],
    ids=[
        "working",
        "input_required",
        "completed",
        "completed-isError",
        "isError-no-message",
        "failed",
        "failed-no-message",
        "cancelled",
    ],
)
def test_v1_tasks_get_is_flat_status_only_without_result_type(task, expected):
    assert get_task_result_v1(task) == expected


def test_v1_tasks_get_writes_null_ttl_for_unlimited():
    assert get_task_result_v1(hub("working", ttl_ms=None, poll_interval_ms=None)) == {
        "taskId": TASK_ID,
        "status": "working",
        "createdAt": TS_CREATED,
        "lastUpdatedAt": TS_UPDATED,
        "ttl": None,
    }


def test_add_related_task_keeps_other_meta():
    assert add_related_task({"_meta": {"fastmcp": {"wrap_result": True}}, "content": []}, "T") == {
        "_meta": {"fastmcp": {"wrap_result": True}, RELATED: {"taskId": "T"}},
        "content": [],
    }
