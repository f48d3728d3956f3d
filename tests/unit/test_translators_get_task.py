"""docs/behaviour.md §4.4 "`tasks/get`" (v1 backend, v2 face): every row but the captured-input ones.

Inputs are the wire shapes of docs/wire.md §7 "mcp 1.30.0" and "FastMCP 3.4.11": the upstream `tasks/get`
result is read with `task_from_wire`, its
`tasks/result` payload is folded in with `outcome_to_v2`, and `get_task_result_v2` writes the
answer. Expected answers are whole dicts.
"""

from __future__ import annotations

from typing import Any

import pytest

from translators.differences import (
    V1Payload,
    get_task_result_v1,
    get_task_result_v2,
    inline_result_type,
    outcome_to_v1,
    outcome_to_v2,
    strip_related_task,
    task_from_get_result_v2,
)
from translators.fields import task_from_wire
from translators.model import CanonicalTask

RELATED = "io.modelcontextprotocol/related-task"
TS_CREATED = "2026-11-30T04:11:26.442368Z"
TS_UPDATED = "2026-11-30T04:11:27.461593Z"
MCP1_ID = "8d6f1c0b2e6a4f8d9b3c1a2e5f7d9c0b:0b8e6a52-3f7c-4d2a-9a8e-1c2d3e4f5a6b"
FASTMCP3_ID = "c2b0a3f4-5d6e-4f70-8a9b-0c1d2e3f4a5b"


def _related(task_id: str) -> dict[str, Any]:
    return {RELATED: {"taskId": task_id}}


def mcp1_get(status: str, **fields: Any) -> dict[str, Any]:
    """An mcp 1.30 `tasks/get` result (ttl 60000, pollInterval 500)."""
    return {
        "taskId": MCP1_ID,
        "status": status,
        **fields,
        "createdAt": TS_CREATED,
        "lastUpdatedAt": TS_UPDATED,
        "ttl": 60000,
        "pollInterval": 500,
    }


def fastmcp3_get(status: str, **fields: Any) -> dict[str, Any]:
    """A FastMCP 3 `tasks/get` result (ttl 60000, pollInterval 5000)."""
    return {
        "taskId": FASTMCP3_ID,
        "status": status,
        **fields,
        "createdAt": TS_CREATED,
        "lastUpdatedAt": TS_UPDATED,
        "ttl": 60000,
        "pollInterval": 5000,
    }


def v2_answer(task_id: str, status: str, *, poll: int | None, ttl: int | None = 60000, **members: Any) -> dict[str, Any]:
    """The expected v2 `GetTaskResult`."""
    answer: dict[str, Any] = {
        "taskId": task_id,
        "status": status,
        "createdAt": TS_CREATED,
        "lastUpdatedAt": TS_UPDATED,
        "ttlMs": ttl,
    }
    if poll is not None:
        answer["pollIntervalMs"] = poll
    answer.update(members)
    answer["resultType"] = "complete"
    return answer


def answer(upstream_get: dict[str, Any], payload: V1Payload | None = None) -> dict[str, Any]:
    """What the proxy answers a v2 `tasks/get` with, given upstream `tasks/get` and `tasks/result`."""
    task = task_from_wire(upstream_get, "v1")
    if payload is not None:
        task = outcome_to_v2(task, payload)
    return get_task_result_v2(task)


# --- working / input_required / cancelled ----------------------------------------------------


def test_v1_working_is_reported_working():
    assert answer(mcp1_get("working")) == v2_answer(MCP1_ID, "working", poll=500)


def test_v1_input_required_with_nothing_captured_is_reported_working():
    # mcp 1.30 confirm_delete: tasks/get shows input_required before the question is delivered.
    got = answer(mcp1_get("input_required"))
    assert got == v2_answer(MCP1_ID, "working", poll=500)
    assert "inputRequests" not in got


def test_v1_cancelled_is_reported_cancelled_whatever_tasks_result_said():
    mcp1_payload = V1Payload("result", {"_meta": _related(MCP1_ID)})  # mcp 1.30: _meta-only success
    fastmcp3_payload = V1Payload("error", {"code": -32602, "message": "Task not completed yet (current state: cancelled)"})
    assert answer(mcp1_get("cancelled"), mcp1_payload) == v2_answer(MCP1_ID, "cancelled", poll=500)
    assert answer(fastmcp3_get("cancelled", statusMessage="Task cancelled"), fastmcp3_payload) == v2_answer(
        FASTMCP3_ID, "cancelled", poll=5000, statusMessage="Task cancelled"
    )


