"""The status page's figures in the SQLite store's file (`tasks.sqlite3` in `state_dir`), beside the
task state (docs/operations.md "Status page"; docs/decisions.md §95). One process owns the file
(§44), so the figures are this proxy's, kept across its restarts: one flush per `FLUSH_S` (the
recorder's deltas, `proxy/observe/lasting.py`), never a write per request.

Tables (`replica` is the name of the proxy that counted; a proxy renamed, or started on another
port, shows its earlier figures under the earlier name):

* `figure_counts (replica, kind, key, minute, count)`: counts by minute under a generic key (JSON
  array, its first item `kind`; figures.py), for `KEEP_MINUTES`;
* `figure_clients (replica, dialect, name, version, requests, first_seen_ms, last_seen_ms,
  backends)`: at most `MAX_CLIENTS` rows per replica (least recently seen go), none older than `KEEP_CLIENTS_MS`;
* `figure_sessions (id, name, version, expires_at)`: a relayed session's client, `SESSION_KEEP_S`, at most
  `MAX_SESSIONS` (trimmed once a minute);
* `figure_errors (n, body)`: the last `RECENT_ERRORS` errors (JSON, with `replica`);
* `figure_replicas (replica, since_ms, last_flush_ms)`: a replica silent for `KEEP_CLIENTS_MS` goes.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable

from ..observe.figures import Batch, ClientRow, ReplicaFigures

KEEP_MINUTES = 1440
"""Minute counts kept: one day."""
KEEP_CLIENTS_MS = 30 * 86_400_000
"""Client rows not seen for 30 days are forgotten."""
MAX_CLIENTS = 1000
SESSION_KEEP_S = 7 * 86_400.0
MAX_SESSIONS = 100_000
RECENT_ERRORS = 50

_SCHEMA = """
CREATE TABLE IF NOT EXISTS figure_counts (replica TEXT, kind TEXT, key TEXT, minute INTEGER, count INTEGER NOT NULL,
    PRIMARY KEY (replica, minute, key));
CREATE INDEX IF NOT EXISTS figure_counts_minute ON figure_counts (minute);
CREATE TABLE IF NOT EXISTS figure_clients (replica TEXT, dialect TEXT, name TEXT, version TEXT, requests INTEGER NOT NULL,
    first_seen_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT NULL, backends TEXT NOT NULL, PRIMARY KEY (replica, dialect, name, version));
