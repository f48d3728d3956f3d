"""Every message the translators emit validates against the *target* side's schema
(`schemas.validate`: the official zod schemas, the rules they leave open, and the JSON Schema where
present): v2 results against ext-tasks / mcp-2026-07-28, errors against mcp-2026-07-28
`JSONRPCErrorResponse`, v1 results against mcp-2025-11-25."""

from __future__ import annotations

from typing import Any

import pytest
from multidict import CIMultiDict
from schemas import EXT_TASKS, MCP_2025_11_25, MCP_2026_07_28, validate

from translators import jsonrpc
from translators.capabilities import server_capabilities_to_v2, tool_to_v2
from translators.differences import (
    V1Payload,
    cancel_answer_v1,
    cancel_answer_v2,
    created_task_from_v1,
    created_task_from_v2,
    created_task_result_v1,
    created_task_result_v2,
    get_task_result_v1,
    get_task_result_v2,
    outcome_to_v2,
    update_ack_v2,
)
from translators.envelope import ModernMeta, check_headers, complete_result, read_meta, with_server_info
from translators.errors import (
    McpError,
    backend_unavailable,
    for_v1_client,
    from_backend,
    missing_tasks_extension,
    unknown_task,
    unsupported_version,
)
from translators.fields import task_from_wire
from translators.model import CanonicalTask, InputRequest, TaskError
from translators.protocol import MODERN_VERSION
from translators.sealing import Keyring

EXT = EXT_TASKS
CORE_2026 = MCP_2026_07_28
CORE_2025 = MCP_2025_11_25
RELATED = "io.modelcontextprotocol/related-task"
TS = "2026-11-30T04:11:26.442368Z"
TID = "8d6f1c0b2e6a4f8d9b3c1a2e5f7d9c0b:0b8e6a52-3f7c-4d2a-9a8e-1c2d3e4f5a6b"
SERVER_INFO = {"name": "mcp-tasks-proxy", "version": "0.1.0"}


def v1_get(status: str, **fields: Any) -> dict[str, Any]:
    return {"taskId": TID, "status": status, **fields, "createdAt": TS, "lastUpdatedAt": TS, "ttl": 60000, "pollInterval": 500}


def hub(status: str, **fields: Any) -> CanonicalTask:
    return CanonicalTask(
        task_id=TID, status=status, created_at=TS, last_updated_at=TS, ttl_ms=60000, poll_interval_ms=500, **fields
    )


ELICIT = InputRequest(
    method="elicitation/create",
    params={
        "mode": "form",
        "message": "Delete probe.txt?",
        "requestedSchema": {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]},
    },
)
SAMPLE = InputRequest(
    method="sampling/createMessage",
    params={"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 10},
)
ROOTS = InputRequest(method="roots/list", params={})

# Hub tasks the v2 face writes: every status, and every §4.4 outcome.
V2_GET_CASES = {
    "working": task_from_wire(v1_get("working"), "v1"),
    "input_required-nothing-captured": task_from_wire(v1_get("input_required"), "v1"),
    "input_required": hub("input_required", input_requests={"k1": ELICIT, "k2": SAMPLE, "k3": ROOTS}),
    "completed": outcome_to_v2(
        task_from_wire(v1_get("completed"), "v1"),
        V1Payload(
            "result",
            {"_meta": {RELATED: {"taskId": TID}}, "content": [{"type": "text", "text": "computed probe"}], "isError": False},
        ),
    ),
    "completed-isError": outcome_to_v2(
        task_from_wire(v1_get("failed", statusMessage="Task failed: failing_job always fails"), "v1"),
        V1Payload("result", {"content": [{"type": "text", "text": "failing_job always fails"}], "isError": True}),
    ),
    "completed-unobtainable": outcome_to_v2(task_from_wire(v1_get("completed"), "v1"), V1Payload("unobtainable")),
    "failed-meta-only": outcome_to_v2(
        task_from_wire(v1_get("failed", statusMessage="protocol_error_job: simulated internal failure"), "v1"),
        V1Payload("result", {"_meta": {RELATED: {"taskId": TID}}}),
    ),
    "failed-jsonrpc-error": outcome_to_v2(
        task_from_wire(v1_get("failed"), "v1"), V1Payload("error", {"code": -32000, "message": "boom", "data": {"x": 1}})
    ),
    "failed-no-message": outcome_to_v2(task_from_wire(v1_get("failed"), "v1"), V1Payload("unobtainable")),
    "cancelled": task_from_wire(v1_get("cancelled"), "v1"),
    "no-ttl-no-poll": task_from_wire({"taskId": TID, "status": "working", "createdAt": TS, "lastUpdatedAt": TS}, "v1"),
    "unknown-field": task_from_wire({**v1_get("working"), "progress": {"done": 1}}, "v1"),
}


def test_schema_helper_rejects_invalid_messages():
    with pytest.raises(AssertionError, match="resultType"):
        validate({"taskId": TID, "status": "working", "createdAt": TS, "lastUpdatedAt": TS, "ttlMs": 1}, EXT, "CreateTaskResult")
    with pytest.raises(AssertionError):
        validate(
            {"resultType": "task", "taskId": TID, "status": "working", "createdAt": TS, "lastUpdatedAt": TS, "ttlMs": 1},
            EXT,
            "GetTaskResult",
        )
    with pytest.raises(AssertionError):
        validate({"task": {"taskId": TID}}, CORE_2025, "CreateTaskResult")


# --- v2 results ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "v1_create",
    [
        {"task": v1_get("working")},
        {"task": {"taskId": TID, "status": "working", "createdAt": TS, "lastUpdatedAt": TS, "pollInterval": 500}},
        {
            "task": {**v1_get("working"), "statusMessage": "Gathering sources...", "parentTaskId": "task-0"},
            "_meta": {"io.modelcontextprotocol/model-immediate-response": "Started."},
        },
    ],
    ids=["mcp1", "mcp1-no-ttl", "everything-with-parent"],
)
def test_created_task_validates_as_ext_tasks_create_task_result(v1_create):
    validate(created_task_result_v2(created_task_from_v1(v1_create)), EXT, "CreateTaskResult")