@pytest.mark.parametrize("status", ["working", "input_required", "cancelled"])
def test_outcome_folding_leaves_non_terminal_and_cancelled_tasks_unchanged(status):
    task = task_from_wire(mcp1_get(status), "v1")
    assert outcome_to_v2(task, V1Payload("unobtainable")) == task
    assert outcome_to_v2(task, V1Payload("error", {"code": -32603, "message": "boom"})) == task


# --- completed ---------------------------------------------------------------------------------


def test_v1_completed_inlines_result_without_related_task_meta():
    # mcp 1.30 slow_compute
    payload = V1Payload(
        "result",
        {"_meta": _related(MCP1_ID), "content": [{"type": "text", "text": "computed probe"}], "isError": False},
    )
    assert answer(mcp1_get("completed"), payload) == v2_answer(
        MCP1_ID,
        "completed",
        poll=500,
        result={"content": [{"type": "text", "text": "computed probe"}], "isError": False, "resultType": "complete"},
    )


def test_v1_completed_result_keeps_its_other_meta_keys():
    # FastMCP 3 slow_compute: `_meta.fastmcp` is not related-task meta and stays.
    fastmcp_payload = {
        "_meta": {"fastmcp": {"wrap_result": True}},
        "content": [{"type": "text", "text": "computed probe"}],
        "structuredContent": {"result": "computed probe"},
        "isError": False,
    }
    assert answer(fastmcp3_get("completed"), V1Payload("result", fastmcp_payload)) == v2_answer(
        FASTMCP3_ID, "completed", poll=5000, result={**fastmcp_payload, "resultType": "complete"}
    )
    mixed = {**fastmcp_payload, "_meta": {**_related(FASTMCP3_ID), "fastmcp": {"wrap_result": True}}}
    assert answer(fastmcp3_get("completed"), V1Payload("result", mixed)) == v2_answer(
        FASTMCP3_ID, "completed", poll=5000, result={**fastmcp_payload, "resultType": "complete"}
    )


def test_strip_related_task_drops_an_emptied_meta_and_keeps_other_keys():
    assert strip_related_task({"_meta": _related("t"), "content": []}) == {"content": []}
    assert strip_related_task({"_meta": {**_related("t"), "k": 1}, "content": []}) == {"_meta": {"k": 1}, "content": []}
    assert strip_related_task({"_meta": {"k": 1}}) == {"_meta": {"k": 1}}
    assert strip_related_task({"content": []}) == {"content": []}


def test_tool_error_on_v1_completed_stays_completed_with_isError():
    # mcp 1.30 failing_job: tasks/get completed, tasks/result an isError CallToolResult.
    payload = V1Payload(
        "result",
        {"_meta": _related(MCP1_ID), "content": [{"type": "text", "text": "failing_job always fails"}], "isError": True},
    )
    assert answer(mcp1_get("completed"), payload) == v2_answer(
        MCP1_ID,
        "completed",
        poll=500,
        result={"content": [{"type": "text", "text": "failing_job always fails"}], "isError": True, "resultType": "complete"},
    )


def test_completed_with_unobtainable_payload_becomes_failed_result_no_longer_available():
    assert answer(mcp1_get("completed"), V1Payload("unobtainable")) == v2_answer(
        MCP1_ID, "failed", poll=500, error={"code": -32603, "message": "result no longer available"}
    )


def test_completed_with_jsonrpc_error_payload_is_failed_result_no_longer_available():
    # docs/decisions.md #7: "A completed v1 task whose tasks/result is an error is reported failed
    # with 'result no longer available': an error cannot be the outcome of a completed task."
    payload = V1Payload("error", {"code": -32602, "message": f"Task not found: {MCP1_ID}"})
    assert answer(mcp1_get("completed"), payload) == v2_answer(
        MCP1_ID, "failed", poll=500, error={"code": -32603, "message": "result no longer available"}
    )


# --- failed --------------------------------------------------------------------------------------


def test_failed_with_meta_only_payload_becomes_failed_32603_with_status_message():
    # mcp 1.30 protocol_error_job
    get = mcp1_get("failed", statusMessage="protocol_error_job: simulated internal failure")
    payload = V1Payload("result", {"_meta": _related(MCP1_ID)})
    assert answer(get, payload) == v2_answer(
        MCP1_ID,
        "failed",
        poll=500,
        statusMessage="protocol_error_job: simulated internal failure",
        error={"code": -32603, "message": "protocol_error_job: simulated internal failure"},
    )


