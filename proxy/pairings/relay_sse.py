"""The relay's byte-level SSE helpers (docs/behaviour.md §3): a v2 backend's SSE answer passed on
whole events at a time so that an event holding the draft-era `-32003` can be renumbered, and the
one frame writer of events the relay writes again. Split out of `relay.py`; bytes unchanged unless
an event holds the code (docs/decisions.md §37)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from translators import jsonrpc
from translators.errors import McpError, legacy_code_renumbered, may_carry_legacy_code

from ..sse import Event, SseParser


def _renumbered_body(raw: bytes) -> bytes:
    """A JSON body that may hold `-32003`, with the code renumbered (unchanged bytes when it
    is not a JSON-RPC message or holds the bytes elsewhere)."""
    try:
        message = jsonrpc.parse(raw).raw
    except McpError:
        return raw
    renumbered = legacy_code_renumbered(message)
    return raw if renumbered is message else jsonrpc.dumps(renumbered)


def _frame(event: Event, data: bytes) -> bytes:
    """One SSE event as the relay writes it again (`id`, `event`, `data` lines)."""
    frame = b"" if event.id is None else b"id: " + event.id.encode() + b"\n"
    frame += b"event: " + event.event.encode() + b"\n"
    for line in data.split(b"\n"):
        frame += b"data: " + line + b"\n"
    return frame + b"\n"


_EVENT_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")
_LONGEST_END = max(map(len, _EVENT_ENDS)) - 1
"""Bytes of an event end that can be in the chunk before the one it ends in."""


def _complete_events_end(buffer: bytes) -> int:
    """Where the last complete event in `buffer` ends (0: none yet). A boundary of mixed line ends
    may be found later than it is, which only delays those bytes."""
    return max(((at + len(end)) if (at := buffer.rfind(end)) >= 0 else 0) for end in _EVENT_ENDS)


async def _relay_sse_renumbered(upstream: Any, response: web.StreamResponse) -> None:  # an aiohttp or lean response
    """An SSE answer of a v2 backend, passed on as it arrives but whole events at a time, so that an
    event holding `-32003` can be parsed and renumbered (`_renumbered_body`); other bytes pass
    unchanged. Events are only parsed when their bytes hold the code."""
    pending: list[bytes] = []  # what came after the last complete event, as it came (joined once)
    tail = b""  # its last bytes: the start of an event end split between two chunks
    async for chunk in upstream.content.iter_any():
        window = tail + chunk
        cut = _complete_events_end(window) - len(tail)  # an event end lies in the new bytes, or none
        if cut <= 0:
            pending.append(chunk)
            tail = window[-_LONGEST_END:]
            continue
        ready, rest = b"".join([*pending, chunk[:cut]]), chunk[cut:]
        pending, tail = ([rest] if rest else []), rest[-_LONGEST_END:]
        if may_carry_legacy_code(ready):
            parser = SseParser()
            ready = b"".join(_frame(event, _renumbered_body(event.data.encode())) for event in parser.feed(ready))
        await response.write(ready)
    if pending:
        await response.write(b"".join(pending))
