"""What the stdio face builds itself (`translators.face_lines`, docs/decisions.md §74, §75)."""

from __future__ import annotations

import json

import pytest

from translators import face_lines


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        (b'{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "gr', 12),
        (b'{"id":"abc","method":"x","params":{"a":"', "abc"),
        (b' \n{ "jsonrpc" : "2.0" , "id" : -7 , "params": {', -7),
        (b'{"method": "x", "params": {"id": 5, "deep": [1, {"id": 6}], "s": "}\\""}, "id": 9, "x"', 9),
        (b'{"jsonrpc": "2.0", "method": "ping", "params": {"x": "zzzz', None),  # id not in the prefix
        (b'{"jsonrpc": "2.0", "id": 12', None),  # the number may go on
        (b'{"jsonrpc": "2.0", "id": "unfinished', None),
        (b'{"id": 1.5, "method": "x"}', None),
        (b'{"id": true, "method": "x"}', None),
        (b'{"id": null, "method": "x"}', None),
        (b'{"id": {"a": 1}, "method": "x"}', None),
        (b'[{"id": 1}]', None),
        (b"not json", None),
        (b"", None),
        (b'{"id": "caf\xc3', None),  # cut inside a UTF-8 sequence, inside the string
    ],
)
def test_id_at_start_reads_the_top_level_id_when_it_lies_in_the_prefix(prefix, expected):
    assert face_lines.id_at_start(prefix) == expected


def test_id_at_start_of_a_whole_message_is_its_id():
    line = json.dumps({"jsonrpc": "2.0", "method": "m", "params": {"id": 1, "x": ["]", "{"]}, "id": "r-1"}).encode()
    assert face_lines.id_at_start(line + b" ") == "r-1"


def test_answering_gives_an_error_the_id_of_its_request_and_leaves_results():
    refused = {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Request body larger than 4194304 bytes"}}
    assert face_lines.answering(refused, 8) == {"jsonrpc": "2.0", "error": refused["error"], "id": 8}
    lost = {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, "message": "Session not found"}}
    assert face_lines.answering(lost, "a") == {"jsonrpc": "2.0", "id": "a", "error": lost["error"]}
    result = {"jsonrpc": "2.0", "id": 3, "result": {}}
    assert face_lines.answering(result, 3) == result
    assert face_lines.answering(refused, 8) is not refused


def test_the_errors_the_face_answers_itself():
    assert face_lines.line_too_long(64, 5) == {
        "jsonrpc": "2.0",
        "id": 5,
        "error": {"code": -32600, "message": "Request line longer than 64 bytes (the stdio face's limit): skipped"},
    }
    assert face_lines.line_too_long(64, None) == {
        "jsonrpc": "2.0",
        "error": {"code": -32600, "message": "Request line longer than 64 bytes (the stdio face's limit): skipped"},
    }
    assert face_lines.no_answer(3, "why") == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32603, "message": "No answer from the backend: why"},
    }
    assert face_lines.session_lost("x", "HTTP 502") == {
        "jsonrpc": "2.0",
        "id": "x",
        "error": {"code": -32603, "message": "The upstream session was lost and no new one could be opened: HTTP 502"},
    }
    assert face_lines.not_initialized(7) == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32600, "message": "Invalid request: the session is not initialized (send initialize first)"},
    }


def test_reinitialize_replays_the_hosts_initialize_under_an_id_of_the_face():
    host = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "h", "version": "1"},
        },
    }
    assert face_lines.reinitialize(host, 2) == {
        "jsonrpc": "2.0",
        "id": "mcp-tasks-proxy/reinitialize/2",
        "method": "initialize",
        "params": host["params"],
    }
    assert face_lines.reinitialize({"jsonrpc": "2.0", "id": 1, "method": "initialize"}, 1)["params"] == {}


def test_replayed_requests_restore_the_log_level_and_the_subscriptions():
    assert face_lines.replayed_requests(3, {"level": "error"}, ["a://1", "a://2"]) == [
        {"jsonrpc": "2.0", "id": "mcp-tasks-proxy/reinitialize/3/1", "method": "logging/setLevel", "params": {"level": "error"}},
        {"jsonrpc": "2.0", "id": "mcp-tasks-proxy/reinitialize/3/2", "method": "resources/subscribe", "params": {"uri": "a://1"}},
        {"jsonrpc": "2.0", "id": "mcp-tasks-proxy/reinitialize/3/3", "method": "resources/subscribe", "params": {"uri": "a://2"}},
    ]
    assert face_lines.replayed_requests(1, None, []) == []
    assert face_lines.ping(4) == {"jsonrpc": "2.0", "id": "mcp-tasks-proxy/ping/4", "method": "ping"}


def test_session_renewed_notices_say_so_and_name_the_lists_that_may_have_changed():
    message = {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {
            "level": "warning",
            "logger": "mcp-tasks-proxy",
            "data": {"event": "upstream session renewed", "reason": "why", "lost": ["requests in flight", "tasks"]},
        },
    }
    assert face_lines.session_renewed_notices("why", None) == [message]
    capabilities = {"tools": {"listChanged": True}, "resources": {"subscribe": True, "listChanged": True}, "prompts": {}}
    assert face_lines.session_renewed_notices("why", capabilities) == [
        message,
        {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
        {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"},
    ]
