"""A relayed SSE answer whose client leaves (issue 37 defect 6): `proxy/pairings/relay_sse.relay_stream`
notes `ANSWERED` on the request when the client had its answer written whole (an SDK closes the stream
as soon as it reads the answer, before the backend ends it), and nothing when it left before. The two
ends are stand-ins for the aiohttp objects: the upstream yields its chunks, then never ends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.faces.checks import ANSWERED
from proxy.pairings.relay_sse import Written, relay_stream

PROGRESS = b"event: message\ndata: " + json.dumps({"jsonrpc": "2.0", "method": "notifications/progress"}).encode() + b"\n\n"
QUESTION = b"event: message\ndata: " + json.dumps({"jsonrpc": "2.0", "id": 0, "method": "elicitation/create"}).encode() + b"\n\n"
ANSWER = b"event: message\r\ndata: " + json.dumps({"jsonrpc": "2.0", "id": 2, "result": {"content": []}}).encode() + b"\r\n\r\n"


def _written(last: bytes) -> bool:
    written = Written()
    written.whole(last)
    return written.answered()


def _chunks(chunks: list[bytes]) -> bool:
    written = Written()
    for chunk in chunks:
        written.chunk(chunk)
    return written.answered()


def test_only_a_response_last_is_an_answer() -> None:
    assert [_written(last) for last in (b"", PROGRESS, QUESTION, ANSWER, PROGRESS + ANSWER, ANSWER + PROGRESS)] == [
        False,
        False,
        False,
        True,
        True,
        False,
    ]
    assert [
        _written(last) for last in (ANSWER[:-2], ANSWER[:30], b": keep-alive\n\n", b'{"jsonrpc":"2.0","id":2,"result":{}}')
    ] == [
        False,
        False,
        False,
        False,
    ]


def test_chunks_as_they_came_are_read_from_the_last_event_end() -> None:
    split = [PROGRESS[:9], PROGRESS[9:] + ANSWER[:20], ANSWER[20:40], ANSWER[40:]]
    assert [_chunks(chunks) for chunks in (split, split[:-1], [ANSWER, PROGRESS], [PROGRESS, ANSWER], [PROGRESS + ANSWER])] == [
        True,
        False,
        False,
        True,
        True,
    ]
    assert (
        _chunks([b"event: message\ndata: " + b"x" * (2 * 1024 * 1024), ANSWER[20:]]) is False
    )  # too long to keep: not looked at


class _Upstream:
    """Yields `chunks`, then waits for ever (a backend that has not ended its stream)."""

    def __init__(self, chunks: list[bytes]):
        self.content = self
        self.chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        await asyncio.Event().wait()


class _Client:
    def __init__(self, count: int) -> None:
        self.writes: list[bytes] = []
        self.count = count
        self.done = asyncio.Event()

    async def write(self, data: bytes) -> None:
        self.writes.append(data)
        if len(self.writes) == self.count:
            self.done.set()


@pytest.mark.parametrize("renumber", [False, True])
@pytest.mark.parametrize(
    ("chunks", "answered"),
    [
        ([PROGRESS, ANSWER], True),
        ([PROGRESS, ANSWER[:20], ANSWER[20:]], True),
        ([PROGRESS, QUESTION], False),
        ([PROGRESS], False),
    ],
)
async def test_a_client_that_leaves_is_noted_answered_only_once_it_had_its_answer(
    chunks: list[bytes], answered: bool, renumber: bool
) -> None:
    request: dict[Any, Any] = {}
    client = _Client(len(chunks) - (1 if renumber and len(chunks) == 3 else 0))  # whole events at a time when renumbering
    relaying = asyncio.create_task(relay_stream(request, _Upstream(chunks), client, repair=renumber))  # type: ignore[arg-type]
    await client.done.wait()
    relaying.cancel()  # the client left: aiohttp cancels the handler
    with pytest.raises(asyncio.CancelledError):
        await relaying
    assert b"".join(client.writes) == b"".join(chunks)
    assert request == ({ANSWERED: True} if answered else {})
