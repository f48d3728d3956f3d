"""A backend's bound work while it drains (proxy/work.py, docs/decisions.md §84): requests in
flight, and relayed sessions from their initialize until DELETE, a 404 or session_idle_ms idle."""

from __future__ import annotations

from proxy.work import BoundWork


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_requests_in_flight_and_relayed_sessions_are_counted_until_they_end():
    clock = Clock()
    work = BoundWork(idle_s=60, clock=clock)
    work.begin()
    work.begin()
    work.end()
    assert work.in_flight == 1
    work.session_seen("s1")
    work.session_seen("s2")
    work.session_used("opened-elsewhere")  # a session not opened here is not counted
    assert work.relayed_sessions() == 2
    work.session_ended("s1")
    assert work.relayed_sessions() == 1
    clock.now += 59
    work.session_used("s2")
    clock.now += 59
    assert work.relayed_sessions() == 1  # used 59 s ago: still live
    clock.now += 2
    assert work.relayed_sessions() == 0  # idle for longer than idle_s
    work.end()
    assert work.in_flight == 0


def test_a_request_longer_than_idle_s_keeps_its_session_and_renews_it_at_its_end():
    """Before, a session whose one request (or GET stream) lasted longer than `idle_s` was let go
    while it ran and not counted after it, though the stdio pool counts it live from that end."""
    clock = Clock()
    work = BoundWork(idle_s=60, clock=clock)
    work.session_seen("s1")
    assert (work.session_began("s1"), work.session_began("opened-elsewhere")) == (True, False)
    assert work.session_began("s1")  # a GET stream beside the request
    clock.now += 90  # both run
    assert work.relayed_sessions() == 1  # in use, not idle
    work.session_done("s1")  # the request's end; the stream still runs
    clock.now += 61
    assert work.relayed_sessions() == 1
    work.session_done("s1")  # the stream's end: idle from now
    clock.now += 59
    assert work.relayed_sessions() == 1
    clock.now += 2
    assert work.relayed_sessions() == 0


def test_a_session_deleted_while_its_get_stream_runs_is_not_counted_again_at_the_streams_end():
    """Decision 146: before, the stream's end renewed a session its DELETE had ended, and a drain
    waited `session_idle_ms` (an hour by default) for sessions no client had any more."""
    clock = Clock()
    work = BoundWork(idle_s=60, clock=clock)
    work.session_seen("s1")
    assert work.session_began("s1")  # the GET stream
    assert work.session_began("s1")  # the DELETE
    work.session_done("s1")
    work.session_ended("s1")  # the DELETE was answered
    work.session_done("s1")  # then the stream ends
    assert work.relayed_sessions() == 0
    assert work.session_began("s1") is False  # nothing of it is left
    assert (work._sessions, work._busy) == ({}, {})


def test_a_held_tasks_request_touches_its_session_without_a_request_to_end():
    clock = Clock()
    work = BoundWork(idle_s=60, clock=clock)
    work.session_seen("s1")
    clock.now += 59
    assert work.session_used("s1")
    clock.now += 59
    assert work.relayed_sessions() == 1
    clock.now += 2
    assert (work.relayed_sessions(), work._busy) == (0, {})
