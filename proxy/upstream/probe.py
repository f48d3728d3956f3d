"""Working out a backend's dialect (TRANSLATION.md §2 "Upstream"; WIRE.md §1.2).

Step 1 sends `server/discover` as a modern request; a modern answer (a `DiscoverResult`, or a
modern JSON-RPC error such as -32022) means a modern backend. Anything else (mcp 1.x and FastMCP 3
answer 400 "Missing session ID") leads to step 2: `initialize` on the session wire, declaring both
the v1 `tasks` capability and the extension so either answer shows. On a session-wire backend the
probe also reads `tools/list` for each tool's `execution.taskSupport`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from translators import jsonrpc
from translators.capabilities import task_support, v1_offers_tool_tasks
from translators.envelope import ModernMeta, add_envelope
from translators.errors import HEADER_MISMATCH, MISSING_CAPABILITY, UNSUPPORTED_VERSION, McpError
from translators.protocol import H_METHOD, H_PROTOCOL_VERSION, MODERN_VERSION, TASKS_EXTENSION, TaskSupport

from ..sse import SseParser
from .session_wire import ACCEPT_BOTH, Backend, SessionLost, UpstreamSession

Dialect = Literal["v1", "v2-session", "v2-modern"]


@dataclass
class BackendProfile:
    """What a probe learned about a backend.

    `dialect`: how it speaks tasks ("v1" also covers a session-wire server without tasks, whose
    `offers_tool_tasks` is False); `protocol_versions`: the versions it answered with;
    `tools`: tool name → task support (from its session-wire `tools/list`); `probed_at_ms`:
    Unix milliseconds of the probe.
    """

    name: str
    url: str
    dialect: Dialect
    protocol_versions: list[str]
    capabilities: dict[str, Any]
    server_info: dict[str, Any]
    instructions: str | None
    tools: dict[str, TaskSupport] = field(default_factory=dict)
    offers_tool_tasks: bool = False
    probed_at_ms: int = 0

    def summary(self) -> str:
        """One line for logs and refusal messages."""
        tasks = "tool tasks" if self.offers_tool_tasks else "no tool tasks"
        return f"{self.name} at {self.url}: {self.dialect} ({', '.join(self.protocol_versions)}; {tasks})"


async def discover(backend: Backend) -> dict[str, Any] | None:
    """Step 1: the backend's `DiscoverResult`, `{}` for a modern backend that rejected the probe,
    or None when it answered like a legacy (session-wire) server.

    Raises `McpError` (HTTP 502) when the backend cannot be reached.
    """
    meta = ModernMeta(MODERN_VERSION, {"extensions": {TASKS_EXTENSION: {}}}, {"name": "mcp-tasks-proxy-probe", "version": "0.1.0"})
    body = jsonrpc.dumps(jsonrpc.request(1, "server/discover", add_envelope({}, meta)))
    headers = {"Accept": ACCEPT_BOTH, H_PROTOCOL_VERSION: MODERN_VERSION, H_METHOD: "server/discover"}
    response = await backend.post(body, headers)
    async with response:
        raw = await response.read()
        content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    answer = _first_message(raw, content_type)
    if not isinstance(answer, dict):
        return None
    result = answer.get("result")
    if isinstance(result, dict) and MODERN_VERSION in (result.get("supportedVersions") or ()):
        return result
    error = answer.get("error")
    if isinstance(error, dict) and error.get("code") in (UNSUPPORTED_VERSION, HEADER_MISMATCH, MISSING_CAPABILITY):
        return {}
    return None


def _first_message(raw: bytes, content_type: str) -> Any:
    try:
        if content_type == "text/event-stream":
            for event in SseParser().feed(raw + b"\n\n"):
                return json.loads(event.data)
            return None
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None


async def list_tools(session: UpstreamSession) -> list[dict[str, Any]]:
    """Every tool of a session-wire backend, following `nextCursor` (at most 100 pages)."""
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(100):
        result = await session.request("tools/list", {"cursor": cursor} if cursor else {})
        tools.extend(t for t in result.get("tools") or () if isinstance(t, dict) and isinstance(t.get("name"), str))
        cursor = result.get("nextCursor")
        if not isinstance(cursor, str) or not cursor:
            break
    return tools


async def _legacy_task_support(backend: Backend) -> dict[str, TaskSupport]:
    """Each tool's `execution.taskSupport` as a dual-era backend (FastMCP 4) shows it on its session
    wire (the 2026 `Tool` has no `execution`); empty when it has no session wire."""
    session = UpstreamSession(backend, {}, client_info={"name": "mcp-tasks-proxy-probe", "version": "0.1.0"})
    try:
        await session.initialize()
        return {t["name"]: task_support(t) for t in await list_tools(session)}
    except (McpError, SessionLost):
        return {}
    finally:
        await session.close()


async def probe(backend: Backend, pinned: str = "auto") -> BackendProfile:
    """Probe `backend` and return its profile. `pinned` is the configured dialect: "auto" tries
    `server/discover`, then `initialize` (TRANSLATION.md §2); "v2-modern" tries only the first,
    "v1" and "v2-session" only the second, and the profile carries the pinned dialect.

    Raises `McpError` (HTTP 502) when it is unreachable or answers the probe(s) unlike MCP.
    """
    now = int(time.time() * 1000)
    discovered = await discover(backend) if pinned in ("auto", "v2-modern") else None
    if discovered is None and pinned == "v2-modern":
        raise McpError(-32603, f"Backend {backend.name!r} is pinned to v2-modern but did not answer server/discover", http_status=502)
    if discovered is not None:
        extensions = (discovered.get("capabilities") or {}).get("extensions") or {}
        return BackendProfile(
            name=backend.name, url=backend.url, dialect="v2-modern",
            protocol_versions=list(discovered.get("supportedVersions") or [MODERN_VERSION]),
            capabilities=discovered.get("capabilities") or {},
            server_info=((discovered.get("_meta") or {}).get("io.modelcontextprotocol/serverInfo") or {}),
            instructions=discovered.get("instructions"), offers_tool_tasks=TASKS_EXTENSION in extensions, probed_at_ms=now,
            tools=await _legacy_task_support(backend),
        )
    probe_capabilities = {
        "tasks": {"list": {}, "cancel": {}},
        "extensions": {TASKS_EXTENSION: {}},
    }
    session = UpstreamSession(backend, probe_capabilities, client_info={"name": "mcp-tasks-proxy-probe", "version": "0.1.0"})
    try:
        await session.initialize()
        capabilities = session.server_capabilities
        extensions = capabilities.get("extensions") if isinstance(capabilities.get("extensions"), dict) else {}
        dialect: Dialect = "v1"
        if TASKS_EXTENSION in extensions and not v1_offers_tool_tasks(capabilities):
            dialect = "v2-session"
        if pinned in ("v1", "v2-session"):
            dialect = pinned  # type: ignore[assignment]
        tools = await list_tools(session) if "tools" in capabilities else []
    except SessionLost:
        raise McpError(-32603, f"Backend {backend.name!r} lost the probe session at once", http_status=502) from None
    finally:
        await session.close()
    return BackendProfile(
        name=backend.name, url=backend.url, dialect=dialect, protocol_versions=[session.protocol_version],
        capabilities=capabilities, server_info=session.server_info, instructions=session.instructions,
        tools={t["name"]: task_support(t) for t in tools},
        offers_tool_tasks=v1_offers_tool_tasks(capabilities) or dialect == "v2-session", probed_at_ms=now,
    )
