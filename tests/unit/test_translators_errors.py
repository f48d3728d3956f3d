"""docs/behaviour.md §6 "Error codes and HTTP statuses" and the error builders of `translators.errors`."""

from __future__ import annotations

import pytest

from translators.errors import (
    ELSEWHERE,
    FORGOTTEN,
    NOT_ISSUED,
    NOT_OF_SESSION,
    McpError,
    backend_http_error,
    backend_unavailable,
    bridged_unavailable,
    for_v1_client,
    from_backend,
    legacy_code_renumbered,
    may_carry_legacy_code,
    missing_tasks_extension,
    modern_http_status,
    unknown_task,
    unsupported_version,
)


def _wire(error: McpError) -> tuple[int, str, object, int | None]:
    return error.code, error.message, error.data, error.http_status


# --- HTTP statuses on the modern face ------------------------------------------------------------


@pytest.mark.parametrize("code", [-32700, -32600, -32602, -32020, -32021, -32022])
def test_modern_wire_answers_400_for_malformed_and_capability_errors(code):
    assert modern_http_status(McpError(code, "x")) == 400


def test_modern_wire_answers_404_for_method_not_found():
    assert modern_http_status(McpError(-32601, "Method not found")) == 404


def test_unreachable_backend_is_502_with_32603_naming_the_backend():
    error = backend_unavailable("fixture-v1", "connection refused")
    assert _wire(error) == (-32603, "Backend 'fixture-v1' unavailable: connection refused", None, 502)
    assert modern_http_status(error) == 502


@pytest.mark.parametrize("status", [502, 503])
def test_a_stdio_bridges_own_unavailable_answer_keeps_its_words_and_status_and_is_the_backends(status):
    said = backend_unavailable("noisy", "its process is not running (still starting)")
    error = bridged_unavailable(said.to_dict(), status)
    assert (_wire(error), error.by_backend) == (
        (-32603, "Backend 'noisy' unavailable: its process is not running (still starting)", None, status),
        True,
    )
    assert error.to_dict() == said.to_dict()


@pytest.mark.parametrize("code", [-32603, -32000, -32001, -32002, -32800, 1, 0])
def test_modern_wire_answers_200_for_other_errors(code):
    assert modern_http_status(McpError(code, "x")) == 200


@pytest.mark.parametrize("status", [406, 413, 415, 502])
def test_explicit_transport_status_wins(status):
    assert modern_http_status(McpError(-32600, "x", http_status=status)) == status


# --- codes from a backend ------------------------------------------------------------------------


def test_backend_32003_is_renumbered_32021():
    data = {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    got = from_backend({"code": -32003, "message": "Missing required client capability", "data": data})
    assert _wire(got) == (-32021, "Missing required client capability", data, None)


def test_a_relayed_error_response_with_32003_is_renumbered_and_kept_otherwise():
    data = {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    message = {"jsonrpc": "2.0", "id": 4, "error": {"code": -32003, "message": "Missing", "data": data}}
    assert legacy_code_renumbered(message) == {
        "jsonrpc": "2.0",
        "id": 4,
        "error": {"code": -32021, "message": "Missing", "data": data},
    }
    assert message["error"]["code"] == -32003  # the input is not changed


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32021, "message": "m"}},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": True, "message": "m"}},
        {"jsonrpc": "2.0", "id": 1, "error": "-32003"},
        {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "-32003"}], "code": -32003}},
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": -32003}},
    ],
)
def test_messages_without_a_legacy_error_code_are_returned_as_they_are(message):
    assert legacy_code_renumbered(message) is message


def test_the_cheap_check_looks_for_the_codes_bytes():
    assert may_carry_legacy_code(b'{"error":{"code":-32003}}') is True
    assert may_carry_legacy_code(b'{"error":{"code":-32021}}') is False


@pytest.mark.parametrize(
    ("status", "wire"),
    [
        (406, (-32600, "Backend 'b' refused the request: HTTP 406 without a JSON-RPC body", None, 406)),
        (404, (-32600, "Backend 'b' refused the request: HTTP 404 without a JSON-RPC body", None, 404)),
        (503, (-32603, "Backend 'b' unavailable: answered HTTP 503 without a JSON-RPC body", None, 502)),
    ],
)
def test_a_backends_http_error_without_a_body_names_the_backend(status, wire):
    assert _wire(backend_http_error("b", status)) == wire


