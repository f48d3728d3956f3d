"""The stdio face's stdin, read as lines of at most a bound (docs/decisions.md §74).

`asyncio.StreamReader.readline` raises `ValueError` ("Separator is not found, and chunk exceed
the limit") for a line over its limit and leaves the stream where it was: the face crashed on a
line over 64 MiB. `lines` reads chunks instead, keeps at most `limit` bytes of a line, and for a
longer one gives `TooLong` (its first bytes, to read the id from) once its newline has come: the
rest of it is skipped and the next line is read as usual.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from translators.face_lines import ID_PREFIX_BYTES

MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest stdin line the face takes (bytes, its newline not counted)."""

CHUNK_BYTES = 65536


@dataclass(frozen=True)
class TooLong:
    """A line over the limit: `prefix` its first `ID_PREFIX_BYTES` bytes, `size` its length in
    bytes (newline not counted)."""

    prefix: bytes
    size: int


async def lines(reader: asyncio.StreamReader, limit: int = MAX_LINE_BYTES) -> AsyncIterator[bytes | TooLong]:
    """Each line of `reader` without its newline (a last line without one too), or `TooLong`
    for one over `limit` bytes, until EOF. Holds at most `limit` bytes of a line, searches each
    chunk once."""
    pending: list[bytes] = []
    size = 0
    skipped: TooLong | None = None  # the line over the limit being skipped
    while chunk := await reader.read(CHUNK_BYTES):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:end]
            if skipped is not None:
                yield TooLong(skipped.prefix, skipped.size + len(piece))
            elif size + len(piece) > limit:
                yield TooLong((b"".join(pending) + piece[:ID_PREFIX_BYTES])[:ID_PREFIX_BYTES], size + len(piece))
            else:
                yield b"".join(pending) + piece
            pending, size, skipped = [], 0, None
            start = end + 1
        rest = chunk[start:]
        if skipped is not None:
            skipped = TooLong(skipped.prefix, skipped.size + len(rest))
        elif size + len(rest) > limit:
            skipped = TooLong((b"".join(pending) + rest[:ID_PREFIX_BYTES])[:ID_PREFIX_BYTES], size + len(rest))
            pending, size = [], 0
        elif rest:
            pending.append(rest)
            size += len(rest)
    if skipped is not None:
        yield skipped
    elif pending:
        yield b"".join(pending)
