"""Results the proxy answers itself and the small builders moved into translators/ (dialect.py,
results.py, capabilities.with_tasks_extension, inputs.mrtr_retry_params, jsonrpc.response_carrying,
differences.with_client_outcome)."""

from __future__ import annotations

from translators.capabilities import server_capabilities_to_v2, with_tasks_extension
from translators.dialect import session_dialect
from translators.differences import with_client_outcome
from translators.inputs import mrtr_retry_params
from translators.jsonrpc import response_carrying
from translators.model import CanonicalTask, TaskError
from translators.results import (
    SERVER_INFO,
    carried_capabilities,
    discover_result,
    initialize_result_v1,
    initialize_result_v2_session,
    task_status_notification_v1,
    tasks_list_result_v1,
    tools_list_to_v1,
    tools_list_to_v2,
    uncarried_capabilities,
)

TASKS = "io.modelcontextprotocol/tasks"
V1_CAPS = {"tools": {"listChanged": True}, "logging": {}, "tasks": {"requests": {"tools": {"call": {}}}}}


def test_the_session_dialect_is_v2_session_only_when_initialize_declares_the_extension():
    assert session_dialect({"capabilities": {"extensions": {TASKS: {}}}}) == "v2-session"
    assert session_dialect({"capabilities": {"extensions": {"other": {}}}}) == "v1"
    assert session_dialect({"capabilities": "nonsense"}) == "v1"
    assert session_dialect({}) == "v1"


def test_discover_shows_v2_capabilities_list_changed_the_extension_and_the_proxys_server_info():
    assert discover_result(V1_CAPS, "be brief", offers_tool_tasks=True, cache_ttl_ms=0) == {
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {"listChanged": True}, "logging": {}, "extensions": {TASKS: {}}},
        "instructions": "be brief",
        "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
    }


def test_discover_shows_logging_only_when_the_backend_declares_it():
    assert "logging" not in discover_result({"tools": {}}, None, offers_tool_tasks=False)["capabilities"]
    assert discover_result({"logging": {}}, None, offers_tool_tasks=False)["capabilities"] == {"logging": {}}


def test_initialize_for_v1_clients_keeps_other_extensions_and_declares_v1_tasks():
    caps = {"tools": {"listChanged": True}, "prompts": {}, "logging": {}, "extensions": {TASKS: {}, "x/y": {"a": 1}}}
    assert initialize_result_v1(caps, None) == {
        "capabilities": {
            "tools": {},
            "prompts": {},
            "logging": {},
            "extensions": {"x/y": {"a": 1}},
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
        },
        "serverInfo": SERVER_INFO,
    }


def test_initialize_for_v1_clients_shows_list_changes_and_subscribe_only_where_the_proxy_listens():
    caps = {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": False},
        "resources": {"listChanged": True, "subscribe": True},
        "extensions": {TASKS: {}},
    }
    tasks = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    assert initialize_result_v1(caps, "hi", listens=True) == {
        "capabilities": {
            "tools": {"listChanged": True},
            "prompts": {},
            "resources": {"listChanged": True, "subscribe": True},
            "tasks": tasks,
        },
        "serverInfo": SERVER_INFO,
        "instructions": "hi",
    }
    assert initialize_result_v1(caps, None, listens=False)["capabilities"] == {
        "tools": {},
        "prompts": {},
        "resources": {},
        "tasks": tasks,
    }
    assert "logging" not in initialize_result_v1({"logging": "yes"}, None)["capabilities"]  # not an object: not declared


def test_initialize_for_v1_clients_of_a_v2_session_backend_shows_what_its_own_upstream_session_carries():
    caps = {  # what a v2-session backend declares in initialize (tests/peers/v2_session_server.py, lists on)
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
        "resources": {"listChanged": True, "subscribe": True},
        "logging": {},
        "extensions": {TASKS: {}},
    }
    shown = initialize_result_v1(caps, None, listens=True)["capabilities"]
    assert shown == {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
        "resources": {"listChanged": True, "subscribe": True},
        "logging": {},
        "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
    }
    # The inverse: a v2 client is shown the same lists without what the proxy carries, and the extension.
    assert server_capabilities_to_v2(shown) == {"tools": {}, "prompts": {}, "resources": {}, "extensions": {TASKS: {}}}
    plain = {"tools": {}, "extensions": {TASKS: {}}}  # the same backend declaring no list changes, no logging
    assert initialize_result_v1(plain, None, listens=True)["capabilities"] == {
        "tools": {},
        "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
    }


def test_initialize_for_v2_session_clients_adds_the_extension_of_a_v2_modern_backend_only():
    assert initialize_result_v2_session({"tools": {}}, "hi", backend_dialect="v2-modern", offers_tool_tasks=True) == {
        "capabilities": {"tools": {}, "extensions": {TASKS: {}}},
        "serverInfo": SERVER_INFO,
        "instructions": "hi",
    }
    assert initialize_result_v2_session({"tools": {}}, None, backend_dialect="v2-session", offers_tool_tasks=True) == {
        "capabilities": {"tools": {}},
        "serverInfo": SERVER_INFO,
    }


