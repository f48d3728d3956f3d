"""Relay: the same dialect on both sides (TRANSLATION.md §3). Bytes are forwarded unchanged: SSE
streams (and bodies of unknown or large size) as they arrive, a JSON answer of known length in one
write; nothing is parsed beyond what routing already read. With one backend, task and session ids pass
through unchanged (TRANSLATION.md §6).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Iterable, Mapping

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
WHOLE_BODY_MAX = 1024 * 1024
"""A non-SSE answer of known length up to this size is read whole and sent in one write."""


async def relay(request: web.Request, backend: Backend, body: bytes | None, forward_headers: Iterable[str] = (),
                add_headers: Mapping[str, str] | None = None) -> web.StreamResponse:
    """Forward `request` (with `body` for POST) to `backend` and stream its answer back.
    `add_headers` are set where the client did not send them (the modern routing headers, which
    the proxy sends on every modern upstream request, TRANSLATION.md §6).

    An unreachable backend gets the client a 502 with a JSON-RPC error naming it.
    """
    wanted = (*REQUEST_HEADERS, *forward_headers)
    headers = {h: request.headers[h] for h in wanted if h in request.headers}
    for name, value in (add_headers or {}).items():
        headers.setdefault(name, value)
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
        headers = {name: upstream.headers[name] for name in RESPONSE_HEADERS if name in upstream.headers}
        length = upstream.content_length
        if length is not None and length <= WHOLE_BODY_MAX and not upstream.headers.get("Content-Type", "").startswith("text/event-stream"):
            # A body of known, modest length (a JSON answer, a 202): one read, one write downstream
            # with its Content-Length, instead of a chunked stream of three writes.
            try:
                body = await upstream.read()
            except (aiohttp.ClientError, ConnectionError, asyncio.TimeoutError) as exc:
                log.info("relay from %s ended early: %s", backend.name, exc.__class__.__name__)
                error = backend_unavailable(backend.name, f"connection failed while reading: {exc.__class__.__name__}")
                return web.Response(body=jsonrpc.dumps(jsonrpc.error_response(None, error)), status=502, content_type="application/json")
            return web.Response(body=body, status=upstream.status, headers=headers)
        response = web.StreamResponse(status=upstream.status, headers=headers)
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
        except (aiohttp.ClientError, ConnectionError, asyncio.TimeoutError) as exc:
            log.info("relay from %s ended early: %s", backend.name, exc.__class__.__name__)
        return response
