"""The SQLite task store (proxy/sqlite_store.py): the memory store's rules, kept across a reopen of
the file, bounded in count and time with expired rows deleted, and one winner per claim."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from proxy.config import ConfigError, load
from proxy.state import sqlite_store, sqlite_wal
from proxy.state.opening import open_store
from proxy.state.sqlite_store import SqliteTaskStore
from proxy.state.store import CapturedInput, Entry, SessionRecord
from translators.model import CanonicalTask, InputRequest, TaskError
from translators.sealing import TaskRef

REF = TaskRef("main", "session-1", "task-1")
OTHER = TaskRef("main", "session-1", "task-2")
ASK = InputRequest(method="elicitation/create", params={"message": "Delete a.txt?"})


def _task(status: str = "completed", task_id: str = "task-1") -> CanonicalTask:
    return CanonicalTask(
        task_id=task_id,
        status=status,
        created_at="2026-11-30T08:00:00Z",
        last_updated_at="2026-11-30T08:00:01Z",
        ttl_ms=60_000,
        result={"content": [{"type": "text", "text": "done"}]} if status == "completed" else None,
    )


def _open(tmp_path, **bounds) -> SqliteTaskStore:
    return SqliteTaskStore(tmp_path / "state" / "tasks.sqlite3", **{"max_tasks": 10, "max_sessions": 10, **bounds})


def _rows(store: SqliteTaskStore, table: str) -> int:
    db = sqlite3.connect(store.path)
    try:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        db.close()


def test_the_file_is_private_and_in_wal_mode_with_normal_sync(tmp_path):
    store = _open(tmp_path)
    assert (
        store.path.stat().st_mode & 0o777,
        store._db.execute("PRAGMA journal_mode").fetchone()[0],
        store._db.execute("PRAGMA synchronous").fetchone()[0],
    ) == (0o600, "wal", 1)  # 1 = NORMAL


async def test_captured_requests_get_fresh_keys_never_reused_and_survive_a_reopen(tmp_path):
    store = _open(tmp_path)
    assert await store.capture_input(REF, 7, ASK, 60) == "input-1"
    assert await store.capture_input(REF, 7, ASK, 60) is None  # the same upstream request again
    assert await store.capture_input(REF, "req-8", ASK, 60) == "input-2"
    assert await store.capture_input(OTHER, 7, ASK, 60) == "input-1"  # keys are per task
    await store.answered(REF, "input-1")
    await store.close()
    store = _open(tmp_path)
    assert await store.capture_input(REF, 7, ASK, 60) is None  # answered, still known as seen
    assert await store.capture_input(REF, 9, ASK, 60) == "input-3"
    assert await store.inputs(REF) == {
        "input-2": CapturedInput("input-2", "req-8", ASK),
        "input-3": CapturedInput("input-3", 9, ASK),
    }
    await store.drop_inputs(REF)
    assert (await store.inputs(REF), await store.inputs(OTHER)) == ({}, {"input-1": CapturedInput("input-1", 7, ASK)})


async def test_a_claim_has_one_winner_also_across_connections_and_a_dead_process_claim_is_released_at_open(tmp_path):
    store = _open(tmp_path)
    await store.capture_input(REF, 7, ASK, 60)
    rival = _open(tmp_path)  # a second connection to the same file
    assert (
        await store.claim_input(REF, "input-1"),
        await rival.claim_input(REF, "input-1"),
        await store.claim_input(REF, "input-1"),
    ) == (CapturedInput("input-1", 7, ASK), None, None)
    await store.release_input(REF, "input-1")
    assert await rival.claim_input(REF, "input-1") == CapturedInput("input-1", 7, ASK)
    assert await store.inputs(REF) == {"input-1": CapturedInput("input-1", 7, ASK)}  # claimed is still outstanding
    await rival.close()
    await store.close()  # it died holding the claim
    store = _open(tmp_path)
    assert await store.claim_input(REF, "input-1") == CapturedInput("input-1", 7, ASK)
    await store.answered(REF, "input-1")
    assert (await store.claim_input(REF, "input-1"), await store.inputs(REF)) == (None, {})


async def test_outcomes_are_kept_forgotten_expire_and_survive_a_reopen(tmp_path):
    store = _open(tmp_path)
    await store.keep_outcome(REF, _task(), 60)
    await store.keep_outcome(OTHER, _task(), 0)  # expires at once
    await store.keep_outcome(TaskRef("other", "s", "t"), _task(), 60)
    assert (await store.outcome(OTHER), _rows(store, "outcomes")) == (None, 2)  # the expired row was deleted on read
    await store.close()
    store = _open(tmp_path)
    assert (await store.outcome(REF), store.outcome_count("main"), store.outcome_count("other")) == (_task(), 1, 1)
    await store.forget_outcome(REF)
    assert (await store.outcome(REF), store.outcome_count("main")) == (None, 0)


async def test_each_table_is_bounded_in_count_soonest_to_expire_first(tmp_path):
    store = _open(tmp_path, max_tasks=2, max_sessions=2)
    refs = [TaskRef("main", "s", f"t{i}") for i in range(3)]
    for i, ref in enumerate(refs):
        await store.keep_outcome(ref, _task(), 60 + i)
        await store.capture_input(ref, i, ASK, 60 + i)
        await store.keep_session(SessionRecord(f"s{i}", "p", "v1", "main", {}, "2025-11-25"), 60 + i)
    await store.keep_outcome(refs[1], _task("cancelled"), 120)  # an update is not a new row
    assert [await store.outcome(r) is not None for r in refs] == [False, True, True]
    assert [bool(await store.inputs(r)) for r in refs] == [False, True, True]
    assert [await store.session(f"s{i}") is not None for i in range(3)] == [False, True, True]
    assert [_rows(store, t) for t in ("outcomes", "input_tasks", "input_requests", "sessions")] == [2, 2, 2, 2]
    # t0's input state was let go while its task may live on: its next key numbers after every key issued.
    assert await store.capture_input(refs[0], 99, ASK, 60) == "input-2"


async def test_the_sweep_deletes_every_expired_row(tmp_path, monkeypatch):
    store = _open(tmp_path)
    await store.keep_outcome(REF, _task(), 0.05)
    await store.capture_input(REF, 1, ASK, 0.05)
    await store.keep_session(SessionRecord("s", "p", "v1", "main", {}, "2025-11-25"), 0.05)
    await store.keep_entry("main", Entry("sealed-1", REF, "p", 1, _task("working", "sealed-1"), "s"), 0.05)
    await store.keep_outcome(OTHER, _task(), 60)
    await asyncio.sleep(0.1)
    store.sweep()
    assert [_rows(store, t) for t in ("outcomes", "input_tasks", "input_requests", "sessions", "entries")] == [1, 0, 0, 0, 0]
    # Writes sweep by themselves once SWEEP_INTERVAL_S has passed.
    monkeypatch.setattr(sqlite_store, "SWEEP_INTERVAL_S", 0.0)
    await store.keep_outcome(OTHER, _task(), 0.01)
    await asyncio.sleep(0.05)
    await store.keep_outcome(REF, _task(), 60)
    assert _rows(store, "outcomes") == 1


async def test_sessions_and_registry_entries_survive_a_reopen(tmp_path):
    store = _open(tmp_path)
    record = SessionRecord(
        "sealed-session",
        "principal-1",
        "v1",
        "main",
        {"capabilities": {"elicitation": {}}, "clientInfo": {"name": "c", "version": "1"}},
        "2025-11-25",
    )
    await store.keep_session(record, 60)
    entry = Entry(
        "sealed-1",
        REF,
        "principal-1",
        7,
        _task("working", "sealed-1"),
        "sealed-session",
        cancelled=True,
        failure=TaskError(code=-32001, message="declined"),
        asked={"input-1"},
        asking={"input-2"},
        saved_at=5.0,
    )
    await store.keep_entry("main", entry, 60)
    held = Entry(
        "sealed-2",
        TaskRef("main", "@held", "x"),
        "principal-1",
        8,
        _task("completed", "sealed-2"),
        "sealed-session",
        held_expires_at=time.time() + 60,
    )
    await store.keep_entry("main", held, 60)
    await store.keep_entry("main", Entry("sealed-3", OTHER, "principal-2", 9, _task("working", "sealed-3"), "s2"), 60)
    await store.close()
    store = _open(tmp_path)
    assert await store.session("sealed-session") == record
    assert await store.entry("main", "sealed-1") == Entry(
        "sealed-1",
        REF,
        "principal-1",
        7,
        _task("working", "sealed-1"),
        "sealed-session",
        cancelled=True,
        failure=TaskError(code=-32001, message="declined"),
        asked={"input-1"},
    )
    assert [e.task_id for e in await store.entries_of("main", "principal-1")] == ["sealed-1", "sealed-2"]
    assert (await store.entries_of("main", "principal-1"))[1].last.result == {"content": [{"type": "text", "text": "done"}]}
    assert (await store.entry("other", "sealed-1"), store.highest_order("main"), store.highest_order("other")) == (None, 9, 0)
    await store.forget_session("sealed-session")
    await store.forget_entry("main", "sealed-1")
    assert (await store.session("sealed-session"), await store.entry("main", "sealed-1")) == (None, None)


async def test_a_held_entry_expires_with_its_own_ttl(tmp_path):
    store = _open(tmp_path)
    held = Entry(
        "sealed-2", TaskRef("main", "@held", "x"), "p", 1, _task("completed", "sealed-2"), "s", held_expires_at=time.time() + 0.05
    )
    await store.keep_entry("main", held, 60)
    await asyncio.sleep(0.1)
    assert (await store.entry("main", "sealed-2"), await store.entries_of("main", "p")) == (None, [])


async def test_maintain_sweeps_and_checkpoints_off_the_write_path(tmp_path, monkeypatch):
    import asyncio

    monkeypatch.setattr(sqlite_store, "SWEEP_INTERVAL_S", 0.05)
    store = _open(tmp_path)
    await store.keep_outcome(REF, _task(), 0.01)
    keeper = asyncio.ensure_future(store.maintain())
    await asyncio.sleep(0.3)
    assert (store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0], _rows(store, "outcomes")) == (0, 0)
    keeper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await keeper
    assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000


async def _write_outcomes(store: SqliteTaskStore, first: int, count: int) -> None:
    for number in range(first, first + count):
        await store.keep_outcome(TaskRef("main", "session-1", f"task-{number}"), _task(task_id=f"task-{number}"), 60)


async def test_a_checkpoint_with_writes_during_it_still_starts_the_log_over(tmp_path, monkeypatch):
    # Decision 121: the worker thread's checkpoint copies the log while writes go on, so the log
    # is never wholly copied when the next write comes, and it only grew (gigabytes in a busy
    # minute, and the index SQLite maps beside it with it); the last pass on the loop's thread
    # copies what came meanwhile, and the next write starts the log over and cuts its file back.
    monkeypatch.setattr(sqlite_wal, "WAL_CHECKPOINT_BYTES", 32_768)
    store = _open(tmp_path, max_tasks=1000)
    wal = store.path.with_name(store.path.name + "-wal")
    await _write_outcomes(store, 0, 40)
    reader = sqlite3.connect(store.path, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM outcomes").fetchone() == (40,)  # holds the log at this point
    await _write_outcomes(store, 40, 1)  # as if written while the thread checkpointed
    store._checkpoint()  # copies up to the reader's point only
    reader.close()
    grown = wal.stat().st_size
    await _write_outcomes(store, 41, 1)  # without the last pass: appended to the log
    assert wal.stat().st_size > grown > 32_768
    store._finish_checkpoint()
    await _write_outcomes(store, 42, 2)
    assert (wal.stat().st_size, _rows(store, "outcomes")) == (32_768, 44)
    await store.close()


async def test_a_finished_task_that_asked_nothing_writes_nothing(tmp_path):
    store = _open(tmp_path)
    await store.keep_outcome(OTHER, _task(task_id="task-2"), 60)
    changes = store._db.total_changes
    await store.drop_inputs(REF)
    assert (store._db.total_changes, store._db.in_transaction) == (changes, False)
    await store.capture_input(REF, 7, ASK, 60)
    await store.drop_inputs(REF)
    assert (await store.inputs(REF), _rows(store, "input_requests"), _rows(store, "input_tasks")) == ({}, 0, 0)
    await store.close()


async def test_the_file_keeps_its_schema_version_and_a_newer_one_is_refused_naming_what_to_do(tmp_path):
    """docs/deploy.md "Upgrade and rollback": a proxy rolled back to an older version refuses a file
    a newer one wrote, instead of reading it half-understood."""
    path = tmp_path / "tasks.sqlite3"
    await SqliteTaskStore(path, max_tasks=10, max_sessions=10).close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == sqlite_store.SCHEMA_VERSION == 1
        db.execute("PRAGMA user_version = 2")
    settings = load(None, {"upstream": [{"url": "http://127.0.0.1:1/mcp"}], "state_dir": str(tmp_path)})
    with pytest.raises(ConfigError) as refused:
        open_store(settings)
    assert str(refused.value) == (
        f"store: {path} was written by a newer mcp-tasks-proxy (schema 2; this version reads up to 1): run the newer "
        "version, or move the file away to start with an empty store"
    )
