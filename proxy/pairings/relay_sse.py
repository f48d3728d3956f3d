"""The relay's byte-level SSE helpers (docs/behaviour.md §3): a v2 backend's SSE answer passed on
whole events at a time so that an event holding the draft-era `-32003` can be renumbered, and the
one frame writer of events the relay writes again. Split out of `relay.py`; bytes unchanged unless
an event holds the code (docs/decisions.md §37). And whether a client that left had been written its
answer whole (`noting_answer`): counted answered then, not cancelled."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from translators import jsonrpc
from translators.errors import McpError
from translators.subscriptions import may_need_v2_repair, v2_repaired

from ..faces.checks import ANSWERED
from ..sse import Event, SseParser

KEEP_MAX = 1024 * 1024
"""Bytes of a relayed stream's last event kept to tell, if the client leaves, whether it was the
answer (a longer last event is not looked at: its client is counted as having left before it)."""


class Written:
    """What a relay last wrote to its client of a backend's SSE answer, read only when the client
    leaves: whether the last event written is the answer. Whole events (`whole`), or chunks as they
    came (`chunk`), kept from the last one that ended an event (references, no copies)."""

    def __init__(self) -> None:
        self._kept: list[bytes] = []
        self._size = 0
        self._ended = True

    def whole(self, events: bytes) -> None:
        """Whole events were written (`events` ends with the last one's end)."""
        self._kept, self._size, self._ended = [events], len(events), True

    def chunk(self, chunk: bytes) -> None:
        """A chunk of the stream as it came was written (an event may be split between chunks)."""
        if self._ended:
            self._kept, self._size = [], 0
        if self._size <= KEEP_MAX:
            self._kept.append(chunk)
            self._size += len(chunk)
        self._ended = chunk.endswith(_EVENT_ENDS)

    def last_data(self) -> bytes | None:
        """The data of the last whole event written (None: none, or one longer than `KEEP_MAX`)."""
        if self._size > KEEP_MAX or not self._kept:
            return None
        events = SseParser().feed(b"".join(self._kept))
        return events[-1].data.encode() if events else None

    def answered(self) -> bool:
        """Whether the last event written is a JSON-RPC response: on a POST's stream only the answer
        to that POST is one, and it is the stream's last event (MCP 2025-11-25, Streamable HTTP)."""
        data = self.last_data()
        if data is None:
            return False
        try:
            return jsonrpc.parse(data).kind == "response"
        except McpError:
            return False


@contextlib.contextmanager
def noting_answer(request: web.Request, written: Written | None = None) -> Iterator[Written]:
    """Around the writing of a relayed SSE answer (into `written`, a new `Written` by default): a
    client that leaves once its answer was written whole leaves `ANSWERED` on `request` (the entry
    counts it answered, not cancelled)."""
    written = written if written is not None else Written()
    try:
        yield written
    except asyncio.CancelledError:
        if written.answered():
            request[ANSWERED] = True
        raise


def _repaired_body(raw: bytes) -> bytes:
    """A v2 backend's JSON body that may need `v2_repaired` (the code `-32003` renumbered, a task
    status notification under its v2 name): unchanged bytes when it is not a JSON-RPC message or
    nothing in it needs repair."""
    try:
        message = jsonrpc.parse(raw).raw
    except McpError:
        return raw
    repaired = v2_repaired(message)
    return raw if repaired is message else jsonrpc.dumps(repaired)


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


async def _relay_sse_repaired(upstream: Any, response: web.StreamResponse,  # an aiohttp or lean response
                              written: Written | None = None) -> None:
    """An SSE answer of a v2 backend, passed on as it arrives but whole events at a time, so that an
    event that needs it can be parsed and repaired (`_repaired_body`); other bytes pass unchanged.
    Events are only parsed when their bytes may need it (`may_need_v2_repair`)."""
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
        if may_need_v2_repair(ready):
            parser = SseParser()
            ready = b"".join(_frame(event, _repaired_body(event.data.encode())) for event in parser.feed(ready))
        await response.write(ready)
        if written is not None:
            written.whole(ready)
    if pending:
        await response.write(b"".join(pending))


async def relay_stream(request: web.Request, upstream: Any, response: web.StreamResponse, *, repair: bool,
                       written: Written | None = None) -> None:
    """A backend's streamed answer passed on as it arrives (`repair`: a v2 backend's SSE, whole
    events at a time, `_relay_sse_repaired`); a client that leaves after its answer is noted
    (`noting_answer`, into `written`)."""
    with noting_answer(request, written) as written:
        if repair:
            await _relay_sse_repaired(upstream, response, written)
            return
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
            written.chunk(chunk)