@pytest.mark.parametrize("case", sorted(V2_GET_CASES))
def test_tasks_get_answer_validates_as_ext_tasks_get_task_result(case):
    validate(get_task_result_v2(V2_GET_CASES[case]), EXT, "GetTaskResult")


@pytest.mark.parametrize("case", ["completed", "completed-isError"])
def test_inlined_result_of_tasks_get_validates_as_core_2026_call_tool_result(case):
    # The nested result is a 2026-07-28 result of its own (resultType required), not only an object.
    validate(get_task_result_v2(V2_GET_CASES[case])["result"], CORE_2026, "CallToolResult")


def test_acks_validate_as_update_and_cancel_task_results():
    validate(update_ack_v2(), EXT, "UpdateTaskResult")
    validate(cancel_answer_v2(), EXT, "CancelTaskResult")
    validate(cancel_answer_v2(v1_get("cancelled")), EXT, "CancelTaskResult")


@pytest.mark.parametrize(
    "capabilities",
    [
        {
            "experimental": {},
            "tools": {"listChanged": False},
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
        },
        {
            "experimental": {},
            "logging": {},
            "prompts": {"listChanged": True},
            "resources": {"subscribe": False, "listChanged": True},
            "tools": {"listChanged": True},
            "tasks": {
                "list": {},
                "cancel": {},
                "requests": {"tools": {"call": {}}, "prompts": {"get": {}}, "resources": {"read": {}}},
            },
            "extensions": {"io.modelcontextprotocol/ui": {}},
        },
        {"tools": {"listChanged": True}},
    ],
    ids=["mcp1", "fastmcp3", "no-tasks"],
)
def test_discover_result_validates_as_core_2026_discover_result(capabilities):
    result = {
        "supportedVersions": [MODERN_VERSION],
        "capabilities": server_capabilities_to_v2(capabilities),
        "instructions": "Fixture tools.",
    }
    discover = with_server_info(complete_result("server/discover", result), SERVER_INFO)
    validate(discover, CORE_2026, "DiscoverResult")
    assert discover == {
        **result,
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
    }


def test_forwarded_tools_list_and_call_validate_as_core_2026_results():
    tools = [
        {"name": "greet", "inputSchema": {"type": "object"}, "execution": None},
        {"name": "slow_compute", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "optional"}},
    ]
    validate(complete_result("tools/list", {"tools": [tool_to_v2(t) for t in tools]}), CORE_2026, "ListToolsResult")
    validate(
        complete_result("tools/call", {"content": [{"type": "text", "text": "Hello, World!"}], "isError": False}),
        CORE_2026,
        "CallToolResult",
    )


# --- errors on the modern face -------------------------------------------------------------------


def _check_headers_error(method: str, params: dict, meta: ModernMeta, headers: dict) -> McpError:
    with pytest.raises(McpError) as info:
        check_headers(method, params, meta, CIMultiDict(headers))
    return info.value


def _parse_error(body: bytes) -> McpError:
    with pytest.raises(McpError) as info:
        jsonrpc.parse(body)
    return info.value


