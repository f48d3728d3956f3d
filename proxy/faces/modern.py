"""The modern wire as the proxy's clients speak it (the stateless 2026-07-28 wire): one checked
request in flight (`ModernRequest`) and a pairing's answer to it (`Reply`).

The entry (`proxy/entry.py`) parses and checks every POST, then hands a `ModernRequest` to the
pairing that serves this client in front of its backend (`proxy/pairings/`); the pairing gives
back a `Reply`, which the entry writes as JSON (or, when the reply carries notifications to send
before its answer, as a server-sent event stream).
"""

from __future__ import annotations

from typing import Any, Mapping

from translators.envelope import ModernMeta


class Reply:
    """A pairing's answer to one request: `notifications` (JSON-RPC notifications to send before
    the answer, in order; none today), then the `result` object, with extra HTTP `headers`."""

    __slots__ = ("result", "headers", "notifications")

    def __init__(self, result: dict[str, Any], headers: Mapping[str, str] | None = None,
                 notifications: list[dict[str, Any]] | None = None):
        self.result = result
        self.headers = dict(headers or {})
        self.notifications = list(notifications or ())


class ModernRequest:
    """One checked modern request in flight: who asks (`principal`), with which envelope (`meta`),
    forwarding which headers upstream (`upstream_headers`)."""

    __slots__ = ("method", "params", "meta", "principal", "upstream_headers")

    def __init__(self, method: str, params: dict[str, Any], meta: ModernMeta, principal: str, upstream_headers: dict[str, str]):
        self.method = method
        self.params = params
        self.meta = meta
        self.principal = principal
        self.upstream_headers = upstream_headers
