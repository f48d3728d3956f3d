"""The FIELDS table (`translators.fields`): spoke → hub → spoke is the identity,
wherever the two versions can both express a task; what they cannot is a listed, tested loss.

docs/wire.md §2.4 (v1 `Task`), §3.3 (v2 `Task`), §6 ("TTL field", "Poll interval", "parentTaskId").
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from translators.errors import McpError
from translators.fields import FIELDS, KNOWN_LOSSES, task_from_wire, task_to_wire
from translators.model import CanonicalTask

V1_TO_V2 = {
    "taskId": "taskId",
    "status": "status",
    "statusMessage": "statusMessage",
    "createdAt": "createdAt",
    "lastUpdatedAt": "lastUpdatedAt",
    "ttl": "ttlMs",
    "pollInterval": "pollIntervalMs",
}
V2_TO_V1 = {v2: v1 for v1, v2 in V1_TO_V2.items()}
TS = "2026-11-30T04:11:26.442368Z"

# --- strategies ----------------------------------------------------------------------------------

statuses = st.sampled_from(["working", "input_required", "completed", "failed", "cancelled"])
timestamps = st.one_of(
    st.sampled_from(["2026-11-30T04:11:26.442368Z", "2026-11-30T04:12:47.344727+00:00", "2025-11-25T10:30:00Z"]),
    st.text(min_size=1, max_size=30),
)
milliseconds = st.integers(min_value=0, max_value=2**53 - 1)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
# Task fields neither dialect defines (they pass through unchanged, §4.4).
extras = st.dictionaries(
    st.sampled_from(["progress", "x-vendor", "task_scope", "origin", "com.example/hint"]), json_values, max_size=3
)


def _task(ttl_key: str, poll_key: str):
    return st.builds(
        lambda required, optional, extra: {**extra, **required, **optional},
        st.fixed_dictionaries(
            {
                "taskId": st.text(min_size=1, max_size=80),
                "status": statuses,
                "createdAt": timestamps,
                "lastUpdatedAt": timestamps,
                ttl_key: st.none() | milliseconds,
            }
        ),
        st.fixed_dictionaries({}, optional={"statusMessage": st.text(max_size=40), poll_key: milliseconds}),
        extras,
    )


v1_tasks = _task("ttl", "pollInterval")
v2_tasks = _task("ttlMs", "pollIntervalMs")
hub_tasks = st.builds(
    CanonicalTask,
    task_id=st.text(min_size=1, max_size=80),
    status=statuses,
    status_message=st.none() | st.text(max_size=40),
    created_at=timestamps,
    last_updated_at=timestamps,
    ttl_ms=st.none() | milliseconds,
    poll_interval_ms=st.none() | milliseconds,
    extra=extras,
)


def _rename(wire: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    return {names.get(k, k): v for k, v in wire.items()}


# --- the table ------------------------------------------------------------------------------------


def test_fields_table_names_each_field_once_in_each_dialect():
    assert [(f.hub, f.v1, f.v2, f.null_when_absent) for f in FIELDS] == [
        ("task_id", "taskId", "taskId", False),
        ("status", "status", "status", False),
        ("status_message", "statusMessage", "statusMessage", False),
        ("created_at", "createdAt", "createdAt", False),
        ("last_updated_at", "lastUpdatedAt", "lastUpdatedAt", False),
        ("ttl_ms", "ttl", "ttlMs", True),
        ("poll_interval_ms", "pollInterval", "pollIntervalMs", False),
    ]


def test_known_losses_are_parent_task_id_on_v1_and_nothing_on_v2():
    assert KNOWN_LOSSES == {"v1": ("parentTaskId",), "v2": ()}


# --- spoke → hub → spoke ------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(v1_tasks)
def test_v1_task_round_trips_through_the_hub(wire):
    assert task_to_wire(task_from_wire(wire, "v1"), "v1") == wire


@settings(max_examples=100, deadline=None)
@given(v2_tasks)
def test_v2_task_round_trips_through_the_hub(wire):
    assert task_to_wire(task_from_wire(wire, "v2"), "v2") == wire


@settings(max_examples=100, deadline=None)
@given(v1_tasks)
def test_v1_task_through_v2_and_back_is_identity(wire):
    v2 = task_to_wire(task_from_wire(wire, "v1"), "v2")
    assert v2 == _rename(wire, V1_TO_V2)
    assert task_to_wire(task_from_wire(v2, "v2"), "v1") == wire


@settings(max_examples=100, deadline=None)
@given(v2_tasks)
def test_v2_task_through_v1_and_back_is_identity(wire):
    v1 = task_to_wire(task_from_wire(wire, "v2"), "v1")
    assert v1 == _rename(wire, V2_TO_V1)
    assert task_to_wire(task_from_wire(v1, "v1"), "v2") == wire


@settings(max_examples=100, deadline=None)
@given(hub_tasks, st.sampled_from(["v1", "v2"]))
def test_hub_task_round_trips_through_either_spoke(task, dialect):
    assert task_from_wire(task_to_wire(task, dialect), dialect) == task


# --- known losses ----------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(v1_tasks, st.text(min_size=1, max_size=40))
def test_parent_task_id_is_a_known_loss_of_v1(wire, parent):
    with_parent = {**wire, "parentTaskId": parent}
    task = task_from_wire(with_parent, "v1")
    assert task.dropped == ("parentTaskId",)
    assert "parentTaskId" not in task.extra
    assert task_to_wire(task, "v1") == wire
    assert task_to_wire(task, "v2") == _rename(wire, V1_TO_V2)


def test_absent_v1_ttl_comes_back_as_null():
    # mcp 1.30 omits ttl when none was requested; both schemas require the key (integer | null).
    wire = {"taskId": "T", "status": "working", "createdAt": TS, "lastUpdatedAt": TS, "pollInterval": 500}
    assert task_to_wire(task_from_wire(wire, "v1"), "v1") == {**wire, "ttl": None}
    assert task_to_wire(task_from_wire(wire, "v1"), "v2") == {
        "taskId": "T",
        "status": "working",
        "createdAt": TS,
        "lastUpdatedAt": TS,
        "pollIntervalMs": 500,
        "ttlMs": None,
    }


def test_outcome_and_envelope_members_are_not_task_fields():
    wire = {
        "taskId": "T",
        "status": "completed",
        "createdAt": TS,
        "lastUpdatedAt": TS,
        "ttlMs": 900000,
        "resultType": "complete",
        "result": {"content": [], "isError": False},
        "error": {"code": -32603, "message": "x"},
        "inputRequests": {"k": {"method": "roots/list", "params": {}}},
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}},
    }
    task = task_from_wire(wire, "v2")
    assert task == CanonicalTask(task_id="T", status="completed", created_at=TS, last_updated_at=TS, ttl_ms=900000)
    assert task_to_wire(task, "v2") == {
        "taskId": "T",
        "status": "completed",
        "createdAt": TS,
        "lastUpdatedAt": TS,
        "ttlMs": 900000,
    }


def test_v1_field_names_are_extras_on_a_v2_task_and_vice_versa_written_over_by_the_table():
    wire = {"taskId": "T", "status": "working", "createdAt": TS, "lastUpdatedAt": TS, "ttlMs": 5, "ttl": 7}
    task = task_from_wire(wire, "v2")
    assert task.ttl_ms == 5
    assert task_to_wire(task, "v1")["ttl"] == 5


# --- malformed tasks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wire",
    [
        {},
        {"status": "working", "createdAt": TS, "lastUpdatedAt": TS, "ttl": 1},
        {"taskId": "T", "status": "done", "createdAt": TS, "lastUpdatedAt": TS, "ttl": 1},
        {"taskId": "T", "status": "working", "lastUpdatedAt": TS, "ttl": 1},
        {"taskId": "T", "status": "working", "createdAt": TS, "lastUpdatedAt": TS, "ttl": "forever"},
        {"taskId": "T", "status": "working", "createdAt": TS, "lastUpdatedAt": TS, "ttl": 1.5},
        {"taskId": 5, "status": "working", "createdAt": TS, "lastUpdatedAt": TS, "ttl": 1},
    ],
    ids=["empty", "no-taskId", "unknown-status", "no-createdAt", "ttl-string", "ttl-float", "taskId-number"],
)
def test_malformed_backend_task_is_32603(wire):
    with pytest.raises(McpError) as info:
        task_from_wire(wire, "v1")
    assert info.value.code == -32603
    assert info.value.message.startswith("Backend answered a malformed v1 task: ")
