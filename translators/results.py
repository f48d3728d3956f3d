"""Results the proxy answers itself, built from a backend's probed profile (docs/behaviour.md
§4.9 `server/discover`, §5.1 `initialize` for v1 clients, §3 `initialize` for v2-session clients,
§5.3 `tasks/list`), and the `tools/list` mapping both ways. Pure: the profile's parts are arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import jsonrpc
from .capabilities import server_capabilities_to_v1, server_capabilities_to_v2, tool_to_v1, tool_to_v2, with_tasks_extension
from .envelope import complete_result, with_server_info
from .protocol import MODERN_VERSION, TaskSupport
from .subscriptions import advertised

SERVER_INFO = {"name": "mcp-tasks-proxy", "version": "0.1.0"}
"""The proxy's own `serverInfo` (`Implementation`), in every result it answers itself."""


def discover_result(
    capabilities: dict[str, Any], instructions: str | None, *, offers_tool_tasks: bool, cache_ttl_ms: int = 0
) -> dict[str, Any]:
    """The `server/discover` result for a session-wire backend with these `initialize` capabilities
    (core 2026-07-28; docs/behaviour.md §4.9): the 2026-07-28 version only, capabilities as v2 shows
    them, `logging` when the backend declares it, the tasks extension when the backend offers tool
    tasks, and the proxy's server info."""
    # listChanged/subscribe: delivered through subscriptions/listen (§4.9); log messages reach the
    # request that asked for them (§4.10).
    shown = carried_capabilities(capabilities, server_capabilities_to_v2(capabilities))
    result: dict[str, Any] = {"supportedVersions": [MODERN_VERSION], "capabilities": shown}
    if offers_tool_tasks:
        result["capabilities"] = with_tasks_extension(result["capabilities"])
    if instructions:
        result["instructions"] = instructions
    return with_server_info(complete_result("server/discover", result, cache_ttl_ms=cache_ttl_ms), SERVER_INFO)


def carried_capabilities(capabilities: Mapping[str, Any], shown: dict[str, Any]) -> dict[str, Any]:
    """`shown` (a backend's capabilities as a face shows them, without what the proxy must carry)
    with what the proxy carries put back where the backend declares it: `listChanged` and
    `resources.subscribe` (`subscriptions.advertised`), and `logging: {}` when the backend declares
    `logging` (an object). Inverse: `uncarried_capabilities`."""
    out = advertised(capabilities, shown)
    if isinstance(capabilities.get("logging"), dict):
        out["logging"] = {}
    return out


def uncarried_capabilities(shown: Mapping[str, Any]) -> dict[str, Any]:
    """`shown` without what the proxy carries (`listChanged`, `resources.subscribe`, `logging`):
    the capabilities a face shows where the proxy carries none of it. Inverse of
    `carried_capabilities` (for capabilities shown without them)."""
    out = {name: value for name, value in shown.items() if name != "logging"}
    for name in ("tools", "prompts", "resources"):
        value = out.get(name)
        if isinstance(value, Mapping):
            out[name] = {key: flag for key, flag in value.items() if key not in ("listChanged", "subscribe")}
    return out


def initialize_result_v1(capabilities: dict[str, Any], instructions: str | None, *, listens: bool = False) -> dict[str, Any]:
    """The proxy's `InitializeResult` for a v1 client in front of a v2 backend with these
    capabilities (docs/behaviour.md §5.1), without `protocolVersion` (the session face sets it):
    tools, resources, prompts and completions, with `listChanged` and `resources.subscribe` only
    where the backend declares them `true` and `listens` (the proxy carries them, §5.9: from its
    own `subscriptions/listen` in front of a v2-modern backend, from the GET stream of the session's
    own upstream session in front of a v2-session backend); `logging: {}` when the backend declares
    `logging` (the session's level goes upstream, §5.1); the backend's other extensions, and v1
    `tasks {list, cancel, requests.tools.call}`. Inverse, for the capabilities:
    `capabilities.server_capabilities_to_v2` of the answer's `capabilities` gives back the
    backend's lists, `listChanged` and `subscribe` dropped (what a v2 client is shown of them)."""
    kept = server_capabilities_to_v2({name: value for name, value in capabilities.items() if name != "tasks"})
    if listens:
        kept = advertised(capabilities, kept)
    if isinstance(capabilities.get("logging"), dict):
        kept["logging"] = {}
    kept["extensions"] = capabilities.get("extensions") or {}
    result: dict[str, Any] = {"capabilities": server_capabilities_to_v1(kept), "serverInfo": SERVER_INFO}
    if instructions:
        result["instructions"] = instructions
    return result


def initialize_result_v2_session(
    capabilities: dict[str, Any],
    instructions: str | None,
    *,
    backend_dialect: str,
    offers_tool_tasks: bool,
    holds_tasks: bool = False,
) -> dict[str, Any]:
    """The proxy's `InitializeResult` for a v2-session client, without `protocolVersion`: the
    backend's capabilities as v2 shows them (no `tasks` key), with the tasks extension (a v1
    backend's comes from its `tasks.requests.tools.call`; a v2-modern backend's when it offers
    tool tasks). In front of a v1 or v2-modern backend `listChanged`, `resources.subscribe` and
    `logging` are shown where the backend declares them (`carried_capabilities`: the proxy carries
    them to the session's GET stream and to each request's stream, docs/behaviour.md §3).
    `holds_tasks`: the proxy holds tasks for the backend's tools (docs/behaviour.md §9), so the
    extension is shown whatever the backend offers."""
    shown = server_capabilities_to_v2(capabilities)
    if backend_dialect in ("v1", "v2-modern"):
        shown = carried_capabilities(capabilities, shown)
    if (backend_dialect == "v2-modern" and offers_tool_tasks) or holds_tasks:
        shown = with_tasks_extension(shown)
    result: dict[str, Any] = {"capabilities": shown, "serverInfo": SERVER_INFO}
    if instructions:
        result["instructions"] = instructions
    return result


def tools_list_to_v2(result: Mapping[str, Any]) -> dict[str, Any]:
    """A v1 backend's `tools/list` result with each tool's task support as v2 shows it
    (`translators.capabilities.tool_to_v2`); anything that is not a tool object stays."""
    tools = result.get("tools")
    if not isinstance(tools, list):
        return dict(result)
    return {**result, "tools": [tool_to_v2(tool) if isinstance(tool, dict) else tool for tool in tools]}


def tools_list_to_v1(result: Mapping[str, Any], support: Mapping[str, TaskSupport], default: TaskSupport) -> dict[str, Any]:
    """A v2 backend's `tools/list` result for a v1 client: each tool with `execution.taskSupport`
    from `support` (by name; `default` for a tool not probed), entries that are not objects dropped."""
    tools = [
        tool_to_v1(tool, support.get(tool.get("name"), default))  # type: ignore[arg-type]
        for tool in result.get("tools") or ()
        if isinstance(tool, dict)
    ]
    return {**result, "tools": tools}


def tasks_list_result_v1(tasks: list[dict[str, Any]], next_cursor: str | None) -> dict[str, Any]:
    """The v1 `tasks/list` result (core 2025-11-25, Tasks): the page's tasks, and `nextCursor`
    when another page follows."""
    result: dict[str, Any] = {"tasks": tasks}
    if next_cursor is not None:
        result["nextCursor"] = next_cursor
    return result


def task_status_notification_v1(task: dict[str, Any]) -> dict[str, Any]:
    """`notifications/tasks/status` carrying a v1 `Task` (core 2025-11-25, Tasks)."""
    return jsonrpc.notification("notifications/tasks/status", task)
