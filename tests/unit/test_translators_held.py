"""The held task's wire shapes on each face (translators/held.py; docs/behaviour.md §9)."""

from __future__ import annotations

from translators.errors import McpError
from translators.held import (
    HELD_SESSION,
    INTERRUPTED,
    asking,
    cancelled,
    cancelled_v1,
    canonical,
    completed,
    created_v1,
    created_v2,
    failed,
    from_canonical,
    get_v1,
    get_v2,
    initialize_held_v1,
    initialize_unheld_v1,
    interrupted,
    is_held_token,
    iso_ms,
    list_v1,
    new_held,
    progress_message,
    result_v1,
    tools_list_held_v1,
    tools_list_unheld_v1,
    with_progress,
    with_progress_token,
)
from translators.model import InputRequest

T0 = 1_780_000_000_000  # 2026-05-28T20:26:40Z
ISO0 = "2026-05-28T20:26:40.000000Z"
ISO1 = "2026-05-28T20:26:41.500000Z"
TTL, POLL = 3_600_000, 1000
RESULT = {"content": [{"type": "text", "text": "computed x"}]}
RELATED = {"io.modelcontextprotocol/related-task": {"taskId": "t1"}}


def _working():
    return new_held("t1", T0, TTL, POLL)


def test_iso_ms_and_the_session_sentinel():
    assert iso_ms(T0) == ISO0
    assert iso_ms(T0 + 1500) == ISO1
    assert HELD_SESSION.strip() == "held" and " " in HELD_SESSION


def test_created_v2_is_the_flat_sep_2663_shape():
    assert created_v2(_working()) == {
        "taskId": "t1",
        "status": "working",
        "createdAt": ISO0,
        "lastUpdatedAt": ISO0,
        "ttlMs": TTL,
        "pollIntervalMs": POLL,
        "resultType": "task",
    }


def test_get_v2_working_carries_the_progress_message():
    state = with_progress(_working(), "step 2 of 5", T0 + 1500)
    assert get_v2(state) == {
        "taskId": "t1",
        "status": "working",
        "statusMessage": "step 2 of 5",
        "createdAt": ISO0,
        "lastUpdatedAt": ISO1,
        "ttlMs": TTL,
        "pollIntervalMs": POLL,
        "resultType": "complete",
    }
    assert with_progress(state, "step 2 of 5", T0 + 9000) is state  # no change, no write


def test_get_v2_completed_inlines_the_exact_result_is_error_kept():
    failing = {"content": [{"type": "text", "text": "nope"}], "isError": True, "structuredContent": {"a": 1}}
    state = completed(_working(), {**failing, "_meta": RELATED}, T0 + 1500)
    wire = get_v2(state)
    assert (wire["status"], wire["result"]) == ("completed", {**failing, "resultType": "complete"})
    assert "statusMessage" not in wire


def test_get_v2_failed_inlines_the_backend_error():
    state = failed(_working(), McpError(-32000, "boom", {"why": "x"}), T0 + 1500)
    assert get_v2(state)["error"] == {"code": -32000, "message": "boom", "data": {"why": "x"}}
    assert get_v2(state)["status"] == "failed"


def test_input_required_shows_input_requests_without_related_meta_and_goes_back_to_working():
    question = InputRequest(method="elicitation/create", params={"message": "Delete a?", "_meta": RELATED})
    state = asking(_working(), {"r1": question}, T0 + 1500)
    wire = get_v2(state)
    assert (wire["status"], wire["inputRequests"]) == (
        "input_required",
        {"r1": {"method": "elicitation/create", "params": {"message": "Delete a?"}}},
    )
    again = asking(state, {}, T0 + 2000)
    assert (again.status, again.input_requests) == ("working", {})


def test_terminal_states_never_change():
    done = completed(_working(), RESULT, T0 + 1)
    assert cancelled(done, T0 + 2) is done
    assert failed(done, McpError(-1, "x"), T0 + 2) is done
    assert with_progress(done, "late", T0 + 3) is done
    gone = cancelled(_working(), T0 + 2)
    assert (gone.status, completed(gone, RESULT, T0 + 3).status) == ("cancelled", "cancelled")


def test_interrupted_is_failed_with_its_message():
    state = interrupted(_working(), T0 + 10)
    assert (state.status, state.error) == ("failed", {"code": -32603, "message": INTERRUPTED})
    assert "may have run" in INTERRUPTED


def test_canonical_round_trips():
    for state in (
        _working(),
        completed(_working(), RESULT, T0 + 1500),
        failed(_working(), McpError(-32001, "x"), T0 + 1500),
        asking(_working(), {"r1": InputRequest(method="roots/list")}, T0 + 1500),
        cancelled(_working(), T0 + 1500),
    ):
        assert from_canonical(canonical(state)) == state


