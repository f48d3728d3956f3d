"""The stdio face's bounded line reader (`proxy.faces.stdio_lines`, docs/decisions.md §74), on a real
`asyncio.StreamReader` fed in chunks."""

from __future__ import annotations

import asyncio

from proxy.faces.stdio_lines import TooLong, lines


async def _read(chunks: list[bytes], limit: int) -> list[bytes | TooLong]:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    return [line async for line in lines(reader, limit)]


async def test_lines_split_on_newlines_across_chunks_and_keep_a_last_line_without_one():
    assert await _read([b"ab", b"c\nde", b"\n\nf"], 10) == [b"abc", b"de", b"", b"f"]


async def test_a_line_at_the_limit_is_kept_and_one_over_it_is_refused_with_its_start():
    assert await _read([b"12345\n"], 5) == [b"12345"]
    assert await _read([b"123456\nok\n"], 5) == [TooLong(b"123456", 6), b"ok"]


async def test_a_line_over_the_limit_across_many_chunks_is_skipped_to_its_newline():
    chunks = [b"x" * 4 for _ in range(10)] + [b"yy\nnext\n"]
    assert await _read(chunks, 8) == [TooLong(b"x" * 40 + b"yy", 42), b"next"]


async def test_a_line_over_the_limit_at_eof_is_refused():
    assert await _read([b"ok\n", b"123456789"], 5) == [b"ok", TooLong(b"123456789", 9)]


async def test_the_start_kept_of_a_long_line_is_bounded():
    big = b"a" * 200_000
    (refused,) = await _read([big[i : i + 65536] for i in range(0, len(big), 65536)] + [b"\n"], 100)
    assert refused == TooLong(b"a" * 65536, 200_000)
