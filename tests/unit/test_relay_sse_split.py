"""The relay's SSE splitter for v2 answers (`proxy/pairings/relay._relay_sse_repaired`): whole
events at a time, bytes unchanged unless an event holds `-32003`, for every split of the stream;
a long event is kept as the chunks that came and joined once (copying and searching the whole
pending event at every chunk took 7 s of the event loop for a 16 MiB event in 64 KiB chunks).
The two ends are stand-ins for the aiohttp objects: the function reads `content.iter_any()` and
calls `write`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from proxy.pairings.relay_sse import _complete_events_end, _frame, _relay_sse_repaired, _repaired_body
from proxy.sse import SseParser
from translators.subscriptions import may_need_v2_repair

LEGACY = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32003, "message": "needs the extension"}}
STREAM = (
    b"id: 1\nevent: message\ndata: " + json.dumps({"jsonrpc": "2.0", "method": "notifications/progress"}).encode() + b"\n\n"
    b": keep-alive\r\n\r\n"
    b"data: " + json.dumps(LEGACY).encode() + b"\r\r"
    b"data: tail without its end"
)


def _before(chunks: list[bytes]) -> list[bytes]:
    """What the splitter wrote before it kept the pending bytes as chunks: the whole pending
    buffer copied and searched at every chunk (the reference the new one must equal)."""
    writes, pending = [], b""
    for chunk in chunks:
        pending += chunk
        cut = _complete_events_end(pending)
        if cut == 0:
            continue
        ready, pending = pending[:cut], pending[cut:]
        if may_need_v2_repair(ready):
            ready = b"".join(_frame(e, _repaired_body(e.data.encode())) for e in SseParser().feed(ready))
        writes.append(ready)
    return writes + ([pending] if pending else [])


class _Upstream:
    def __init__(self, chunks: list[bytes]):
        self.content = self
        self.chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


class _Client:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.writes.append(data)


async def _relayed(chunks: list[bytes]) -> list[bytes]:
    client = _Client()
    await _relay_sse_repaired(_Upstream(chunks), client)  # type: ignore[arg-type]
    return client.writes


async def test_every_split_writes_what_it_wrote_before_in_whole_events() -> None:
    for first in range(len(STREAM) + 1):
        for second in range(first, len(STREAM) + 1, 7):
            chunks = [STREAM[:first], STREAM[first:second], STREAM[second:]]
            assert await _relayed(chunks) == _before(chunks), (first, second)
    one_by_one = [STREAM[i : i + 1] for i in range(len(STREAM))]
    writes = await _relayed(one_by_one)
    assert writes == _before(one_by_one)
    assert b"-32021" in writes[2] and writes[-1] == b"data: tail without its end"


async def test_a_long_event_in_many_chunks_is_written_once_when_it_ends() -> None:
    chunks = [b"data: " + b"x" * 65530] + [bytes([65 + i % 26]) * 65536 for i in range(255)] + [b"\n", b"\nid: 2"]
    writes = await _relayed(chunks)
    assert writes == [b"".join(chunks[:-1]) + b"\n", b"id: 2"]
