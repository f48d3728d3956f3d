"""Where a rollout's record lives (`proxy/rollout/state.py`; docs/decisions.md §174): beside the task
state, so that a restart resumes it and every replica sharing the store applies the same weights.

One record (JSON) per store, written by compare and set on its `version` (`write(record, expected)`:
True when the record held `expected`, 0 meaning none), and a lease naming the one process that
decides (`lead`): in memory and in SQLite (one process per file) that is always this process; in
Redis the process that holds `rollout:lease` (SET NX with an expiry, renewed by its holder), which
moves to another process once its holder stops renewing it (killed, stopped, cut off).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol

RECORD_KEY = "rollout:record"
LEASE_KEY = "rollout:lease"


class RolloutStore(Protocol):
    shared: bool
    """Whether other processes read and lead through the same record (`RolloutDriver.quiet`)."""

    async def read(self) -> dict[str, Any] | None:
        """The record, None when there is none."""

    async def write(self, record: dict[str, Any], expected: int) -> bool:
        """Store `record` if the stored one has version `expected` (0: none stored); whether it was stored."""

    async def lead(self, process: str, lease_ms: int) -> bool:
        """Take or renew the lease for `process` for `lease_ms`; whether `process` holds it."""

    async def leader(self) -> str | None:
        """The process holding the lease, None when none does."""

    async def release(self, process: str) -> None:
        """Give the lease up if `process` holds it (a graceful stop)."""


class MemoryRollouts:
    """The record of a proxy with `store = "memory"`: this process's, lost at its stop."""

    shared = False

    def __init__(self) -> None:
        self._record: dict[str, Any] | None = None
        self._process: str | None = None

    async def read(self) -> dict[str, Any] | None:
        return self._record

    async def write(self, record: dict[str, Any], expected: int) -> bool:
        if (self._record["version"] if self._record is not None else 0) != expected:
            return False
        self._record = record
        return True

    async def lead(self, process: str, lease_ms: int) -> bool:
        self._process = process
        return True

    async def leader(self) -> str | None:
        return self._process

    async def release(self, process: str) -> None:
        if self._process == process:
            self._process = None


class SqliteRollouts(MemoryRollouts):
    """The record in the SQLite store's file (table `rollout`, one row), read and written in place
    (one process owns the file: it always decides)."""

    def __init__(self, db: Callable[[], sqlite3.Connection]):
        super().__init__()
        self._db = db
        self._db().execute("CREATE TABLE IF NOT EXISTS rollout (id INTEGER PRIMARY KEY CHECK (id = 1), body TEXT NOT NULL)")

    async def read(self) -> dict[str, Any] | None:
        row = self._db().execute("SELECT body FROM rollout WHERE id = 1").fetchone()
        return json.loads(row[0]) if row is not None else None

    async def write(self, record: dict[str, Any], expected: int) -> bool:
        stored = await self.read()
        if (stored["version"] if stored is not None else 0) != expected:
            return False
        db = self._db()
        with db:
            db.execute("INSERT INTO rollout VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET body = excluded.body", (json.dumps(record),))
        return True


_WRITE = """
local current = redis.call('GET', KEYS[1])
local version = 0
if current then version = cjson.decode(current)['version'] end
if version ~= tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""

_LEAD = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
  return 1
end
return 0
"""


class RedisRollouts:
    """The record and the lease in Redis (`redis`: the store's client; `prefix`: its key prefix)."""

    shared = True

    def __init__(self, redis: Any, prefix: str):
        self._redis = redis
        self._record = prefix + RECORD_KEY
        self._lease = prefix + LEASE_KEY
        self._write = redis.register_script(_WRITE)
        self._lead = redis.register_script(_LEAD)
        self._release = redis.register_script(_RELEASE)

    async def read(self) -> dict[str, Any] | None:
        raw = await self._redis.get(self._record)
        return json.loads(raw) if raw is not None else None

    async def write(self, record: dict[str, Any], expected: int) -> bool:
        return bool(await self._write(keys=[self._record], args=[json.dumps(record), expected]))

    async def lead(self, process: str, lease_ms: int) -> bool:
        return bool(await self._lead(keys=[self._lease], args=[process, lease_ms]))

    async def leader(self) -> str | None:
        holder = await self._redis.get(self._lease)
        return str(holder) if holder is not None else None

    async def release(self, process: str) -> None:
        await self._release(keys=[self._lease], args=[process])


def rollouts_for(store: Any) -> RolloutStore:
    """The rollout store beside the task state store `store` (None: in memory)."""
    from .opening import beside

    return beside(store, SqliteRollouts, RedisRollouts, MemoryRollouts)
