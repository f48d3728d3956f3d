"""The lean face: a plain POST to the MCP endpoint that arrived whole is served one step shorter
(docs/decisions.md §175, docs/performance.md "The lean face").

aiohttp's server spends most of a relayed call's server side in its own machinery: the parser's
message queue, the connection's request loop waking for each message, the application's router,
middleware and match info, a task handed from one loop to the next. For the request the proxy
serves most — one `POST` to the MCP endpoint, HTTP/1.1, its head and its `Content-Length` body in
one read, nothing unusual in it — `BoundedRequestHandler` (`proxy/connections.py`) asks
`whole_post` here first. When it says yes, the request is built as aiohttp builds it (the same
`web.Request` class, headers, body stream and payload writer, the route's match info made once at
start), handed to the endpoint's handler, and its response prepared and written by aiohttp's own
response code: the entry, the pairings and every response (JSON, SSE, an error) cannot tell the
two paths apart, and neither can a client.

Everything else goes to aiohttp's parser as before, byte for byte: a head or body split over
reads, chunked or compressed bodies, `Expect`, `Upgrade`, HTTP/1.0, a query string, a head over
`MAX_HEAD` bytes, a body over `MAX_BODY` bytes, any character aiohttp might refuse or read differently (obs-text, a control
character, a space before a colon), a second request in the same read (pipelined), other methods
and paths. So every limit, refusal and parser error stays aiohttp's; this module only says "this
one is plain". Pure: no I/O here but what `LeanRequests` asks of its protocol.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from aiohttp import hdrs, web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.http_parser import RawRequestMessage
from aiohttp.http_writer import HttpVersion11, _serialize_headers
from aiohttp.web_response import StreamResponse
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

MAX_HEAD = 8190
"""A longer head goes to aiohttp's parser (its line limit is 8190 bytes), which refuses what it must."""
MAX_BODY = 65536
"""A longer body goes to aiohttp's parser: the request's body stream holds this much without
pausing the connection's reading (which aiohttp's parser allows only within a body it is reading)."""
_HEADER_LINES = re.compile(rb"(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e]*\r\n)*")
"""Header fields as RFC 9110 writes them, with visible ASCII values only: anything else is aiohttp's to judge."""
_DIGITS = re.compile(r"[0-9]{1,12}")
_REFUSED = frozenset({"transfer-encoding", "expect", "upgrade", "content-encoding"})
"""Fields that ask for more than a whole body of known length: left to aiohttp."""


class LeanTarget(NamedTuple):
    """One path the lean face serves: its `path`, its `url` (made once), the route's `handler` and
    its `match_info` (resolved once at start, as aiohttp's router would for every request)."""

    path: str
    url: URL
    handler: Any
    match_info: Any


def whole_post(data: bytes, targets: Mapping[bytes, LeanTarget]) -> tuple[LeanTarget, RawRequestMessage, bytes] | None:
    """`data` read as exactly one plain POST to one of `targets` (keyed by the request target's
    bytes): the target, the message as aiohttp's parser would give it, and the body. None for
    anything else (see the module), which then goes to aiohttp's parser unread."""
    if not data.startswith(b"POST "):
        return None
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
    if end < 0:
        return None
    line_end = data.find(b"\r\n")
    target_end = data.find(b" ", 5, line_end)
    if target_end < 0 or data[target_end:line_end] != b" HTTP/1.1":
        return None
    target = targets.get(data[5:target_end])
    if target is None:
        return None
    block = data[line_end + 2 : end + 2]
    if _HEADER_LINES.fullmatch(block) is None:
        return None
    pairs: list[tuple[str, str]] = []
    raw: list[tuple[bytes, bytes]] = []
    length: int | None = None
    should_close = False
    for line in block.decode("ascii").split("\r\n")[:-1]:
        name, _, value = line.partition(":")
        value = value.strip(" \t")
        folded = name.lower()
        if folded in _REFUSED:
            return None
        if folded == "content-length":
            if length is not None or _DIGITS.fullmatch(value) is None:
                return None
            length = int(value)
        elif folded == "connection":
            tokens = {token.strip().lower() for token in value.split(",")}
            if "upgrade" in tokens:
                return None
            should_close = should_close or "close" in tokens
        pairs.append((name, value))
        raw.append((name.encode("ascii"), value.encode("ascii")))
    if length is None or length > MAX_BODY or len(data) != end + 4 + length:
        return None  # no length, a long body, a body still to come, or more than one request: aiohttp's
    message = RawRequestMessage("POST", target.path, HttpVersion11, CIMultiDictProxy(CIMultiDict(pairs)), tuple(raw),
                                should_close, None, False, False, target.url)
    return target, message, data[end + 4 :]


def plain_body(response: StreamResponse) -> bytes | None:
    """The body of `response` when the lean face may write it whole (`finish_head`, `head_bytes`): a
    `web.Response` not yet sent, its body bytes, no compression, chunking or cookies, a status that
    has a body. None: aiohttp's response code writes it (`prepare`, `write_eof`)."""
    if type(response) is not web.Response or response.prepared or response._compression or response._chunked or response._cookies:
        return None
    body = response.body
    if not isinstance(body, bytes) or response.status < 200 or response.status in (204, 304):
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
