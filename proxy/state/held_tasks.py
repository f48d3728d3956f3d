"""Held tasks in the store: the record of a plain call the proxy turned into a task it holds
itself (docs/behaviour.md §9; docs/decisions.md §105-§114), in memory, in the SQLite file and in
Redis, behind one small interface (`HeldTaskStore`), reached through `TaskStateStore.held_tasks()`.

A record is written when the task is created and whenever it changes (status, status message,
questions, outcome); reads never write. Every record lives until its task's ttl has passed
(`HeldState.expires_ms`), then it is gone (SQLite: deleted when read or swept; Redis: its TTL).

Which process holds the call (`holder`) is in the record: a record that is not terminal and whose
holder is gone (not this process with SQLite, whose file one process holds at a time; a process
whose heartbeat stopped with Redis) is a call that was interrupted (`translators.held.interrupted`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, TypeVar

from translators.held import HeldState

PREFIX = "mcp-tasks-proxy:"


@dataclass(frozen=True, slots=True)
class HeldRecord:
    """One held task: its `state` (ids, status, outcome, times in ms), the `principal` whose it is,
    the `backend` and `tool` called, the upstream `session` id and JSON-RPC `upstream_id` of the
    plain call, the `holder` process (its store name) that has the upstream call open, and the
    backend's JSON-RPC id of each question outstanding (`questions`, by input key: a v1 client's
    answer names it, and any replica can show it on a `tasks/result` stream)."""

    state: HeldState
    principal: str
    backend: str
    tool: str
    session: str
    upstream_id: str
    holder: str
    questions: dict[str, Any] = field(default_factory=dict)

    @property
    def task_id(self) -> str:
        return self.state.task_id

    def evolve(self, state: HeldState, questions: dict[str, Any] | None = None) -> HeldRecord:
        return replace(self, state=state, questions=self.questions if questions is None else questions)

    def to_json(self) -> str:
        body = asdict(self)
        return json.dumps(body, separators=(",", ":"))

    @staticmethod
    def from_json(raw: str) -> HeldRecord:
        body = json.loads(raw)
        return HeldRecord(state=HeldState(**body.pop("state")), **body)


class HeldTaskStore(Protocol):
    """Held task records (module docstring). Every method is a coroutine."""

    async def put(self, record: HeldRecord) -> None:
        """Write the record (new or changed), kept until `record.state.expires_ms()`."""

    async def get(self, task_id: str) -> HeldRecord | None:
        """The record of `task_id`, or None (unknown or past its ttl)."""

    async def of_principal(self, backend: str, principal: str) -> list[HeldRecord]:
        """`principal`'s live records of `backend`, in creation order."""

    async def unfinished(self) -> list[HeldRecord]:
        """Every record not yet terminal (to find those whose holder is gone)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class MemoryHeldStore:
    """`HeldTaskStore` in this process (the memory store: nothing survives the process)."""

    def __init__(self) -> None:
        self._records: dict[str, HeldRecord] = {}

    def _sweep(self) -> None:
        now = _now_ms()
        for task_id in [i for i, r in self._records.items() if r.state.expires_ms() <= now]:
            del self._records[task_id]

    async def put(self, record: HeldRecord) -> None:
        self._sweep()
        self._records[record.task_id] = record

    async def get(self, task_id: str) -> HeldRecord | None:
        record = self._records.get(task_id)
        if record is not None and record.state.expires_ms() <= _now_ms():
            del self._records[task_id]
            return None
        return record

    async def of_principal(self, backend: str, principal: str) -> list[HeldRecord]:
        self._sweep()
        mine = [r for r in self._records.values() if (r.backend, r.principal) == (backend, principal)]
        return sorted(mine, key=lambda r: r.state.created_ms)

    async def unfinished(self) -> list[HeldRecord]:
        self._sweep()
        return [r for r in self._records.values() if not r.state.terminal]


SCHEMA = """
CREATE TABLE IF NOT EXISTS held_tasks (id TEXT PRIMARY KEY, backend TEXT NOT NULL, principal TEXT NOT NULL,
    live INTEGER NOT NULL, created_ms INTEGER NOT NULL, body TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS held_tasks_owner ON held_tasks (backend, principal, created_ms);
CREATE INDEX IF NOT EXISTS held_tasks_live ON held_tasks (live);
"""


class SqliteHeldStore:
    """`HeldTaskStore` in the SQLite store's file (table `held_tasks`; `db()` is the store's current
    connection, which moves into memory when the file cannot be written). `max_rows` bounds the
    table: beyond it the records soonest to expire go first."""

    def __init__(self, db: Callable[[], Any], *, max_rows: int):
        self._db = db
        self.max_rows = max_rows
        self._db().executescript(SCHEMA)

    async def put(self, record: HeldRecord) -> None:
        db, state = self._db(), record.state
        now = time.time()
        db.execute("DELETE FROM held_tasks WHERE expires_at <= ?", (now,))
        db.execute("INSERT OR REPLACE INTO held_tasks VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (record.task_id, record.backend, record.principal, 0 if state.terminal else 1, state.created_ms,
                    record.to_json(), state.expires_ms() / 1000))
        excess = db.execute("SELECT count(*) FROM held_tasks").fetchone()[0] - self.max_rows
        if excess > 0:
            db.execute("DELETE FROM held_tasks WHERE id IN (SELECT id FROM held_tasks ORDER BY expires_at LIMIT ?)", (excess,))

    async def get(self, task_id: str) -> HeldRecord | None:
        row = self._db().execute("SELECT body, expires_at FROM held_tasks WHERE id = ?", (task_id,)).fetchone()
        if row is None or row[1] <= time.time():
            return None
        return HeldRecord.from_json(row[0])

    async def of_principal(self, backend: str, principal: str) -> list[HeldRecord]:
        rows = self._db().execute("SELECT body FROM held_tasks WHERE backend = ? AND principal = ? AND expires_at > ? "
                                  "ORDER BY created_ms", (backend, principal, time.time())).fetchall()
        return [HeldRecord.from_json(row[0]) for row in rows]

    async def unfinished(self) -> list[HeldRecord]:
        rows = self._db().execute("SELECT body FROM held_tasks WHERE live = 1 AND expires_at > ?", (time.time(),)).fetchall()
        return [HeldRecord.from_json(row[0]) for row in rows]


Result = TypeVar("Result")


class RedisHeldStore:
    """`HeldTaskStore` in Redis, beside the other keys of `proxy/state/redis_store.py`:
    `h:<task id>` (the record, JSON, with the task's ttl), `ho:<backend>:<principal>` (a sorted
    set of the principal's task ids by creation), `hl` (a sorted set of the ids not yet
    terminal, by expiry). `store` is the `RedisTaskStore` (its client and `guard`)."""

    def __init__(self, store: Any):
        self.store = store

    async def _guarded(self, work: Callable[[], Awaitable[Result]]) -> Result:
        return await self.store.guard(work)  # type: ignore[no-any-return]

    async def put(self, record: HeldRecord) -> None:
        redis, state = self.store.redis, record.state
        px = state.expires_ms() - _now_ms()
        owned = f"{PREFIX}ho:{record.backend}:{record.principal}"
        if px <= 0:  # past its ttl: nothing to keep
            await self._guarded(lambda: redis.delete(PREFIX + "h:" + record.task_id))
            return

        async def work() -> None:
            async with redis.pipeline(transaction=True) as pipe:
                pipe.set(PREFIX + "h:" + record.task_id, record.to_json(), px=px)
                pipe.zadd(owned, {record.task_id: state.created_ms})
                pipe.pexpire(owned, px, gt=True)
                pipe.pexpire(owned, px, nx=True)
                if state.terminal:
                    pipe.zrem(PREFIX + "hl", record.task_id)
                else:
                    pipe.zadd(PREFIX + "hl", {record.task_id: state.expires_ms()})
                await pipe.execute()

        await self.store.guard_write(work)

    async def get(self, task_id: str) -> HeldRecord | None:
        raw = await self._guarded(lambda: self.store.redis.get(PREFIX + "h:" + task_id))
        return HeldRecord.from_json(raw) if raw is not None else None

    async def _records(self, ids: list[str]) -> list[HeldRecord]:
        if not ids:
            return []
        raws = await self._guarded(lambda: self.store.redis.mget([PREFIX + "h:" + i for i in ids]))
        return [HeldRecord.from_json(raw) for raw in raws if raw is not None]

    async def of_principal(self, backend: str, principal: str) -> list[HeldRecord]:
        ids = await self._guarded(lambda: self.store.redis.zrange(f"{PREFIX}ho:{backend}:{principal}", 0, -1))
        return await self._records(list(ids))

    async def unfinished(self) -> list[HeldRecord]:
        redis = self.store.redis
        await self._guarded(lambda: redis.zremrangebyscore(PREFIX + "hl", "-inf", _now_ms()))
        ids = await self._guarded(lambda: redis.zrange(PREFIX + "hl", 0, -1))
        return [r for r in await self._records(list(ids)) if not r.state.terminal]
