"""Working out a backend's dialect (docs/behaviour.md §2 "Upstream"; docs/wire.md §1.2).

Step 1 sends `server/discover` as a modern request; a modern answer (a `DiscoverResult`, or a
modern JSON-RPC error such as -32022) means a modern backend. Anything else (mcp 1.x and FastMCP 3
answer 400 "Missing session ID") leads to step 2: `initialize` on the session wire, declaring both
the v1 `tasks` capability and the extension so either answer shows. On a session-wire backend the
probe also reads `tools/list` for each tool's `execution.taskSupport`.

Probes never end a session (docs/decisions.md §2): each backend's probes keep one session-wire
session (`ProbeSession`) and re-probe a backend known to speak the session wire with `tools/list`
on it. Only when that session is gone (the backend restarted or was replaced) is the backend
probed from step 1 again, since on the official `mcp` 1.30 SDK even a refused sessionless POST
(such as `server/discover`) starts and ends a server session, and ending any session stops task
creation in every other session of that server process.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp

from translators import jsonrpc
from translators.capabilities import task_support, v1_offers_tool_tasks
from translators.envelope import ModernMeta, add_envelope
from translators.errors import HEADER_MISMATCH, MISSING_CAPABILITY, UNSUPPORTED_VERSION, McpError
from translators.oauth import AuthChallenge
from translators.protocol import H_METHOD, H_PROTOCOL_VERSION, MODERN_VERSION, TASKS_EXTENSION, TaskSupport

from ..sse import SseParser
from .endpoint import ACCEPT_BOTH, BackendUnreachable, Endpoint
from .session_wire import SessionLost, UpstreamSession

Dialect = Literal["v1", "v2-session", "v2-modern"]
PROBE_CLIENT = {"name": "mcp-tasks-proxy-probe", "version": "0.1.0"}
V1_PROBE_CAPABILITIES: dict[str, Any] = {"tasks": {"list": {}, "cancel": {}}, "extensions": {TASKS_EXTENSION: {}}}
"""Declared by the session-wire probe: the v1 `tasks` capability and the extension, so that
either answer shows."""


@dataclass
class BackendProfile:
    """What a probe learned about a backend.

    `url`: where it is, for logs (its URL after redirects; a stdio backend's command, never the
    connector's internal address); `dialect`: how it speaks tasks ("v1" also covers a session-wire server without tasks, whose
    `offers_tool_tasks` is False); `protocol_versions`: the versions it answered with;
    `tools`: tool name → task support (from its session-wire `tools/list`); `probed_at_ms`:
    Unix milliseconds of the probe; `provisional`: see below.
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
    listed: frozenset[str] = frozenset()
    """The tool names a v2-modern backend's own `tools/list` gave the probe (`list_modern_tools`):
    the tools it serves, for the `tool` label of the tool results."""
    probed_at_ms: int = 0
    provisional: bool = False
    """Not probed: the pinned `dialect` of a protected backend whose probe was challenged and that
    has no `probe_headers` (no capabilities, no tools), until a client's authorized request lets
    the proxy learn the rest (docs/decisions.md §82)."""

    def summary(self) -> str:
        """One line for logs and refusal messages."""
        tasks = "tool tasks" if self.offers_tool_tasks else "no tool tasks"
        return f"{self.name} at {self.url}: {self.dialect} ({', '.join(self.protocol_versions)}; {tasks})"


async def discover(backend: Endpoint) -> dict[str, Any] | None:
    """Step 1: the backend's `DiscoverResult`, `{}` for a modern backend that rejected the probe,
    or None when it answered like a legacy (session-wire) server.

    Raises `McpError` (HTTP 502) when the backend cannot be reached.
    """
    meta = ModernMeta(MODERN_VERSION, {"extensions": {TASKS_EXTENSION: {}}}, PROBE_CLIENT)
    body = jsonrpc.dumps(jsonrpc.request(1, "server/discover", add_envelope({}, meta)))
    headers = {"Accept": ACCEPT_BOTH, H_PROTOCOL_VERSION: MODERN_VERSION, H_METHOD: "server/discover"}
    response = await backend.post(body, headers, lean=False)  # the probe stays on aiohttp's client (decision 115)
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


