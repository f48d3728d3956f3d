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


def test_a_cr_at_the_end_of_what_came_waits_for_the_next_byte() -> None:
    parser = SseParser()
    assert parser.feed(b"data: a\r\r") == []  # the second CR may be half of a CRLF
    assert parser.feed(b"data: b\r\n\r\n") == [Event("a"), Event("b")]


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
