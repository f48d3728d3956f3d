"""Which virtual sessions of a stdio backend count as idle (`ProcessPool._idle`,
docs/decisions.md §140, §145): a relayed session unused for `idle_s` with nothing in flight and no
GET stream; a session of the proxy's own face (`kept`) only when a bound asks (`kept_too`) and it
holds no task (but those whose outcome its face keeps: §147)."""

from __future__ import annotations

import asyncio
import time

import pytest

from proxy.config import Upstream
from proxy.upstream.stdio import ProcessPool
from proxy.upstream.stdio.mux import Greeting, ProcessSlot
from proxy.upstream.stdio.process import Launch
from proxy.upstream.stdio.session import Pending, VirtualSession
from translators.errors import McpError

IDLE_S = 10.0
LONG_AGO = 100.0
NOW = LONG_AGO + IDLE_S


def _pool() -> ProcessPool:
    return ProcessPool(Upstream(name="notes", command=["notes"]), None, idle_s=IDLE_S)  # type: ignore[arg-type]


def _session(**fields) -> VirtualSession:
    return VirtualSession("s", None, last_used=LONG_AGO, **fields)


@pytest.mark.parametrize(
    ("fields", "idle", "idle_under_a_bound"),
    [
        ({}, True, True),
        ({"kept": True}, False, True),
        ({"kept": True, "tasks": {"t1"}}, False, False),  # its result may still be fetched
        ({"kept": True, "tasks": {"t1"}, "settled": {"t1"}}, False, True),  # the proxy keeps its outcome (decision 147)
        ({"kept": True, "tasks": {"t1", "t2"}, "settled": {"t1"}}, False, False),
        ({"tasks": {"t1"}}, True, True),  # a relayed session's tasks go with it (decision 140)
        ({"inflight": {1: Pending(None, 1, "tools/call", None)}}, False, False),
        ({"kept": True, "inflight": {1: Pending(None, 1, "tools/call", None)}}, False, False),
    ],
)
def test_idle_for_its_time_and_a_kept_session_only_under_a_bound(fields, idle, idle_under_a_bound):
    pool, session = _pool(), _session(**fields)
    assert (pool._idle(session, NOW), pool._idle(session, NOW, kept_too=True)) == (idle, idle_under_a_bound)
    assert (pool._idle(session, NOW - 0.001), pool._idle(session, NOW - 0.001, kept_too=True)) == (False, False)


def test_only_a_kept_sessions_own_task_is_settled_by_the_face():
    """`outcome_kept` (called by `V1Follower` once the outcome is stored for the task's ttl) marks
    a task of the proxy's own session; a relayed session's, another session's or an unknown
    session's task is left as it is."""
    pool = _pool()
    own, relayed = _own("own", tasks={"t1", "t2"}), VirtualSession("relayed", None, tasks={"t3"})
    _slot(pool, "a", own, relayed)
    for session_id, task in (("own", "t1"), ("own", "t3"), ("relayed", "t3"), ("gone", "t1"), (None, "t1")):
        pool.outcome_kept(session_id, task)
    assert (own.settled, own.holds_tasks, relayed.settled, relayed.holds_tasks) == ({"t1"}, True, set(), True)
    pool.outcome_kept("own", "t2")
    assert (own.settled, own.holds_tasks) == ({"t1", "t2"}, False)


def test_a_relayed_session_with_its_get_stream_open_is_never_idle_a_kept_one_is_under_a_bound():
    """A relayed session's GET stream is its client listening; a kept session's is the proxy's own
    listener (`SessionListener`), which would otherwise hold the process for good (decision 145)."""
    queue: asyncio.Queue = asyncio.Queue()
    pool = _pool()
    relayed, kept = _session(stream=queue), _session(kept=True, stream=queue)
    assert (pool._idle(relayed, NOW), pool._idle(relayed, NOW, kept_too=True)) == (False, False)
    assert (pool._idle(kept, NOW), pool._idle(kept, NOW, kept_too=True)) == (False, True)


def _slot(pool: ProcessPool, key: str, *sessions: VirtualSession) -> ProcessSlot:
    """A process slot of `pool` (never started) carrying `sessions`, the most recently used so far."""
    slot = ProcessSlot(
        Launch("notes", ["notes"], max_line_bytes=1024, grace_s=0.1),
        Greeting({}, {}),
        on_down=lambda reason: None,
        on_up=lambda: None,
    )
    pool.slots[key], pool.owners[key] = slot, key
    for session in sessions:
        session.slot = slot
        slot.sessions[session.id] = pool.sessions[session.id] = session
    return slot


def _own(session_id: str, **fields) -> VirtualSession:
    return VirtualSession(session_id, None, kept=True, last_used=time.monotonic() - 2 * IDLE_S, **fields)


async def test_a_newcomer_ends_the_idle_own_sessions_of_one_process_only():
    """Before, a bound reached ended every idle kept session of the pool: one newcomer cost every
    idle modern caller its process's state (a tester's alice, bob and carol for dave)."""
    pool = ProcessPool(Upstream(name="notes", command=["notes"], max_processes=3), None, idle_s=IDLE_S)  # type: ignore[arg-type]
    alice, bob, carol = _own("alice"), _own("bob"), _own("carol")
    for who, session in (("alice", alice), ("bob", bob), ("carol", carol)):
        _slot(pool, who, session)
    pool._make_room("dave")
    await asyncio.gather(*pool._stopping)
    assert (list(pool.slots), [s.lost for s in (alice, bob, carol)]) == (["bob", "carol"], [True, False, False])
    assert sorted(pool.sessions) == ["bob", "carol"]


async def test_a_process_a_newcomer_waits_for_is_not_given_to_another():
    """Before, a process being started for one newcomer held no session yet, so the next newcomer
    stopped it to start its own, and the first waited out its start wait for a 502."""
    pool = ProcessPool(Upstream(name="notes", command=["notes"], max_processes=1), None, idle_s=IDLE_S)  # type: ignore[arg-type]
    slot = _slot(pool, "first")
    slot.opening = 1
    with pytest.raises(McpError) as refused:
        pool._make_room("second")
    assert (refused.value.http_status, refused.value.message) == (
        503,
        "Backend 'notes': all 1 of its processes hold other callers' sessions (max_processes = 1); no other is started",
    )
    slot.opening = 0
    pool._make_room("second")
    await asyncio.gather(*pool._stopping)
    assert list(pool.slots) == []


async def test_a_process_with_a_task_or_a_callers_session_is_not_given_away():
    pool = ProcessPool(Upstream(name="notes", command=["notes"], max_processes=2), None, idle_s=IDLE_S)  # type: ignore[arg-type]
    own = _own("alice")
    _slot(pool, "alice", own)
    relayed = VirtualSession("bob", None, last_used=time.monotonic())  # in use: not idle
    _slot(pool, "bob", relayed, _own("bob-own"))
    pool.slots["alice"]._task_owner.add("t1", own, 60_000, now=time.monotonic())
    with pytest.raises(McpError):
        pool._make_room("carol")
    assert (own.lost, relayed.lost, list(pool.slots)) == (False, False, ["alice", "bob"])
