"""A bound on the answers read for one piece of work: the shadow's comparisons
(`shadow_max_body_bytes`, docs/behaviour.md §8 "Shadow"). A comparison sets `ANSWER_BOUND` in its own
context; every upstream answer read there (`session_wire.read_answer`, whichever connector or
pairing asked) is then read chunk by chunk and given up once it is longer than the bound, never
buffered whole. Nothing is bounded where it is not set (a client's own requests).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from translators.errors import McpError, backend_unavailable


@dataclass(slots=True)
class ReadBound:
    """At most `limit` bytes of each answer; `over`: the backend whose answer was longer (None while
    none was)."""

    limit: int
    over: str | None = None


ANSWER_BOUND: ContextVar[ReadBound | None] = ContextVar("mcp_tasks_proxy_answer_bound", default=None)
"""The bound of the work running in this context (None: answers are read whole)."""


def too_large(bound: ReadBound, backend: str) -> McpError:
    """`backend`'s answer is over `bound`: noted on it, and the error that ends the read (HTTP 502)."""
    bound.over = backend
    return backend_unavailable(backend, f"answered more than {bound.limit} bytes (the bound of this read)")


async def bounded_body(backend: str, response: Any, bound: ReadBound) -> bytes:
    """The whole body of `response` (aiohttp's or a connector's alike: `content_length`,
    `content.iter_any()`) if it is at most `bound.limit` bytes; raises `too_large` as soon as it is
    known to be longer (its Content-Length, or the bytes read so far)."""
    length = response.content_length
    if length is not None and length > bound.limit:
        raise too_large(bound, backend)
    chunks: list[bytes] = []
    read = 0
    async for chunk in response.content.iter_any():
        read += len(chunk)
        if read > bound.limit:
            raise too_large(bound, backend)
        chunks.append(chunk)
    return b"".join(chunks)


async def bounded_chunks(backend: str, chunks: AsyncIterator[bytes], bound: ReadBound) -> AsyncIterator[bytes]:
    """`chunks` (a stream's) until more than `bound.limit` bytes came, then `too_large`."""
    read = 0
    async for chunk in chunks:
        read += len(chunk)
        if read > bound.limit:
            raise too_large(bound, backend)
        yield chunk
