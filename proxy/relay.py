"""Relay: the same dialect on both sides (TRANSLATION.md §3). Bytes are forwarded as they arrive;
nothing is parsed beyond what routing already read. With one backend, task and session ids pass
through unchanged (TRANSLATION.md §6).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Iterable

import aiohttp
from aiohttp import web

from translators import jsonrpc
from translators.errors import backend_unavailable
from translators.protocol import H_LAST_EVENT_ID, H_METHOD, H_NAME, H_PROTOCOL_VERSION, H_SESSION_ID

from .upstream.session_wire import Backend

log = logging.getLogger(__name__)

REQUEST_HEADERS = ("Authorization", "Accept", "Content-Type", H_PROTOCOL_VERSION, H_METHOD, H_NAME, H_SESSION_ID, H_LAST_EVENT_ID)
"""Request headers a relay forwards (plus the configured `forward_headers`); hop-by-hop never."""
RESPONSE_HEADERS = ("Content-Type", H_SESSION_ID, H_NAME, H_METHOD, "Cache-Control", "X-Accel-Buffering")


async def relay(request: web.Request, backend: Backend, body: bytes | None, forward_headers: Iterable[str] = ()) -> web.StreamResponse:
    """Forward `request` (with `body` for POST) to `backend` and stream its answer back.

    An unreachable backend gets the client a 502 with a JSON-RPC error naming it.
    """
    wanted = (*REQUEST_HEADERS, *forward_headers)
    headers = {h: request.headers[h] for h in wanted if h in request.headers}
    try:
        if request.method == "POST":
            upstream = await backend.post(body or b"", headers)
        else:
            upstream = await backend.http.request(request.method, backend.url, headers={**backend.extra_headers, **headers},
                                                  timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        error = backend_unavailable(backend.name, f"cannot reach it ({exc.__class__.__name__})")
        return web.Response(body=jsonrpc.dumps(jsonrpc.error_response(None, error)), status=502, content_type="application/json")
    async with upstream:
        response = web.StreamResponse(status=upstream.status)
        for name in RESPONSE_HEADERS:
            if name in upstream.headers:
                response.headers[name] = upstream.headers[name]
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
        except (aiohttp.ClientError, ConnectionError, asyncio.TimeoutError) as exc:
            log.info("relay from %s ended early: %s", backend.name, exc.__class__.__name__)
        return response
