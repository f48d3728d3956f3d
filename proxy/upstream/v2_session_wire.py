"""Upstream connector for v2-session backends: SEP-2663 requests carried on the session wire.

The per-request envelope of the modern wire becomes session state: each upstream session is
opened (`initialize`) declaring the caller's input capabilities and, when the caller declared it,
the tasks extension; it is pooled per (principal, those capabilities), so a principal's tasks stay
on the session that created them (v2-session servers bind tasks to sessions, like v1 servers).
Requests for input during a call arrive as server→client requests (the session wire allows
them), not as MRTR rounds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from translators.capabilities import with_tasks_extension
from translators.envelope import ModernMeta, strip_envelope, upstream_client_capabilities

from .pool import SessionPool
from .session_wire import NotificationHandler, ServerRequestHandler, UpstreamSession


def session_capabilities(meta: ModernMeta) -> dict[str, Any]:
    """What an upstream v2-session declares in `initialize` for a caller with this envelope."""
    capabilities = upstream_client_capabilities(meta.client_capabilities)
    return with_tasks_extension(capabilities) if meta.declares_tasks else capabilities


class V2SessionClient:
    """The `ModernClient` interface over a v2-session backend's pooled sessions."""

    def __init__(self, pool: SessionPool):
        self.pool = pool

    async def session(self, meta: ModernMeta, principal: str, headers: Mapping[str, str]) -> UpstreamSession:
        """The caller's pooled session for this envelope's capabilities."""
        return await self.pool.shared(principal, session_capabilities(meta), headers)

    async def request(self, method: str, params: dict[str, Any], meta: ModernMeta, *,
                      headers: Mapping[str, str] | None = None, principal: str = "anonymous",
                      on_server_request: ServerRequestHandler | None = None,
                      on_notification: NotificationHandler | None = None) -> dict[str, Any]:
        """Send one request on the caller's session and return its `result` (v2 shapes as the
        backend gives them); notifications on its answer stream go to `on_notification`. Raises
        like `UpstreamSession.request`."""
        session = await self.session(meta, principal, headers or {})
        return await session.request(method, strip_envelope(params), headers=headers, on_server_request=on_server_request,
                                     on_notification=on_notification)