@pytest.mark.parametrize(
    ("tool", "status_message", "text"),
    [
        ("failing_job", "Task failed: failing_job always fails", "failing_job always fails"),
        (
            "protocol_error_job",
            "Task failed: protocol_error_job: simulated internal failure",
            "protocol_error_job: simulated internal failure",
        ),
    ],
)
def test_tool_error_on_v1_failed_becomes_completed_with_isError(tool, status_message, text):
    # FastMCP 3 ends both fixture tools `failed` with an isError CallToolResult.
    payload = V1Payload("result", {"_meta": _related(FASTMCP3_ID), "content": [{"type": "text", "text": text}], "isError": True})
    assert answer(fastmcp3_get("failed", statusMessage=status_message), payload) == v2_answer(
        FASTMCP3_ID,
        "completed",
        poll=5000,
        statusMessage=status_message,
        result={"content": [{"type": "text", "text": text}], "isError": True, "resultType": "complete"},
    )


def test_failed_with_tool_result_lacking_isError_gets_isError_true():
    payload = V1Payload("result", {"content": [{"type": "text", "text": "partial"}]})
    assert answer(fastmcp3_get("failed"), payload) == v2_answer(
        FASTMCP3_ID,
        "completed",
        poll=5000,
        result={"content": [{"type": "text", "text": "partial"}], "isError": True, "resultType": "complete"},
    )


def test_failed_with_jsonrpc_error_keeps_that_error_unchanged():
    error = {"code": -32000, "message": "upstream exploded", "data": {"detail": ["a", 1]}}
    get = fastmcp3_get("failed", statusMessage="Task failed")
    assert answer(get, V1Payload("error", error)) == v2_answer(
        FASTMCP3_ID, "failed", poll=5000, statusMessage="Task failed", error=error
    )


def test_failed_with_jsonrpc_error_without_data_keeps_code_and_message():
    error = {"code": -32603, "message": f"Task {MCP1_ID} has no result stored"}
    assert answer(mcp1_get("failed"), V1Payload("error", error)) == v2_answer(MCP1_ID, "failed", poll=500, error=error)


def test_failed_with_empty_payload_uses_status_message():
    get = mcp1_get("failed", statusMessage="kaboom")
    assert answer(get, V1Payload("result", {})) == v2_answer(
        MCP1_ID, "failed", poll=500, statusMessage="kaboom", error={"code": -32603, "message": "kaboom"}
    )


def test_failed_unobtainable_without_status_message_says_task_failed():
    assert answer(mcp1_get("failed"), V1Payload("unobtainable")) == v2_answer(
        MCP1_ID, "failed", poll=500, error={"code": -32603, "message": "Task failed"}
    )


def test_failed_unobtainable_with_status_message_uses_it():
    get = mcp1_get("failed", statusMessage="kaboom")
    assert answer(get, V1Payload("unobtainable")) == v2_answer(
        MCP1_ID, "failed", poll=500, statusMessage="kaboom", error={"code": -32603, "message": "kaboom"}
    )


# --- fields ----------------------------------------------------------------------------------


def test_absent_v1_ttl_becomes_null_ttlMs():
    # mcp 1.30 with `"task":{}` omits ttl.
    get = {"taskId": MCP1_ID, "status": "working", "createdAt": TS_CREATED, "lastUpdatedAt": TS_UPDATED, "pollInterval": 500}
    assert answer(get) == v2_answer(MCP1_ID, "working", poll=500, ttl=None)


def test_null_v1_ttl_stays_null_ttlMs():
    get = {**mcp1_get("working"), "ttl": None}
    assert answer(get) == v2_answer(MCP1_ID, "working", poll=500, ttl=None)


def test_absent_poll_interval_stays_absent():
    # FastMCP 3 input_required status carries ttl 3600000 and no pollInterval.
    get = {
        "taskId": FASTMCP3_ID,
        "status": "working",
        "statusMessage": "Delete probe.txt?",
        "createdAt": TS_CREATED,
        "lastUpdatedAt": TS_UPDATED,
        "ttl": 3600000,
    }
    got = answer(get)
    assert got == v2_answer(FASTMCP3_ID, "working", poll=None, ttl=3600000, statusMessage="Delete probe.txt?")
    assert "pollIntervalMs" not in got and "pollInterval" not in got


def test_unknown_task_fields_pass_through_unchanged():
    get = {**mcp1_get("working"), "progress": {"done": 2, "total": 4}, "x-vendor": "abc"}
    assert answer(get) == v2_answer(MCP1_ID, "working", poll=500, progress={"done": 2, "total": 4}, **{"x-vendor": "abc"})


