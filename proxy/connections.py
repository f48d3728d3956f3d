"""Bounds on every client connection (docs/decisions.md §40, §41): a deadline for request headers,
an idle timeout, a cap on open connections, and parser errors answered and logged without echoing
the request's bytes.

aiohttp's `RequestHandler` already closes a connection that has no request in progress for
`keepalive_timeout` seconds (a fresh one that sends nothing included); it is given
`idle_timeout_ms`. A request in progress is never idle, so the session face's GET stream (a
keep-alive comment every 15 s), a held `tasks/result` and relayed SSE are not cut by it. What
aiohttp lacks is added here, in a subclass: the header deadline (aiohttp waits for a head trickled
one byte at a time until the idle timer fires, and not at all once a request has started it), the
cap (answered 503 with a JSON-RPC error body, then closed), and `handle_error` for malformed
requests (aiohttp logs the parser's message, which quotes up to 100 bytes of the offending line:
a bearer token in an oversized `Authorization` header). The subclass reads a few of aiohttp's
private fields (`_waiter`, `_messages`, `_request_count`, `_request_handler`): aiohttp is pinned
in pyproject.toml, and tests/operations/test_connections.py measures every bound against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import struct
import termios
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.http_parser import RawRequestMessage
from aiohttp.http_writer import StreamWriter
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from aiohttp.web_protocol import RequestHandler, _ErrInfo
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from translators import jsonrpc
from translators.errors import INTERNAL_ERROR, INVALID_REQUEST, McpError

from .lean_face import LeanTarget, Parsed, finish_head, head_bytes, plain_body, whole_post
from .logs import REQUEST_ID_HEADER, request_id_from

log = logging.getLogger(__name__)

LIVENESS_PATH = "/healthz"
"""Served also beyond `max_connections`: idle sockets filling the cap must not make an
orchestrator restart a live process."""
BUSY_RETRY_AFTER_S = 1
"""`Retry-After` of the 503 answered beyond `max_connections`."""


@dataclass
class ConnectionLimits:
    """The bounds of one listening socket: `header_timeout_s`, `idle_timeout_s` (seconds) and
    `max_connections`; `open` counts the connections open now."""

    header_timeout_s: float
    idle_timeout_s: float
    max_connections: int
    open: int = 0
    live: set[BoundedRequestHandler] = field(default_factory=set)
    """The connections open now (a restart drains them: `drain_connections`)."""
    lean: dict[str, LeanTarget] = field(default_factory=dict)
    """The paths whose plain POSTs the lean face serves (`proxy/lean_face.py`), set at start."""


def _error_body(code: int, message: str) -> bytes:
    return jsonrpc.dumps(jsonrpc.error_response(None, McpError(code, message)))


async def _busy(request: BaseRequest) -> StreamResponse:
    """The answer to every request on a connection over `max_connections`: 503, then close."""
    response = web.Response(status=503, body=_error_body(INTERNAL_ERROR, "Service Unavailable: too many open connections; retry later"),
                            content_type="application/json",
                            headers={"Retry-After": str(BUSY_RETRY_AFTER_S),
                                     REQUEST_ID_HEADER: request_id_from(request.headers.get(REQUEST_ID_HEADER))})
    response.force_close()
    return response


class BoundedRequestHandler(RequestHandler):
    """aiohttp's HTTP/1.1 protocol with the bounds of `ConnectionLimits` (see the module)."""

    def __init__(self, manager: web.Server, *, limits: ConnectionLimits, **kwargs: Any):
        super().__init__(manager, keepalive_timeout=limits.idle_timeout_s, **kwargs)
        self._limits = limits
        self._counted = False
        self._header_deadline: asyncio.TimerHandle | None = None
        self._plain = self._request_handler
        """The application's handler: while it is the one in use (no cap, no drain), the lean face may serve."""
        self._lean: asyncio.Task[None] | None = None
        """The request the lean face is serving (`proxy/lean_face.py`); what arrives meanwhile waits in `_held`."""
        self._held = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._limits.open += 1
        self._limits.live.add(self)
        self._counted = True
        if self._limits.open > self._limits.max_connections:
            self._request_handler = self._over_the_cap(self._request_handler)
        super().connection_made(transport)

    @staticmethod
    def _over_the_cap(serve: Any) -> Any:
        """The request handler of a connection beyond `max_connections`: 503 (`_busy`), except
        the liveness check `GET /healthz`, served as usual; either way the connection then closes
        (docs/decisions.md §46)."""

        async def handle(request: BaseRequest) -> StreamResponse:
            if request.method != "GET" or request.path != LIVENESS_PATH:
                return await _busy(request)
            response = await serve(request)
            response.force_close()
            return response

        return handle

    def connection_lost(self, exc: BaseException | None) -> None:
        self._limits.live.discard(self)
        if self._counted:
            self._counted = False
            self._limits.open -= 1
        self._stop_header_deadline()
        super().connection_lost(exc)
        if self._lean is not None:  # its client left: cancelled, as aiohttp's handler_cancellation does
            self._lean.cancel()

    def data_received(self, data: bytes) -> None:
        # The clock starts with the first byte of a request head: between requests (start() waits
        # for the next one) or before the first. Bytes that arrive while a request is handled are
        # its body (bounded by body_timeout_ms) or pipelined ones, timed once that request ends.
        # (Written out, without helpers: this runs for every read of every connection.)
        if self._lean is not None:  # pipelined behind a lean request: read once it is answered
            self._held += data
            if len(self._held) > self._read_bufsize and self.transport is not None:
                self.transport.pause_reading()
            return
        parsed = self._request_count
        if self._header_deadline is not None:  # a head begun earlier
            super().data_received(data)
            if self._request_count != parsed:  # complete now (or refused as malformed)
                self._stop_header_deadline()
            return
        waiter = self._waiter
        starts = (bool(data) and not self._force_close and not self._close and not self._messages
                  and (parsed == 0 or (waiter is not None and not waiter.done())))
        if starts and self._limits.lean and self._request_handler is self._plain and self._payload_parser is None \
                and not self._upgraded:
            self._parse_lean(data)
        else:
            super().data_received(data)
        if starts and self._request_count == parsed and not self._force_close:
            # A head begun and not complete (no timer for the common whole head).
            self._header_deadline = self._loop.call_later(self._limits.header_timeout_s, self._header_timeout)

    def _parse_lean(self, data: bytes) -> None:
        """A read that begins a request, parsed by the connection's own parser as aiohttp's
        `data_received` parses it: one whole plain POST is served by the lean face
        (`proxy/lean_face.py`); anything else is queued for aiohttp's request loop as aiohttp queues it."""
        lean = None
        try:
            found: Parsed = self._parser.feed_data(data)  # type: ignore[union-attr]
            lean = whole_post(found, self._limits.lean)
        except HttpProcessingError as exc:  # answered 400 by aiohttp's loop (`handle_error`)
            found = ([(_ErrInfo(status=400, exc=exc, message=exc.message), EMPTY_PAYLOAD)], False, b"")
        messages, upgraded, tail = found
        self._request_count += len(messages)
        if lean is not None:  # taken off the queue at once: the parser counts it consumed, as aiohttp's loop tells it
            self._parser.message_consumed()  # type: ignore[union-attr]
            self._lean = self._loop.create_task(self._serve_lean(*lean))
            return
        self._messages.extend(messages)
        waiter = self._waiter
        if messages and waiter is not None and not waiter.done():
            waiter.set_result(None)
        if not self._buffer_paused and len(self._messages) >= self._max_msg_queue_size:
            self._pause_reading_for_buffer()
        self._upgraded = upgraded
        if upgraded and tail:
            self._message_tail = tail

    def drain(self, grace_s: float) -> None:
        """Keep the connection alive no more (a restart hands over, `drain_connections`): its next
        answer says `Connection: close` and the connection closes after it, so that its client
        opens the next one to the new process; an idle connection that gets no request within
        `grace_s` is closed then (its client sees it closed before it reuses it)."""
        serve = self._request_handler
        if serve is None:
            return

        async def closing(request: BaseRequest) -> StreamResponse:
            # As if the client had asked to close: every answer, a stream's too, says so in its head.
            request._message = request._message._replace(should_close=True)  # aiohttp reads keep_alive from it
            response = await serve(request)
            response.force_close()
            return response

        self._request_handler = closing
        self._loop.call_later(grace_s, self._close_if_idle)

    def _close_if_idle(self) -> None:
        if self._waiter is not None and not self._messages and self._lean is None and not self._unread():
            self.close()

    def _unread(self) -> bool:
        """Whether bytes wait in the kernel for this connection that the loop has not read yet: a
        request sent while the loop was busy (or the process stopped). Closing then would drop it
        with a reset (the kernel answers a close with unread bytes with RST), so an idle close
        waits for it (docs/decisions.md §176)."""
        transport = self.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None:
            return False
        try:
            return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0] > 0
        except (OSError, ValueError):
            return False

    async def _serve_lean(self, target: LeanTarget, message: RawRequestMessage, payload: StreamReader) -> None:
        """One request the lean face took (`proxy/lean_face.py`): built, handled and answered as
        aiohttp's request loop does it, with its keep-alive, cancellation and graceful stop."""
        loop = self._loop
        self._request_in_progress = True
        keep_alive = False
        request: BaseRequest | None = None
        try:
            if self._manager is None or self._request_factory is None:
                return  # the connection was lost before this task ran
            self._manager.requests_count += 1
            request = self._request_factory(message, payload, self, StreamWriter(self, loop), asyncio.current_task(loop))  # type: ignore[arg-type]
            request._match_info = target.match_info
            self._current_request = request
            try:
                response = await target.handler(request)
            finally:
                self._current_request = None
            if self._request_handler is not self._plain:  # drained meanwhile: this answer is the connection's last
                response.force_close()
            body = plain_body(response)
            if body is None:  # streamed, already sent, or anything unusual: aiohttp's response code writes it
                await response.prepare(request)
                await response.write_eof()
                keep_alive = bool(response.keep_alive)
            else:  # a whole JSON answer: its head as aiohttp's would be, and the body, in one write
                keep_alive = response._keep_alive if response._keep_alive is not None else not message.should_close
                finish_head(response, body, keep_alive)
                if target.prepare is None:
                    await request._prepare_hook(response)  # the application's on_response_prepare (X-Request-Id)
                else:  # the same receivers, each as a plain function (`prepare_now`)
                    for now in target.prepare:
                        now(request, response)
                transport = self.transport
                if transport is not None:  # else its client has gone (and this task is cancelled)
                    transport.write(head_bytes(response) + body)
        except ConnectionError:
            pass
        except Exception as exc:  # as aiohttp's loop: a 500 (`handle_error` logs it) unless an answer began, then closed
            if request is None:
                log.exception("unhandled error taking a request")
            else:
                with contextlib.suppress(Exception):
                    error = self.handle_error(request, 500, exc)
                    await error.prepare(request)
                    await error.write_eof()
        finally:
            self._lean = None
            self._request_in_progress = False
            if self._handler_waiter is not None:
                self._handler_waiter.set_result(None)
            if not keep_alive or self._close or self._force_close:
                self.force_close()
        if self.transport is None:
            return
        self._keepalive = True
        close_time = loop.time() + self._keepalive_timeout
        self._next_keepalive_close_time = close_time
        if self._keepalive_handle is None:
            self._keepalive_handle = loop.call_at(close_time, self._process_keepalive)
        held = self._held
        if held:
            self._held = b""
            self.transport.resume_reading()
            self.data_received(held)

    def _process_keepalive(self) -> None:
        if self._lean is not None:  # a request in progress is never idle; the timer starts again at its end
            self._keepalive_handle = None
            return
        if self._keepalive and not self._force_close and self._loop.time() >= self._next_keepalive_close_time and self._unread():
            # Idle by the clock, but a request came while the loop was late (decision 176): read it,
            # and time the idleness again from now.
            self._next_keepalive_close_time = self._loop.time() + self._keepalive_timeout
            self._keepalive_handle = self._loop.call_at(self._next_keepalive_close_time, self._process_keepalive)
            return
        super()._process_keepalive()

    def end_stream(self) -> None:
        """Close the connection if it is serving a GET (a session's event stream, which never ends
        by itself): its client opens it again, on the new process of a restart."""
        request = self._current_request
        if request is not None and request.method == "GET":
            self.force_close()

    def _stop_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _header_timeout(self) -> None:
        """Headers did not arrive in time: answer 408 (best effort) and close."""
        self._header_deadline = None
        transport = self.transport
        if transport is not None and not transport.is_closing():
            seconds = f"{self._limits.header_timeout_s:g}"
            body = _error_body(INVALID_REQUEST, f"Request headers not received within {seconds} s")
            transport.write(b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
                            b"%s: %s\r\nContent-Length: %d\r\n\r\n%s"
                            % (REQUEST_ID_HEADER.encode(), request_id_from(None).encode(), len(body), body))
        log.info("closed a connection from %s: request headers not received within %g s", self._peer(), self._limits.header_timeout_s)
        self.force_close()

    def _peer(self) -> str:
        peer = self.peername
        return str(peer[0]) if isinstance(peer, tuple) else str(peer)

    def handle_error(self, request: BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> StreamResponse:
        """A request the parser refused: HTTP `status` with a JSON-RPC error body, logged by its
        kind only. The parser's message quotes request bytes (header values), so neither the log
        nor the answer carries it. Other errors go to aiohttp's handling."""
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        log.info("refused a malformed HTTP request from %s: %d (%s)", self._peer(), status, type(exc).__name__)
        if request.writer.output_size > 0:  # as aiohttp: an answer already started cannot be replaced
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        if isinstance(exc, LineTooLong):
            reason = f"Bad Request: the request line or a header is longer than {self.max_field_size} bytes"
        else:
            reason = f"Bad Request: malformed HTTP request ({type(exc).__name__})"
        # A new request id: nothing of a request the parser refused is trusted, its X-Request-Id neither.
        response = web.Response(status=status, body=_error_body(INVALID_REQUEST, reason), content_type="application/json",
                                headers={REQUEST_ID_HEADER: request_id_from(None)})
        response.force_close()
        return response


async def drain_connections(limits: ConnectionLimits, grace_s: float) -> None:
    """Drain every open connection (`BoundedRequestHandler.drain`) and wait, at most `grace_s` and a
    little more, until they have closed; then end the GET event streams still open (their clients
    reconnect): a restart's old process does this once it stopped accepting, before its graceful
    stop (`proxy/restart.py`), whose other requests in flight then finish."""
    for handler in list(limits.live):
        handler.drain(grace_s)
    deadline = asyncio.get_running_loop().time() + grace_s + 0.2
    while limits.live and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    for handler in list(limits.live):  # what is left: requests in flight, and event streams, ended now
        handler.end_stream()
