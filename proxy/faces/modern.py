"""The modern wire as the proxy's clients speak it (the stateless 2026-07-28 wire): one checked
request in flight (`ModernRequest`), a pairing's answer to it (`Reply`), and the answer as it goes
out (`AnswerStream`: JSON, or a server-sent event stream once a notification about the request
arrives before its answer, for a client whose `Accept` allows one; docs/behaviour.md §4.10).

The entry (`proxy/entry.py`) parses and checks every POST, then hands a `ModernRequest` to the
pairing that serves this client in front of its backend (`proxy/pairings/`); the pairing may call
`ModernRequest.notify` while it works (each call goes out at once), and gives back a `Reply`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from translators import jsonrpc
from translators.envelope import ModernMeta

from ..sse import sse_frame
from .checks import json_response, stream_to, takes_sse

Notify = Callable[[dict[str, Any]], Awaitable[None]]
"""Send one JSON-RPC notification about the request to its client, now."""


class Reply:
    """A pairing's answer to one request: `notifications` (JSON-RPC notifications to send before
    the answer, in order, after any sent with `ModernRequest.notify`), then the `result` object,
    with extra HTTP `headers` (sent only when the answer is JSON: an answer streamed as SSE has
    sent its headers with the first notification)."""

    __slots__ = ("result", "headers", "notifications")

    def __init__(self, result: dict[str, Any], headers: Mapping[str, str] | None = None,
                 notifications: list[dict[str, Any]] | None = None):
        self.result = result
        self.headers = dict(headers or {})
        self.notifications = list(notifications or ())


async def _nobody(_message: dict[str, Any]) -> None:
    return None


class ModernRequest:
    """One checked modern request in flight: who asks (`principal`), with which envelope (`meta`),
    forwarding which headers upstream (`upstream_headers`), and where notifications about it go
    (`notify`; by default nowhere, `streamed` gives one); `request_id` is its JSON-RPC id (a
    subscription's id; None until `streamed`)."""

    __slots__ = ("method", "params", "meta", "principal", "upstream_headers", "notify", "request_id")

    def __init__(self, method: str, params: dict[str, Any], meta: ModernMeta, principal: str, upstream_headers: dict[str, str]):
        self.method = method
        self.params = params
        self.meta = meta
        self.principal = principal
        self.upstream_headers = upstream_headers
        self.notify: Notify = _nobody
        self.request_id: jsonrpc.RequestId | None = None

    def streamed(self, notify: Notify | None, request_id: jsonrpc.RequestId | None = None) -> ModernRequest:
        """This request, its notifications sent to `notify` (None: nowhere), its JSON-RPC id `request_id`."""
        self.notify = notify or _nobody
        self.request_id = request_id
        return self


class AnswerStream:
    """The answer to one modern POST as it goes out: nothing is written until the first
    notification (`notify`), which opens a `text/event-stream` response (`X-Accel-Buffering: no`,
    a `: keep-alive` comment every `keepalive_s` seconds from then on); `finish` writes the answer
    as the last event, or as JSON when no notification came. A client whose `Accept` does not
    allow `text/event-stream` (`takes_sse`) cannot receive notifications: `notify` drops them and
    the answer is JSON (docs/decisions.md §65). A client gone away makes `notify` a no-op (the
    entry's handler is then cancelled, and with it the upstream request)."""

    def __init__(self, request: web.Request, keepalive_s: float):
        self.request = request
        self.keepalive_s = keepalive_s
        self.stream: web.StreamResponse | None = None
        self.gone = not takes_sse(request.headers.get("Accept"))
        """Whether nothing can be streamed to the client (it went away, or takes JSON only)."""
        self._events = 0
        self._keepalive: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        """Whether the SSE response has been opened (its status and headers are sent)."""
        return self.stream is not None

    async def notify(self, message: dict[str, Any]) -> None:
        if self.gone:
            return
        try:
            if self.stream is None:
                stream = web.StreamResponse(status=200, headers={
                    "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
                self.stream = stream
                await stream_to(self.request, stream)
                self._keepalive = asyncio.ensure_future(self._keep_alive(stream))
            self._events += 1
            await self.stream.write(sse_frame(self._events, message))
        except (ConnectionError, RuntimeError):
            self.gone = True

    async def _keep_alive(self, stream: web.StreamResponse) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            while True:
                await asyncio.sleep(self.keepalive_s)
                await stream.write(b": keep-alive\n\n")

    async def finish(self, answer: dict[str, Any], status: int = 200, headers: Mapping[str, str] | None = None) -> web.StreamResponse:
        """Write `answer` (a JSON-RPC response): as JSON with `status` and `headers` when nothing
        was streamed, else as the stream's last event (the stream's status stays 200)."""
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self.stream is None:
            return json_response(answer, status, headers)
        if not self.gone:
            with contextlib.suppress(ConnectionError, RuntimeError):
                self._events += 1
                await self.stream.write(sse_frame(self._events, answer))
                await self.stream.write_eof()
        return self.stream

    def close(self) -> None:
        """Stop the keep-alive comments (the handler was cancelled)."""
        if self._keepalive is not None:
            self._keepalive.cancel()


async def write_reply(out: AnswerStream, request_id: Any, reply: Reply) -> web.StreamResponse:
    """A pairing's reply through `out`: its own notifications, then the answer."""
    for message in reply.notifications:
        await out.notify(message)
    return await out.finish(jsonrpc.result_response(request_id, reply.result), 200, reply.headers)
