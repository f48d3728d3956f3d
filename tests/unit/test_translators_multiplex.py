"""translators.multiplex: the rewrites that carry many sessions over one stdio process."""

from __future__ import annotations

import json

import pytest

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


# line_with_id: the id replaced in the bytes, for the shapes whose id's place is certain ----------


def _decoded_with_id(line: bytes, new_id: object) -> dict:
    return multiplex.with_id(json.loads(line), new_id)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}',
        b'{"result":{"content":[{"type":"text","text":"hi"}]},"jsonrpc":"2.0","id":7}',
        b'{"method":"tools/call","params":{"name":"echo"},"jsonrpc":"2.0","id":7}',
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"x":"}"}}}',
        b'{"id":7}',
    ],
)
@pytest.mark.parametrize("new_id", [41, 0, -3, "c-7", "a}b,c", ""])
def test_a_line_of_a_known_shape_gets_the_new_id_and_nothing_else_changes(line, new_id):
    out = multiplex.line_with_id(line, 7, new_id)
    assert out is not None
    assert json.loads(out) == _decoded_with_id(line, new_id)
    assert multiplex.line_with_id(out, new_id, 7) == line  # its own inverse


@pytest.mark.parametrize(
    ("line", "old_id", "why"),
    [
        (b'{"jsonrpc": "2.0", "id": 7, "result": {}}', 7, "spaced: not the compact spelling"),
        (b'{"jsonrpc":"2.0","id":7,"result":{"id":3}}', 7, "a second id, nested"),
        (b'{"jsonrpc":"2.0","id":7,"result":{},"id":8}', 8, "a duplicate id: a decoder reads the last"),
        (b'{"jsonrpc":"2.0","id":7,"result":{},"id":7}', 7, "a duplicate id of the same value"),
        (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","\\u0069d":2}', 7, "a second id spelt with an escape: the last is read"),
        (b'{"result":{},"i\\u0064":2,"jsonrpc":"2.0","id":7}', 7, "a second id spelt with an escape, before the last"),
        (b'{"result":{"k":"v"},"jsonrpc":"2.0","id":17}', 7, "another id ending in the same digit"),
        (b'{"jsonrpc":"2.0","id":77,"result":{}}', 7, "another id beginning with the same digit"),
        (b'{"result":{"a\\"id":7}}', 7, 'the bytes "id": end the key a"id'),
        (b'{"result":{"x":{"id":7}}}', 7, "an id at the end, but nested"),
        (b'{"jsonrpc":"2.0","id":"\\u0061","result":{}}', "a", "a string id spelt with an escape"),
        (b'{"jsonrpc":"2.0","id":true,"result":{}}', True, "not an id"),
        (b'{"jsonrpc":"2.0","result":{},"error":{"code":1}}', 7, "no id at all"),
        (b'\xef\xbb\xbf{"result":{},"jsonrpc":"2.0","id":7}', 7, "a byte order mark first"),
        ('{"result":{},"jsonrpc":"2.0","id":7}'.encode("utf-16-le"), 7, "UTF-16"),
    ],
)
def test_a_line_whose_id_has_no_certain_place_is_left_to_the_encoder(line, old_id, why):
    assert multiplex.line_with_id(line, old_id, 41) is None, why


@pytest.mark.parametrize("new_id", ['say "hi"', "back\\slash", "é", "tab\there", True, 1.5, None])
def test_ids_with_more_than_one_spelling_are_never_written_by_splicing(new_id):
    assert multiplex.line_with_id(b'{"jsonrpc":"2.0","id":7,"result":{}}', 7, new_id) is None