@pytest.mark.parametrize(
    "error",
    [
        {"code": -32602, "message": "Task not found: no-such-task"},
        {"code": -32601, "message": "Method not found", "data": "tasks/result"},
        {"code": -32021, "message": "Missing", "data": {"requiredCapabilities": {}}},
        {"code": -32603, "message": "Task X has no result stored"},
    ],
)
def test_other_backend_codes_pass_unchanged(error):
    assert from_backend(error).to_dict() == error


@pytest.mark.parametrize(
    "error",
    [
        None,
        "boom",
        [],
        {},
        {"message": "no code"},
        {"code": "x", "message": "m"},
        {"code": True, "message": "m"},
        {"code": 1.5, "message": "m"},
    ],
    ids=["none", "string", "list", "empty", "no-code", "string-code", "bool-code", "float-code"],
)
def test_malformed_backend_error_becomes_32603(error):
    assert from_backend(error).to_dict() == {"code": -32603, "message": "Backend answered a malformed JSON-RPC error"}


def test_backend_error_without_string_message_gets_empty_message():
    assert from_backend({"code": -32000, "message": 5}).to_dict() == {"code": -32000, "message": ""}


# --- codes toward v1 clients -----------------------------------------------------------------------


def test_32021_becomes_32601_for_v1_client_keeping_message():
    got = for_v1_client(missing_tasks_extension("Tool 'failing_job' requires the tasks extension"))
    assert (got.code, got.message) == (-32601, "Tool 'failing_job' requires the tasks extension")


@pytest.mark.parametrize("code", [-32020, -32022])
def test_header_and_version_errors_become_32603_for_v1_client_keeping_message(code):
    got = for_v1_client(McpError(code, "Mcp-Name header does not match the request body"))
    assert (got.code, got.message) == (-32603, "Mcp-Name header does not match the request body")


@pytest.mark.parametrize("code", [-32700, -32600, -32601, -32602, -32603, -32000])
def test_other_codes_reach_v1_client_unchanged(code):
    error = McpError(code, "m", {"d": 1})
    assert _wire(for_v1_client(error)) == (code, "m", {"d": 1}, None)


# --- builders ---------------------------------------------------------------------------------------


def test_missing_tasks_extension_names_the_extension_in_required_capabilities():
    assert missing_tasks_extension("Missing required client capability").to_dict() == {
        "code": -32021,
        "message": "Missing required client capability",
        "data": {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}},
    }


def test_unsupported_version_carries_supported_and_requested():
    assert unsupported_version("2025-11-25").to_dict() == {
        "code": -32022,
        "message": "Unsupported protocol version: 2025-11-25. Supported versions: 2026-07-28",
        "data": {"supported": ["2026-07-28"], "requested": "2025-11-25"},
    }


def test_unknown_task_is_32602_and_says_why():
    assert unknown_task().to_dict() == {"code": -32602, "message": "Unknown task"}
    assert unknown_task(FORGOTTEN).to_dict() == {
        "code": -32602,
        "message": "Unknown task: the backend no longer knows it: it ended and was forgotten, its ttl passed, or the backend restarted",
    }
    assert [unknown_task(why).message for why in (NOT_ISSUED, ELSEWHERE, NOT_OF_SESSION)] == [
        "Unknown task: the id does not unseal: it was not issued by this proxy to this caller or session, or it was altered",
        "Unknown task: the id names a task this backend does not hold: one of another backend, or of this backend before its upgrade",
        "Unknown task: the id names no task of this session",
    ]
    assert unknown_task("x" * 300).message == "Unknown task: " + "x" * 200


def test_error_object_omits_absent_data_but_keeps_falsy_data():
    assert McpError(-32603, "m").to_dict() == {"code": -32603, "message": "m"}
    assert McpError(-32603, "m", {}).to_dict() == {"code": -32603, "message": "m", "data": {}}
    assert McpError(-32603, "m", 0).to_dict() == {"code": -32603, "message": "m", "data": 0}
