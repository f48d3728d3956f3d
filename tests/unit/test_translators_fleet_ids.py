"""Task ids and requestStates relabelled between a v2-modern client and several v2-modern backends
(docs/behaviour.md §6 "Task ids"; `translators.fleet_ids`).

Every place a task id or a requestState appears (SEP-2663, core 2026-07-28 MRTR), what must stay
untouched (tool arguments, tool results, names, input keys, errors), non-string values, round trips,
no mutation of the input, and exceptions from the mapping.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from translators.errors import McpError
from translators.fleet_ids import ids_to_backend, ids_to_client, listened_task_ids, relabel

RELATED = "io.modelcontextprotocol/related-task"
SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
}
BACKEND_TASK = "kArGLyOK-1"
SEALED_TASK = "sealed:kArGLyOK-1"
BACKEND_STATE = "opaque-blob"
SEALED_STATE = "state:opaque-blob"


def seal_task(value: str) -> str:
    return "sealed:" + value


def seal_state(value: str) -> str:
    return "state:" + value


def unseal_task(value: str) -> str:
    if not value.startswith("sealed:"):
        raise McpError(-32602, f"unknown task {value}")
    return value.removeprefix("sealed:")


def unseal_state(value: str) -> str:
    if not value.startswith("state:"):
        raise McpError(-32602, "bad requestState")
    return value.removeprefix("state:")


def never(value: str) -> str:
    raise AssertionError(f"called with {value!r}")


def to_client(message: dict[str, Any]) -> dict[str, Any]:
    return ids_to_client(message, seal_task, seal_state)


def to_backend(message: dict[str, Any]) -> dict[str, Any]:
    return ids_to_backend(message, unseal_task, unseal_state)


# --- params.taskId ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["tasks/get", "tasks/cancel"])
def test_task_request_params_task_id_to_backend(method: str) -> None:
    message = {"jsonrpc": "2.0", "id": 3, "method": method, "params": {"taskId": SEALED_TASK, "_meta": META}}
    assert to_backend(message) == {
        "jsonrpc": "2.0",
        "id": 3,
        "method": method,
        "params": {"taskId": BACKEND_TASK, "_meta": META},
    }


def test_tasks_update_maps_task_id_but_not_input_response_keys() -> None:
    key = f"{BACKEND_TASK}:1f2832058f877ab8"  # FastMCP 4 keys embed the backend task id; they stay opaque
    message = {
        "jsonrpc": "2.0",
        "id": 6,
        "method": "tasks/update",
        "params": {
            "taskId": SEALED_TASK,
            "inputResponses": {key: {"action": "accept", "content": {"taskId": SEALED_TASK}}},
            "_meta": META,
        },
    }
    assert to_backend(message) == {
        "jsonrpc": "2.0",
        "id": 6,
        "method": "tasks/update",
        "params": {
            "taskId": BACKEND_TASK,
            "inputResponses": {key: {"action": "accept", "content": {"taskId": SEALED_TASK}}},
            "_meta": META,
        },
    }


def test_notifications_tasks_detailed_task_params() -> None:
    message = {
        "jsonrpc": "2.0",
        "method": "notifications/tasks",
        "params": {
            "_meta": {SUBSCRIPTION: 9},
            "taskId": BACKEND_TASK,
            "status": "completed",
            "createdAt": "2026-08-01T10:00:00Z",
            "lastUpdatedAt": "2026-08-01T10:00:05Z",
            "ttlMs": 60000,
            "pollIntervalMs": 5000,
            "result": {"content": [{"type": "text", "text": f"taskId {BACKEND_TASK}"}], "isError": False},
        },
    }
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "method": "notifications/tasks",
        "params": {
            "_meta": {SUBSCRIPTION: 9},
            "taskId": SEALED_TASK,
            "status": "completed",
            "createdAt": "2026-08-01T10:00:00Z",
            "lastUpdatedAt": "2026-08-01T10:00:05Z",
            "ttlMs": 60000,
            "pollIntervalMs": 5000,
            "result": {"content": [{"type": "text", "text": f"taskId {BACKEND_TASK}"}], "isError": False},
        },
    }


def test_notifications_tasks_status_params() -> None:
    message = {"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": {"taskId": BACKEND_TASK, "status": "working"}}
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "method": "notifications/tasks/status",
        "params": {"taskId": SEALED_TASK, "status": "working"},
    }


def test_notifications_tasks_input_required_maps_related_task_inside_input_requests() -> None:
    message = {
        "jsonrpc": "2.0",
        "method": "notifications/tasks",
        "params": {
            "taskId": BACKEND_TASK,
            "status": "input_required",
            "inputRequests": {
                "elicit-1": {
                    "method": "elicitation/create",
                    "params": {"message": "Name?", "_meta": {RELATED: {"taskId": BACKEND_TASK}}},
                }
            },
        },
    }
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "method": "notifications/tasks",
        "params": {
            "taskId": SEALED_TASK,
            "status": "input_required",
            "inputRequests": {
                "elicit-1": {
                    "method": "elicitation/create",
                    "params": {"message": "Name?", "_meta": {RELATED: {"taskId": SEALED_TASK}}},
                }
            },
        },
    }


# --- result.taskId ---------------------------------------------------------------------------------


def test_create_task_result() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {
            "resultType": "task",
            "taskId": BACKEND_TASK,
            "status": "working",
            "createdAt": "2026-08-01T10:00:00+00:00",
            "lastUpdatedAt": "2026-08-01T10:00:00+00:00",
            "ttlMs": 900000,
            "pollIntervalMs": 5000,
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}},
        },
    }
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {
            "resultType": "task",
            "taskId": SEALED_TASK,
            "status": "working",
            "createdAt": "2026-08-01T10:00:00+00:00",
            "lastUpdatedAt": "2026-08-01T10:00:00+00:00",
            "ttlMs": 900000,
            "pollIntervalMs": 5000,
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "1"}},
        },
    }


def test_get_task_result_completed_leaves_inlined_result_alone() -> None:
    inlined = {
        "resultType": "complete",
        "content": [{"type": "text", "text": f'{{"taskId": "{BACKEND_TASK}"}}'}],
        "structuredContent": {"taskId": BACKEND_TASK, "requestState": BACKEND_STATE},
        "isError": False,
    }
    message = {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"resultType": "complete", "taskId": BACKEND_TASK, "status": "completed", "ttlMs": None, "result": inlined},
    }
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {
            "resultType": "complete",
            "taskId": SEALED_TASK,
            "status": "completed",
            "ttlMs": None,
            "result": {
                "resultType": "complete",
                "content": [{"type": "text", "text": '{"taskId": "kArGLyOK-1"}'}],
                "structuredContent": {"taskId": "kArGLyOK-1", "requestState": "opaque-blob"},
                "isError": False,
            },
        },
    }


def test_get_task_result_failed_leaves_error_alone() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {
            "resultType": "complete",
            "taskId": BACKEND_TASK,
            "status": "failed",
            "statusMessage": f"task {BACKEND_TASK} failed",
            "error": {"code": -32603, "message": "boom", "data": {"taskId": BACKEND_TASK}},
        },
    }
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {
            "resultType": "complete",
            "taskId": SEALED_TASK,
            "status": "failed",
            "statusMessage": "task kArGLyOK-1 failed",
            "error": {"code": -32603, "message": "boom", "data": {"taskId": "kArGLyOK-1"}},
        },
    }


def test_get_task_result_input_required_maps_related_task_in_each_input_request() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 4,
        "result": {
            "resultType": "complete",
            "taskId": BACKEND_TASK,
            "status": "input_required",
            "inputRequests": {
                "elicit-1": {
                    "method": "elicitation/create",
                    "params": {"mode": "form", "message": "Name?", "_meta": {RELATED: {"taskId": BACKEND_TASK}, "x": 1}},
                },
                "sample-2": {
                    "method": "sampling/createMessage",
                    "params": {"messages": [], "maxTokens": 10, "_meta": {RELATED: {"taskId": "other-task"}}},
                },
                "roots-3": {"method": "roots/list", "params": {}},
                "bare-4": {"method": "roots/list"},
            },
        },
    }
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "id": 4,
        "result": {
            "resultType": "complete",
            "taskId": SEALED_TASK,
            "status": "input_required",
            "inputRequests": {
                "elicit-1": {
                    "method": "elicitation/create",
                    "params": {"mode": "form", "message": "Name?", "_meta": {RELATED: {"taskId": SEALED_TASK}, "x": 1}},
                },
                "sample-2": {
                    "method": "sampling/createMessage",
                    "params": {"messages": [], "maxTokens": 10, "_meta": {RELATED: {"taskId": "sealed:other-task"}}},
                },
                "roots-3": {"method": "roots/list", "params": {}},
                "bare-4": {"method": "roots/list"},
            },
        },
    }


# --- related-task _meta ------------------------------------------------------------------------------


def test_related_task_in_params_meta() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": "task-1",
        "method": "elicitation/create",
        "params": {"mode": "form", "message": "Name?", "_meta": {RELATED: {"taskId": BACKEND_TASK}, "keep": "me"}},
    }
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "id": "task-1",
        "method": "elicitation/create",
        "params": {"mode": "form", "message": "Name?", "_meta": {RELATED: {"taskId": SEALED_TASK}, "keep": "me"}},
    }


def test_related_task_in_result_meta() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 5,
        "result": {
            "resultType": "complete",
            "content": [{"type": "text", "text": "hello Ada"}],
            "_meta": {RELATED: {"taskId": BACKEND_TASK}},
        },
    }
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "id": 5,
        "result": {
            "resultType": "complete",
            "content": [{"type": "text", "text": "hello Ada"}],
            "_meta": {RELATED: {"taskId": SEALED_TASK}},
        },
    }


# --- requestState (MRTR) -----------------------------------------------------------------------------


def test_input_required_result_request_state_and_input_requests() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "resultType": "input_required",
            "inputRequests": {
                "login": {
                    "method": "elicitation/create",
                    "params": {"mode": "form", "message": "GitHub user?", "requestedSchema": {"type": "object"}},
                }
            },
            "requestState": BACKEND_STATE,
        },
    }
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "resultType": "input_required",
            "inputRequests": {
                "login": {
                    "method": "elicitation/create",
                    "params": {"mode": "form", "message": "GitHub user?", "requestedSchema": {"type": "object"}},
                }
            },
            "requestState": SEALED_STATE,
        },
    }


def test_mrtr_retry_maps_request_state_but_not_name_arguments_or_responses() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "taskId",
            "arguments": {"taskId": SEALED_TASK, "requestState": SEALED_STATE},
            "inputResponses": {"login": {"action": "accept", "content": {"name": "ada"}}},
            "requestState": SEALED_STATE,
            "_meta": META,
        },
    }
    assert to_backend(message) == {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "taskId",
            "arguments": {"taskId": "sealed:kArGLyOK-1", "requestState": "state:opaque-blob"},
            "inputResponses": {"login": {"action": "accept", "content": {"name": "ada"}}},
            "requestState": BACKEND_STATE,
            "_meta": META,
        },
    }


@pytest.mark.parametrize("method,field", [("prompts/get", "name"), ("resources/read", "uri")])
def test_mrtr_retry_of_prompts_and_resources(method: str, field: str) -> None:
    message = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {field: "x", "requestState": SEALED_STATE}}
    assert to_backend(message) == {
        "jsonrpc": "2.0",
        "id": 7,
        "method": method,
        "params": {field: "x", "requestState": BACKEND_STATE},
    }


# --- subscriptions/listen taskIds --------------------------------------------------------------------


def test_subscriptions_listen_task_ids() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "subscriptions/listen",
        "params": {"_meta": META, "notifications": {"taskIds": [SEALED_TASK, "sealed:T2"], "toolsListChanged": True}},
    }
    assert to_backend(message) == {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "subscriptions/listen",
        "params": {"_meta": META, "notifications": {"taskIds": [BACKEND_TASK, "T2"], "toolsListChanged": True}},
    }


def test_subscriptions_acknowledged_task_ids() -> None:
    message = {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {SUBSCRIPTION: 9}, "notifications": {"taskIds": [BACKEND_TASK]}},
    }
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {SUBSCRIPTION: 9}, "notifications": {"taskIds": [SEALED_TASK]}},
    }


def test_listened_task_ids() -> None:
    assert listened_task_ids({"notifications": {"taskIds": ["a", 3]}}) == ["a", 3]
    assert listened_task_ids({"notifications": {}}) == []
    assert listened_task_ids({"notifications": "x"}) == []
    assert listened_task_ids({}) == []


# --- v1 shapes (session-wire relays) ---------------------------------------------------------------


def test_v1_create_task_result_nested_task() -> None:
    message = {"jsonrpc": "2.0", "id": 2, "result": {"task": {"taskId": BACKEND_TASK, "status": "working", "ttl": 60000}}}
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {"task": {"taskId": SEALED_TASK, "status": "working", "ttl": 60000}},
    }
    assert to_backend(to_client(message)) == message


def test_v1_tasks_list_entries() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"tasks": [{"taskId": BACKEND_TASK, "status": "completed"}, {"taskId": "t2"}, "odd"], "nextCursor": "c1"},
    }
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"tasks": [{"taskId": SEALED_TASK, "status": "completed"}, {"taskId": "sealed:t2"}, "odd"], "nextCursor": "c1"},
    }
    assert to_backend(to_client(message)) == message


def test_v1_related_task_of_a_server_request_and_of_tasks_result() -> None:
    ask = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "elicitation/create",
        "params": {"message": "Sure?", "requestedSchema": {}, "_meta": {RELATED: {"taskId": BACKEND_TASK}}},
    }
    assert to_client(ask)["params"]["_meta"] == {RELATED: {"taskId": SEALED_TASK}}
    result = {"jsonrpc": "2.0", "id": 4, "result": {"content": [], "_meta": {RELATED: {"taskId": BACKEND_TASK}}}}
    assert to_client(result)["result"] == {"content": [], "_meta": {RELATED: {"taskId": SEALED_TASK}}}


def test_tasks_list_without_changes_is_the_same_object() -> None:
    message = {"jsonrpc": "2.0", "id": 3, "result": {"tasks": [{"status": "working"}]}}
    assert relabel(message, never, never)["result"] is message["result"]


# --- untouched -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 6, "result": {"resultType": "complete"}},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "error": {"code": -32602, "message": f"Task {BACKEND_TASK} not found", "data": {"taskId": BACKEND_TASK}},
        },
        {
            "jsonrpc": "2.0",
            "id": 8,
            "result": {
                "resultType": "complete",
                "content": [{"type": "text", "text": f'"taskId": "{BACKEND_TASK}", "requestState": "x"'}],
                "structuredContent": {"task": {"taskId": BACKEND_TASK}, "taskIds": [BACKEND_TASK]},
                "isError": False,
            },
        },
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "slow", "arguments": {"taskId": BACKEND_TASK}, "_meta": META},
        },
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": META}},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 1, "method": "x", "params": [BACKEND_TASK, {"taskId": BACKEND_TASK}]},
    ],
    ids=["update-ack", "error", "tool-result", "tool-call", "discover", "no-params", "positional-params"],
)
def test_messages_without_ids_are_equal_copies_and_call_nothing(message: dict[str, Any]) -> None:
    before = copy.deepcopy(message)
    out = relabel(message, never, never)
    assert out == before
    assert out is not message
    assert message == before


@pytest.mark.parametrize(
    "params",
    [
        {"taskId": None},
        {"taskId": 42},
        {"requestState": None},
        {"requestState": {"nested": "x"}},
        {"_meta": {RELATED: {"taskId": 7}}},
        {"_meta": {RELATED: "not-an-object"}},
        {"_meta": {RELATED: {}}},
        {"_meta": "not-an-object"},
        {"inputRequests": {"k": "not-an-object", "j": {"method": "roots/list", "params": "nope"}}},
        {"inputRequests": ["not", "a", "map"]},
        {"notifications": {"taskIds": [1, None]}},
        {"notifications": {"taskIds": "T"}},
        {"notifications": {"toolsListChanged": True}},
    ],
)
def test_non_string_and_malformed_values_are_left_as_they_are(params: dict[str, Any]) -> None:
    for part in ("params", "result"):
        message = {"jsonrpc": "2.0", "id": 1, part: params}
        assert relabel(message, never, never) == {"jsonrpc": "2.0", "id": 1, part: copy.deepcopy(params)}


def test_only_the_strings_among_task_ids_are_mapped() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "subscriptions/listen",
        "params": {"notifications": {"taskIds": ["a", 3, None, "b"]}},
    }
    assert to_client(message) == {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "subscriptions/listen",
        "params": {"notifications": {"taskIds": ["sealed:a", 3, None, "sealed:b"]}},
    }


# --- round trips, no mutation, exceptions ---------------------------------------------------------


ROUND_TRIP_MESSAGES = [
    {"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": BACKEND_TASK, "_meta": META}},
    {
        "jsonrpc": "2.0",
        "id": 6,
        "method": "tasks/update",
        "params": {"taskId": BACKEND_TASK, "inputResponses": {"k": {"action": "decline"}}, "_meta": META},
    },
    {"jsonrpc": "2.0", "id": 7, "method": "tasks/cancel", "params": {"taskId": BACKEND_TASK, "_meta": META}},
    {"jsonrpc": "2.0", "id": 2, "result": {"resultType": "task", "taskId": BACKEND_TASK, "status": "working", "ttlMs": 60000}},
    {
        "jsonrpc": "2.0",
        "id": 4,
        "result": {
            "resultType": "complete",
            "taskId": BACKEND_TASK,
            "status": "input_required",
            "inputRequests": {
                "e": {"method": "elicitation/create", "params": {"message": "?", "_meta": {RELATED: {"taskId": BACKEND_TASK}}}}
            },
            "_meta": {RELATED: {"taskId": BACKEND_TASK}},
        },
    },
    {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required", "requestState": BACKEND_STATE, "inputRequests": {}}},
    {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "n", "arguments": {"taskId": "a"}, "requestState": BACKEND_STATE},
    },
    {"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": {"notifications": {"taskIds": [BACKEND_TASK, "T2"]}}},
    {
        "jsonrpc": "2.0",
        "method": "notifications/tasks",
        "params": {"_meta": {SUBSCRIPTION: 9}, "taskId": BACKEND_TASK, "status": "cancelled"},
    },
    {"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "Task not found"}},
]


@pytest.mark.parametrize("message", ROUND_TRIP_MESSAGES)
def test_round_trip(message: dict[str, Any]) -> None:
    before = copy.deepcopy(message)
    assert to_backend(to_client(message)) == before
    assert message == before


def test_round_trip_changes_every_id_on_the_way() -> None:
    message = ROUND_TRIP_MESSAGES[4]
    sealed = to_client(message)
    assert sealed["result"]["taskId"] == SEALED_TASK
    assert sealed["result"]["_meta"] == {RELATED: {"taskId": SEALED_TASK}}
    assert sealed["result"]["inputRequests"]["e"]["params"]["_meta"] == {RELATED: {"taskId": SEALED_TASK}}


def test_input_is_not_mutated_and_only_changed_containers_are_copied() -> None:
    arguments = {"taskId": BACKEND_TASK}
    meta = {RELATED: {"taskId": BACKEND_TASK}, "other": {"a": 1}}
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "n", "arguments": arguments, "requestState": BACKEND_STATE, "_meta": meta},
    }
    before = copy.deepcopy(message)
    out = to_client(message)
    assert message == before
    assert out == {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "n",
            "arguments": {"taskId": BACKEND_TASK},
            "requestState": SEALED_STATE,
            "_meta": {RELATED: {"taskId": SEALED_TASK}, "other": {"a": 1}},
        },
    }
    assert out["params"] is not message["params"]
    assert out["params"]["_meta"] is not meta
    assert out["params"]["_meta"][RELATED] is not meta[RELATED]
    assert out["params"]["arguments"] is arguments
    assert out["params"]["_meta"]["other"] is meta["other"]


def test_input_requests_map_is_not_mutated() -> None:
    message = copy.deepcopy(ROUND_TRIP_MESSAGES[4])
    before = copy.deepcopy(message)
    to_client(message)
    assert message == before


def test_exception_from_task_id_propagates() -> None:
    message = {"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": "forged", "_meta": META}}
    before = copy.deepcopy(message)
    with pytest.raises(McpError) as info:
        to_backend(message)
    assert (info.value.code, info.value.message) == (-32602, "unknown task forged")
    assert message == before


def test_exception_from_request_state_propagates_as_is() -> None:
    boom = RuntimeError("tampered")

    def refuse(value: str) -> str:
        raise boom

    message = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "n", "requestState": "x"}}
    with pytest.raises(RuntimeError) as info:
        relabel(message, never, refuse)
    assert info.value is boom


def test_exception_from_task_ids_list_propagates() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "subscriptions/listen",
        "params": {"notifications": {"taskIds": ["sealed:ok", "bad"]}},
    }
    with pytest.raises(McpError) as info:
        to_backend(message)
    assert (info.value.code, info.value.message) == (-32602, "unknown task bad")


def test_directions_apply_the_given_mapping() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"resultType": "input_required", "requestState": "s", "_meta": {RELATED: {"taskId": "t"}}},
    }
    assert ids_to_client(message, str.upper, lambda s: s * 2) == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"resultType": "input_required", "requestState": "ss", "_meta": {RELATED: {"taskId": "T"}}},
    }
    assert ids_to_backend(message, str.upper, lambda s: s + "!") == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"resultType": "input_required", "requestState": "s!", "_meta": {RELATED: {"taskId": "T"}}},
    }


def test_a_message_without_ids_is_known_from_its_bytes_and_would_pass_unchanged():
    from translators.fleet_ids import may_carry_ids

    def seal(task_id: str) -> str:
        return "sealed-" + task_id

    plain = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"content": [{"type": "text", "text": "Hello, task!"}], "resultType": "complete"},
    }
    assert may_carry_ids(json.dumps(plain).encode()) is False
    assert ids_to_client(plain, seal, seal) == plain
    for carrying in (
        {"jsonrpc": "2.0", "id": 2, "result": {"taskId": "t1", "status": "working"}},
        {"jsonrpc": "2.0", "id": 3, "result": {"resultType": "input_required", "requestState": "s1"}},
        {"jsonrpc": "2.0", "method": "subscriptions/listen", "params": {"taskIds": ["t1"]}},
    ):
        assert may_carry_ids(json.dumps(carrying).encode()) is True
    # A key spelled with an escape decodes to taskId: never taken for a message without ids.
    escaped = b'{"jsonrpc": "2.0", "id": 4, "result": {"task\\u0049d": "t1"}}'
    assert json.loads(escaped)["result"] == {"taskId": "t1"}
    assert may_carry_ids(escaped) is True
