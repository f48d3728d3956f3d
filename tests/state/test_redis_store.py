"""The Redis store (proxy/state/redis_store.py) against a real redis-server: the rules of the other
stores, atomic claims between two processes' stores, a dead claimer's claim released, and every
key carrying a TTL set by Redis."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
import redis.asyncio as aioredis

from proxy.state.health import RETRY_S, StoreUnreachable, display_url
from proxy.state.redis_store import PREFIX, RedisTaskStore
from proxy.state.store import CapturedInput, Entry, SessionRecord
from translators.model import CanonicalTask, InputRequest, TaskError
from translators.sealing import TaskRef

REF = TaskRef("main", "session-1", "task-1")
OTHER = TaskRef("main", "session-1", "task-2")
ASK = InputRequest(method="elicitation/create", params={"message": "Delete a.txt?"})


def _task(status: str = "completed") -> CanonicalTask:
    return CanonicalTask(
        task_id="task-1", status=status, created_at="2026-11-30T08:00:00Z", last_updated_at="2026-11-30T08:00:01Z", ttl_ms=60_000
    )


async def test_captured_requests_get_fresh_keys_and_are_answered_once(redis_url):
    store = RedisTaskStore(redis_url, process="a")
    try:
        assert await store.capture_input(REF, 7, ASK, 60) == "input-1"
        assert await store.capture_input(REF, 7, ASK, 60) is None
        assert await store.capture_input(REF, "x", ASK, 60) == "input-2"
        assert await store.capture_input(OTHER, 7, ASK, 60) == "input-1"
        assert await store.inputs(REF) == {
            "input-1": CapturedInput("input-1", 7, ASK),
            "input-2": CapturedInput("input-2", "x", ASK),
        }
        assert await store.claim_input(REF, "input-1") == CapturedInput("input-1", 7, ASK)
        await store.answered(REF, "input-1")
        assert await store.capture_input(REF, 7, ASK, 60) is None  # answered, sent again: not captured again
        assert await store.capture_input(REF, 9, ASK, 60) == "input-3"
        assert list(await store.inputs(REF)) == ["input-2", "input-3"]
        await store.drop_inputs(REF)
        assert await store.inputs(REF) == {}
    finally:
        await store.close()


async def test_of_two_processes_claiming_one_key_one_wins_and_a_dead_claimers_claim_is_released(redis_url):
    a, b = RedisTaskStore(redis_url, process="a"), RedisTaskStore(redis_url, process="b")
    try:
        await a.heartbeat()
        await b.heartbeat()
        await a.capture_input(REF, 7, ASK, 60)
        claims = await asyncio.gather(*(store.claim_input(REF, "input-1") for store in (a, b, a, b)))
        assert sorted(claim is not None for claim in claims) == [False, False, False, True]
        assert await b.claim_input(REF, "input-1") is None
        holder = "a" if claims[0] is not None or claims[2] is not None else "b"
        winner, loser = (a, b) if holder == "a" else (b, a)
        await winner.release_input(REF, "input-1")
        assert await loser.claim_input(REF, "input-1") == CapturedInput("input-1", 7, ASK)
        await loser.redis.delete(PREFIX + "hb:" + loser.process)  # the claimer died (its heartbeat expired)
        assert await winner.claim_input(REF, "input-1") == CapturedInput("input-1", 7, ASK)
    finally:
        await a.close()
        await b.close()


async def test_outcomes_sessions_and_entries_are_shared_and_expire(redis_url):
    a, b = RedisTaskStore(redis_url, process="a"), RedisTaskStore(redis_url, process="b")
    try:
        await a.keep_outcome(REF, _task(), 60)
        await a.keep_outcome(OTHER, _task(), 0.05)
        assert (await b.outcome(REF), a.outcome_count("main"), b.outcome_count("main")) == (_task(), 2, 0)
        await b.forget_outcome(REF)
        assert await a.outcome(REF) is None
        record = SessionRecord("sid", "alice", "v1", "main", {"clientInfo": {"name": "c"}}, "2025-11-25")
        await a.keep_session(record, 60)
        assert await b.session("sid") == record
        await b.forget_session("sid")
        assert await a.session("sid") is None
        orders = [await a.next_order("main"), await b.next_order("main"), await a.next_order("other")]
        assert orders == [1, 2, 1]
        entry = Entry(
            "sealed-1",
            REF,
            "alice",
            orders[0],
            _task("working"),
            "sid",
            cancelled=True,
            failure=TaskError(code=-32603, message="no"),
            asked={"input-1"},
        )
        later = Entry("sealed-2", OTHER, "alice", orders[1], _task(), "sid")
        await a.keep_entry("main", entry, 60)
        await b.keep_entry("main", later, 0.05)
        got = await b.entry("main", "sealed-1")
        assert (got.task_id, got.ref, got.owner, got.order, got.cancelled, got.failure, got.asked, got.last) == (
            "sealed-1",
            REF,
            "alice",
            1,
            True,
            TaskError(code=-32603, message="no"),
            {"input-1"},
            _task("working"),
        )
        assert [e.task_id for e in await a.entries_of("main", "alice")] == ["sealed-1", "sealed-2"]
        await asyncio.sleep(0.2)
        assert (await a.outcome(OTHER), [e.task_id for e in await a.entries_of("main", "alice")]) == (None, ["sealed-1"])
        await a.forget_entry("main", "sealed-1")
        assert (await b.entry("main", "sealed-1"), await b.entries_of("main", "alice")) == (None, [])
    finally:
        await a.close()
        await b.close()


async def test_every_key_has_a_ttl_set_by_redis(redis_url):
    store = RedisTaskStore(redis_url, process="a")
    try:
        await store.heartbeat()
        await store.keep_outcome(REF, _task(), 60)
        await store.capture_input(REF, 7, ASK, 60)
        await store.keep_session(SessionRecord("sid", "p", "v1", "main", {}, "2025-11-25"), 60)
        await store.keep_entry("main", Entry("t", REF, "p", await store.next_order("main"), _task(), "sid"), 60)
        raw = aioredis.Redis.from_url(redis_url, decode_responses=True)
        keys = sorted([key async for key in raw.scan_iter(match=PREFIX + "*")])
        ttls = {key.split(":", 2)[1]: await raw.ttl(key) > 0 for key in keys}
        await raw.aclose()
        assert (len(keys), ttls) == (
            9,
            {"hb": True, "run": True, "o": True, "i": True, "n": True, "s": True, "e": True, "eo": True, "ord": True},
        )
    finally:
        await store.close()


def _store_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "proxy.state.health" and r.levelno >= logging.WARNING]


async def test_a_paused_redis_fails_an_operation_within_its_bound_and_once_more_at_once(own_redis, caplog):
    """Issue 20 item 11: a stalled Redis (SIGSTOP) used to hold every operation for the whole stall."""
    caplog.set_level(logging.INFO)
    store = RedisTaskStore(own_redis.url, process="a", timeout_ms=300)
    try:
        await store.keep_outcome(REF, _task(), 60)
        own_redis.pause()
        with pytest.raises(StoreUnreachable) as first:
            await asyncio.wait_for(store.outcome(REF), 10)
        assert (first.value.code, first.value.http_status, first.value.message) == (
            -32603,
            503,
            f"task state store {own_redis.url} unreachable: no answer within 300 ms",
        )
        assert (store.health.reachable, store.health.reason) == (False, "no answer within 300 ms")
        with pytest.raises(StoreUnreachable) as second:  # at once: a request touching the store twice waits one bound
            await asyncio.wait_for(store.outcome(REF), 0.2)
        assert second.value.message == first.value.message
        own_redis.resume()
        await asyncio.sleep(RETRY_S)
        assert (await store.outcome(REF), store.health.reachable) == (_task(), True)
        assert _store_warnings(caplog) == [
            f"task state store {own_redis.url} is unreachable: no answer within 300 ms",
            f"task state store {own_redis.url} is reachable again",
        ]
    finally:
        own_redis.resume()
        await store.close()


async def test_a_stopped_redis_is_unreachable_naming_it_and_the_heartbeat_sees_it_back(own_redis, caplog):
    """Issue 20 item 12: a stopped Redis used to raise the client's ConnectionError (HTTP 500, a traceback)."""
    caplog.set_level(logging.INFO)
    store = RedisTaskStore(own_redis.url, process="a", timeout_ms=300)
    try:
        await store.heartbeat()
        own_redis.halt()
        closed = "Connection closed by server."  # the pooled connection, closed when the server stopped
        with pytest.raises(StoreUnreachable) as caught:
            await asyncio.wait_for(store.capture_input(REF, 7, ASK, 60), 10)
        assert (caught.value.http_status, caught.value.message) == (
            503,
            f"task state store {own_redis.url} unreachable: {closed}",
        )
        await asyncio.sleep(RETRY_S)
        with pytest.raises(StoreUnreachable) as again:  # a new connection, refused
            await asyncio.wait_for(store.heartbeat(), 10)
        assert again.value.message == f"task state store {own_redis.url} unreachable: connection refused"
        own_redis.start_again()
        await store.heartbeat()
        assert (store.health.reachable, await store.capture_input(REF, 7, ASK, 60)) == (True, "input-1")
        assert _store_warnings(caplog) == [
            f"task state store {own_redis.url} is unreachable: {closed}",
            f"task state store {own_redis.url} is reachable again",
        ]
    finally:
        await store.close()


