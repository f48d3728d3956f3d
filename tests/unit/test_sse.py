"""The incremental SSE parser (`proxy/sse.py`, WHATWG HTML §9.2): line ends, fields, and every
split of the stream giving the same events."""

from __future__ import annotations

import pytest

from proxy.sse import Event, SseParser, sse_frame

STREAM = (
    b": a comment\n"
    b"id: 1\n"
    b"event: message\n"
    b'data: {"jsonrpc":"2.0","method":"notifications/progress"}\n'
    b"\n"
    b"id: 2\n"
    b"data:\n"
    b"\n"  # a priming event (empty data): skipped, its id kept
    b"data: first line\n"
    b"data:second line\n"
    b"retry: 500\n"
    b"\n"
    b"event: other\n"
    b"data: \xc3\xa9t\xc3\xa9 \xe2\x9c\x93\n"
    b"\n"
)
EVENTS = [
    Event('{"jsonrpc":"2.0","method":"notifications/progress"}', "message", "1"),
    Event("first line\nsecond line", "message", "2"),
    Event("\u00e9t\u00e9 \u2713", "other", "2"),
]


def _parse(chunks: list[bytes]) -> list[Event]:
    """The events of the chunks, then of the end of the stream (as `iter_events` ends it)."""
    parser = SseParser()
    return [event for chunk in [*chunks, b"\n\n"] for event in parser.feed(chunk)]


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_every_line_end_gives_the_same_events(line_end: bytes) -> None:
    assert _parse([STREAM.replace(b"\n", line_end)]) == EVENTS


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_every_split_into_two_chunks_gives_the_same_events(line_end: bytes) -> None:
    stream = STREAM.replace(b"\n", line_end)
    for cut in range(len(stream) + 1):
        assert _parse([stream[:cut], stream[cut:]]) == EVENTS, cut


def test_one_byte_at_a_time_gives_the_same_events_even_across_crlf_and_characters() -> None:
    stream = STREAM.replace(b"\n", b"\r\n")
    assert _parse([stream[i : i + 1] for i in range(len(stream))]) == EVENTS


def test_a_cr_then_a_cr_is_two_line_ends() -> None:
    assert _parse([b"data: a\r", b"\r", b"data: b\r\r"]) == [Event("a"), Event("b")]


def test_a_cr_at_the_end_of_what_came_ends_the_line_at_once_and_a_following_lf_is_its_crlf() -> None:
    """A stream of CR line ends gets each event when its blank line comes, not when the next
    event's first byte does (before, the last CR was held as maybe half a CRLF: an event of a
    CR-only GET stream waited for the next one, minutes maybe)."""
    parser = SseParser()
    assert parser.feed(b"data: a\r\r") == [Event("a")]
    assert parser.feed(b"\ndata: b\r") == []  # the LF is the second half of the CRLF before it
    assert parser.feed(b"") == []
    assert parser.feed(b"\n\r") == [Event("b")]
    assert parser.feed(b"\n\ndata: c\n\n") == [Event("c")]  # CRLF, then an LF of its own


def test_an_event_not_yet_ended_is_held_until_its_blank_line() -> None:
    parser = SseParser()
    assert parser.feed(b"data: held\n") == []
    assert parser.feed(b"\n") == [Event("held")]


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert _parse([b"data: \xff\xfe ok\n\n"]) == [Event("\ufffd\ufffd ok")]


def test_an_id_with_nul_is_ignored() -> None:
    assert _parse([b"id: 7\ndata: a\n\nid: x\x00y\ndata: b\n\n"]) == [Event("a", "message", "7"), Event("b", "message", "7")]


def test_a_frame_parses_back_to_its_message() -> None:
    frame = sse_frame(3, {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "é"}})
    assert _parse([frame]) == [
        Event('{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"é"}}', "message", "3")
    ]


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_a_leading_byte_order_mark_is_ignored_at_every_split(line_end: bytes) -> None:
    """WHATWG HTML §9.2.5: one leading U+FEFF is ignored; before, the first line read as the
    field `\\ufeffdata` and the stream's first event was lost."""
    stream = (b"\xef\xbb\xbfdata: lead\n\n" + STREAM).replace(b"\n", line_end)
    events = [Event("lead"), *EVENTS]
    for cut in range(len(stream) + 1):
        assert _parse([stream[:cut], stream[cut:]]) == events, cut
    assert _parse([stream[i : i + 1] for i in range(len(stream))]) == events


def test_only_one_leading_byte_order_mark_is_ignored_and_only_at_the_start() -> None:
    bom = b"\xef\xbb\xbf"
    assert _parse([bom + bom + b"data: a\n\n"]) == []  # the second is part of the field name
    assert _parse([b"data: a\n\n" + bom + b"data: b\n\n"]) == [Event("a")]
    assert _parse([bom[:2], b"data: a\n\n"]) == []  # two bytes of a BOM are not one


def test_a_line_never_ended_is_kept_as_the_chunks_that_came_not_copied_at_each_one() -> None:
    """A long line (a large result in one event) arriving in many chunks: each chunk is kept as
    it came and joined once when the line ends. Copying the whole line so far at every chunk (as
    before) made a 64 MiB event in 64 KiB chunks cost 45 s of the event loop."""
    parser = SseParser()
    chunks = [b"data: " + b"x" * 65530] + [bytes([65 + i % 26]) * 65536 for i in range(63)]
    for chunk in chunks:
        assert parser.feed(chunk) == []
    assert all(kept is fed for kept, fed in zip(parser._pending, chunks, strict=True))
    [event] = parser.feed(b"\n\n")
    assert event.data == b"".join(chunks)[len(b"data: ") :].decode()
    assert parser._pending == []
