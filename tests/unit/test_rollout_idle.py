"""Without a `[rollout]` table, a process whose rollout store is its own (SQLite, memory) reads
the record every `IDLE_TICK_S`; on a shared store every tick runs as before, so that the lease
stays where it is (docs/decisions.md §189). A tick itself is unchanged: it still ends a record a
removed table left."""

from __future__ import annotations

import sqlite3
from typing import Any

from proxy.config import load
from proxy.rollout.driver import IDLE_TICK_S, TICK_S, RolloutDriver
from proxy.state.rollouts import MemoryRollouts, RedisRollouts, SqliteRollouts

ROLLOUT = {"from": "main", "to": "next", "steps": [50, 100], "step_ms": 60_000}


def _driver(tmp_path: Any, store: Any, rollout: dict[str, Any] | None = None) -> RolloutDriver:
    upstream = [{"name": "main", "url": "http://127.0.0.1:9/mcp"}, {"name": "next", "url": "http://127.0.0.1:9/next"}]
    settings = load(
        None,
        {"listen": "127.0.0.1:0", "upstream": upstream, "state_dir": str(tmp_path), **({"rollout": rollout} if rollout else {})},
    )

    async def figures() -> Any:
        raise AssertionError("no figures are read here")

    driver = RolloutDriver(settings, fleet=None, store=store, figures=figures, shadow=lambda name, figures: None)  # type: ignore[arg-type]
    driver.process = "p1"
    return driver


def test_only_a_process_without_a_table_on_a_store_of_its_own_reads_the_record_less_often(tmp_path):
    db = sqlite3.connect(tmp_path / "rollout.db")
    own = (MemoryRollouts(), SqliteRollouts(lambda: db))
    shared = RedisRollouts.__new__(RedisRollouts)  # its attributes only: no Redis is asked
    quiet = [_driver(tmp_path, store).quiet() for store in (*own, shared)]
    with_table = _driver(tmp_path, MemoryRollouts(), ROLLOUT).quiet()
    db.close()
    assert (quiet, with_table, TICK_S, IDLE_TICK_S) == ([True, True, False], False, 0.5, 5.0)


async def test_without_a_table_a_tick_ends_a_record_left_and_keeps_the_lease(tmp_path):
    store = MemoryRollouts()
    await store.write({"fingerprint": "f1", "version": 3, "state": "running"}, 0)
    driver = _driver(tmp_path, store)
    await driver.tick()
    ended = await store.read()
    await driver.tick()
    assert (ended, await store.read(), driver.leading, await store.leader()) == (
        {"fingerprint": "", "version": 4, "ended_ms": ended["ended_ms"], "was": "running"},
        ended,
        True,
        "p1",
    )
