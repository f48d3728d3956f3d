"""What the fleet remembers beside the task state (docs/decisions.md §192): the backend that handed
out its own task ids to modern clients while it was the only one (`plain_issuer`), so that once
backends are added, by reload or restart, those ids still reach it (`Fleet.plain_owner`).

One note per store: in memory (this process's, lost at its stop), in the SQLite store's file
(table `fleet_notes`), or in Redis (`fleet:plain-issuer`, every replica sharing the store reads the
same). A note is read at start and written when the fleet has one backend; the last writer wins,
which is right: plain ids are handed out only by a fleet of one backend, and each such fleet notes
its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, Protocol

PLAIN_ISSUER_KEY = "fleet:plain-issuer"


class FleetNotes(Protocol):
    shared: bool
    """Whether other processes write the note too (Redis): then a miss is worth reading it again."""

    async def plain_issuer(self) -> str | None:
        """The backend noted as having handed out plain task ids, None when none was."""

    async def note_plain_issuer(self, name: str) -> None:
        """Note `name` as the backend that hands out plain task ids."""


class MemoryNotes:
    """The note of a proxy with `store = "memory"` (or none): this process's."""

    shared = False

    def __init__(self) -> None:
        self._issuer: str | None = None

    async def plain_issuer(self) -> str | None:
        return self._issuer

    async def note_plain_issuer(self, name: str) -> None:
        self._issuer = name


class SqliteNotes:
    """The note in the SQLite store's file (`db()`: its connection, also after a spill into memory)."""

    shared = False

    def __init__(self, db: Callable[[], sqlite3.Connection]):
        self._db = db
        self._db().execute("CREATE TABLE IF NOT EXISTS fleet_notes (key TEXT PRIMARY KEY, value TEXT NOT NULL)")

    async def plain_issuer(self) -> str | None:
        row = self._db().execute("SELECT value FROM fleet_notes WHERE key = ?", (PLAIN_ISSUER_KEY,)).fetchone()
        return str(row[0]) if row is not None else None

    async def note_plain_issuer(self, name: str) -> None:
        db = self._db()
        with db:
            db.execute("INSERT INTO fleet_notes VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                       (PLAIN_ISSUER_KEY, name))


class RedisNotes:
    """The note in Redis (`redis`: the store's client; `prefix`: its key prefix), shared by every replica."""

    shared = True

    def __init__(self, redis: Any, prefix: str):
        self._redis = redis
        self._key = prefix + PLAIN_ISSUER_KEY

    async def plain_issuer(self) -> str | None:
        value = await self._redis.get(self._key)
        return str(value) if value is not None else None

    async def note_plain_issuer(self, name: str) -> None:
        await self._redis.set(self._key, name)


def notes_for(store: Any) -> FleetNotes:
    """The fleet's notes beside the task state store `store` (None or memory: in this process)."""
    from .opening import beside

    return beside(store, SqliteNotes, RedisNotes, MemoryNotes)