async def list_modern_tools(backend: Endpoint) -> frozenset[str]:
    """The names of every tool a v2-modern backend lists (modern `tools/list`, following
    `nextCursor`, at most `MAX_TOOL_PAGES` pages); what was read so far when a page fails (a
    protected backend challenges the probe: none)."""
    meta = ModernMeta(MODERN_VERSION, {"extensions": {TASKS_EXTENSION: {}}}, PROBE_CLIENT)
    headers = {"Accept": ACCEPT_BOTH, H_PROTOCOL_VERSION: MODERN_VERSION, H_METHOD: "tools/list"}
    names: set[str] = set()
    cursor: Any = None
    for page in range(MAX_TOOL_PAGES):
        body = jsonrpc.dumps(jsonrpc.request(page + 1, "tools/list", add_envelope({"cursor": cursor} if cursor else {}, meta)))
        try:
            response = await backend.post(body, headers, lean=False)
            async with response:
                raw = await response.read()
                content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        except (McpError, aiohttp.ClientError, OSError, TimeoutError):
            break
        answer = _first_message(raw, content_type)
        result = answer.get("result") if isinstance(answer, dict) else None
        if not isinstance(result, dict):
            break
        tools = result.get("tools")
        if isinstance(tools, list):
            names.update(t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str))
        cursor = result.get("nextCursor")
        if not isinstance(cursor, str) or not cursor:
            break
    return frozenset(names)


MAX_TOOL_PAGES = 100
"""Pages of one `tools/list` a probe follows."""


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


class ProbeSession:
    """The one session-wire session a backend's probes hold (docs/decisions.md §2): opened by the
    first probe that needs it, reused by every later one, never ended (no DELETE). `session` is
    None until then, after the backend forgot it, or for a backend that gives no session ids.
    """

    def __init__(self, backend: Endpoint):
        self.backend = backend
        self.session: UpstreamSession | None = None

    def held(self, capabilities: dict[str, Any]) -> UpstreamSession | None:
        """The held session when it was opened with `capabilities` and is not known to be lost."""
        session = self.session
        if session is None or session.lost or not session.session_id or session.client_capabilities != capabilities:
            return None
        return session

    async def tools(self, capabilities: dict[str, Any]) -> tuple[UpstreamSession, list[dict[str, Any]]]:
        """The session (the held one, else a new one initialised with `capabilities` and held from
        then on) and every tool its `tools/list` names (none when it declares no `tools`).

        Raises `SessionLost` when a new session is lost at once and `McpError` (HTTP 502) when the
        backend cannot be reached or answers unlike MCP.
        """
        session = self.held(capabilities)
        if session is not None:
            try:
                return session, await list_tools(session) if "tools" in session.server_capabilities else []
            except SessionLost:
                pass  # forgotten (a restarted or replaced backend): a new session below
        self.session = None  # a replaced session is dropped, never ended: its backend forgot it
        session = UpstreamSession(self.backend, capabilities, client_info=PROBE_CLIENT)
        await session.initialize(self.backend.probe_headers)
        if session.session_id:
            self.session = session
        return session, await list_tools(session) if "tools" in session.server_capabilities else []


async def _legacy_task_support(held: ProbeSession) -> dict[str, TaskSupport]:
    """Each tool's `execution.taskSupport` as a dual-era backend (FastMCP 4) shows it on its session
    wire (the 2026 `Tool` has no `execution`); empty when it has no session wire."""
    try:
        _, tools = await held.tools({})
    except (McpError, SessionLost):
        return {}
    return {t["name"]: task_support(t) for t in tools}


