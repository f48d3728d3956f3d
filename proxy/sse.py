"""Incremental Server-Sent Events parser (WHATWG HTML §9.2), for upstream SSE responses.

Handles LF, CRLF and CR line ends, a leading byte order mark, multi-line `data`, comments and `retry`; events with empty
`data` (priming events) are skipped, as the session wire requires (docs/wire.md §5).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from translators import jsonrpc


@dataclass(frozen=True, slots=True)
class Event:
    """One dispatched event: `data` (the joined data lines), `event` type, last event `id`."""

    data: str
    event: str = "message"
    id: str | None = None


BOM = b"\xef\xbb\xbf"
"""U+FEFF in UTF-8: ignored once at the start of a stream."""


class SseParser:
    """Feed bytes with `feed()`; it returns the events completed so far."""

    def __init__(self) -> None:
        self._pending: list[bytes] = []
        """The pieces of the line not ended yet (line ends already made LF, none in them)."""
        self._cr = False
        """The last byte fed was a CR: a line end at once (an event is not held back until the
        next byte comes), and an LF first in the next chunk is the rest of its CRLF."""
        self._start: bytes | None = b""
        """The stream's first bytes while they may still be a byte order mark (None after)."""
        self._data: list[str] = []
        self._event = ""
        self._last_id: str | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        """Parse `chunk` (any split of the stream) and return the events it completed. Each byte
        is looked at a fixed number of times, however long the line it is part of."""
        if self._start is not None:  # one leading U+FEFF is ignored (WHATWG HTML §9.2.5)
            chunk, self._start = self._start + chunk, None
            if len(chunk) < len(BOM) and BOM.startswith(chunk):
                self._start = chunk
                return []
            if chunk.startswith(BOM):
                chunk = chunk[len(BOM) :]
        if self._cr and chunk:  # the last chunk ended with a CR, already taken as a line end
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]  # the second half of that CRLF
            self._cr = False
        if b"\r" in chunk:  # CRLF or CR line ends: made LF first
            self._cr = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        cut = chunk.rfind(b"\n")
        if cut == -1:
            if chunk:
                self._pending.append(chunk)
            return []
        lines = chunk[:cut]
        if self._pending:
            self._pending.append(lines)
            lines = b"".join(self._pending)
        self._pending = [chunk[cut + 1 :]] if cut + 1 < len(chunk) else []
        events: list[Event] = []
        for line in lines.decode("utf-8", errors="replace").split("\n"):  # whole lines: no character is cut
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> Event | None:
        if line == "":
            data, self._data = self._data, []
            kind, self._event = self._event or "message", ""
            if not data or not any(data):
                return None
            return Event("\n".join(data), kind, self._last_id)
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._last_id = value
        return None


async def iter_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[Event]:
    """Events of an SSE body given as an async iterator of byte chunks."""
    parser = SseParser()
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
    for event in parser.feed(b"\n\n"):
        yield event


def unnumbered_frame(message: dict[str, Any]) -> bytes:
    """One SSE event carrying a JSON-RPC message, without an `id` (on a stream whose ids are another's)."""
    return b"event: message\ndata: " + jsonrpc.dumps(message) + b"\n\n"


def sse_frame(event_id: int, message: dict[str, Any]) -> bytes:
    """One SSE event carrying a JSON-RPC message (`id`, `event: message`, one `data` line)."""
    return b"id: %d\nevent: message\ndata: " % event_id + jsonrpc.dumps(message) + b"\n\n"