def test_a_password_is_never_shown():
    assert display_url("redis://user:s3cret@10.0.0.1:6379/2") == "redis://user:***@10.0.0.1:6379/2"
    assert display_url("redis://:s3cret@10.0.0.1:6379/2") == "redis://:***@10.0.0.1:6379/2"
    assert display_url("redis://10.0.0.1:6379/2") == "redis://10.0.0.1:6379/2"


async def test_a_restart_that_emptied_redis_is_seen_and_questions_go_back_under_their_keys(own_redis, caplog):
    """Issue 20 item 13 at the store: the heartbeat sees Redis' data gone, and `restore_input` puts a
    question back under its own key (skipping one the store still knows), keys never reused."""
    caplog.set_level(logging.INFO)
    store = RedisTaskStore(own_redis.url, process="a")
    held = []

    async def restore() -> int:
        return sum([await store.restore_input(REF, captured, 60) for captured in held])

    store.when_lost(restore)
    try:
        await store.heartbeat()
        for uid in (7, 8):
            await store.capture_input(REF, uid, ASK, 60)
        first, second = (await store.inputs(REF)).values()
        held.append(second)
        assert await store.restore_input(REF, second, 60) is False  # the store still knows it: nothing done
        own_redis.restart()  # nothing persisted
        with contextlib.suppress(StoreUnreachable):  # the pooled connection broken by the restart
            await store.heartbeat()
        await asyncio.sleep(RETRY_S)
        await store.heartbeat()
        assert await store.inputs(REF) == {"input-2": CapturedInput("input-2", 8, ASK)}
        assert await store.capture_input(REF, 9, ASK, 60) == "input-3"  # after the key put back, never input-1 again
        await store.heartbeat()  # nothing lost since: nothing more put back
        assert [r.getMessage() for r in caplog.records if "put back" in r.getMessage()] == [
            f"task state store {own_redis.url}: Redis restarted; 1 captured question(s) held by this process put back"
        ]
        await store.redis.flushdb()  # emptied without a restart: the run token is gone
        await store.heartbeat()
        assert list(await store.inputs(REF)) == ["input-2"]
        assert first.key == "input-1"
    finally:
        await store.close()


