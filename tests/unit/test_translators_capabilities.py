"""Capabilities and tools across the versions: docs/behaviour.md §4.8, §4.9, §5.1; docs/wire.md §2.1, §2.2, §6.

Inputs are the `initialize` / `server/discover` capabilities and `tools/list` entries of the traces.
"""

from __future__ import annotations

import pytest

from translators.capabilities import (
    server_capabilities_to_v1,
    server_capabilities_to_v2,
    task_support,
    tool_to_v1,
    tool_to_v2,
    v1_offers_tool_tasks,
)

TASKS = "io.modelcontextprotocol/tasks"
UI = "io.modelcontextprotocol/ui"
V1_TASKS_CAPABILITY = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}

# docs/wire.md §7 "mcp 1.30.0"
MCP1_CAPS = {
    "experimental": {},
    "tools": {"listChanged": False},
    "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
}
# docs/wire.md §7 "FastMCP 3.4.11"
FASTMCP3_CAPS = {
    "experimental": {},
    "logging": {},
    "prompts": {"listChanged": True},
    "resources": {"subscribe": False, "listChanged": True},
    "tools": {"listChanged": True},
    "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}, "prompts": {"get": {}}, "resources": {"read": {}}}},
    "extensions": {UI: {}},
}
# docs/wire.md §7 "TypeScript SDK 1.32.2 / server-everything"
EVERYTHING_CAPS = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"subscribe": True, "listChanged": True},
    "logging": {},
    "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
    "completions": {},
}
# docs/wire.md §7 "FastMCP 4.1.4" (server/discover)
FASTMCP4_CAPS = {
    "logging": {},
    "prompts": {"listChanged": False},
    "resources": {"subscribe": False, "listChanged": False},
    "tools": {"listChanged": False},
    "extensions": {UI: {}, TASKS: {}},
}

SCHEMA = {"type": "object"}
TRACE_TOOLS = [
    {"name": "greet", "inputSchema": SCHEMA, "execution": None},
    {"name": "slow_compute", "inputSchema": SCHEMA, "execution": {"taskSupport": "optional"}},
    {"name": "failing_job", "inputSchema": SCHEMA, "execution": {"taskSupport": "required"}},
    {"name": "echo", "description": "Echo", "inputSchema": SCHEMA, "execution": {"taskSupport": "forbidden"}},
]


def _no_notification_flags(caps: dict) -> bool:
    return all(not ({"listChanged", "subscribe"} & value.keys()) for value in caps.values() if isinstance(value, dict))


# --- v1 backend → server/discover capabilities (§4.9) ------------------------------------------


def test_mcp1_capabilities_on_discover_are_tools_and_the_tasks_extension():
    assert server_capabilities_to_v2(MCP1_CAPS) == {"tools": {}, "extensions": {TASKS: {}}}


@pytest.mark.parametrize("caps", [MCP1_CAPS, FASTMCP3_CAPS, EVERYTHING_CAPS], ids=["mcp1", "fastmcp3", "everything"])
def test_discover_capabilities_have_no_tasks_key_no_notification_flags_and_the_extension(caps):
    got = server_capabilities_to_v2(caps)
    assert "tasks" not in got
    assert _no_notification_flags(got)
    assert got["extensions"] == {TASKS: {}}
    for name in ("tools", "resources", "prompts", "completions"):
        assert (name in got) == (name in caps), name


def test_discover_capabilities_are_only_tools_resources_prompts_completions_and_the_extension():
    # docs/behaviour.md §4.9, row `capabilities`: the backend's tools, resources, prompts and
    # completions, their listChanged/subscribe flags dropped, plus the tasks extension.
    assert server_capabilities_to_v2(FASTMCP3_CAPS) == {"prompts": {}, "resources": {}, "tools": {}, "extensions": {TASKS: {}}}
    assert server_capabilities_to_v2(EVERYTHING_CAPS) == {
        "tools": {},
        "prompts": {},
        "resources": {},
        "completions": {},
        "extensions": {TASKS: {}},
    }


@pytest.mark.parametrize(
    "caps",
    [
        {"tools": {"listChanged": True}},
        {"tools": {}, "tasks": {"list": {}, "cancel": {}}},
        {"tools": {}, "tasks": {"requests": {"prompts": {"get": {}}}}},
        {"tools": {}, "tasks": {"requests": {"tools": {}}}},
    ],
    ids=["no-tasks", "no-requests", "prompts-only", "tools-without-call"],
)
def test_discover_capabilities_have_no_extension_without_tasks_requests_tools_call(caps):
    assert server_capabilities_to_v2(caps) == {"tools": {}}
    assert v1_offers_tool_tasks(caps) is False


