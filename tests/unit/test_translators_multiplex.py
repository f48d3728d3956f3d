"""translators.multiplex: the rewrites that carry many sessions over one stdio process."""

from __future__ import annotations

from translators import multiplex
from translators.multiplex import Route

RELATED = "io.modelcontextprotocol/related-task"


def test_a_request_gets_the_process_id_and_token_and_the_response_its_own_id_back():
    request = {
        "jsonrpc": "2.0",
        "id": "c-7",
        "method": "tools/call",
        "params": {"name": "echo", "_meta": {"progressToken": "tok", "other": 1}},
    }
    out = multiplex.to_process(request, 41, 9)
    assert out == {
        "jsonrpc": "2.0",
        "id": 41,
        "method": "tools/call",
        "params": {"name": "echo", "_meta": {"progressToken": 9, "other": 1}},
    }
    assert request["id"] == "c-7" and request["params"]["_meta"]["progressToken"] == "tok"
    assert multiplex.with_progress_token(multiplex.with_id(out, "c-7"), "tok") == request
    assert multiplex.to_client({"jsonrpc": "2.0", "id": 41, "result": {}}, "c-7") == {"jsonrpc": "2.0", "id": "c-7", "result": {}}


def test_a_request_without_a_token_keeps_its_params():
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    assert multiplex.progress_token(request) is None
    assert multiplex.to_process(request, 5, None) == {"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}}


def test_progress_notification_token_is_rewritten_both_ways():
    note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 9, "progress": 1}}
    back = multiplex.with_progress_token(note, "tok")
    assert back == {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "tok", "progress": 1}}
    assert multiplex.with_progress_token(back, 9) == note


def test_cancelled_names_the_process_id():
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c-1", "reason": "x"}}
    assert multiplex.cancelled_to_process(note, 12) == {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 12, "reason": "x"},
    }


def test_routes_in_order():
    related = {"method": "elicitation/create", "id": 3, "params": {"_meta": {RELATED: {"taskId": "t1"}}, "message": "?"}}
    assert multiplex.route_of(related) == Route("task", "t1")
    assert multiplex.route_of({"method": "notifications/progress", "params": {"progressToken": 4}}) == Route("progress", 4)
    assert multiplex.route_of({"method": "notifications/cancelled", "params": {"requestId": 8}}) == Route("server-request", 8)
    assert multiplex.route_of({"method": "notifications/tasks/status", "params": {"taskId": "t2", "status": "working"}}) == Route(
        "task", "t2"
    )
    assert multiplex.route_of({"method": "notifications/resources/updated", "params": {"uri": "file:///a"}}) == Route(
        "resource", "file:///a"
    )
    assert multiplex.route_of({"method": "notifications/tools/list_changed"}) == Route("broadcast")
    assert multiplex.route_of({"method": "sampling/createMessage", "id": 2, "params": {}}) == Route("in-flight")
    assert multiplex.route_of({"method": "notifications/message", "params": {"level": "info"}}) == Route("in-flight")


def test_task_ids_read_from_results_and_requests():
    assert multiplex.created_task({"task": {"taskId": "t9", "status": "working"}}) == "t9"
    assert multiplex.created_task({"content": []}) is None
    assert multiplex.task_param({"method": "tasks/result", "params": {"taskId": "t9"}}) == "t9"
    assert multiplex.task_param({"method": "tools/call", "params": {"taskId": "t9"}}) is None
    assert [multiplex.terminal({"status": s}) for s in ("working", "input_required", "completed", "failed", "cancelled")] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert multiplex.terminal(None) is False


def test_task_list_keeps_only_the_callers_tasks_and_the_cursor():
    result = {"tasks": [{"taskId": "a"}, {"taskId": "b"}, {"taskId": "c"}], "nextCursor": "n"}
    assert multiplex.own_tasks(result, {"a", "c"}.__contains__) == {
        "tasks": [{"taskId": "a"}, {"taskId": "c"}],
        "nextCursor": "n",
    }
    assert multiplex.own_tasks(result, set().__contains__) == {"tasks": [], "nextCursor": "n"}
