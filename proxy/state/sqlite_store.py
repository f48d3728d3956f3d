"""`TaskStateStore` in a SQLite file in `state_dir`: what only this proxy knows survives a crash and
restart (docs/decisions.md, "State that survives a restart"; the interface is `proxy/state/store.py`).

Durability and cost. The database runs in WAL mode with `synchronous=NORMAL`: a commit appends its pages
to the write-ahead log with write(2) — into the operating system's page cache — and returns without
fsync. A killed process (SIGKILL, out of memory, a crash) therefore loses nothing it committed: the
kernel still holds and writes those pages. No write waits for the disk; only a power loss or kernel crash
may lose the last commits, and never corrupts the file. The one step that syncs, copying the log into the
database (a checkpoint), is run by `maintain()` in a worker thread every `SWEEP_INTERVAL_S` and once the
log holds 4 MiB, never by a write, with a last short pass on the event loop's thread so that the log
starts over (`proxy/state/sqlite_wal.py`, decision 121; without `maintain()`, SQLite's automatic
checkpoint applies). A poll writes nothing; a request that ends a task commits once. The relay never
calls the store; the translated faces await it, and each call runs one short statement or transaction
(microseconds) on the event loop's thread without suspending.

Bounds. Every row has a wall-clock `expires_at` (seconds since the epoch); a read of an expired row
deletes it and answers as if it were absent, and `sweep()` (run by `maintain()`, and by any write once
`SWEEP_INTERVAL_S` has passed) deletes every expired row. Each table holds at most its limit (`max_tasks`
task rows of each kind, `max_sessions` sessions): beyond it the rows soonest to expire go first (for
equal lifetimes, the least recently written).

One process per file, enforced: the store holds a POSIX lock on `<file>.lock` while open, and a second
process is refused (docs/decisions.md §44). At open, claims on requests for input that a process left
when it died are released: that process may or may not have delivered its answer, so the request is shown
again (docs/decisions.md, "State that survives a restart").
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from translators import jsonrpc
from translators.inputs import input_key
from translators.model import CanonicalTask, InputRequest, TaskError
from translators.sealing import TaskRef

from . import sqlite_wal
from .held_tasks import HeldTaskStore, SqliteHeldStore
from .sqlite_faults import StoreDamaged, StoreInUse, StoreTooNew, _spills, lock_path
from .store import CapturedInput, Entry, SessionRecord

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""The file's schema (`PRAGMA user_version`; 0: a file from before the version was kept, the same
schema). A change of the tables raises it, with what a newer proxy does to an older file; an older
proxy refuses a newer file (`StoreTooNew`) rather than read it half-understood."""

SWEEP_INTERVAL_S = 30.0
"""How often expired rows are deleted and the write-ahead log is checkpointed at the latest."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outcomes (backend TEXT, session TEXT, task TEXT, body TEXT NOT NULL,
    expires_at REAL NOT NULL, PRIMARY KEY (backend, session, task));
CREATE INDEX IF NOT EXISTS outcomes_expiry ON outcomes (expires_at);
CREATE TABLE IF NOT EXISTS input_tasks (backend TEXT, session TEXT, task TEXT, next_number INTEGER NOT NULL,
    expires_at REAL NOT NULL, PRIMARY KEY (backend, session, task));
CREATE INDEX IF NOT EXISTS input_tasks_expiry ON input_tasks (expires_at);
CREATE TABLE IF NOT EXISTS input_requests (backend TEXT, session TEXT, task TEXT, number INTEGER, key TEXT NOT NULL,
    upstream_id TEXT NOT NULL, request TEXT NOT NULL, state TEXT NOT NULL, PRIMARY KEY (backend, session, task, number),
    UNIQUE (backend, session, task, upstream_id));
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, body TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_expiry ON sessions (expires_at);
CREATE TABLE IF NOT EXISTS entries (backend TEXT, task_id TEXT, owner TEXT NOT NULL, ord INTEGER NOT NULL,
    body TEXT NOT NULL, expires_at REAL NOT NULL, PRIMARY KEY (backend, task_id));
CREATE INDEX IF NOT EXISTS entries_owner ON entries (backend, owner, ord);
CREATE INDEX IF NOT EXISTS entries_expiry ON entries (expires_at);
"""

_KEYS = {"outcomes": ("backend", "session", "task"), "input_tasks": ("backend", "session", "task"),
         "sessions": ("id",), "entries": ("backend", "task_id")}
"""Each bounded table and its primary key columns."""
_REF = "backend = ? AND session = ? AND task = ?"
_LIVE = ("outstanding", "claimed")


