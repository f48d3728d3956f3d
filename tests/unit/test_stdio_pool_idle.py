"""Which virtual sessions of a stdio backend count as idle (`ProcessPool._idle`,
docs/decisions.md §140, §145): a relayed session unused for `idle_s` with nothing in flight and no
GET stream; a session of the proxy's own face (`kept`) only when a bound asks (`kept_too`) and it
holds no task."""

from __future__ import annotations

import asyncio

import pytest

from proxy.config import Upstream
from proxy.upstream.stdio import ProcessPool
from proxy.upstream.stdio_session import Pending, VirtualSession

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
        ({"kept": True, "tasks": {"t1"}}, False, False),
        ({"tasks": {"t1"}}, True, True),  # a relayed session's tasks go with it (decision 140)
        ({"inflight": {1: Pending(None, 1, "tools/call", None)}}, False, False),
        ({"kept": True, "inflight": {1: Pending(None, 1, "tools/call", None)}}, False, False),
    ],
)
def test_idle_for_its_time_and_a_kept_session_only_under_a_bound(fields, idle, idle_under_a_bound):
    pool, session = _pool(), _session(**fields)
    assert (pool._idle(session, NOW), pool._idle(session, NOW, kept_too=True)) == (idle, idle_under_a_bound)
    assert (pool._idle(session, NOW - 0.001), pool._idle(session, NOW - 0.001, kept_too=True)) == (False, False)


def test_a_session_with_its_get_stream_open_is_never_idle():
    queue: asyncio.Queue = asyncio.Queue()
    pool = _pool()
    for kept in (False, True):
        session = _session(kept=kept, stream=queue)
        assert (pool._idle(session, NOW), pool._idle(session, NOW, kept_too=True)) == (False, False)
