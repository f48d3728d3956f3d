"""translators/subscriptions.py: the filter a session-wire backend can honour, and every message of a
listen stream (docs/behaviour.md §4.9)."""

from __future__ import annotations

from translators.subscriptions import (
    acknowledged,
    advertised,
    for_subscription,
    listen_ended,
    narrow_filter,
    offered_filter,
    tasks_notification,
)

SUB = "io.modelcontextprotocol/subscriptionId"
CAPS = {"tools": {"listChanged": True}, "prompts": {"listChanged": False}, "resources": {"subscribe": True, "listChanged": False}}


def test_offered_filter_follows_the_declared_capabilities():
    assert offered_filter(CAPS, offers_tool_tasks=True) == {"toolsListChanged": True, "resourceSubscriptions": [], "taskIds": []}
    assert offered_filter({"tools": {}}, offers_tool_tasks=False) == {}


def test_narrow_filter_keeps_the_requested_subset_the_backend_offers():
    offered = offered_filter(CAPS, offers_tool_tasks=False)
    requested = {
        "toolsListChanged": True,
        "promptsListChanged": True,
        "resourceSubscriptions": ["a", 3, "a", "b"],
        "taskIds": ["t"],
    }
    assert narrow_filter(requested, offered) == {"toolsListChanged": True, "resourceSubscriptions": ["a", "b"]}
    assert narrow_filter({"toolsListChanged": False}, offered) == {}
    assert narrow_filter("nonsense", offered) == {}


def test_acknowledged_and_ended_carry_the_subscription_id():
    assert acknowledged(9, {"taskIds": ["T"]}) == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {SUB: 9}, "notifications": {"taskIds": ["T"]}},
    }
    assert listen_ended(9) == {"resultType": "complete", "_meta": {SUB: 9}}


def test_for_subscription_stamps_what_was_agreed_and_drops_the_rest():
    agreed = {"toolsListChanged": True, "resourceSubscriptions": ["file:///a"]}
    tools = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert for_subscription(tools, "s", agreed) == {**tools, "params": {"_meta": {SUB: "s"}}}
    prompts = {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed", "params": {}}
    assert for_subscription(prompts, "s", agreed) is None
    updated = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "file:///a", "_meta": {"x": 1}}}
    assert for_subscription(updated, "s", agreed) == {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": "file:///a", "_meta": {"x": 1, SUB: "s"}},
    }
    other = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "file:///b"}}
    assert for_subscription(other, "s", agreed) is None
    status = {"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": {"taskId": "T", "status": "working"}}
    assert for_subscription(status, "s", agreed) is None


def test_tasks_notification_is_the_detailed_task_without_result_type():
    task = {
        "resultType": "complete",
        "_meta": {"io.modelcontextprotocol/serverInfo": {}},
        "taskId": "T",
        "status": "working",
        "createdAt": "c",
        "lastUpdatedAt": "u",
        "ttlMs": None,
    }
    assert tasks_notification(4, task) == {
        "jsonrpc": "2.0",
        "method": "notifications/tasks",
        "params": {"taskId": "T", "status": "working", "createdAt": "c", "lastUpdatedAt": "u", "ttlMs": None, "_meta": {SUB: 4}},
    }


def test_advertised_puts_back_list_changed_and_subscribe_where_declared():
    shown = {"tools": {}, "prompts": {}, "resources": {}}
    assert advertised(CAPS, shown) == {"tools": {"listChanged": True}, "prompts": {}, "resources": {"subscribe": True}}
    assert advertised({}, shown) == shown