def _ref(ref: TaskRef) -> tuple[str, str, str]:
    return (ref.backend, ref.session, ref.task)


def inspect_file(db: sqlite3.Connection, path: Path) -> None:
    """Refuse a damaged file now, not on a later request (`StoreDamaged`): SQLite reads pages only
    when a statement needs them, so a damaged table would otherwise fail requests one by one. The
    quick check reads every page once (milliseconds for the bounded tables). Then refuse a file a
    newer proxy wrote (`StoreTooNew`). Run at open, and read-only by `inspect_read_only`."""
    try:
        verdict = db.execute("PRAGMA quick_check(1)").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        verdict = str(exc)
    if verdict != "ok":
        verdict = " ".join(verdict.split())  # one line
        raise StoreDamaged(f"{path} is damaged (quick check: {verdict}): move it away to start with an empty store")
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreTooNew(f"{path} was written by a newer mcp-tasks-proxy (schema {version}; this version reads up to "
                          f"{SCHEMA_VERSION}): run the newer version, or move the file away to start with an empty store")


def inspect_read_only(path: Path) -> None:
    """`inspect_file` on a read-only connection, which takes no lock (`mcp-tasks-proxy check`, and
    `serve` before it starts: `proxy/check.py`). Without a write-ahead log (no proxy has the file
    open, and the last one stopped cleanly) the file is opened `immutable`, so that SQLite creates
    no `-wal` and `-shm` beside it; with one, read-only, reading the log too. Raises what opening
    the store would for the file: `StoreDamaged`, `StoreTooNew`, or `sqlite3.Error`."""
    mode = "mode=ro" if sqlite_wal.log_path(path).exists() else "mode=ro&immutable=1"
    db = sqlite3.connect(f"{path.absolute().as_uri()}?{mode}", uri=True, timeout=2)
    try:
        inspect_file(db, path)
    finally:
        db.close()


