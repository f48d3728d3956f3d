"""The GET stream's replay buffer (`proxy/faces/replay.py`): bounded in events and in bytes."""

from __future__ import annotations

from proxy.faces.replay import REPLAY_BYTES, ReplayBuffer


def test_the_default_byte_bound_is_one_mebibyte() -> None:
    assert (ReplayBuffer(256).max_bytes, REPLAY_BYTES) == (1024 * 1024, 1024 * 1024)


def test_the_oldest_events_go_first_beyond_the_bytes() -> None:
    buffer = ReplayBuffer(100, 10)
    for event_id, frame in enumerate([b"aaaa", b"bbbb", b"cc", b"ddddd"], 1):
        buffer.append(event_id, frame)
    assert (list(buffer), buffer.size) == ([(3, b"cc"), (4, b"ddddd")], 7)
    assert buffer.after(3) == [b"ddddd"]


def test_the_oldest_events_go_first_beyond_the_count() -> None:
    buffer = ReplayBuffer(2, 100)
    for event_id in range(1, 5):
        buffer.append(event_id, b"x" * event_id)
    assert (list(buffer), buffer.size) == ([(3, b"xxx"), (4, b"xxxx")], 7)


def test_an_event_larger_than_the_bound_alone_is_not_kept_and_keeps_the_rest() -> None:
    buffer = ReplayBuffer(100, 10)
    buffer.append(1, b"small")
    buffer.append(2, b"x" * 11)
    assert (list(buffer), buffer.size) == ([(1, b"small")], 5)
    buffer.append(3, b"x" * 10)
    assert (list(buffer), buffer.size) == ([(3, b"x" * 10)], 10)


def test_no_events_are_kept_when_replay_events_is_zero() -> None:
    buffer = ReplayBuffer(0)
    buffer.append(1, b"frame")
    assert (list(buffer), len(buffer), buffer.size) == ([], 0, 0)
