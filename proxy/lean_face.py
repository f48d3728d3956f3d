"""The lean face: a plain POST to the MCP endpoint that arrived whole is served one step shorter
(docs/decisions.md §175, §182; docs/performance.md "The lean face").

aiohttp's server spends most of a relayed call's server side in its own machinery: the parser's
message queue, the connection's request loop waking for each message, the application's router,
middleware and match info, a task handed from one loop to the next. Every read of a connection
is parsed by the connection's own aiohttp parser (its C parser, llhttp) as before;
`BoundedRequestHandler` (`proxy/connections.py`) then asks `whole_post` here whether what that read
gave is one request the lean face takes. When it is, the request is built as aiohttp builds it
(the same `web.Request` class, from the parser's own message and body stream, the route's match
info made once at start), handed to the endpoint's handler, and its response prepared and written
by aiohttp's own response code: the entry, the pairings and every response (JSON, SSE, an error)
cannot tell the two paths apart, and neither can a client.

Everything else goes to aiohttp's request loop as before, already parsed, as aiohttp's own
`data_received` queues it: a head or body split over reads, chunked or compressed bodies, `Expect`,
`Upgrade`, HTTP/1.0, a query string, a body over `MAX_BODY` bytes, a second request in the same
read (pipelined), other methods and paths, and whatever the parser refused. Every limit, refusal
and parser error is aiohttp's own, since aiohttp's parser reads every byte; this module only says
"this one is plain". Pure: no I/O here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from aiohttp import hdrs, web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.http_parser import RawRequestMessage
from aiohttp.http_writer import HttpVersion11, _serialize_headers
from aiohttp.streams import StreamReader
from aiohttp.web_response import StreamResponse

MAX_BODY = 65536
"""A longer body goes to aiohttp's request loop: its body stream holds this much without pausing
the connection's reading (the stream pauses it beyond twice its 64 KiB limit)."""


class LeanTarget(NamedTuple):
    """One path the lean face serves: its `path`, the route's `handler` and its `match_info`
    (resolved once at start, as aiohttp's router would for every request), and `prepare`
    (`prepare_now`)."""

    path: str
    handler: Any
    match_info: Any
    prepare: tuple[Callable[[Any, Any], None], ...] | None = None


def prepare_now(receivers: Iterable[Any]) -> tuple[Callable[[Any, Any], None], ...] | None:
    """The application's `on_response_prepare` receivers as plain functions, when each offers one
    (a `now(request, response)` that does what awaiting it does): the lean face calls them in
    turn instead of awaiting aiohttp's `_prepare_hook` (its signal's coroutines cost a whole
    answer about 6,000 instructions). None when any receiver has none: the hook runs them."""
    nows = tuple(getattr(receiver, "now", None) for receiver in receivers)
    return None if any(now is None for now in nows) else nows  # type: ignore[return-value]


Parsed = tuple[Sequence[tuple[Any, StreamReader]], bool, bytes]
"""What aiohttp's request parser's `feed_data` returns for one read: (message, body stream) pairs,
whether the connection was upgraded, and the bytes after an upgrade."""


def whole_post(parsed: Parsed, targets: Mapping[str, LeanTarget]) -> tuple[LeanTarget, RawRequestMessage, StreamReader] | None:
    """`parsed` (one read, as aiohttp's parser gave it) as exactly one plain POST to one of
    `targets` (keyed by the request target), whole: the target, the parser's message and its body
    stream, at its end. None for anything else (see the module), which aiohttp's loop then serves."""
    messages, upgraded, tail = parsed
    if len(messages) != 1 or upgraded or tail:
        return None
    message, payload = messages[0]
    if message.method != "POST" or message.version != HttpVersion11 or message.upgrade or message.chunked \
            or message.compression is not None or hdrs.EXPECT in message.headers:
        return None
    target = targets.get(message.path)
    if target is None or not payload.is_eof() or payload.total_bytes > MAX_BODY:
        return None
    return target, message, payload


def plain_body(response: StreamResponse) -> bytes | None:
    """The body of `response` when the lean face may write it whole (`finish_head`, `head_bytes`): a
    `web.Response` not yet sent, its body bytes, no compression, chunking or cookies, a status that
    has a body. None: aiohttp's response code writes it (`prepare`, `write_eof`)."""
    # aiohttp's own attributes, not its properties (`prepared`, `body`, `status`): each property is a
    # Python call, and this runs for every answer (aiohttp is pinned: pyproject.toml)
    if type(response) is not web.Response or response._eof_sent or response._payload_writer is not None or response._compression \
            or response._chunked or response._cookies:
        return None
    body = response._body
    status = response._status
    if not isinstance(body, bytes) or status < 200 or status in (204, 304):
        return None
    return body


def finish_head(response: web.Response, body: bytes, keep_alive: bool) -> None:
    """Complete `response`'s header fields as aiohttp's `prepare` does for a whole body, before the
    application's `on_response_prepare` sees them: `Content-Length`, a default `Content-Type`,
    `Date`, `Server`, and `Connection: close` when the connection ends with it."""
    headers = response.headers
    headers[hdrs.CONTENT_LENGTH] = str(len(body))
    headers.setdefault(hdrs.CONTENT_TYPE, "application/octet-stream")
    if hdrs.DATE not in headers:
        headers[hdrs.DATE] = rfc822_formatted_time()
    headers.setdefault(hdrs.SERVER, SERVER_SOFTWARE)
    if not keep_alive and hdrs.CONNECTION not in headers:
        headers[hdrs.CONNECTION] = "close"


def head_bytes(response: web.Response) -> bytes:
    """The status line and header fields, by aiohttp's own serializer (which refuses a field holding CR or LF)."""
    return _serialize_headers(f"HTTP/1.1 {response.status} {response.reason}", response.headers)