class SqliteTaskStore:
    """`TaskStateStore` in the SQLite file `path` (created, mode 0600, with its directory).

    `max_tasks` bounds each kind of task row (outcomes, tasks with captured requests, registry
    entries), `max_sessions` the sessions. Raises `sqlite3.Error` when the file cannot be opened,
    `StoreDamaged` when SQLite's quick check finds it damaged (docs/decisions.md §43) and
    `StoreTooNew` for a newer schema (`inspect_file`).
    """

    shared = False

    def __init__(self, path: str | Path, *, max_tasks: int, max_sessions: int):
        self._orders: dict[str, int] = {}
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))  # captured requests may be private
        self._lock = self._lock_out_others()
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None)
            try:
                self._db.execute("PRAGMA busy_timeout=2000")
                inspect_file(self._db, self.path)  # before anything is written to it
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                sqlite_wal.limit_log(self._db)
                self._db.executescript(_SCHEMA)
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            except BaseException:
                self._db.close()
                raise
        except BaseException:
            os.close(self._lock)
            raise
        self._limits = {"outcomes": max_tasks, "input_tasks": max_tasks, "entries": max_tasks, "sessions": max_sessions}
        self._db.execute("UPDATE input_requests SET state = 'outstanding' WHERE state = 'claimed'")
        meta = dict(self._db.execute("SELECT name, value FROM meta").fetchall())
        self._highest = int(meta.get("highest", 0))
        """The highest input key number handed out (see `MemoryTaskStore._highest`)."""
        self._forgot = meta.get("forgot") == "1"
        self._counts: dict[str, int] = {}
        self._swept = 0.0
        self.in_memory = False
        """Set once the file could not be written: the state is then kept in memory only."""
        self._held = SqliteHeldStore(lambda: self._db, max_rows=max_tasks)
        self.sweep()

    @property
    def db(self) -> sqlite3.Connection:
        """The open connection (file or spilled copy) for the figures' tables (`figures_sqlite.py`)."""
        return self._db

    # -- housekeeping ------------------------------------------------------------------------------

    def _lock_out_others(self) -> int:
        """Hold `<file>.lock` (a POSIX record lock: held per process, released by the kernel when the
        process dies, even by SIGKILL). Raises `StoreInUse` when another process holds it: two
        processes would each release the other's live claims at open and overrun the bounds."""
        fd = os.open(lock_path(self.path), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                raise StoreInUse.of(self.path) from None
            raise
        return fd

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            if self._db.in_transaction:  # SQLite already rolled back after some errors (SQLITE_FULL)
                self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _spill(self, exc: sqlite3.Error) -> None:
        """The file cannot be written: copy what it holds into an in-memory database and go on there."""
        log.error("state store %s cannot be written (%s): task state is kept in memory from now on and will not survive a restart",
                  self.path, exc)
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
        memory = sqlite3.connect(":memory:", isolation_level=None)
        self._db.backup(memory)
        self._db.close()
        self._db = memory
        self.in_memory = True
        self.sweep()  # recounts the rows

    def _note_forgot(self) -> None:
        """Input state was let go before its task ended: later keys number after every key issued."""
        if not self._forgot:
            self._forgot = True
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('forgot', '1')")

    def _delete_input_task(self, key: tuple[str, str, str]) -> None:
        self._db.execute(f"DELETE FROM input_requests WHERE {_REF}", key)
        self._counts["input_tasks"] -= self._db.execute(f"DELETE FROM input_tasks WHERE {_REF}", key).rowcount

    def _delete(self, table: str, key: tuple[Any, ...]) -> None:
        if table == "input_tasks":
            self._delete_input_task(key)  # type: ignore[arg-type]
            return
        where = " AND ".join(f"{c} = ?" for c in _KEYS[table])
        self._counts[table] -= self._db.execute(f"DELETE FROM {table} WHERE {where}", key).rowcount

    def _added(self, table: str) -> None:
        """A row was inserted into `table`: drop the rows soonest to expire beyond its limit."""
        self._counts[table] += 1
        excess = self._counts[table] - self._limits[table]
        if excess <= 0:
            return
        columns = ", ".join(_KEYS[table])
        for key in self._db.execute(f"SELECT {columns} FROM {table} ORDER BY expires_at LIMIT ?", (excess,)).fetchall():
            if table == "input_tasks":
                self._note_forgot()
            self._delete(table, tuple(key))

    def _upsert(self, table: str, values: dict[str, Any]) -> None:
        """Insert or replace the row `values` (all columns), counting and bounding new rows."""
        columns = ", ".join(values)
        marks = ", ".join("?" * len(values))
        if self._db.execute(f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({marks})", tuple(values.values())).rowcount:
            self._added(table)
            return
        keys = _KEYS[table]
        sets = ", ".join(f"{c} = ?" for c in values if c not in keys)
        where = " AND ".join(f"{c} = ?" for c in keys)
        self._db.execute(f"UPDATE {table} SET {sets} WHERE {where}",
                         (*(v for c, v in values.items() if c not in keys), *(values[c] for c in keys)))

    def _maybe_sweep(self) -> None:
        if time.monotonic() - self._swept >= SWEEP_INTERVAL_S:
            self.sweep()

    @_spills
    def sweep(self) -> None:
        """Delete every expired row now (and recount each table)."""
        now = time.time()
        with self._tx() as db:
            expired = db.execute("SELECT backend, session, task FROM input_tasks WHERE expires_at <= ?", (now,)).fetchall()
            for key in expired:
                db.execute(f"DELETE FROM input_requests WHERE {_REF}", key)
            if expired:
                self._note_forgot()
            for table in _KEYS:
                db.execute(f"DELETE FROM {table} WHERE expires_at <= ?", (now,))
                self._counts[table] = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        self._swept = time.monotonic()

    async def maintain(self) -> None:
        """Run until cancelled: every `SWEEP_INTERVAL_S`, `sweep()`; a checkpoint of the
        write-ahead log in a worker thread (so that no write ever runs one) as often, and sooner
        once the log holds `sqlite_wal.WAL_CHECKPOINT_BYTES` (looked at every `WAL_CHECK_S`), each
        ending with a short pass here so that the log starts over (`proxy/state/sqlite_wal.py`)."""
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        wal = str(sqlite_wal.log_path(self.path))
        checkpointed = time.monotonic()
        try:
            while True:
                await asyncio.sleep(min(sqlite_wal.WAL_CHECK_S, SWEEP_INTERVAL_S))
                due = time.monotonic() - checkpointed >= SWEEP_INTERVAL_S
                if time.monotonic() - self._swept >= SWEEP_INTERVAL_S:
                    self.sweep()
                if self.in_memory or not (due or sqlite_wal.log_size(wal) > sqlite_wal.WAL_CHECKPOINT_BYTES):
                    continue
                await asyncio.to_thread(self._checkpoint)
                self._finish_checkpoint()
                checkpointed = time.monotonic()
        finally:
            self._db.execute("PRAGMA wal_autocheckpoint=1000")

    def _checkpoint(self) -> None:
        sqlite_wal.checkpoint(self.path)

    def _finish_checkpoint(self) -> None:
        sqlite_wal.finish_checkpoint(self._db, self.path)

    def held_tasks(self) -> HeldTaskStore:
        return self._held

    async def close(self) -> None:
        self._db.close()
        if self._lock >= 0:
            os.close(self._lock)  # releases the lock
            self._lock = -1

    # -- terminal outcomes ---------------------------------------------------------------------------

    @_spills
    async def outcome(self, ref: TaskRef) -> CanonicalTask | None:
        row = self._db.execute(f"SELECT body, expires_at FROM outcomes WHERE {_REF}", _ref(ref)).fetchone()
        if row is None:
            return None
        if row[1] <= time.time():
            self._delete("outcomes", _ref(ref))
            return None
        return CanonicalTask.model_validate_json(row[0])

    @_spills
    async def keep_outcome(self, ref: TaskRef, task: CanonicalTask, keep_s: float) -> None:
        self._maybe_sweep()
        with self._tx():
            self._upsert("outcomes", {"backend": ref.backend, "session": ref.session, "task": ref.task,
                                      "body": task.model_dump_json(), "expires_at": time.time() + keep_s})

    @_spills
    async def forget_outcome(self, ref: TaskRef) -> None:
        self._delete("outcomes", _ref(ref))

    def outcome_count(self, backend: str) -> int:
        return self._db.execute("SELECT count(*) FROM outcomes WHERE backend = ? AND expires_at > ?", (backend, time.time())).fetchone()[0]

    # -- captured requests for input -------------------------------------------------------------

    def _input_task(self, ref: TaskRef) -> int | None:
        """The next key number of a task with captured requests (None: none, or expired and deleted)."""
        row = self._db.execute(f"SELECT next_number, expires_at FROM input_tasks WHERE {_REF}", _ref(ref)).fetchone()
        if row is None:
            return None
        if row[1] <= time.time():
            self._note_forgot()
            self._delete_input_task(_ref(ref))
            return None
        return row[0]

    @_spills
    async def capture_input(self, ref: TaskRef, upstream_id: jsonrpc.RequestId, request: InputRequest, keep_s: float) -> str | None:
        self._maybe_sweep()
        uid = json.dumps(upstream_id)
        with self._tx() as db:
            number = self._input_task(ref)
            if number is None:
                number = self._highest + 1 if self._forgot else 1
                db.execute("INSERT INTO input_tasks VALUES (?, ?, ?, ?, ?)", (*_ref(ref), number, time.time() + keep_s))
                self._added("input_tasks")
            elif db.execute(f"SELECT 1 FROM input_requests WHERE {_REF} AND upstream_id = ?", (*_ref(ref), uid)).fetchone():
                return None
            key = input_key("input-", number)
            db.execute("INSERT INTO input_requests VALUES (?, ?, ?, ?, ?, ?, ?, 'outstanding')",
                       (*_ref(ref), number, key, uid, request.model_dump_json()))
            db.execute(f"UPDATE input_tasks SET next_number = ? WHERE {_REF}", (number + 1, *_ref(ref)))
            if number > self._highest:
                self._highest = number
                db.execute("INSERT OR REPLACE INTO meta VALUES ('highest', ?)", (str(number),))
        return key

    @_spills
    async def inputs(self, ref: TaskRef) -> dict[str, CapturedInput]:
        if self._input_task(ref) is None:
            return {}
        rows = self._db.execute(f"SELECT key, upstream_id, request FROM input_requests WHERE {_REF} AND state IN (?, ?) "
                                "ORDER BY number", (*_ref(ref), *_LIVE)).fetchall()
        return {key: CapturedInput(key, json.loads(uid), InputRequest.model_validate_json(body)) for key, uid, body in rows}

    @_spills
    async def claim_input(self, ref: TaskRef, key: str) -> CapturedInput | None:
        if self._input_task(ref) is None:
            return None
        # One UPDATE decides: of two claims (any connection to this file), only one changes the row.
        claimed = self._db.execute(f"UPDATE input_requests SET state = 'claimed' WHERE {_REF} AND key = ? AND state = 'outstanding' "
                                   "RETURNING upstream_id, request", (*_ref(ref), key)).fetchall()  # all: the statement ends here
        if not claimed:
            return None
        return CapturedInput(key, json.loads(claimed[0][0]), InputRequest.model_validate_json(claimed[0][1]))

    @_spills
    async def release_input(self, ref: TaskRef, key: str) -> None:
        self._db.execute(f"UPDATE input_requests SET state = 'outstanding' WHERE {_REF} AND key = ? AND state = 'claimed'", (*_ref(ref), key))

    @_spills
    async def answered(self, ref: TaskRef, key: str) -> None:
        self._db.execute(f"UPDATE input_requests SET state = 'answered' WHERE {_REF} AND key = ?", (*_ref(ref), key))

    @_spills
    async def drop_inputs(self, ref: TaskRef) -> None:
        key = _ref(ref)
        # Most tasks never asked for input: a read finds nothing, and no write transaction is run.
        if self._db.execute(f"SELECT 1 FROM input_tasks WHERE {_REF}", key).fetchone() is None:
            return
        with self._tx():
            self._delete_input_task(key)

    # -- the proxy's own sessions ------------------------------------------------------------------

    @_spills
    async def keep_session(self, record: SessionRecord, keep_s: float) -> None:
        self._maybe_sweep()
        body = json.dumps({"principal": record.principal, "face": record.face, "backend": record.backend,
                           "params": record.params, "protocol_version": record.protocol_version})
        with self._tx():
            self._upsert("sessions", {"id": record.session_id, "body": body, "expires_at": time.time() + keep_s})

    @_spills
    async def session(self, session_id: str) -> SessionRecord | None:
        row = self._db.execute("SELECT body, expires_at FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        if row[1] <= time.time():
            self._delete("sessions", (session_id,))
            return None
        body = json.loads(row[0])
        return SessionRecord(session_id, body["principal"], body["face"], body["backend"], body["params"], body["protocol_version"])

    @_spills
    async def forget_session(self, session_id: str) -> None:
        self._delete("sessions", (session_id,))

    # -- the v1 face's task registry ---------------------------------------------------------------

    @_spills
    async def keep_entry(self, backend: str, entry: Entry, keep_s: float) -> None:
        self._maybe_sweep()
        expires_at = time.time() + keep_s
        if entry.held_expires_at is not None:
            expires_at = min(expires_at, entry.held_expires_at)
        body = json.dumps({"ref": [entry.ref.backend, entry.ref.session, entry.ref.task], "session_id": entry.session_id,
                           "last": entry.last.model_dump(mode="json"), "cancelled": entry.cancelled,
                           "failure": entry.failure.model_dump(mode="json") if entry.failure is not None else None,
                           "asked": sorted(entry.asked), "held_expires_at": entry.held_expires_at})
        with self._tx():
            self._upsert("entries", {"backend": backend, "task_id": entry.task_id, "owner": entry.owner, "ord": entry.order,
                                     "body": body, "expires_at": expires_at})

    @staticmethod
    def _entry(task_id: str, owner: str, order: int, raw: str) -> Entry:
        body = json.loads(raw)
        failure = body["failure"]
        return Entry(task_id, TaskRef(*body["ref"]), owner, order, CanonicalTask.model_validate(body["last"]), body["session_id"],
                     cancelled=body["cancelled"], failure=TaskError.model_validate(failure) if failure is not None else None,
                     asked=set(body["asked"]), held_expires_at=body["held_expires_at"])

    @_spills
    async def entry(self, backend: str, task_id: str) -> Entry | None:
        row = self._db.execute("SELECT owner, ord, body, expires_at FROM entries WHERE backend = ? AND task_id = ?",
                               (backend, task_id)).fetchone()
        if row is None:
            return None
        if row[3] <= time.time():
            self._delete("entries", (backend, task_id))
            return None
        return self._entry(task_id, row[0], row[1], row[2])

    async def entries_of(self, backend: str, owner: str) -> list[Entry]:
        rows = self._db.execute("SELECT task_id, ord, body FROM entries WHERE backend = ? AND owner = ? AND expires_at > ? ORDER BY ord",
                                (backend, owner, time.time())).fetchall()
        return [self._entry(task_id, owner, order, body) for task_id, order, body in rows]

    @_spills
    async def forget_entry(self, backend: str, task_id: str) -> None:
        self._delete("entries", (backend, task_id))

    def highest_order(self, backend: str) -> int:
        """The highest `Entry.order` kept for `backend` (0 when none)."""
        return self._db.execute("SELECT coalesce(max(ord), 0) FROM entries WHERE backend = ?", (backend,)).fetchone()[0]

    async def next_order(self, backend: str) -> int:
        # The file is read once per backend (its rows from before a restart); from then on this
        # process hands out every order (one process per file), so memory holds the highest.
        previous = self._orders.get(backend)
        if previous is None:
            previous = self.highest_order(backend)
        order = self._orders[backend] = previous + 1
        return order
