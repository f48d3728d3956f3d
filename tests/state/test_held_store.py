"""Held task records (proxy/state/held_tasks.py) in each store: memory, the SQLite file (also after
reopening it, as after a restart) and a real Redis; expiry at the task's ttl; listings by principal
in creation order; the unfinished ones."""

from __future__ import annotations

import time

import pytest

from proxy.state.held_tasks import HeldRecord
from proxy.state.redis_store import PREFIX, RedisTaskStore
from proxy.state.sqlite_store import SqliteTaskStore
from proxy.state.store import MemoryTaskStore
from translators.held import completed, new_held


def _record(task_id: str, principal: str = "p1", *, created_ms: int | None = None, ttl_ms: int = 60_000) -> HeldRecord:
    now = created_ms if created_ms is not None else int(time.time() * 1000)
    return HeldRecord(new_held(task_id, now, ttl_ms, 1000), principal, "main", "slow_compute", "sess-1", "7", "proc-a")


async def _exercise(held) -> None:
    now = int(time.time() * 1000)
    first, second, other = _record("t1", created_ms=now - 20), _record("t2", created_ms=now - 10), _record("t3", "p2")
    for record in (second, first, other):
        await held.put(record)
    assert await held.get("t1") == first
    assert await held.get("nope") is None
    assert [r.task_id for r in await held.of_principal("main", "p1")] == ["t1", "t2"]
    assert await held.of_principal("other-backend", "p1") == []
    done = first.evolve(completed(first.state, {"content": []}, now))
    await held.put(done)
    assert (await held.get("t1")).state.status == "completed"
    assert sorted(r.task_id for r in await held.unfinished()) == ["t2", "t3"]
    short = _record("t4", ttl_ms=1, created_ms=now - 1000)  # past its ttl already
    await held.put(short)
    assert await held.get("t4") is None
    assert "t4" not in [r.task_id for r in await held.unfinished()]


def test_a_record_round_trips_through_json():
    record = _record("t1")
    assert HeldRecord.from_json(record.to_json()) == record


async def test_memory_store():
    store = MemoryTaskStore(max_tasks=10)
    assert store.held_tasks() is store.held_tasks()
    await _exercise(store.held_tasks())


async def test_sqlite_store_and_after_a_reopen(tmp_path):
    store = SqliteTaskStore(tmp_path / "state.db", max_tasks=10, max_sessions=10)
    await _exercise(store.held_tasks())
    await store.close()
    reopened = SqliteTaskStore(tmp_path / "state.db", max_tasks=10, max_sessions=10)
    try:
        held = reopened.held_tasks()
        assert (await held.get("t1")).state.status == "completed"
        assert sorted(r.task_id for r in await held.unfinished()) == ["t2", "t3"]
    finally:
        await reopened.close()


async def test_sqlite_store_is_bounded(tmp_path):
    store = SqliteTaskStore(tmp_path / "state.db", max_tasks=3, max_sessions=10)
    try:
        now = int(time.time() * 1000)
        for number in range(5):
            await store.held_tasks().put(_record(f"t{number}", created_ms=now + number))
        assert [r.task_id for r in await store.held_tasks().of_principal("main", "p1")] == ["t2", "t3", "t4"]
    finally:
        await store.close()


@pytest.mark.slow
async def test_redis_store(redis_url):
    store = RedisTaskStore(redis_url, process="a")
    try:
        await _exercise(store.held_tasks())
        ttl = await store.redis.pttl(PREFIX + "h:t2")
        assert 0 < ttl <= 60_000
        other = RedisTaskStore(redis_url, process="b")  # another replica sees the same records
        try:
            assert (await other.held_tasks().get("t1")).state.status == "completed"
        finally:
            await other.close()
    finally:
        await store.close()