def test_initialize_for_v2_session_clients_shows_what_the_proxy_carries_in_front_of_v1_and_v2_modern_backends():
    caps = {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": False},
        "resources": {"subscribe": True, "listChanged": True},
        "logging": {},
    }
    carried = {
        "tools": {"listChanged": True},
        "prompts": {},
        "resources": {"subscribe": True, "listChanged": True},
        "logging": {},
    }
    assert initialize_result_v2_session(caps, None, backend_dialect="v1", offers_tool_tasks=False) == {
        "capabilities": carried,
        "serverInfo": SERVER_INFO,
    }
    assert initialize_result_v2_session(caps, None, backend_dialect="v2-modern", offers_tool_tasks=True)["capabilities"] == {
        **carried,
        "extensions": {TASKS: {}},
    }
    # Relayed (v2-session backend): the proxy carries nothing.
    assert initialize_result_v2_session(caps, None, backend_dialect="v2-session", offers_tool_tasks=False)["capabilities"] == {
        "tools": {},
        "prompts": {},
        "resources": {},
    }
    not_declared = initialize_result_v2_session({"logging": "yes"}, None, backend_dialect="v1", offers_tool_tasks=False)
    assert "logging" not in not_declared["capabilities"]


def test_carried_capabilities_and_their_inverse():
    caps = {"tools": {"listChanged": True}, "resources": {"subscribe": True}, "logging": {}}
    shown = {"tools": {}, "resources": {}, "completions": {}}
    carried = carried_capabilities(caps, shown)
    assert carried == {"tools": {"listChanged": True}, "resources": {"subscribe": True}, "completions": {}, "logging": {}}
    assert uncarried_capabilities(carried) == shown
    assert carried_capabilities({}, shown) == shown  # nothing declared: nothing carried
    assert uncarried_capabilities(shown) == shown


def test_tools_list_is_mapped_both_ways():
    v1_tool = {"name": "a", "execution": {"taskSupport": "optional"}}
    assert tools_list_to_v2({"tools": [v1_tool, 7]}) == {"tools": [{"name": "a"}, 7]}  # the 2026-07-28 Tool has no execution
    assert tools_list_to_v2({"nextCursor": "c"}) == {"nextCursor": "c"}
    assert tools_list_to_v1({"tools": [{"name": "a"}, {"name": "b"}, 7]}, {"a": "required"}, "forbidden") == {
        "tools": [
            {"name": "a", "execution": {"taskSupport": "required"}},
            {"name": "b", "execution": {"taskSupport": "forbidden"}},
        ]
    }


def test_tasks_list_status_notification_and_response_carrying():
    assert tasks_list_result_v1([{"taskId": "t"}], None) == {"tasks": [{"taskId": "t"}]}
    assert tasks_list_result_v1([], "next") == {"tasks": [], "nextCursor": "next"}
    assert task_status_notification_v1({"taskId": "t"}) == {
        "jsonrpc": "2.0",
        "method": "notifications/tasks/status",
        "params": {"taskId": "t"},
    }
    assert response_carrying(5, {"jsonrpc": "2.0", "id": "x", "result": {"a": 1}, "extra": 1}) == {
        "jsonrpc": "2.0",
        "id": 5,
        "result": {"a": 1},
    }


def test_mrtr_retry_params_carry_answers_and_the_rounds_state():
    assert mrtr_retry_params({"name": "t"}, {"resultType": "input_required", "requestState": "s"}, {"k": {"v": 1}}) == {
        "name": "t",
        "inputResponses": {"k": {"v": 1}},
        "requestState": "s",
    }
    assert mrtr_retry_params({"name": "t"}, {"resultType": "input_required"}, {}) == {"name": "t", "inputResponses": {}}


def test_with_tasks_extension_replaces_extensions():
    assert with_tasks_extension({"sampling": {}, "extensions": {"x": {}}}) == {"sampling": {}, "extensions": {TASKS: {}}}


def test_the_client_outcome_overlays_a_proxy_failure_and_a_sticky_cancel():
    working = CanonicalTask(
        task_id="t", status="working", created_at="2026-01-01T00:00:00Z", last_updated_at="2026-01-01T00:00:00Z"
    )
    error = TaskError(code=-1, message="no")
    assert with_client_outcome(working, None, False) is working
    assert (with_client_outcome(working, error, True).status, with_client_outcome(working, error, True).error) == (
        "failed",
        error,
    )
    assert with_client_outcome(working.evolve(status="completed", result={"a": 1}), None, True).model_dump(
        exclude_none=True
    ) == working.evolve(status="cancelled").model_dump(exclude_none=True)
