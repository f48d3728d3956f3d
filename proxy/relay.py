"""Relay: the same dialect on both sides (TRANSLATION.md §3). Bytes are forwarded unchanged: SSE
streams (and bodies of unknown or large size) as they arrive, a JSON answer of known length in one
write; nothing is parsed beyond what routing already read. With one backend, task and session ids pass
through unchanged (TRANSLATION.md §6). With several, the caller gives `session_id` (the upstream
session a sealed `Mcp-Session-Id` names) and `seal_session` (for the id a backend hands out), and on
the modern wire `rewrite`, applied to every JSON-RPC message of the answer (its task ids); only then
are answers parsed, SSE event by event.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Iterable, Mapping

import aiohttp
from aiohttp import web

from translators import jsonrpc
from translators.errors import McpError, backend_unavailable
from translators.protocol import H_LAST_EVENT_ID, H_METHOD, H_NAME, H_PROTOCOL_VERSION, H_SESSION_ID

from .metrics import clock
from .sse import SseParser
from .upstream.session_wire import IDEMPOTENT_METHODS, Backend

log = logging.getLogger(__name__)

REQUEST_HEADERS = ("Authorization", "Accept", "Content-Type", H_PROTOCOL_VERSION, H_METHOD, H_NAME, H_SESSION_ID, H_LAST_EVENT_ID)
"""Request headers a relay forwards (plus the configured `forward_headers`); hop-by-hop never."""
RESPONSE_HEADERS = ("Content-Type", H_SESSION_ID, H_NAME, H_METHOD, "Cache-Control", "X-Accel-Buffering")
WHOLE_BODY_MAX = 1024 * 1024
"""A non-SSE answer of known length up to this size is read whole and sent in one write."""


async def relay(request: web.Request, backend: Backend, body: bytes | None, forward_headers: Iterable[str] = (),
                add_headers: Mapping[str, str] | None = None, *, set_headers: Mapping[str, str] | None = None,
                session_id: str | None = None, seal_session: Callable[[str], str] | None = None,
                rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None, method: str | None = None) -> web.StreamResponse:
    """Forward `request` (with `body` for POST) to `backend` and stream its answer back.
    `add_headers` are set where the client did not send them (the modern routing headers, which
    the proxy sends on every modern upstream request, TRANSLATION.md §6); `set_headers` replace the
    client's. `session_id`, `seal_session` and `rewrite`: see the module docstring. `method`: the
    JSON-RPC method of a POST, whose time to the backend's response headers is recorded in
    `mcp_tasks_proxy_upstream_seconds`.

    A POST that cannot be sent raises the connector's `McpError` (`BackendUnreachable` when no
    connection could be made, so that new work may go to another backend); a GET or DELETE that
    cannot be sent gets the client a 502 with a JSON-RPC error naming the backend.
    """
    wanted = (*REQUEST_HEADERS, *forward_headers)
    headers = {h: request.headers[h] for h in wanted if h in request.headers}
    for name, value in (add_headers or {}).items():
        headers.setdefault(name, value)
    headers.update(set_headers or {})
    if session_id is not None:
        headers[H_SESSION_ID] = session_id
    started = clock()
    try:
        if request.method == "POST":
            upstream = await backend.post(body or b"", headers, idempotent=method in IDEMPOTENT_METHODS)
            if method is not None:
                backend.metrics.upstream(backend.name, method, clock() - started)
        else:
            upstream = await backend.http.request(request.method, backend.url, headers={**backend.extra_headers, **headers},
                                                  timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        error = backend_unavailable(backend.name, f"cannot reach it ({exc.__class__.__name__})")
        return web.Response(body=jsonrpc.dumps(jsonrpc.error_response(None, error)), status=502, content_type="application/json")
    async with upstream:
        headers = {name: upstream.headers[name] for name in RESPONSE_HEADERS if name in upstream.headers}
        if seal_session is not None and H_SESSION_ID in headers:
            headers[H_SESSION_ID] = seal_session(headers[H_SESSION_ID])
        is_sse = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
        if rewrite is not None:
            return await _relay_rewritten(request, upstream, headers, is_sse, rewrite, backend.name)
        length = upstream.content_length
        if length is not None and length <= WHOLE_BODY_MAX and not is_sse:
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


async def _relay_rewritten(request: web.Request, upstream: aiohttp.ClientResponse, headers: dict[str, str], is_sse: bool,
                           rewrite: Callable[[dict[str, Any]], dict[str, Any]], backend: str) -> web.StreamResponse:
    """The answer with `rewrite` applied to each JSON-RPC message: a JSON body whole, an SSE body
    event by event as they arrive. A body that is not JSON-RPC passes unchanged. The backend's
    `Mcp-Name` is replaced by the rewritten result's `taskId` (the sealed id), if it has one."""
    headers.pop(H_NAME, None)  # the backend's own task id: set again below from the rewritten answer
    if not is_sse:
        try:
            raw = await upstream.read()
        except (aiohttp.ClientError, ConnectionError, asyncio.TimeoutError) as exc:
            error = backend_unavailable(backend, f"connection failed while reading: {exc.__class__.__name__}")
            return web.Response(body=jsonrpc.dumps(jsonrpc.error_response(None, error)), status=502, content_type="application/json")
        try:
            message = jsonrpc.parse(raw).raw
        except McpError:
            return web.Response(body=raw, status=upstream.status, headers=headers)
        message = rewrite(message)
        result = message.get("result")
        if isinstance(result, dict) and isinstance(result.get("taskId"), str):
            headers[H_NAME] = result["taskId"]
        return web.Response(body=jsonrpc.dumps(message), status=upstream.status, headers=headers)
    response = web.StreamResponse(status=upstream.status, headers=headers)
    await response.prepare(request)
    parser = SseParser()
    try:
        async for chunk in upstream.content.iter_any():
            for event in parser.feed(chunk):
                frame = b"" if event.id is None else b"id: " + event.id.encode() + b"\n"
                frame += b"event: " + event.event.encode() + b"\n"
                for line in _rewrite_data(event.data.encode(), rewrite).split(b"\n"):
                    frame += b"data: " + line + b"\n"
                await response.write(frame + b"\n")
        await response.write_eof()
    except (aiohttp.ClientError, ConnectionError, asyncio.TimeoutError) as exc:
        log.info("relay from %s ended early: %s", backend, exc.__class__.__name__)
    return response


def _rewrite_data(raw: bytes, rewrite: Callable[[dict[str, Any]], dict[str, Any]]) -> bytes:
    try:
        message = jsonrpc.parse(raw)
    except McpError:
        return raw
    return jsonrpc.dumps(rewrite(message.raw))
