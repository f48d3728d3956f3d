"""Created tasks (docs/behaviour.md §4.2, §5.2; docs/wire.md §3.2) and the v2 acknowledgements (docs/behaviour.md §4.5–§4.7).

* v1 nested `CreateTaskResult` → flat v2 `CreateTaskResult` with `resultType: "task"` and none of
  `task`, `ttl`, `pollInterval`, `result`, `error`, `inputRequests`, `requestState`.
* v2 flat `CreateTaskResult` → nested v1 `{"task": {...}}`, always `working`.
* `tasks/cancel` and `tasks/update` acks are `{"resultType": "complete"}` and nothing else.
"""

from __future__ import annotations

import pytest

from translators.differences import (
    cancel_answer_v1,
    cancel_answer_v2,
    created_task_from_v1,
    created_task_from_v2,
    created_task_result_v1,
    created_task_result_v2,
    drop_task_param,
    task_param_v1,
    update_ack_v2,
)
from translators.errors import McpError
from translators.fields import task_from_wire
from translators.model import CanonicalTask, InputRequest, TaskError

TS = "2026-11-30T04:11:26.442368Z"
TS_V2 = "2026-11-30T04:12:47.344727+00:00"
MCP1_ID = "8d6f1c0b2e6a4f8d9b3c1a2e5f7d9c0b:0b8e6a52-3f7c-4d2a-9a8e-1c2d3e4f5a6b"
FASTMCP4_ID = "kArGLyOKq3Vd9x0fXbR2mT7yQe1sLw8ZcN4uJhP6aDo"
FORBIDDEN_IN_V2_CREATE = {"task", "ttl", "pollInterval", "result", "error", "inputRequests", "requestState"}

# mcp 1.30 slow_compute + task {"ttl": 60000}
MCP1_CREATE = {
    "task": {"taskId": MCP1_ID, "status": "working", "createdAt": TS, "lastUpdatedAt": TS, "ttl": 60000, "pollInterval": 500}
}
# mcp 1.30 slow_compute + task {} (no ttl reported)
MCP1_CREATE_NO_TTL = {"task": {"taskId": MCP1_ID, "status": "working", "createdAt": TS, "lastUpdatedAt": TS, "pollInterval": 500}}
# server-everything simulate-research-query: statusMessage on create; docs/wire.md §2.3 model hint _meta
EVERYTHING_CREATE = {
    "task": {
        "taskId": "3f2a1b0c-9d8e-4f7a-b6c5-d4e3f2a1b0c9",
        "status": "working",
        "ttl": 300000,
        "createdAt": "2026-11-30T04:11:26.442Z",
        "lastUpdatedAt": "2026-11-30T04:11:26.442Z",
        "pollInterval": 1000,
        "statusMessage": "Gathering sources...",
    },
    "_meta": {"io.modelcontextprotocol/model-immediate-response": "Started the job."},
}
# FastMCP 4 slow_compute
FASTMCP4_CREATE = {
    "taskId": FASTMCP4_ID,
    "status": "working",
    "createdAt": TS_V2,
    "lastUpdatedAt": TS_V2,
    "ttlMs": 900000,
    "pollIntervalMs": 5000,
    "resultType": "task",
}


# --- v1 backend → v2 client ---------------------------------------------------------------------


def test_created_v1_task_becomes_flat_v2_create_task_result():
    assert created_task_result_v2(created_task_from_v1(MCP1_CREATE)) == {
        "taskId": MCP1_ID,
        "status": "working",
        "createdAt": TS,
        "lastUpdatedAt": TS,
        "ttlMs": 60000,
        "pollIntervalMs": 500,
        "resultType": "task",
    }


def test_created_v1_task_without_ttl_gets_null_ttlMs():
    assert created_task_result_v2(created_task_from_v1(MCP1_CREATE_NO_TTL)) == {
        "taskId": MCP1_ID,
        "status": "working",
        "createdAt": TS,
        "lastUpdatedAt": TS,
        "ttlMs": None,
        "pollIntervalMs": 500,
        "resultType": "task",
    }


def test_created_v1_task_keeps_status_message():
    got = created_task_result_v2(created_task_from_v1(EVERYTHING_CREATE))
    assert got == {
        "taskId": "3f2a1b0c-9d8e-4f7a-b6c5-d4e3f2a1b0c9",
        "status": "working",
        "statusMessage": "Gathering sources...",
        "createdAt": "2026-11-30T04:11:26.442Z",
        "lastUpdatedAt": "2026-11-30T04:11:26.442Z",
        "ttlMs": 300000,
        "pollIntervalMs": 1000,
        "resultType": "task",
    }


@pytest.mark.parametrize(
    "v1_create", [MCP1_CREATE, MCP1_CREATE_NO_TTL, EVERYTHING_CREATE], ids=["mcp1", "mcp1-no-ttl", "everything"]
)
def test_created_task_result_v2_has_no_wrapper_no_v1_names_and_no_outcome_members(v1_create):
    got = created_task_result_v2(created_task_from_v1(v1_create))
    assert got["resultType"] == "task"
    assert "ttlMs" in got
    for absent in sorted(FORBIDDEN_IN_V2_CREATE):
        assert absent not in got, absent


def test_created_task_result_v2_of_a_parent_task_id_task_drops_it():
    v1 = {"task": {**MCP1_CREATE["task"], "parentTaskId": "task-fedcba9876543210fedcba98"}}
    task = created_task_from_v1(v1)
    assert task.dropped == ("parentTaskId",)
    assert created_task_result_v2(task) == created_task_result_v2(created_task_from_v1(MCP1_CREATE))


