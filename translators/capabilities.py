"""Capabilities and tools' task support, v1 (2025-11-25) ↔ v2 (SEP-2663 on 2026-07-28).

Sources: core 2025-11-25 ServerCapabilities and ToolExecution; core 2026-07-28 Tool; SEP-2663
§Negotiation; docs/behaviour.md §4.9, §5.1.
"""

from __future__ import annotations

from typing import Any

from .protocol import TASKS_EXTENSION, TaskSupport
from .registry import _difference


def v1_offers_tool_tasks(capabilities: dict[str, Any]) -> bool:
    """Whether a 2025-11-25 `ServerCapabilities` declares `tasks.requests.tools.call`."""
    tasks = capabilities.get("tasks")
    requests = tasks.get("requests") if isinstance(tasks, dict) else None
    tools = requests.get("tools") if isinstance(requests, dict) else None
    call = tools.get("call") if isinstance(tools, dict) else None
    return isinstance(call, dict) or call is True  # objects per the schema; early SDKs sent true


def server_capabilities_to_v2(capabilities: dict[str, Any]) -> dict[str, Any]:
    """A v1 backend's `ServerCapabilities` as a v2 `server/discover` shows them (docs/behaviour.md §4.9).

    Keeps tools, resources, prompts and completions without `listChanged`/`subscribe` (list
    changes are not carried; `logging` is added by `results.discover_result`, where it works);
    adds `extensions[io.modelcontextprotocol/tasks] = {}` when the backend declares
    `tasks.requests.tools.call`; never a `tasks` key.
    """
    out: dict[str, Any] = {}
    for name in ("tools", "resources", "prompts", "completions"):
        value = capabilities.get(name)
        if isinstance(value, dict):
            out[name] = {k: v for k, v in value.items() if k not in ("listChanged", "subscribe")}
    if v1_offers_tool_tasks(capabilities):
        out["extensions"] = {TASKS_EXTENSION: {}}
    return out


def with_tasks_extension(capabilities: dict[str, Any]) -> dict[str, Any]:
    """A copy of `capabilities` (client or server) whose `extensions` is exactly
    `{io.modelcontextprotocol/tasks: {}}` (SEP-2663 §Negotiation)."""
    return {**capabilities, "extensions": {TASKS_EXTENSION: {}}}


def server_capabilities_to_v1(capabilities: dict[str, Any]) -> dict[str, Any]:
    """A v2 backend's capabilities as the proxy's v1 `initialize` shows them (docs/behaviour.md §5.1):
    the extension becomes `tasks = {list, cancel, requests.tools.call}`; other extensions stay, as
    2025-11-25 servers such as FastMCP 3 already show them."""
    out = {k: v for k, v in capabilities.items() if k not in ("extensions", "tasks")}
    declared = capabilities.get("extensions")
    extensions = {k: v for k, v in declared.items() if k != TASKS_EXTENSION} if isinstance(declared, dict) else {}
    if extensions:
        out["extensions"] = extensions
    out["tasks"] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    return out


_difference(
    "server-capability",
    v1="`capabilities.tasks {list, cancel, requests.tools.call}` in `initialize`",
    v2="`capabilities.extensions[io.modelcontextprotocol/tasks] = {}` in `server/discover`",
    source="core 2025-11-25 ServerCapabilities; SEP-2663 §Negotiation",
    to_v2=server_capabilities_to_v2,
    to_v1=server_capabilities_to_v1,
)


def task_support(tool: dict[str, Any]) -> TaskSupport:
    """A 2025-11-25 tool's `execution.taskSupport`; absent or unknown means "forbidden"."""
    execution = tool.get("execution")
    value = execution.get("taskSupport") if isinstance(execution, dict) else None
    return value if value in ("required", "optional") else "forbidden"


def tool_to_v2(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool without `execution`, which the 2026-07-28 `Tool` does not have."""
    return {k: v for k, v in tool.items() if k != "execution"}


def tool_to_v1(tool: dict[str, Any], support: TaskSupport) -> dict[str, Any]:
    """A tool with `execution.taskSupport = support` for a 2025-11-25 client (docs/behaviour.md §5.1)."""
    return {**tool, "execution": {**(tool.get("execution") or {}), "taskSupport": support}}


_difference(
    "tool-task-support",
    v1="`Tool.execution.taskSupport`: forbidden (default), optional, required",
    v2="no `execution`; the server decides per call",
    source="core 2025-11-25 ToolExecution; core 2026-07-28 Tool",
    to_v2=tool_to_v2,
    to_v1=tool_to_v1,
)
