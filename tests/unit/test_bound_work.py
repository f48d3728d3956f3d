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


def test_a_request_longer_than_idle_s_renews_its_session_at_its_end():
    """Before, a session whose one request (or GET stream) lasted longer than `idle_s` was let go
    while it ran and not counted after it, though the stdio pool counts it live from that end."""
    clock = Clock()
    work = BoundWork(idle_s=60, clock=clock)
    work.session_seen("s1")
    assert (work.session_used("s1"), work.session_used("opened-elsewhere")) == (True, False)
    clock.now += 90  # the request runs
    assert work.relayed_sessions() == 0  # in flight: counted among the requests, not the sessions
    work.session_seen("s1")  # its end (the entry renews what began counted)
    clock.now += 59
    assert work.relayed_sessions() == 1