def test_v1_shapes():
    assert created_v1(_working()) == {
        "task": {"taskId": "t1", "status": "working", "createdAt": ISO0, "lastUpdatedAt": ISO0, "ttl": TTL, "pollInterval": POLL}
    }
    done = completed(_working(), RESULT, T0 + 1500)
    assert get_v1(done) == {
        "taskId": "t1",
        "status": "completed",
        "createdAt": ISO0,
        "lastUpdatedAt": ISO1,
        "ttl": TTL,
        "pollInterval": POLL,
    }
    assert result_v1(done) == {**RESULT, "_meta": RELATED}
    tool_error = completed(_working(), {"content": [{"type": "text", "text": "nope"}], "isError": True}, T0 + 1500)
    assert (get_v1(tool_error)["status"], get_v1(tool_error)["statusMessage"]) == ("failed", "nope")
    error = result_v1(failed(_working(), McpError(-32000, "boom"), T0 + 1500))
    assert isinstance(error, McpError) and (error.code, error.message) == (-32000, "boom")
    assert list_v1([done], "c2") == {"tasks": [get_v1(done)], "nextCursor": "c2"}
    assert cancelled_v1(_working())["status"] == "cancelled"


def test_tools_list_held_and_its_inverse():
    listed = {
        "tools": [
            {"name": "plain", "inputSchema": {"type": "object"}},
            {"name": "forbidden", "execution": {"taskSupport": "forbidden"}},
            {"name": "tasked", "execution": {"taskSupport": "required"}},
            "junk",
        ],
        "nextCursor": "n",
    }
    held = tools_list_held_v1(listed)
    assert held == {
        "tools": [
            {"name": "plain", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "optional"}},
            {"name": "forbidden", "execution": {"taskSupport": "optional"}},
            {"name": "tasked", "execution": {"taskSupport": "required"}},
            "junk",
        ],
        "nextCursor": "n",
    }
    back = tools_list_unheld_v1(held, frozenset({"plain", "forbidden"}))
    assert back["tools"][0] == {"name": "plain", "inputSchema": {"type": "object"}}
    assert back["tools"][1] == {"name": "forbidden"}
    assert back["tools"][2:] == listed["tools"][2:]


def test_tools_list_held_of_a_backend_with_tasks_shows_only_the_named_tools():
    listed = {
        "tools": [
            {"name": "greet"},
            {"name": "report", "execution": {"taskSupport": "forbidden"}},
            {"name": "tasked", "execution": {"taskSupport": "optional"}},
        ]
    }
    held = tools_list_held_v1(listed, frozenset({"report", "tasked", "absent"}))
    assert held == {
        "tools": [
            {"name": "greet"},
            {"name": "report", "execution": {"taskSupport": "optional"}},
            {"name": "tasked", "execution": {"taskSupport": "optional"}},
        ]
    }
    assert tools_list_held_v1(listed, frozenset()) == listed
    assert tools_list_unheld_v1(held, frozenset({"report"}))["tools"][1] == {"name": "report"}


def test_initialize_held_declares_the_held_tasks_and_its_inverse():
    result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {"listChanged": True}}, "serverInfo": {"name": "s"}}
    held = initialize_held_v1(result)
    assert held == {
        "protocolVersion": "2025-11-25",
        "capabilities": {
            "tools": {"listChanged": True},
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
        },
        "serverInfo": {"name": "s"},
    }
    assert initialize_unheld_v1(held) == result
    own = {"capabilities": {"tasks": {"requests": {"tools": {"call": {}}}}}}
    assert (initialize_held_v1(own), initialize_unheld_v1(own)) == (own, own)
    assert initialize_held_v1({"error": "x"}) == {"error": "x"}


def test_progress_token_and_message():
    assert with_progress_token({"name": "x"}, "held:abc") == {"name": "x", "_meta": {"progressToken": "held:abc"}}
    own = {"name": "x", "_meta": {"progressToken": 7}}
    assert with_progress_token(own, "held:abc") == own
    assert (is_held_token("held:abc"), is_held_token(7), is_held_token("mine")) == (True, False, False)
    note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1, "message": "m"}}
    assert progress_message(note) == "m"
    assert progress_message({"method": "notifications/progress", "params": {"progress": 1}}) is None
    assert progress_message({"method": "notifications/message", "params": {"message": "m"}}) is None


def test_a_v2_session_initialize_shows_the_extension_when_the_proxy_holds_tasks():
    from translators.results import initialize_result_v2_session

    plain = initialize_result_v2_session({"tools": {}}, None, backend_dialect="v1", offers_tool_tasks=False)
    held = initialize_result_v2_session({"tools": {}}, None, backend_dialect="v1", offers_tool_tasks=False, holds_tasks=True)
    assert "extensions" not in plain["capabilities"]
    assert held["capabilities"]["extensions"] == {"io.modelcontextprotocol/tasks": {}}
