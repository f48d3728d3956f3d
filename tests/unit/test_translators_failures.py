"""The reasons a failure is counted under and the repairs a client leaned on (translators/failures.py)."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from translators.errors import (
    ELSEWHERE,
    FORGOTTEN,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    NOT_ISSUED,
    McpError,
    backend_http_error,
    backend_unavailable,
    from_backend,
    unknown_task,
)
from translators.failures import (
    ACCEPT,
    AUTH_REQUIRED,
    BACKEND,
    BACKEND_REFUSED,
    BACKEND_REMOVED,
    BACKEND_UNREACHABLE,
    MISSING_METHOD,
    MISSING_NAME,
    PROXY,
    PROXY_ERROR,
    PROXY_REFUSED,
    REASONS,
    REPAIRS,
    SESSION_LOST,
    STORE_UNREACHABLE,
    TASK_UNKNOWN,
    accept_repaired,
    missing_headers,
    of_answer,
    of_error,
    of_status,
)


def _of(error: McpError, method: str | None = None) -> tuple[str, str]:
    return of_error(error.code, error.message, error.http_status, by_backend=error.by_backend, method=method)


def test_the_sets_are_closed_and_each_code_is_explained():
    assert list(REASONS) == [
        SESSION_LOST,
        TASK_UNKNOWN,
        BACKEND_REFUSED,
        BACKEND_UNREACHABLE,
        AUTH_REQUIRED,
        PROXY_REFUSED,
        STORE_UNREACHABLE,
        PROXY_ERROR,
        BACKEND_REMOVED,
    ]
    assert list(REPAIRS) == [MISSING_METHOD, MISSING_NAME, ACCEPT]
    assert all(text and text[0].islower() for text in (*REASONS.values(), *REPAIRS.values()))


def test_errors_the_proxy_answered_with():
    assert _of(unknown_task(NOT_ISSUED), "tasks/get") == (TASK_UNKNOWN, PROXY)
    assert _of(unknown_task(ELSEWHERE), "tasks/get") == (TASK_UNKNOWN, PROXY)
    assert _of(unknown_task(FORGOTTEN), "tasks/get") == (TASK_UNKNOWN, BACKEND)  # the backend said it does not know it
    assert _of(McpError(INVALID_REQUEST, "Session not found"), "tools/call") == (SESSION_LOST, PROXY)
    assert _of(McpError(-32020, "Mcp-Method header does not match the request body's method")) == (PROXY_REFUSED, PROXY)
    assert _of(McpError(INVALID_REQUEST, "Not Acceptable", http_status=406)) == (PROXY_REFUSED, PROXY)
    assert _of(McpError(INTERNAL_ERROR, "Internal error in mcp-tasks-proxy")) == (PROXY_ERROR, PROXY)
    assert _of(McpError(INTERNAL_ERROR, "task state store redis://x unreachable: timeout", http_status=503)) == (
        STORE_UNREACHABLE,
        PROXY,
    )
    assert _of(McpError(-32600, "Unauthorized", http_status=401)) == (AUTH_REQUIRED, BACKEND)
    # a stdio backend's bound, the proxy's own (decision 148; before, backend_unreachable)
    bound = "Backend 'notes': all 2 of its processes hold other callers' sessions (max_processes = 2); no other is started"
    assert _of(McpError(INTERNAL_ERROR, bound, http_status=503)) == (PROXY_REFUSED, PROXY)


def test_errors_of_the_backend_raised_again():
    assert _of(backend_unavailable("old", "cannot reach it (ClientConnectorError)")) == (BACKEND_UNREACHABLE, BACKEND)
    assert _of(backend_http_error("old", 406)) == (BACKEND_REFUSED, BACKEND)
    assert _of(backend_http_error("old", 503)) == (BACKEND_UNREACHABLE, BACKEND)  # a backend's own 503 stays its
    assert _of(from_backend({"code": -32602, "message": "Task abc not found"}), "tasks/get") == (TASK_UNKNOWN, BACKEND)
    assert _of(from_backend({"code": -32602, "message": "Invalid arguments"}), "tools/call") == (BACKEND_REFUSED, BACKEND)
    assert _of(from_backend({"code": -32601, "message": "Method not found"}), "prompts/get") == (BACKEND_REFUSED, BACKEND)


@pytest.mark.parametrize(
    ("status", "session_wire", "failure"),
    [
        (404, True, (SESSION_LOST, BACKEND)),
        (404, False, (BACKEND_REFUSED, BACKEND)),
        (400, True, (BACKEND_REFUSED, BACKEND)),
        (401, False, (AUTH_REQUIRED, BACKEND)),
        (502, True, (BACKEND_UNREACHABLE, BACKEND)),
        (504, False, (BACKEND_UNREACHABLE, BACKEND)),
    ],
)
def test_relayed_answers_by_status(status, session_wire, failure):
    assert of_status(status, session_wire=session_wire) == failure


def test_relayed_answers_by_the_error_the_relay_holds():
    not_found = {"code": -32602, "message": "Task abc not found"}
    assert of_answer(not_found, 400, method="tasks/get", session_wire=False) == (TASK_UNKNOWN, BACKEND)
    assert of_answer({"code": -32600, "message": "Session not found"}, 404, method="tasks/get", session_wire=True) == (
        SESSION_LOST,
        BACKEND,
    )
    assert of_answer({"code": -32603, "message": "Backend 'b' unavailable: x"}, 502, method="tools/call", session_wire=False) == (
        BACKEND_UNREACHABLE,
        BACKEND,
    )
    assert of_answer(None, 404, method="tools/call", session_wire=True) == (SESSION_LOST, BACKEND)
    assert of_answer("not an object", 500, method="tools/call", session_wire=False) == (BACKEND_REFUSED, BACKEND)


def test_missing_routing_headers():
    call = {"name": "greet", "arguments": {}}
    assert missing_headers("tools/call", call, CIMultiDict({"mcp-method": "tools/call", "MCP-NAME": "greet"})) == ()
    assert missing_headers("tools/call", call, CIMultiDict({"Mcp-Method": "tools/call"})) == (MISSING_NAME,)
    assert missing_headers("tools/call", call, CIMultiDict()) == (MISSING_METHOD, MISSING_NAME)
    assert missing_headers("tools/list", {}, CIMultiDict()) == (MISSING_METHOD,)  # no name to carry
    assert missing_headers("tasks/get", {"taskId": "T"}, CIMultiDict({"Mcp-Method": "tasks/get"})) == (MISSING_NAME,)


@pytest.mark.parametrize(
    ("accept", "repaired"),
    [
        ("application/json, text/event-stream", False),
        ("text/event-stream;q=0.9, application/json", False),
        ("*/*", False),
        ("application/*, text/*", False),
        ("application/json", True),
        ("text/event-stream", True),
        ("", True),
        (None, True),
    ],
)
def test_an_accept_without_both_media_types_is_repaired(accept, repaired):
    assert accept_repaired(accept) is repaired