async def test_with_an_append_only_file_a_restart_loses_nothing_and_puts_nothing_back(tmp_path, caplog):
    """docs/configuration.md "A Redis store": `appendonly yes` keeps every question across a restart."""
    from proxy.bench.redis_server import start_redis

    caplog.set_level(logging.INFO)
    server = start_redis(appendonly=True)
    store = RedisTaskStore(server.url, process="a")
    try:
        await store.heartbeat()
        await store.capture_input(REF, 7, ASK, 60)
        captured = await store.inputs(REF)
        store.when_lost(lambda: store.restore_input(REF, captured["input-1"], 60))
        server.restart()
        with contextlib.suppress(StoreUnreachable):
            await store.heartbeat()
        await asyncio.sleep(RETRY_S)
        await store.heartbeat()
        assert await store.inputs(REF) == {"input-1": CapturedInput("input-1", 7, ASK)}
        assert [r.getMessage() for r in caplog.records if "put back" in r.getMessage()] == [
            f"task state store {server.url}: Redis restarted; 0 captured question(s) held by this process put back"
        ]
    finally:
        await store.close()
        server.stop()


async def test_the_count_of_kept_outcomes_drops_expired_ones_without_being_asked(redis_url, monkeypatch):
    # Only a metrics scrape or the status page asked for the count, and only then were expired
    # outcomes dropped from this process's map: without either it held every task of `keep_s`.
    from proxy.state import redis_store

    monkeypatch.setattr(redis_store, "PRUNE_AT", 8)
    store = RedisTaskStore(redis_url, process="a")
    try:
        for number in range(8):
            await store.keep_outcome(TaskRef("main", "s", f"gone-{number}"), _task(), 0.01)
        await asyncio.sleep(0.05)
        await store.keep_outcome(TaskRef("main", "s", "kept-1"), _task(), 60)  # the ninth: expired ones dropped
        assert (list(store._outcomes), store._prune_at) == ([TaskRef("main", "s", "kept-1")], 8)
        assert store.outcome_count("main") == 1
    finally:
        await store.close()
