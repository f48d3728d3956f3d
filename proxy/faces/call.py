"""One POST to the MCP endpoint, parsed once (docs/architecture.md "The request path").

The entry reads the body once and builds a `Call`; routing, the pairings and the faces take the
call, not its pieces. What the call came to is an `Outcome`, which the layer that answered
reports (returns, or raises as an `McpError`) and the entry's observer records once
(`proxy/observe/outcome.py`). Nothing here counts.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from translators import jsonrpc
from translators.envelope import ModernMeta
from translators.errors import McpError
from translators.failures import Failure
from translators.tool_results import Seen

ClientKey = tuple[str, str]
"""A client as it names itself: (`clientInfo.name`, `clientInfo.version`); ("unknown", "") without one."""
UNKNOWN_CLIENT: ClientKey = ("unknown", "")
UNCLASSIFIED = "unclassified"
"""The face of a POST read as neither a modern request nor a session's (no JSON-RPC, no 2026-07-28
envelope, no session): counted in a row of its own, never under a dialect."""
CANCELLED = "cancelled"
"""The outcome of a request whose client left before its answer's end (not an error)."""

REFUSAL = web.RequestKey("mcp_tasks_proxy_refusal", McpError)
"""The error a proxy session's rules raised for a request, for its failure's reason."""
SEEN = web.RequestKey("mcp_tasks_proxy_tool_seen", Seen)
"""What the answer to a `tools/call`, `tasks/get` or `tasks/result` said of the tool's outcome
(`translators.tool_results`), left by a layer that wrote it and holds only the request (a proxy
session, the held v1 calls; a relay sets `Call.seen`): the observer counts it (`proxy/observe/tools.py`)."""


def client_key(info: Any) -> ClientKey:
    """The `ClientKey` of a `clientInfo` object (anything else: `UNKNOWN_CLIENT`). Names and
    versions are cut to 64 characters."""
    if not isinstance(info, dict):
        return UNKNOWN_CLIENT
    name, version = info.get("name"), info.get("version")
    if not isinstance(name, str) or not name:
        return UNKNOWN_CLIENT
    return name[:64], version[:64] if isinstance(version, str) else ""


RELAYED = "relayed"
"""An answer a relay passed on from the backend, on the modern wire."""
RELAYED_SESSION = "relayed-session"
"""An answer a relay passed on from the backend, on a relayed session."""
OWN_SESSION = "own-session"
"""An answer of one of the proxy's own sessions (`proxy.faces.session`)."""
TRANSLATED = "translated"
"""A translating pairing's `Reply` to a modern request (`proxy.faces.modern`)."""


class Outcome:
    """What a call came to as its client saw it: `label` "ok", "cancelled", a JSON-RPC code
    ("-32602") or "http_<status>"; `failure` (reason code, by whom: `translators.failures`) when
    the layer that answered knows it; else the observer reads it from the answer, or from the
    label; `reason`, a refusal's message free of header values. `source` says who answered
    (`RELAYED`, `RELAYED_SESSION`, `OWN_SESSION`, `TRANSLATED`; None: the proxy refused, or
    answered in the backend's stead) and `answer` what the client got, as far as the observer may
    read it: the response of a relay or a proxy session, the result object of a translation (for
    the trace and the shadows). Never changed once made: the usual ones are shared."""

    __slots__ = ("label", "failure", "reason", "answer", "source")

    def __init__(self, label: str, failure: Failure | None = None, reason: str | None = None, *, answer: Any = None,
                 source: str | None = None):
        self.label = label
        self.failure = failure
        self.reason = reason
        self.answer = answer
        self.source = source

    @classmethod
    def relayed(cls, response: web.StreamResponse, source: str) -> Outcome:
        """A relayed answer from `source`: its body is not read, so only its HTTP status ("ok" below 300)."""
        status = response.status
        if status < 300:
            return _OK_FROM[source]
        return cls(f"http_{status}", answer=response, source=source)

    @staticmethod
    def ok(source: str) -> Outcome:
        """An answer from `source` that was ok (shared)."""
        return _OK_FROM[source]

    @classmethod
    def of_status(cls, status: int) -> Outcome:
        """An answer the proxy gave in a backend's stead, by its HTTP status alone."""
        return OK if status < 300 else cls(f"http_{status}")


OK = Outcome("ok")
_OK_FROM = {source: Outcome("ok", source=source) for source in (RELAYED, RELAYED_SESSION, OWN_SESSION)}


class Call:
    """One POST, parsed once: the HTTP `request` and its `body`, the JSON-RPC `message`, the `face`
    it came in on ("v2-modern", "v1", "v2-session", or `UNCLASSIFIED` until read), the client's
    `dialect` when it is not the face's (a relayed v2-session), its `principal` (None until the
    entry has worked it out: a relayed session's POST needs none), its `client` (`clientInfo`), the modern `meta`, the `repairs` the proxy made
    good for it, and where it is counted: `backend` (a `proxy.upstream.backend.Backend`; the fleet's
    first until routed) and `backend_dialect` (None: what the backend speaks now)."""

    __slots__ = ("request", "body", "message", "face", "dialect", "principal", "client", "meta", "repairs", "backend",
                 "backend_dialect", "relaying", "recorded", "started", "seen")

    def __init__(self, request: web.Request, backend: Any):
        self.request = request
        self.body = b""
        self.message: jsonrpc.Message | None = None
        self.face = UNCLASSIFIED
        self.dialect: str | None = None
        self.principal: str | None = None
        self.client: ClientKey = UNKNOWN_CLIENT
        self.meta: ModernMeta | None = None
        self.repairs: tuple[str, ...] = ()
        self.backend = backend
        self.backend_dialect: str | None = None
        self.relaying = False
        """A relay is under way: a client that leaves now is counted (`CANCELLED`, or ok once it had its answer)."""
        self.recorded = False
        """The observer has its outcome (a translated answer's is recorded before it is written)."""
        self.started = time.perf_counter()
        """When the entry took the call (`time.perf_counter`): a tool call's latency is counted from here."""
        self.seen: Seen | None = None
        """What a relay read of its answer about a tool call (`translators.tool_results`); other
        layers, which hold only the request, leave it as `SEEN` on the request."""

    @property
    def method(self) -> str | None:
        message = self.message
        return message.method if message is not None else None

    @property
    def session_id(self) -> str | None:
        return self.request.headers.get("Mcp-Session-Id")
