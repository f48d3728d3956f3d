"""`LineSplitter`: a stdio process's output cut into lines where the event loop hands it over
(docs/behaviour.md §7 "stdio backends", docs/decisions.md §72 for lines over the limit)."""

from __future__ import annotations

import pytest

from proxy.upstream.stdio.process import KEEP_BYTES, Launch, LineSplitter, LongLine, StdioProcess

TEXT = b'{"jsonrpc":"2.0","id":1,"result":{}}\n{"jsonrpc":"2.0","method":"notifications/progress"}\n\nlast'


def _all(splitter: LineSplitter, chunks: list[bytes]) -> list[bytes | LongLine]:
    lines: list[bytes | LongLine] = []
    for chunk in chunks:
        lines += splitter.feed(chunk)
    return lines + splitter.end()


def test_one_chunk_gives_every_line_and_the_last_one_without_a_newline_at_the_end() -> None:
    assert _all(LineSplitter(1024), [TEXT]) == [
        b'{"jsonrpc":"2.0","id":1,"result":{}}',
        b'{"jsonrpc":"2.0","method":"notifications/progress"}',
        b"",
        b"last",
    ]


@pytest.mark.parametrize("cut", range(1, len(TEXT)))
def test_every_split_of_the_bytes_gives_the_same_lines(cut: int) -> None:
    assert _all(LineSplitter(1024), [TEXT[:cut], TEXT[cut:]]) == _all(LineSplitter(1024), [TEXT])


def test_byte_by_byte_gives_the_same_lines() -> None:
    assert _all(LineSplitter(1024), [TEXT[i : i + 1] for i in range(len(TEXT))]) == _all(LineSplitter(1024), [TEXT])


def test_a_line_is_given_when_its_newline_comes_and_not_before() -> None:
    splitter = LineSplitter(1024)
    assert splitter.feed(b'{"id":') == []
    assert splitter.feed(b"1}") == []
    assert splitter.feed(b"\n{") == [b'{"id":1}']
    assert splitter.end() == [b"{"]
    assert splitter.end() == []


def test_a_line_of_exactly_the_limit_is_kept_and_one_byte_more_is_a_long_line() -> None:
    assert LineSplitter(8).feed(b"12345678\n") == [b"12345678"]
    assert LineSplitter(8).feed(b"123456789\nnext\n") == [LongLine(9, b"123456789", b"123456789"), b"next"]


def test_a_long_line_keeps_its_size_and_both_ends_over_many_chunks() -> None:
    head, middle, tail = b"h" * KEEP_BYTES, b"m" * (3 * KEEP_BYTES), b"t" * KEEP_BYTES
    line = head + middle + tail
    splitter = LineSplitter(KEEP_BYTES)
    chunks = [line[i : i + 1000] for i in range(0, len(line), 1000)]
    assert _all(splitter, [*chunks, b"\nafter\n"]) == [LongLine(len(line), head, tail), b"after"]


def test_a_long_line_cut_off_by_the_end_of_the_stream_is_given_as_one() -> None:
    splitter = LineSplitter(4)
    assert splitter.feed(b"ok\n0123456789") == [b"ok"]
    assert splitter.end() == [LongLine(10, b"0123456789", b"0123456789")]


@pytest.mark.parametrize(
    ("line", "delivered"),
    [
        (
            b'{"jsonrpc":"2.0","id":1,"result":{}}',
            ({"jsonrpc": "2.0", "id": 1, "result": {}}, b'{"jsonrpc":"2.0","id":1,"result":{}}'),
        ),
        (b'  {"id":1}  ', ({"id": 1}, b'{"id":1}')),  # stripped: those bytes may be passed on
        (b'{"k":"\xed\xa0\x80"}', ({"k": "\ud800"}, None)),  # a surrogate written as UTF-8: decoded, never passed on
        (b'\xef\xbb\xbf{"id":1}', ({"id": 1}, None)),  # a byte order mark: decoded, never passed on
        (b'{"id":1} {"id":2}', None),
        (b'{"id":', None),
        (b"[1]", None),
        (b"[" * 100_000, None),  # nested too deeply for the decoder: skipped, not raised
        (b'{"k":"\xff"}', None),
    ],
)
def test_a_stdout_line_is_decoded_as_json_loads_does_and_given_with_its_bytes_when_they_may_pass(line, delivered) -> None:
    got: list[tuple[object, bytes | None]] = []
    process = StdioProcess(
        Launch("t", ["true"]), on_message=lambda message, text: got.append((message, text)), on_exit=lambda _code: None
    )
    process._stdout_line(line)
    process._stdout_line(b'{"after":true}')  # the next line still arrives
    assert got == ([delivered] if delivered is not None else []) + [({"after": True}, b'{"after":true}')]