@pytest.mark.parametrize(
    "v1_result",
    [
        {},
        {"task": None},
        {"task": "abc"},
        {"content": [{"type": "text", "text": "This tool requires task-augmented invocation"}], "isError": True},
    ],
    ids=["empty", "task-null", "task-string", "isError-instead-of-task"],
)
def test_call_answered_without_a_task_is_internal_error(v1_result):
    with pytest.raises(McpError) as info:
        created_task_from_v1(v1_result)
    assert info.value.to_dict() == {"code": -32603, "message": "Backend answered a task-augmented call without a task"}


def test_malformed_v1_task_is_internal_error():
    with pytest.raises(McpError) as info:
        created_task_from_v1({"task": {"status": "working", "createdAt": TS, "lastUpdatedAt": TS}})
    assert info.value.code == -32603
    assert info.value.message.startswith("Backend answered a malformed v1 task: ")


# --- v2 backend → v1 client ---------------------------------------------------------------------


def test_created_v2_task_becomes_nested_v1_create_task_result():
    assert created_task_result_v1(created_task_from_v2(FASTMCP4_CREATE)) == {
        "task": {
            "taskId": FASTMCP4_ID,
            "status": "working",
            "createdAt": TS_V2,
            "lastUpdatedAt": TS_V2,
            "ttl": 900000,
            "pollInterval": 5000,
        }
    }


def test_born_terminal_v2_task_is_created_working_for_v1_client():
    # mcpkit creates born-terminal tasks (status completed); a v1 task MUST start working.
    born = {**FASTMCP4_CREATE, "status": "completed", "statusMessage": "done", "ttlMs": 300000, "pollIntervalMs": 1000}
    assert created_task_result_v1(created_task_from_v2(born)) == {
        "task": {
            "taskId": FASTMCP4_ID,
            "status": "working",
            "createdAt": TS_V2,
            "lastUpdatedAt": TS_V2,
            "ttl": 300000,
            "pollInterval": 1000,
        }
    }


@pytest.mark.parametrize(
    "outcome",
    [
        {"status": "completed", "result": {"content": [{"type": "text", "text": "Hello, World!"}], "isError": False}},
        {"status": "failed", "error": TaskError(code=-32603, message="boom")},
        {"status": "input_required", "input_requests": {"k": InputRequest(method="roots/list")}},
    ],
    ids=["completed-with-result", "failed-with-error", "input_required-with-requests"],
)
def test_v1_create_task_result_of_a_task_with_an_outcome_says_working(outcome):
    # §5.2: a task the proxy holds itself carries the plain result; its v1 CreateTaskResult
    # still says `working` (the next tasks/get reports the real status).
    task = CanonicalTask(task_id=FASTMCP4_ID, created_at=TS_V2, last_updated_at=TS_V2, ttl_ms=60000, **outcome)
    assert created_task_result_v1(task) == {
        "task": {"taskId": FASTMCP4_ID, "status": "working", "createdAt": TS_V2, "lastUpdatedAt": TS_V2, "ttl": 60000}
    }


def test_created_task_v1_to_v2_to_v1_round_trip():
    assert created_task_result_v1(created_task_from_v1(MCP1_CREATE)) == MCP1_CREATE


# --- acks -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "upstream",
    [
        {"taskId": MCP1_ID, "status": "cancelled", "createdAt": TS, "lastUpdatedAt": TS, "ttl": 60000, "pollInterval": 500},
        {"code": -32602, "message": "Cannot cancel task in terminal state 'cancelled'"},
        McpError(-32602, "Task not found: no-such-task"),
        None,
    ],
    ids=["v1-task", "error-object", "McpError", "nothing"],
)
def test_cancel_ack_is_result_type_complete_and_nothing_else(upstream):
    assert cancel_answer_v2(upstream) == {"resultType": "complete"}


def test_cancel_ack_without_argument_is_result_type_complete_and_nothing_else():
    assert cancel_answer_v2() == {"resultType": "complete"}


def test_update_ack_is_result_type_complete_and_nothing_else():
    assert update_ack_v2() == {"resultType": "complete"}


def test_acks_are_fresh_objects():
    first = cancel_answer_v2()
    first["taskId"] = "leak"
    assert cancel_answer_v2() == {"resultType": "complete"}
    second = update_ack_v2()
    second["status"] = "leak"
    assert update_ack_v2() == {"resultType": "complete"}


def test_v1_cancel_answer_is_the_task_already_cancelled():
    task = task_from_wire(
        {
            "taskId": FASTMCP4_ID,
            "status": "working",
            "createdAt": TS_V2,
            "lastUpdatedAt": TS_V2,
            "ttlMs": 900000,
            "pollIntervalMs": 5000,
        },
        "v2",
    )
    assert cancel_answer_v1(task) == {
        "taskId": FASTMCP4_ID,
        "status": "cancelled",
        "createdAt": TS_V2,
        "lastUpdatedAt": TS_V2,
        "ttl": 900000,
        "pollInterval": 5000,
    }


# --- task request parameter ------------------------------------------------------------------------


@pytest.mark.parametrize(("ttl_ms", "expected"), [(3_600_000, {"ttl": 3_600_000}), (60000, {"ttl": 60000}), (0, {}), (None, {})])
def test_upstream_task_param_carries_configured_ttl_and_zero_means_none(ttl_ms, expected):
    assert task_param_v1(ttl_ms) == expected


def test_legacy_task_param_from_v2_client_is_ignored():
    params = {"name": "slow_compute", "arguments": {"seconds": 1}, "task": {"ttl": 5}}
    assert drop_task_param(params) == {"name": "slow_compute", "arguments": {"seconds": 1}}
