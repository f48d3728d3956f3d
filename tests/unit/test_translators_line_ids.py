"""translators.line_ids: the id of a response read from the two ends of a line too long to keep."""

from __future__ import annotations

import json

import pytest

from translators.line_ids import response_id

KEEP = 4096


def _ends(message: dict, separators=(", ", ": ")) -> tuple[bytes, bytes]:
    line = json.dumps(message, separators=separators).encode()
    return line[:KEEP], line[-KEEP:]


BIG = {"content": [{"type": "text", "text": "y" * 100_000, "id": 99}], "structuredContent": {"id": 98, "q": '"}'}}


@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":")])
def test_the_id_is_read_from_the_head_when_it_comes_first(separators):
    head, tail = _ends({"jsonrpc": "2.0", "id": 7, "result": BIG}, separators)
    assert response_id(head, tail) == 7


@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":")])
def test_the_id_is_read_from_the_tail_when_it_comes_last(separators):
    head, tail = _ends({"result": BIG, "jsonrpc": "2.0", "id": 12}, separators)
    assert response_id(head, tail) == 12


def test_a_string_id_and_an_error_response():
    head, tail = _ends({"jsonrpc": "2.0", "error": {"code": -1, "message": "x" * 10_000, "data": {"id": 3}}, "id": 'a\\"b'})
    assert response_id(head, tail) == 'a\\"b'


def test_nested_ids_are_not_taken_for_the_message_id():
    head, tail = _ends({"jsonrpc": "2.0", "result": {"id": 5, "text": "z" * 10_000, "tail": {"id": 6}}})
    assert response_id(head, tail) is None


def test_a_request_or_notification_is_not_a_response():
    head, tail = _ends({"jsonrpc": "2.0", "id": 4, "method": "sampling/createMessage", "params": {"x": "y" * 10_000}})
    assert response_id(head, tail) is None
    head, tail = _ends({"params": {"x": "y" * 10_000}, "method": "sampling/createMessage", "jsonrpc": "2.0", "id": 4})
    assert response_id(head, tail) is None


def test_the_whole_line_in_both_ends():
    line = b' {"id": 2, "jsonrpc": "2.0", "result": {}}\r'
    assert response_id(line, line) == 2


def test_an_id_cut_by_the_kept_part_or_not_an_id_is_not_read():
    line = json.dumps({"jsonrpc": "2.0", "result": {"t": "y" * 10_000}, "id": 123456}).encode()
    assert response_id(line[:KEEP], line[-5:]) is None  # the tail starts inside the number: `3456}`
    for bad in (b"not json at all", b"[1, 2]", b'{"id": true, "result": 1}', b'{"id": 1.5, "result": 1}', b""):
        assert response_id(bad, bad) is None


def test_a_tail_starting_inside_a_string_is_read_up_to_where_it_can_be_told():
    text = "q" * 5000 + '\\\\", "id": 5, "u": "' + "q" * 10  # backslashes, then what looks like members
    line = json.dumps({"jsonrpc": "2.0", "result": {"t": text}, "id": 9}).encode()
    head = line[:KEEP]
    for cut in (line.index(b"\\\\"), line.index(b"\\\\") + 1, line.index(b'\\", \\"id')):
        assert response_id(head, line[cut:]) == 9
    assert response_id(head, b'\\"}, "id": 9}') == 9  # a quote whose escaping cannot be told ends the reading there
    assert response_id(b"", b'\\"}, "id": 9}') is None  # and no `result` was seen