def test_parent_task_id_is_dropped_and_listed():
    # mcpkit's v1 tasks carry parentTaskId (docs/wire.md §6).
    get = {
        "taskId": "task-0123456789abcdef01234567",
        "parentTaskId": "task-fedcba9876543210fedcba98",
        "status": "working",
        "createdAt": TS_CREATED,
        "lastUpdatedAt": TS_UPDATED,
        "ttl": 300000,
        "pollInterval": 1000,
    }
    task = task_from_wire(get, "v1")
    assert task.dropped == ("parentTaskId",)
    assert task.extra == {}
    assert get_task_result_v2(task) == {
        "taskId": "task-0123456789abcdef01234567",
        "status": "working",
        "createdAt": TS_CREATED,
        "lastUpdatedAt": TS_UPDATED,
        "ttlMs": 300000,
        "pollIntervalMs": 1000,
        "resultType": "complete",
    }


def test_result_type_complete_is_added_and_v1_names_never_appear():
    for status, payload in [
        ("working", None),
        ("completed", V1Payload("result", {"content": [], "_meta": _related(MCP1_ID)})),
        ("failed", V1Payload("unobtainable")),
        ("cancelled", None),
    ]:
        got = answer(mcp1_get(status), payload)
        assert got["resultType"] == "complete"
        assert not {"ttl", "pollInterval", "task", "requestState"} & got.keys()


def test_get_task_result_v2_of_hub_with_input_requests_lists_them():
    task = CanonicalTask.model_validate(
        {
            "task_id": MCP1_ID,
            "status": "input_required",
            "created_at": TS_CREATED,
            "last_updated_at": TS_UPDATED,
            "ttl_ms": 60000,
            "poll_interval_ms": 500,
            "input_requests": {"k1": {"method": "roots/list", "params": {}}},
        }
    )
    assert get_task_result_v2(task) == v2_answer(
        MCP1_ID, "input_required", poll=500, inputRequests={"k1": {"method": "roots/list", "params": {}}}
    )


# --- resultType of the inlined result (core 2026-07-28 Result; SEP-2663 tasks/get) ----------------


def _hub_completed(result: dict[str, Any]) -> CanonicalTask:
    return CanonicalTask.model_validate(
        {
            "task_id": MCP1_ID,
            "status": "completed",
            "created_at": TS_CREATED,
            "last_updated_at": TS_UPDATED,
            "ttl_ms": 60000,
            "poll_interval_ms": 500,
            "result": result,
        }
    )


def test_inlined_result_of_a_completed_task_carries_result_type_complete():
    got = get_task_result_v2(_hub_completed({"content": [{"type": "text", "text": "done"}], "isError": False}))
    assert got["result"] == {"content": [{"type": "text", "text": "done"}], "isError": False, "resultType": "complete"}
    tool_error = get_task_result_v2(_hub_completed({"content": [{"type": "text", "text": "no"}], "isError": True}))
    assert tool_error["result"] == {"content": [{"type": "text", "text": "no"}], "isError": True, "resultType": "complete"}


def test_v2_inlined_result_type_is_removed_in_the_hub_and_absent_for_v1_clients():
    # A v2 backend's completed tasks/get: the nested resultType is a 2026-07-28 mark, not payload.
    wire = v2_answer(
        MCP1_ID, "completed", poll=500, result={"content": [{"type": "text", "text": "done"}], "resultType": "complete"}
    )
    task = task_from_get_result_v2(wire)
    assert task.result == {"content": [{"type": "text", "text": "done"}]}
    status_only, payload = outcome_to_v1(task)
    assert payload == V1Payload("result", {"content": [{"type": "text", "text": "done"}]})
    assert get_task_result_v1(task) == {
        "taskId": MCP1_ID,
        "status": "completed",
        "createdAt": TS_CREATED,
        "lastUpdatedAt": TS_UPDATED,
        "ttl": 60000,
        "pollInterval": 500,
    }
    assert get_task_result_v2(task) == wire


def test_inline_result_type_adds_the_mark_only_where_a_completed_result_lacks_it():
    bare = v2_answer(FASTMCP3_ID, "completed", poll=5000, result={"content": []})
    assert inline_result_type(bare) == v2_answer(
        FASTMCP3_ID, "completed", poll=5000, result={"content": [], "resultType": "complete"}
    )
    assert bare["result"] == {"content": []}  # the argument is not changed
    marked = v2_answer(FASTMCP3_ID, "completed", poll=5000, result={"content": [], "resultType": "complete"})
    assert inline_result_type(marked) == marked
    failed = v2_answer(FASTMCP3_ID, "failed", poll=5000, error={"code": -32603, "message": "x"})
    assert inline_result_type(failed) == failed
    working = v2_answer(FASTMCP3_ID, "working", poll=5000)
    assert inline_result_type(working) == working
