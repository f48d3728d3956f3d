"""translators/subscriptions.py: the filter a session-wire backend can honour, and every message of a
listen stream (docs/behaviour.md §4.9); the other way, what the proxy asks a 2026-07-28 backend for on
behalf of a v1 session and what that session's GET stream gets (§5.9)."""

from __future__ import annotations

import pytest

from translators.errors import McpError
from translators.subscriptions import (
    CARRIED,
    MAX_SUBSCRIPTIONS,
    MAX_URI_CHARS,
    acknowledged,
    acknowledged_filter,
    advertised,
    for_subscription,
    from_subscription,
    listen_ended,
    listen_filter_v1,
    listen_params,
    narrow_filter,
    offered_filter,
    own_stream_notification,
    requested_filter,
    subscriptions_after,
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


V2_CAPS = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": False},
    "resources": {"listChanged": True, "subscribe": True},
    "logging": {},
}


def test_listen_filter_v1_asks_for_every_declared_list_and_the_sessions_uris():
    assert listen_filter_v1(V2_CAPS, ["file:///a", 7, "file:///a", "file:///b"]) == {
        "toolsListChanged": True,
        "resourcesListChanged": True,
        "resourceSubscriptions": ["file:///a", "file:///b"],
    }
    assert listen_filter_v1(V2_CAPS, None) == {"toolsListChanged": True, "resourcesListChanged": True}
    assert listen_filter_v1(V2_CAPS, []) == {"toolsListChanged": True, "resourcesListChanged": True}
    assert listen_filter_v1({"resources": {"subscribe": True}}, ["u"]) == {"resourceSubscriptions": ["u"]}
    assert listen_filter_v1({"resources": {"subscribe": False}, "tools": {}}, ["u"]) == {}  # nothing to listen for
    assert listen_filter_v1({"tools": {"listChanged": True}}, "u") == {"toolsListChanged": True}


def test_listen_params_and_requested_filter_are_inverses():
    wanted = {"toolsListChanged": True, "resourceSubscriptions": ["u"]}
    assert listen_params(wanted) == {"notifications": wanted}
    assert requested_filter(listen_params(wanted)) == wanted
    assert requested_filter({}) == {}
    assert requested_filter({"notifications": "all"}) == {}


def test_acknowledged_filter_reads_back_what_acknowledged_writes():
    agreed = {"toolsListChanged": True, "resourceSubscriptions": ["u"]}
    assert acknowledged_filter(acknowledged("L1", agreed)) == agreed
    assert acknowledged_filter({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged"}) == {}
    assert acknowledged_filter({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}}) is None


def test_from_subscription_unstamps_what_for_subscription_stamps():
    agreed = {"toolsListChanged": True, "resourceSubscriptions": ["file:///a"]}
    tools = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert from_subscription(for_subscription(tools, "L1", agreed), agreed) == tools
    updated = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "file:///a", "_meta": {"x": 1}}}
    assert from_subscription(for_subscription(updated, "L1", agreed), agreed) == updated
    bare = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "file:///a"}}
    assert from_subscription(for_subscription(bare, 5, agreed), agreed) == bare


def test_from_subscription_drops_what_the_session_did_not_ask_for():
    agreed = {"toolsListChanged": True, "resourceSubscriptions": ["file:///a"]}
    stamp = {"_meta": {SUB: "L1"}}
    prompts = {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed", "params": stamp}
    assert from_subscription(prompts, agreed) is None
    other = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "file:///b", **stamp}}
    assert from_subscription(other, agreed) is None
    no_uri = {"jsonrpc": "2.0", "method": "notifications/resources/updated"}
    assert from_subscription(no_uri, agreed) is None
    assert from_subscription(acknowledged("L1", agreed), agreed) is None
    assert from_subscription(tasks_notification("L1", {"taskId": "T", "status": "working"}), agreed) is None
    assert from_subscription({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}, agreed) is None


def test_own_stream_notification_passes_agreed_changes_and_logs_at_the_sessions_level_unchanged():
    agreed = listen_filter_v1(CAPS, ["reference://notes"])
    tools = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    updated = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "reference://notes"}}
    warning = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "warning", "logger": "s", "data": "w"}}
    assert own_stream_notification(tools, agreed, None) == tools
    assert own_stream_notification(updated, agreed, None) == updated
    assert own_stream_notification(warning, agreed, "warning") == warning
    assert own_stream_notification(warning, agreed, "debug") == warning


def test_own_stream_notification_drops_what_the_session_did_not_ask_for():
    agreed = listen_filter_v1(CAPS, ["reference://notes"])
    elsewhere = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "reference://elsewhere"}}
    prompts = {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}  # declared listChanged: false
    info = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "i"}}
    status = {"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": {"taskId": "t", "status": "working"}}
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}
    assert own_stream_notification(elsewhere, agreed, "debug") is None
    assert own_stream_notification(prompts, agreed, "debug") is None
    assert own_stream_notification(info, agreed, "warning") is None
    assert own_stream_notification(info, agreed, None) is None  # no level set: no log messages
    assert own_stream_notification(status, agreed, "debug") is None
    assert own_stream_notification(progress, agreed, "debug") is None
    assert own_stream_notification(elsewhere, listen_filter_v1(CAPS, []), "debug") is None


def test_carried_is_exactly_what_a_full_filter_lets_through():
    everything = {
        "toolsListChanged": True,
        "promptsListChanged": True,
        "resourcesListChanged": True,
        "resourceSubscriptions": ["u"],
    }
    methods = [
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
        "notifications/tasks/status",
        "notifications/message",
        "notifications/progress",
    ]
    through = [m for m in methods if for_subscription({"jsonrpc": "2.0", "method": m, "params": {"uri": "u"}}, 1, everything)]
    assert sorted(CARRIED) == sorted(through) == sorted(methods[:4])


def test_subscriptions_after_appends_moves_and_removes_a_uri():
    assert subscriptions_after(None, "resources/subscribe", {"uri": "a"}) == ["a"]
    assert subscriptions_after(["a", "b"], "resources/subscribe", {"uri": "a"}) == ["b", "a"]
    assert subscriptions_after(["a", "b"], "resources/unsubscribe", {"uri": "a"}) == ["b"]
    assert subscriptions_after(["b"], "resources/unsubscribe", {"uri": "never"}) == ["b"]


def test_subscriptions_after_refuses_a_bad_uri_and_one_too_many():
    refusals = [
        (None, "resources/subscribe", {}, "resources/subscribe needs params.uri (a string)"),
        (None, "resources/unsubscribe", {"uri": 7}, "resources/unsubscribe needs params.uri (a string)"),
        (
            None,
            "resources/subscribe",
            {"uri": "u" * (MAX_URI_CHARS + 1)},
            "resources/subscribe: params.uri is longer than 8192 characters",
        ),
        (
            [f"r{n}" for n in range(MAX_SUBSCRIPTIONS)],
            "resources/subscribe",
            {"uri": "one more"},
            "At most 100 resource subscriptions per session",
        ),
    ]
    for held, method, params, message in refusals:
        with pytest.raises(McpError) as refused:
            subscriptions_after(held, method, params)
        assert (refused.value.code, refused.value.message) == (-32602, message)
    assert len(subscriptions_after(None, "resources/subscribe", {"uri": "u" * MAX_URI_CHARS})) == 1
