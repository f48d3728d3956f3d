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
        buffer = self._buffer + chunk if self._buffer else chunk
        held = b""
        if b"\r" in buffer:  # CRLF or CR line ends: made LF first (a CR at the end may be half a CRLF)
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        cut = buffer.rfind(b"\n")
        if cut == -1:
            self._buffer = buffer + held
            return []
        self._buffer = buffer[cut + 1 :] + held
        events: list[Event] = []
        for line in buffer[:cut].decode("utf-8", errors="replace").split("\n"):  # whole lines: no character is cut
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


def sse_frame(event_id: int, message: dict[str, Any]) -> bytes:
    """One SSE event carrying a JSON-RPC message (`id`, `event: message`, one `data` line)."""
    return b"id: %d\nevent: message\ndata: " % event_id + jsonrpc.dumps(message) + b"\n\n"