def _read_meta_error(params: dict) -> McpError:
    with pytest.raises(McpError) as info:
        read_meta(params)
    return info.value


def _unseal_error() -> McpError:
    with pytest.raises(McpError) as info:
        Keyring(bytes(64)).unseal_task_id("forged", "anonymous")
    return info.value


ERRORS = {
    "missing-extension": lambda: missing_tasks_extension("Missing required client capability"),
    "unsupported-version": lambda: unsupported_version("2025-11-25"),
    "unknown-task": lambda: unknown_task("abc"),
    "unseal": _unseal_error,
    "backend-unavailable": lambda: backend_unavailable("fixture-v1", "connection refused"),
    "backend-32003": lambda: from_backend({"code": -32003, "message": "Missing", "data": {"requiredCapabilities": {}}}),
    "backend-malformed": lambda: from_backend("boom"),
    "header-mismatch": lambda: _check_headers_error(
        "tasks/get", {"taskId": "T"}, ModernMeta("2026-07-28"), {"MCP-Protocol-Version": "2026-07-28", "Mcp-Name": "U"}
    ),
    "header-version": lambda: _check_headers_error(
        "tools/list", {}, ModernMeta("2025-11-25"), {"MCP-Protocol-Version": "2025-11-25"}
    ),
    "missing-meta": lambda: _read_meta_error({}),
    "parse-error": lambda: _parse_error(b"{"),
    "invalid-request": lambda: _parse_error(b"[]"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
@pytest.mark.parametrize("request_id", [7, "req-1"])
def test_error_answers_validate_as_core_2026_jsonrpc_error_response(name, request_id):
    validate(jsonrpc.error_response(request_id, ERRORS[name]()), CORE_2026, "JSONRPCErrorResponse")


@pytest.mark.parametrize("name", ["parse-error", "invalid-request"])
def test_error_answer_without_request_id_validates_as_core_2026_jsonrpc_error_response(name):
    # A body that does not parse has no id to echo. Both MCP schemas make `id` optional and
    # type it string | integer, so the id-less answer must omit `id` rather than send null.
    validate(jsonrpc.error_response(None, ERRORS[name]()), CORE_2026, "JSONRPCErrorResponse")


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_error_answers_for_v1_clients_validate_as_core_2025_jsonrpc_error_response(name):
    validate(jsonrpc.error_response(7, for_v1_client(ERRORS[name]())), CORE_2025, "JSONRPCErrorResponse")


# --- v1 results ------------------------------------------------------------------------------------


V1_HUB_CASES = {
    "working": hub("working"),
    "input_required": hub("input_required", input_requests={"k1": ELICIT}),
    "completed": hub("completed", result={"content": [{"type": "text", "text": "done"}], "isError": False}),
    "completed-isError": hub("completed", result={"content": [{"type": "text", "text": "kaboom"}], "isError": True}),
    "failed": hub("failed", error=TaskError(code=-32603, message="simulated internal failure")),
    "cancelled": hub("cancelled"),
    "unlimited-ttl": CanonicalTask(task_id=TID, status="working", created_at=TS, last_updated_at=TS),
}


@pytest.mark.parametrize("case", sorted(V1_HUB_CASES))
def test_v1_tasks_get_validates_as_core_2025_get_task_result(case):
    validate(get_task_result_v1(V1_HUB_CASES[case]), CORE_2025, "GetTaskResult")
    validate(get_task_result_v1(V1_HUB_CASES[case]), CORE_2025, "Task")


@pytest.mark.parametrize(
    "v2_create",
    [
        {
            "taskId": "kArGLyOK",
            "status": "working",
            "createdAt": TS,
            "lastUpdatedAt": TS,
            "ttlMs": 900000,
            "pollIntervalMs": 5000,
            "resultType": "task",
        },
        {"taskId": "task-0", "status": "completed", "createdAt": TS, "lastUpdatedAt": TS, "ttlMs": None, "resultType": "task"},
    ],
    ids=["fastmcp4", "born-terminal-unlimited"],
)
def test_v1_created_task_validates_as_core_2025_create_task_result(v2_create):
    validate(created_task_result_v1(created_task_from_v2(v2_create)), CORE_2025, "CreateTaskResult")


@pytest.mark.parametrize("case", sorted(V1_HUB_CASES))
def test_v1_cancel_answer_validates_as_core_2025_cancel_task_result(case):
    answer = cancel_answer_v1(V1_HUB_CASES[case])
    validate(answer, CORE_2025, "CancelTaskResult")
    assert answer["status"] == "cancelled"
    assert "resultType" not in answer