async def probe(backend: Endpoint, pinned: str = "auto", held: ProbeSession | None = None,
                last: BackendProfile | None = None) -> BackendProfile:
    """Probe `backend` and return its profile. `pinned` is the configured dialect: "auto" tries
    `server/discover`, then `initialize` (docs/behaviour.md §2); "v2-modern" tries only the first,
    "v1" and "v2-session" only the second, and the profile carries the pinned dialect.

    `held` keeps the probes' session-wire session between calls (a new one when None). When
    `last` (the previous profile) is session-wire and `held` still holds its session, the probe is
    `tools/list` on that session alone: a backend that still knows the session is the same server
    process. Any answer but a refused connection drops that session and probes from step 1.

    Raises `McpError` (HTTP 502) when it is unreachable or answers the probe(s) unlike MCP, and
    `translators.oauth.AuthChallenge` when it is protected and the probe's credentials (the
    connector's `probe_headers`, or none) are not enough (docs/decisions.md §82).
    """
    now = int(time.time() * 1000)
    held = held if held is not None else ProbeSession(backend)
    session = held.held(V1_PROBE_CAPABILITIES) if last is not None and last.dialect in ("v1", "v2-session") else None
    if session is not None:
        try:
            tools = await list_tools(session) if "tools" in session.server_capabilities else []
            return _session_wire_profile(backend, pinned, session, tools, now)
        except (BackendUnreachable, AuthChallenge):
            raise
        except (McpError, SessionLost):
            held.session = None  # forgotten or answered by another server: never ended, only dropped
    discovered = await discover(backend) if pinned in ("auto", "v2-modern") else None
    if discovered is None and pinned == "v2-modern":
        raise McpError(-32603, f"Backend {backend.name!r} is pinned to v2-modern but did not answer server/discover", http_status=502)
    if discovered is not None:
        extensions = (discovered.get("capabilities") or {}).get("extensions") or {}
        return BackendProfile(
            name=backend.name, url=backend.address, dialect="v2-modern",
            protocol_versions=list(discovered.get("supportedVersions") or [MODERN_VERSION]),
            capabilities=discovered.get("capabilities") or {},
            server_info=((discovered.get("_meta") or {}).get("io.modelcontextprotocol/serverInfo") or {}),
            instructions=discovered.get("instructions"), offers_tool_tasks=TASKS_EXTENSION in extensions, probed_at_ms=now,
            tools=await _legacy_task_support(held), listed=await list_modern_tools(backend),
        )
    try:
        session, tools = await held.tools(V1_PROBE_CAPABILITIES)
    except SessionLost:
        raise McpError(-32603, f"Backend {backend.name!r} lost the probe session at once", http_status=502) from None
    return _session_wire_profile(backend, pinned, session, tools, now)


def pinned_profile(backend: Endpoint, pinned: Dialect) -> BackendProfile:
    """The provisional profile of a protected backend with a pinned dialect whose probe was
    challenged: that dialect and nothing else known (docs/decisions.md §82)."""
    return BackendProfile(name=backend.name, url=backend.url, dialect=pinned, protocol_versions=[], capabilities={},
                          server_info={}, instructions=None, provisional=True)


def _session_wire_profile(backend: Endpoint, pinned: str, session: UpstreamSession, tools: list[dict[str, Any]],
                          now: int) -> BackendProfile:
    """The profile of a session-wire backend from its initialised `session` and its `tools`."""
    capabilities = session.server_capabilities
    extensions = capabilities.get("extensions") if isinstance(capabilities.get("extensions"), dict) else {}
    dialect: Dialect = "v1"
    if TASKS_EXTENSION in extensions and not v1_offers_tool_tasks(capabilities):
        dialect = "v2-session"
    if pinned in ("v1", "v2-session"):
        dialect = pinned  # type: ignore[assignment]
    return BackendProfile(
        name=backend.name, url=backend.address, dialect=dialect, protocol_versions=[session.protocol_version],
        capabilities=capabilities, server_info=session.server_info, instructions=session.instructions,
        tools={t["name"]: task_support(t) for t in tools},
        offers_tool_tasks=v1_offers_tool_tasks(capabilities) or dialect == "v2-session", probed_at_ms=now,
    )