CREATE TABLE IF NOT EXISTS figure_sessions (id TEXT PRIMARY KEY, name TEXT NOT NULL, version TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS figure_sessions_expiry ON figure_sessions (expires_at);
CREATE TABLE IF NOT EXISTS figure_errors (n INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS figure_replicas (replica TEXT PRIMARY KEY, since_ms INTEGER NOT NULL, last_flush_ms INTEGER NOT NULL);
"""

_ADD_CLIENT = """
INSERT INTO figure_clients VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (replica, dialect, name, version) DO UPDATE SET
    requests = requests + excluded.requests, first_seen_ms = min(first_seen_ms, excluded.first_seen_ms),
    last_seen_ms = max(last_seen_ms, excluded.last_seen_ms),
    backends = (SELECT json_group_array(value) FROM (SELECT value FROM json_each(figure_clients.backends)
                UNION SELECT value FROM json_each(excluded.backends) ORDER BY value LIMIT 32))
"""
"""A client row added into: requests summed, first and last seen widened, backends joined (sorted, at most 32)."""


class SqliteFigures:
    """The figures in the database `db()` answers (the SQLite store's connection: after a spill
    into memory, the figures follow it). Every method runs a few statements on the event loop's
    thread without suspending (a flush: one transaction, about a millisecond for a busy second)."""

    shared = False
    suspends = False
    """`add` runs to its end without waiting (no `await` in it), so a flush needs no shield from cancellation."""

    def __init__(self, db: Callable[[], sqlite3.Connection]):
        self._db = db
        self._trimmed_minute = -1
        db().executescript(_SCHEMA)

    async def add(self, replica: str, process: str, batch: Batch, started_ms: int, now_ms: int) -> None:
        """Add one flush of `replica` (its deltas; `started_ms` the process's start, kept as the
        replica's `since_ms` when it is the first)."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT INTO figure_counts VALUES (?, ?, ?, ?, ?) ON CONFLICT (replica, minute, key) "
                           "DO UPDATE SET count = count + excluded.count",
                           [(replica, key[0], json.dumps(key), minute, n) for (minute, key), n in batch.counts.items()])
            db.executemany(_ADD_CLIENT, [(replica, dialect, name, version, n, first, last, json.dumps(backends))
                                         for (dialect, name, version), (n, first, last, backends) in batch.clients.items()])
            if batch.clients:
                db.execute("DELETE FROM figure_clients WHERE replica = ? AND (last_seen_ms < ? OR rowid IN (SELECT rowid FROM figure_clients "
                           "WHERE replica = ? ORDER BY last_seen_ms DESC LIMIT -1 OFFSET ?))",
                           (replica, now_ms - KEEP_CLIENTS_MS, replica, MAX_CLIENTS))
            if batch.sessions:
                expires = time.time() + SESSION_KEEP_S
                db.executemany("INSERT OR REPLACE INTO figure_sessions VALUES (?, ?, ?, ?)",
                               [(sid, name, version, expires) for sid, (name, version) in batch.sessions.items()])
            if batch.errors:
                db.executemany("INSERT INTO figure_errors (body) VALUES (?)", [(json.dumps({**e, "replica": replica}),) for e in batch.errors])
                db.execute("DELETE FROM figure_errors WHERE n <= (SELECT max(n) FROM figure_errors) - ?", (RECENT_ERRORS,))
            db.execute("INSERT INTO figure_replicas VALUES (?, ?, ?) ON CONFLICT (replica) DO UPDATE SET "
                       "since_ms = min(since_ms, excluded.since_ms), last_flush_ms = excluded.last_flush_ms", (replica, started_ms, now_ms))
            minute = now_ms // 60_000
            if minute != self._trimmed_minute:  # what is past its keep goes, once a minute
                db.execute("DELETE FROM figure_counts WHERE minute <= ?", (minute - KEEP_MINUTES,))
                db.execute("DELETE FROM figure_replicas WHERE last_flush_ms < ?", (now_ms - KEEP_CLIENTS_MS,))
                db.execute("DELETE FROM figure_clients WHERE last_seen_ms < ?", (now_ms - KEEP_CLIENTS_MS,))
                db.execute("DELETE FROM figure_sessions WHERE expires_at <= ? OR id IN (SELECT id FROM figure_sessions "
                           "ORDER BY expires_at DESC LIMIT -1 OFFSET ?)", (time.time(), MAX_SESSIONS))
                self._trimmed_minute = minute
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    async def read(self, now_ms: int) -> tuple[list[ReplicaFigures], list[dict]]:  # type: ignore[type-arg]
        """Every replica's figures of the last day, and the recent errors (oldest first)."""
        db = self._db()
        replicas = {name: ReplicaFigures(name, since, last)
                    for name, since, last in db.execute("SELECT replica, since_ms, last_flush_ms FROM figure_replicas ORDER BY replica")}
        first = now_ms // 60_000 - KEEP_MINUTES + 1
        for name, key, minute, n in db.execute("SELECT replica, key, minute, count FROM figure_counts WHERE minute >= ?", (first,)):
            replica = replicas.get(name)
            if replica is not None:
                replica.minutes.setdefault(minute, {})[tuple(json.loads(key))] = n
        for name, dialect, client, version, n, first_ms, last_ms, backends in db.execute(
                "SELECT replica, dialect, name, version, requests, first_seen_ms, last_seen_ms, backends FROM figure_clients"):
            replica = replicas.get(name)
            if replica is not None:
                row = replica.clients[(dialect, client, version)] = ClientRow(first_ms, n, last_ms)
                row.backends = set(json.loads(backends))
                row.replicas = {name}
        errors = [json.loads(body) for (body,) in db.execute("SELECT body FROM figure_errors ORDER BY n")]
        return list(replicas.values()), errors

    async def session_client(self, session_id: str) -> tuple[str, str] | None:
        """The client a relayed session's `initialize` named, if a flush kept it."""
        row = self._db().execute("SELECT name, version, expires_at FROM figure_sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None or row[2] <= time.time():
            return None
        return row[0], row[1]

    async def done(self, process: str) -> None:
        """The process stops (its last flush made): nothing to release here."""
