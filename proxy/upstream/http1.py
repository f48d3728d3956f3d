"""HTTP/1.1 on the wire for the relay's upstream client, sans-IO (docs/decisions.md §115): a
request head written, a response head parsed and its body framed (RFC 9112 §4–§7). No sockets, no
clock: `lean.py` feeds it bytes. Only what a client of an MCP backend meets is read: a status
line, header fields, a body framed by `Content-Length`, by `Transfer-Encoding: chunked` (extensions
and trailers skipped) or by the end of the connection; interim 1xx answers are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from multidict import CIMultiDict, CIMultiDictProxy

MAX_HEAD_BYTES = 65_536
"""A response head (status line and fields) longer than this is refused (aiohttp's own bound
is 8190 bytes a line; a head this long is not a backend's)."""
NO_BODY_STATUSES = frozenset({204, 304})


class ProtocolError(Exception):
    """The bytes are not an HTTP/1.1 response (the connection cannot be used any more)."""


def request_head(method: str, target: str, host: str, headers: Mapping[str, str], length: int | None) -> bytes:
    """The head of a request: `method target HTTP/1.1`, `Host`, `headers` in their order and, when
    `length` is given, `Content-Length` (any given one is dropped). Field values are sent as UTF-8
    (surrogates escaped, as aiohttp's server decoded them). Raises `ValueError` for a name or value
    holding CR or LF (a header would be smuggled). `request_start` + `framing`."""
    return request_start(method, target, host, headers) + framing(length)


def request_start(method: str, target: str, host: str, headers: Mapping[str, str]) -> bytes:
    """A request head up to its framing: the request line, `Host` and `headers` (see
    `request_head`), the same bytes for the same arguments (so a caller may keep it)."""
    sent = [(name, value) for name, value in headers.items() if name.lower() not in _FRAMING]
    fields = "".join([f"{name}: {value}\r\n" for name, value in sent])
    # Each line ends in the one CRLF put there: any other CR or LF came in a name or value.
    if fields.count("\n") != len(sent) or fields.count("\r") != len(sent) or any(":" in name for name, _ in sent):
        bad = next(name for name, value in sent if "\r" in name + value or "\n" in name + value or ":" in name)
        raise ValueError(f"a header field {bad!r} that cannot be sent")
    return f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n{fields}".encode("utf-8", "surrogateescape")


def framing(length: int | None) -> bytes:
    """The end of a request head: `Content-Length: length` when given, and the blank line."""
    return b"Content-Length: %d\r\n\r\n" % length if length is not None else b"\r\n"


_FRAMING = frozenset({"content-length", "host", "transfer-encoding", "connection"})
"""Fields the head sets itself (or that would frame the body otherwise); a caller's are dropped."""


@dataclass(slots=True)
class ResponseHead:
    """A parsed response head: `status` (int), `reason`, `headers` (case-insensitive, every
    field in order), `content_length` (None: not framed by a length), `chunked`, `keep_alive`."""

    status: int
    reason: str
    headers: CIMultiDictProxy[str]
    content_length: int | None
    chunked: bool
    keep_alive: bool


def _head(raw: bytes, no_body: bool) -> ResponseHead:
    """Parse one head (without its blank line). Raises `ProtocolError`. (Digits are ASCII ones:
    `str.isdigit` alone also takes "²", which `int` refuses.)"""
    text = raw.decode("utf-8", "surrogateescape")
    lines = text.split("\r\n") if "\r\n" in text else text.split("\n")
    status_line = lines[0]
    version, _, rest = status_line.partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not (code.isascii() and code.isdigit()):
        raise ProtocolError(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
    fields = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        # (a name with whitespace around it also refuses a line folded onto the one before)
        if not colon or not name or name != name.strip():
            raise ProtocolError(f"a malformed header field: {line[:80]!r}")
        fields.append((name, value.strip(" \t")))
    headers: CIMultiDict[str] = CIMultiDict(fields)
    status = int(code)
    connection = headers.get("Connection")
    if connection is None:
        keep_alive = version == "HTTP/1.1"
    else:
        connection = connection.lower()
        keep_alive = ("close" not in connection) if version == "HTTP/1.1" else ("keep-alive" in connection)
    length: int | None = None
    chunked = False
    if no_body or status in NO_BODY_STATUSES or status < 200:
        length = 0
    elif "Transfer-Encoding" in headers:
        codings = [c.strip().lower() for v in headers.getall("Transfer-Encoding") for c in v.split(",")]
        chunked = codings[-1] == "chunked"
        if not chunked:
            keep_alive = False  # framed by the connection's end (RFC 9112 §6.3 item 4)
    elif (lengths := headers.getall("Content-Length", None)) is not None:
        value = lengths[0]
        if len(lengths) != 1 or not (value.isascii() and value.isdigit()):  # a list of equal lengths is one (RFC 9110 §8.6)
            values = {v.strip() for v in ",".join(lengths).split(",")}
            if len(values) != 1 or not ((value := values.pop()).isascii() and value.isdigit()):
                raise ProtocolError("an invalid Content-Length")
        length = int(value)
    else:
        keep_alive = False  # read until the connection closes
    return ResponseHead(status, reason, CIMultiDictProxy(headers), length, chunked, keep_alive)


class ResponseParser:
    """Bytes in (`feed`), a response out: `head` once its head is complete, body bytes as
    `feed` returns them, `done` once the message is whole. `head_request`: the answer to a HEAD
    (no body). Bytes after the message (`extra`) mean the server sent more than it was asked."""

    __slots__ = ("head", "done", "extra", "_buffer", "_remaining", "_no_body", "_chunk_state", "_until_close")

    def __init__(self, *, head_request: bool = False):
        self.head: ResponseHead | None = None
        self.done = False
        self.extra = b""
        self._buffer = b""
        self._remaining = 0
        self._no_body = head_request
        self._chunk_state = 0  # 0 size line, 1 data, 2 CRLF after data, 3 trailers
        self._until_close = False

    def feed(self, data: bytes) -> list[bytes]:
        """Take `data`; the body bytes it completes, in order (possibly none). Raises `ProtocolError`."""
        if self.done:
            self.extra += data
            return []
        if self.head is None:
            data = self._buffer + data if self._buffer else data
            while True:
                end = data.find(b"\r\n\r\n")
                skip = 4
                if end < 0:
                    end = data.find(b"\n\n")
                    skip = 2
                if end < 0:
                    if len(data) > MAX_HEAD_BYTES:
                        raise ProtocolError("a response head over 64 KiB")
                    self._buffer = data
                    return []
                head = _head(data[:end], self._no_body)
                data = data[end + skip:]
                if head.status >= 200:
                    break
                if head.status == 101:
                    raise ProtocolError("101 Switching Protocols was not asked for")
                # an interim answer (100, 103): the final one follows
            self.head = head
            self._buffer = b""
            if head.chunked:
                self._remaining = -1
            elif head.content_length is None:
                self._until_close = True
            else:
                self._remaining = head.content_length
                if self._remaining == 0:
                    self.done = True
                    self.extra = data
                    return []
            if not data:
                return []
        if self._until_close:
            return [data]
        if self._remaining >= 0 and not self.head.chunked:
            if len(data) < self._remaining:
                self._remaining -= len(data)
                return [data]
            body, self.extra = data[:self._remaining], data[self._remaining:]
            self._remaining = 0
            self.done = True
            return [body] if body else []
        return self._chunks(data)

    def _chunks(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        data = self._buffer + data if self._buffer else data
        self._buffer = b""
        at = 0
        size_of = len(data)
        while at < size_of:
            state = self._chunk_state
            if state == 0:  # fast path: a whole chunk (size line, data, CRLF) in what is here
                end = data.find(b"\r\n", at, at + 64)
                if end > at:
                    try:
                        length = int(data[at:end], 16)
                    except ValueError:
                        length = -1  # an extension or bad size: the general path below says which
                    stop = end + 2 + length
                    if length > 0 and data[stop:stop + 2] == b"\r\n":
                        out.append(data[end + 2:stop])
                        at = stop + 2
                        continue
            if state == 1:
                piece = data[at:at + self._remaining]
                out.append(piece)
                at += len(piece)
                self._remaining -= len(piece)
                if self._remaining == 0:
                    self._chunk_state = 2
                continue
            end = data.find(b"\n", at)
            if end < 0:
                if len(data) - at > MAX_HEAD_BYTES:
                    raise ProtocolError("a chunk line over 64 KiB")
                self._buffer = data[at:]
                break
            line = data[at:end].rstrip(b"\r")
            at = end + 1
            if state == 0:
                size = line.split(b";", 1)[0].strip()
                try:
                    self._remaining = int(size, 16)
                except ValueError:
                    raise ProtocolError(f"an invalid chunk size {size[:20]!r}") from None
                if self._remaining < 0:
                    raise ProtocolError("a negative chunk size")
                self._chunk_state = 1 if self._remaining else 3
            elif state == 2:
                if line:
                    raise ProtocolError("a chunk not ended by CRLF")
                self._chunk_state = 0
            elif not line:  # state 3: trailer fields up to a blank line
                self.done = True
                self.extra = data[at:]
                return out
        return out

    def eof(self) -> None:
        """The connection ended: the message is whole if it was framed by that end. Raises
        `ProtocolError` when it ended before the message did."""
        if self.done:
            return
        if self.head is not None and self._until_close:
            self.done = True
            return
        raise ProtocolError("the connection ended before the response did")
