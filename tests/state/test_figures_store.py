"""The status page's figures in the store (proxy/state/figures_sqlite.py, figures_redis.py;
docs/decisions.md §95): the recorder's deltas (`StatusRecorder.take`), added by two processes of
two replicas into a real SQLite file and a real redis-server, read back exactly, and a flush the
store refused sent again with the next (`Lasting`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from proxy.observe.figures import CLIENT_FAILURES, FAILURES, LEANING, REPAIRS, REQUESTS, fleet_figures
from proxy.observe.lasting import Lasting
from proxy.observe.recorder import StatusRecorder
from proxy.state.figures_redis import RedisFigures
from proxy.state.figures_sqlite import SqliteFigures
from proxy.state.redis_store import PREFIX
from proxy.state.sqlite_store import SqliteTaskStore

MINUTE = 60.0
T0 = 1_796_000_000.0 - 1_796_000_000.0 % MINUTE  # the start of a minute, Unix seconds
LEGACY = ("legacy-cli", "1.2.0")
MODERN = ("modern-app", "3.0.0")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def test_take_hands_over_what_was_counted_since_the_last_take():
    clock = Clock()
    recorder = StatusRecorder(clock)
    recorder.request("old", "v1", "v1", "ok", LEGACY)
    recorder.request("old", "v1", "v1", "-32602", LEGACY, "tools/call", "Unknown task")
    recorder.remember_session("s-1", client=LEGACY)
    first = recorder.take()
    minute = int(T0 // 60)
    assert first.counts == {
        (minute, (REQUESTS, "old", "v1", "v1", False)): 1,
        (minute, (REQUESTS, "old", "v1", "v1", True)): 1,
        (minute, (FAILURES, "old", "v1", "v1", "task_unknown", "proxy")): 1,  # the proxy's message: its refusal
        (minute, (CLIENT_FAILURES, "v1", *LEGACY, "task_unknown")): 1,
    }
    at = int(T0 * 1000)
    assert first.clients == {("v1", *LEGACY): (2, at, at, ["old"])}
    assert first.sessions == {"s-1": LEGACY}
    assert [(e["code"], e["reason"], e["detail"]) for e in first.errors] == [("-32602", "task_unknown", "Unknown task")]
    assert not recorder.take()  # nothing new

    clock.now += 10
    recorder.request("old", "v1", "v1", "ok", LEGACY)
    clock.now += MINUTE
    recorder.request("new", "v2-modern", "v2-modern", "ok", MODERN)
    recorder.count(("example", "modern-app", "Mcp-Method"))  # another kind of count: handed over the same way
    second = recorder.take()
    assert second.counts == {
        (minute, (REQUESTS, "old", "v1", "v1", False)): 1,
        (minute + 1, (REQUESTS, "new", "v2-modern", "v2-modern", False)): 1,
        (minute + 1, ("example", "modern-app", "Mcp-Method")): 1,
    }
    assert second.clients == {
        ("v2-modern", *MODERN): (1, at + 70_000, at + 70_000, ["new"]),
        ("v1", *LEGACY): (1, at, at + 10_000, ["old"]),
    }
    assert (second.sessions, second.errors) == ({}, [])


@contextlib.asynccontextmanager
async def _sqlite(tmp_path: Path) -> AsyncIterator[Any]:
    store = SqliteTaskStore(tmp_path / "tasks.sqlite3", max_tasks=100, max_sessions=100)
    try:
        yield SqliteFigures(lambda: store.db)
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def _redis(url: str) -> AsyncIterator[Any]:
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        yield RedisFigures(client, session_keep_s=3600)
    finally:
        await client.aclose()


@pytest.fixture(params=["sqlite", "redis"])
async def figures(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "sqlite":
        async with _sqlite(tmp_path) as store:
            yield store
    else:
        async with _redis(request.getfixturevalue("redis_url")) as store:
            yield store


async def test_two_replicas_add_into_one_store_and_read_back_exactly(figures):
    clock = Clock()
    a1, a2, b = StatusRecorder(clock), StatusRecorder(clock), StatusRecorder(clock)
    started = int(T0 * 1000)
    for _ in range(3):
        a1.request("old", "v1", "v1", "ok", LEGACY)
    a2.request("old", "v1", "v1", "ok", LEGACY)  # a second worker of replica a
    a2.remember_session("s-1", client=LEGACY)
    clock.now += 5
    b.request("new", "v2-modern", "v1", "-32602", MODERN, "tools/call", "Unknown task", failure=("task_unknown", "proxy"),
              repairs=("mcp-method",))  # fmt: skip
    now = int(clock.now * 1000)
    await figures.add("a:1", "p1", a1.take(), started, now)
    await figures.add("a:1", "p2", a2.take(), started + 1000, now)
    await figures.add("b:2", "p3", b.take(), started + 2000, now)

    replicas, errors = await figures.read(now)
    assert [(r.name, r.since_ms, r.last_flush_ms) for r in replicas] == [("a:1", started, now), ("b:2", started + 2000, now)]
    minute = int(T0 // 60)
    assert replicas[0].minutes == {minute: {(REQUESTS, "old", "v1", "v1", False): 4}}
    assert replicas[1].minutes == {
        minute: {
            (REQUESTS, "new", "v2-modern", "v1", True): 1,
            (LEANING, "v2-modern", "modern-app", "3.0.0"): 1,
            (REPAIRS, "v2-modern", "modern-app", "3.0.0", "mcp-method"): 1,
            (FAILURES, "new", "v2-modern", "v1", "task_unknown", "proxy"): 1,
            (CLIENT_FAILURES, "v2-modern", "modern-app", "3.0.0", "task_unknown"): 1,
        }
    }
    assert [(e["replica"], e["code"], e["reason"], e["by"], e["detail"]) for e in errors] == [
        ("b:2", "-32602", "task_unknown", "proxy", "Unknown task")
    ]
    assert await figures.session_client("s-1") == LEGACY
    assert await figures.session_client("s-2") is None

    fleet = fleet_figures(replicas, errors, now)
    assert fleet.since_ms == started
    assert fleet.matrix(60) == [
        {"client_dialect": "v1", "backend_dialect": "v1", "mode": "relayed", "requests": 4, "errors": 0},
        {"client_dialect": "v2-modern", "backend_dialect": "v1", "mode": "translated", "requests": 1, "errors": 1},
    ]
    assert fleet.clients() == [
        {"dialect": "v2-modern", "name": "modern-app", "version": "3.0.0", "requests": 1, "first_seen_ms": now, "last_seen_ms": now,
         "backends": ["new"], "errors": 1, "failures": {"task_unknown": 1}, "leaning": 1, "repairs": {"mcp-method": 1},
         "replicas": ["b:2"]},
        {"dialect": "v1", "name": "legacy-cli", "version": "1.2.0", "requests": 4, "first_seen_ms": started, "last_seen_ms": started,
         "backends": ["old"], "errors": 0, "failures": {}, "leaning": 0, "repairs": {}, "replicas": ["a:1"]},
    ]  # fmt: skip
    assert fleet.failures(60) == [
        {"backend": "new", "client_dialect": "v2-modern", "backend_dialect": "v1", "mode": "translated", "reason": "task_unknown",
         "by": "proxy", "count": 1}
    ]  # fmt: skip
    assert fleet.backend_failures("new", 60) == (0, 1)
    assert fleet.leaning() == [
        {"dialect": "v2-modern", "name": "modern-app", "version": "3.0.0", "requests": 1, "leaning": 1, "repairs": {"mcp-method": 1},
         "last_leaning_ms": now}
    ]  # fmt: skip
    assert fleet.last_v1_ms() == started

    clock.now += 1440 * MINUTE  # a day later: the counts are gone, the clients are not
    later = int(clock.now * 1000)
    replicas, _ = await figures.read(later)
    assert [r.minutes for r in replicas] == [{}, {}]
    assert fleet_figures(replicas, [], later).last_v1_ms() == started


class Refusing:
    """A store that refuses `fails` flushes, then hands each to `inner`."""

    shared = False

    def __init__(self, inner: Any, fails: int):
        self.inner, self.fails = inner, fails

    async def add(self, *args: Any, **kwargs: Any) -> None:
        if self.fails:
            self.fails -= 1
            raise OSError("disk full")
        await self.inner.add(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_flush_the_store_refused_goes_with_the_next(tmp_path, caplog):
    clock = Clock()
    recorder = StatusRecorder(clock)
    async with _sqlite(tmp_path) as inner:
        lasting = Lasting(recorder, Refusing(inner, 1), replica="a:1", store_name="sqlite")
        recorder.request("old", "v1", "v1", "ok", LEGACY)
        await lasting.flush()
        assert "status figures not flushed to the store (disk full)" in caplog.text
        recorder.request("old", "v1", "v1", "ok", LEGACY)
        fleet, counting = await lasting.view()
    assert fleet.request_counts(60) == (2, 0, 2)
    assert [c["requests"] for c in fleet.clients()] == [2]
    assert (counting["covers"], counting["replica"], [r["requests_last_hour"] for r in counting["replicas"]]) == (
        "proxy",
        "a:1",
        [2],
    )


async def test_a_read_waits_for_live_processes_only_and_names_one_too_slow(redis_url, monkeypatch):
    """A process whose heartbeat lives but which has not flushed since the read began is waited
    for at most `BARRIER_S`, then named in `counting.late`; one whose heartbeat is gone (killed)
    is not waited for, and its stamp is dropped."""
    import proxy.observe.lasting as lasting_module

    monkeypatch.setattr(lasting_module, "BARRIER_S", 0.3)
    async with _redis(redis_url) as store:
        redis = store.redis
        await redis.set(PREFIX + "hb:me", "1", ex=5)
        await redis.set(PREFIX + "hb:stuck", "1", ex=5)  # alive, but its flushes do not come
        await redis.hset(PREFIX + "f:fl", mapping={"stuck": '["b:2", 1000]', "dead": '["b:2", 1000]'})
        recorder = StatusRecorder()
        recorder.request("old", "v1", "v1", "ok", LEGACY)
        lasting = Lasting(recorder, store, replica="a:1", store_name="redis", process="me")
        _, counting = await lasting.view()
        assert counting["late"] == ["b:2 (stuck)"]
        assert [(r["name"], r["processes"], r["requests_last_hour"]) for r in counting["replicas"]] == [("a:1", 1, 1)]
        assert sorted(await redis.hkeys(PREFIX + "f:fl")) == ["me", "stuck"]
        await lasting.close()  # signs off: reads no longer wait for it
        assert await redis.hkeys(PREFIX + "f:fl") == ["stuck"]


async def test_a_relayed_sessions_client_is_kept_while_the_session_is_used(redis_url):
    """On Redis a binding lives `session_keep_s` unused; a process that relays the session writes
    it again once a quarter of that has passed (at its next flush), never per request."""
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        store = RedisFigures(client, session_keep_s=0.4)
        recorder = StatusRecorder()
        lasting = Lasting(recorder, store, replica="a:1", store_name="redis", process="me")
        key = PREFIX + "f:s:s-1"
        recorder.remember_session("s-1", client=LEGACY)
        await lasting.flush()
        assert await store.session_client("s-1") == LEGACY
        for _ in range(3):  # used for longer than its lifetime: kept
            await asyncio.sleep(0.15)  # more than a quarter of the lifetime
            assert recorder.session_client("s-1") == LEGACY
            await lasting.flush()
            assert 250 < await client.pttl(key) <= 400
        await lasting.flush()  # not used since: not written again
        async with asyncio.timeout(10):  # a deadline: a key that never expires fails here
            while await client.exists(key):
                await lasting.flush()
                await asyncio.sleep(0.05)
        assert await store.session_client("s-1") is None
    finally:
        await client.aclose()
