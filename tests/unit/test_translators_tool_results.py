"""What an answer says of its tool call (translators/tool_results.py): every shape both dialects
give, and the relay's bytes reading agreeing with the parsed one."""

from __future__ import annotations

import json

import pytest

from translators.tool_results import (
    ENDED_OK,
    ENDED_PROTOCOL_ERROR,
    ENDED_TOOL_ERROR,
    NOT_ENDED,
    Seen,
    of_bytes,
    of_message,
    of_result,
)

TEXT = [{"type": "text", "text": "hi"}]


@pytest.mark.parametrize(
    ("method", "result", "v1", "expected"),
    [
        ("tools/call", {"content": TEXT, "isError": False}, True, ENDED_OK),
        ("tools/call", {"content": TEXT}, False, ENDED_OK),
        ("tools/call", {"content": TEXT, "isError": True}, True, ENDED_TOOL_ERROR),
        ("tools/call", {"content": TEXT, "isError": True, "resultType": "complete"}, False, ENDED_TOOL_ERROR),
        ("tools/call", {"task": {"taskId": "t-1", "status": "working"}}, True, Seen(None, "t-1")),
        ("tools/call", {"taskId": "t-2", "status": "working", "resultType": "task"}, False, Seen(None, "t-2")),
        ("tasks/result", {"content": TEXT, "isError": True}, True, ENDED_TOOL_ERROR),
        ("tasks/result", {"content": TEXT}, True, ENDED_OK),
        ("tasks/get", {"taskId": "t", "status": "completed"}, True, NOT_ENDED),
        ("tasks/get", {"taskId": "t", "status": "failed"}, True, ENDED_TOOL_ERROR),
        ("tasks/get", {"taskId": "t", "status": "working"}, True, NOT_ENDED),
        ("tasks/get", {"taskId": "t", "status": "cancelled"}, True, NOT_ENDED),
        (
            "tasks/get",
            {"taskId": "t", "status": "completed", "result": {"content": TEXT, "isError": True}},
            False,
            ENDED_TOOL_ERROR,
        ),
        ("tasks/get", {"taskId": "t", "status": "completed", "result": {"content": TEXT}}, False, ENDED_OK),
        (
            "tasks/get",
            {"taskId": "t", "status": "failed", "error": {"code": -32603, "message": "x"}},
            False,
            ENDED_PROTOCOL_ERROR,
        ),
        ("tasks/get", {"taskId": "t", "status": "input_required", "inputRequests": {}}, False, NOT_ENDED),
        ("tools/list", {"tools": []}, True, NOT_ENDED),
    ],
)
def test_each_shape(method: str, result: object, v1: bool, expected: Seen) -> None:
    assert of_result(method, result, v1=v1) == expected
    message = {"jsonrpc": "2.0", "id": 1, "result": result}
    assert of_message(method, message, v1=v1) == expected
    for separators in ((",", ":"), (", ", ": ")):  # compact (pydantic, JavaScript) and Python's json default
        assert of_bytes(method, json.dumps(message, separators=separators).encode(), v1=v1) == expected


@pytest.mark.parametrize(
    ("method", "expected"),
    [("tools/call", ENDED_PROTOCOL_ERROR), ("tasks/result", ENDED_PROTOCOL_ERROR), ("tasks/get", NOT_ENDED)],
)
def test_a_json_rpc_error(method: str, expected: Seen) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "Unknown tool"}}
    assert of_message(method, message, v1=True) == expected
    assert of_bytes(method, json.dumps(message).encode(), v1=True) == expected


def test_text_that_spells_is_error_is_not_a_tool_error() -> None:
    text = 'the answer is {"isError": true, "error": 1}'
    raw = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": text}], "isError": False}}
    ).encode()
    assert of_bytes("tools/call", raw, v1=True) == ENDED_OK


def test_a_result_that_is_no_object_is_no_end() -> None:
    assert of_result("tools/call", ["not", "an", "object"], v1=True) == NOT_ENDED


def test_not_json_is_no_end() -> None:
    assert of_bytes("tasks/result", b"<html>", v1=True) == NOT_ENDED
    assert of_bytes("tools/call", b"", v1=True) == NOT_ENDED


def test_a_nested_is_error_or_an_errors_data_is_parsed_not_trusted() -> None:
    first = {"jsonrpc": "2.0", "id": 1, "result": {"isError": True, "content": TEXT, "structuredContent": {"isError": False}}}
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "boom", "data": {"isError": False}}}
    for separators in ((",", ":"), (", ", ": ")):
        assert of_bytes("tools/call", json.dumps(first, separators=separators).encode(), v1=True) == ENDED_TOOL_ERROR
        assert of_bytes("tools/call", json.dumps(error, separators=separators).encode(), v1=True) == ENDED_PROTOCOL_ERROR
