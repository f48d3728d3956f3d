"""Upstream connector for the modern wire (core 2026-07-28, stateless): v2-modern backends.

Every request carries its envelope in `params._meta` (protocol version, client capabilities,
client info), the headers `MCP-Protocol-Version`, `Mcp-Method` and, where the body names
something, `Mcp-Name` (Base64-sentinel encoded when not header-safe), and on `tools/call` the
`Mcp-Param-*` headers of the tool's `x-mcp-header` arguments (`tool_headers.ToolHeaders`, when
given). Errors come back with HTTP
statuses (400/404) and a JSON-RPC body. Source: core 2026-07-28 §Transports; SEP-2663 §Routing
headers; docs/behaviour.md §6 "Routing headers (`Mcp-Name`, `Mcp-Method`)".
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Mapping
from typing import Any

from translators import jsonrpc
from translators.envelope import ModernMeta, add_envelope, encode_header_value, name_param
from translators.errors import McpError
from translators.protocol import H_METHOD, H_NAME, H_PROTOCOL_VERSION

from .endpoint import ACCEPT_BOTH, IDEMPOTENT_METHODS, Endpoint
from .session_wire import NotificationHandler, read_answer
from .tool_headers import ToolHeaders

log = logging.getLogger(__name__)


async def _no_server_requests(message: dict[str, Any]) -> None:
    """Modern SSE streams must not carry requests (core 2026-07-28 MRTR); one that does is ignored."""
    log.warning("modern backend sent a server request (%s) on a response stream; ignored", message.get("method"))
    return None


async def _nowhere(_answer: dict[str, Any]) -> None:  # pragma: no cover - never called
    return None


class ModernClient:
    """Requests to one modern backend; stateless, so one instance serves every caller.
    `tool_headers`: where the `Mcp-Param-*` headers of a `tools/call` come from (None: none added)."""

    def __init__(self, backend: Endpoint, tool_headers: ToolHeaders | None = None):
        self.backend = backend
        self.tool_headers = tool_headers
        self._ids = itertools.count(1)

    async def _ask(self, method: str, params: dict[str, Any], meta: ModernMeta, headers: Mapping[str, str]) -> dict[str, Any]:
        return await self.request(method, params, meta, headers=headers)

    async def request(self, method: str, params: dict[str, Any], meta: ModernMeta, *,
                      headers: Mapping[str, str] | None = None,
                      on_notification: NotificationHandler | None = None) -> dict[str, Any]:
        """Send one request with `meta` as its envelope and return its `result`.

        Raises `McpError` for a JSON-RPC error answer (-32003 renumbered to -32021) and `McpError`
        with HTTP 502 naming the backend when it is unreachable or answers something not MCP.
        """
        request_id = next(self._ids)
        body = jsonrpc.dumps(jsonrpc.request(request_id, method, add_envelope(params, meta)))
        request_headers = {**(headers or {}), "Accept": ACCEPT_BOTH, H_PROTOCOL_VERSION: meta.protocol_version, H_METHOD: method}
        name = name_param(method, params)
        if name is not None:
            request_headers[H_NAME] = encode_header_value(name)
        if method == "tools/call" and self.tool_headers is not None:
            request_headers.update(await self.tool_headers.for_call(params, meta, headers or {}, self._ask))
        started = time.perf_counter()
        try:
            response = await self.backend.post(body, request_headers, idempotent=method in IDEMPOTENT_METHODS)
            async with response:
                result = await read_answer(self.backend.name, response, (method, request_id), (_no_server_requests, on_notification, _nowhere))
        except McpError:
            self.backend.on_hop(method, time.perf_counter() - started)
            raise
        self.backend.on_hop(method, time.perf_counter() - started)
        return result