@pytest.mark.parametrize("caps", [MCP1_CAPS, FASTMCP3_CAPS, EVERYTHING_CAPS, {"tasks": {"requests": {"tools": {"call": {}}}}}])
def test_backend_declaring_tasks_requests_tools_call_offers_tool_tasks(caps):
    assert v1_offers_tool_tasks(caps) is True


def test_discover_capabilities_do_not_alias_the_backend_capabilities():
    caps = {"tools": {"listChanged": True}, "tasks": V1_TASKS_CAPABILITY}
    got = server_capabilities_to_v2(caps)
    got["tools"]["x"] = 1
    assert caps["tools"] == {"listChanged": True}


# --- v2 backend → v1 initialize capabilities (§5.1) ---------------------------------------------


def test_fastmcp4_capabilities_on_v1_initialize_get_tasks_and_keep_the_rest():
    assert server_capabilities_to_v1(FASTMCP4_CAPS) == {
        "logging": {},
        "prompts": {"listChanged": False},
        "resources": {"subscribe": False, "listChanged": False},
        "tools": {"listChanged": False},
        "extensions": {UI: {}},
        "tasks": V1_TASKS_CAPABILITY,
    }


def test_v1_initialize_capabilities_drop_an_emptied_extensions_object():
    assert server_capabilities_to_v1({"tools": {}, "extensions": {TASKS: {}}}) == {"tools": {}, "tasks": V1_TASKS_CAPABILITY}


def test_v1_initialize_capabilities_replace_a_backend_tasks_key():
    assert server_capabilities_to_v1({"tools": {}, "tasks": {"list": {}}}) == {"tools": {}, "tasks": V1_TASKS_CAPABILITY}


def test_capabilities_v2_to_v1_to_v2_keep_the_extension():
    assert server_capabilities_to_v2(server_capabilities_to_v1({"tools": {}, "extensions": {TASKS: {}}})) == {
        "tools": {},
        "extensions": {TASKS: {}},
    }


# --- tools (docs/wire.md §2.2; docs/behaviour.md §4.8, §5.1) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        (TRACE_TOOLS[0], "forbidden"),
        (TRACE_TOOLS[1], "optional"),
        (TRACE_TOOLS[2], "required"),
        (TRACE_TOOLS[3], "forbidden"),
        ({"name": "t", "inputSchema": SCHEMA}, "forbidden"),
        ({"name": "t", "inputSchema": SCHEMA, "execution": {}}, "forbidden"),
        ({"name": "t", "inputSchema": SCHEMA, "execution": {"taskSupport": "always"}}, "forbidden"),
        ({"name": "t", "inputSchema": SCHEMA, "execution": "optional"}, "forbidden"),
    ],
    ids=[
        "null-execution",
        "optional",
        "required",
        "explicit-forbidden",
        "absent",
        "empty-execution",
        "unknown-value",
        "non-object",
    ],
)
def test_task_support_absent_or_unknown_means_forbidden(tool, expected):
    assert task_support(tool) == expected


def test_modern_face_tools_have_no_execution():
    assert tool_to_v2(TRACE_TOOLS[1]) == {"name": "slow_compute", "inputSchema": SCHEMA}
    assert tool_to_v2(TRACE_TOOLS[0]) == {"name": "greet", "inputSchema": SCHEMA}
    assert tool_to_v2({"name": "x", "inputSchema": SCHEMA}) == {"name": "x", "inputSchema": SCHEMA}


@pytest.mark.parametrize("tool", TRACE_TOOLS[1:], ids=lambda t: t["name"])
def test_tool_to_v1_is_the_inverse_of_tool_to_v2(tool):
    assert tool_to_v1(tool_to_v2(tool), task_support(tool)) == tool


@pytest.mark.parametrize("support", ["required", "optional", "forbidden"])
def test_tool_to_v2_is_the_inverse_of_tool_to_v1(support):
    v2_tool = {"name": "slow_compute", "description": "Slow", "inputSchema": SCHEMA}
    v1_tool = tool_to_v1(v2_tool, support)
    assert v1_tool == {**v2_tool, "execution": {"taskSupport": support}}
    assert tool_to_v2(v1_tool) == v2_tool


def test_tool_to_v1_keeps_other_execution_members():
    tool = {"name": "t", "inputSchema": SCHEMA, "execution": {"taskSupport": "required", "x-hint": 1}}
    assert tool_to_v1(tool, "optional") == {
        "name": "t",
        "inputSchema": SCHEMA,
        "execution": {"taskSupport": "optional", "x-hint": 1},
    }


def test_tool_without_execution_gains_explicit_forbidden_on_v1():
    # Known difference: absent and "forbidden" mean the same; v1 output is always explicit.
    greet = TRACE_TOOLS[0]
    assert tool_to_v1(tool_to_v2(greet), task_support(greet)) == {
        "name": "greet",
        "inputSchema": SCHEMA,
        "execution": {"taskSupport": "forbidden"},
    }
