"""Incremental Server-Sent Events parser (WHATWG HTML §9.2), for upstream SSE responses.

Handles LF, CRLF and CR line ends, multi-line `data`, comments and `retry`; events with empty
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


class SseParser:
    """Feed bytes with `feed()`; it returns the events completed so far."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._event = ""
        self._last_id: str | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        """Parse `chunk` (any split of the stream) and return the events it completed."""
        self._buffer += chunk
        events: list[Event] = []
        while True:
            cut = _line_end(self._buffer)
            if cut is None:
                return events
            end, width = cut
            line = self._buffer[:end].decode("utf-8", errors="replace")
            self._buffer = self._buffer[end + width :]
            event = self._line(line)
            if event is not None:
                events.append(event)

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


def _line_end(buffer: bytes) -> tuple[int, int] | None:
    lf = buffer.find(b"\n")
    cr = buffer.find(b"\r")
    if cr == -1 and lf == -1:
        return None
    if cr != -1 and (lf == -1 or cr < lf):
        if cr + 1 == len(buffer):
            return None  # a CR at the end may be the first half of CRLF
        return (cr, 2) if buffer[cr + 1 : cr + 2] == b"\n" else (cr, 1)
    return lf, 1


async def iter_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[Event]:
    """Events of an SSE body given as an async iterator of byte chunks."""
    parser = SseParser()
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
    for event in parser.feed(b"\n\n"):
        yield event


def sse_frame(event_id: int, message: dict[str, Any]) -> bytes:
    """One SSE event carrying a JSON-RPC message (`id`, `event: message`, one `data` line)."""
    return b"id: %d\nevent: message\ndata: " % event_id + jsonrpc.dumps(message) + b"\n\n"
