"""The SQLite store's write-ahead log kept short (docs/decisions.md §121; the store is
`proxy/state/sqlite_store.py`).

A commit appends to the log; a checkpoint copies the log into the database. The store checkpoints
in a worker thread, so that its syncs never wait for the disk on the event loop. But a checkpoint of
another thread never finds the log wholly copied while writes go on (each copies what was there when
it started), and SQLite starts the log over only from a wholly copied one: under steady writes the
log only grew, by gigabytes in a busy minute, and with it the index SQLite maps beside it (the
`-shm` file, counted in the process's RSS, about 8 bytes per 4 KiB page of log). So a checkpoint
here is the bulk in the worker thread (`checkpoint`), then one short pass on the event loop's thread
(`finish_checkpoint`) for what was written meanwhile (usually nothing or a few pages); the next
write then starts the log over, and cuts its file back to `WAL_CHECKPOINT_BYTES`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

log = logging.getLogger(__name__)

WAL_CHECK_S = 1.0
"""How often the store's `maintain()` looks at the log's size..."""
WAL_CHECKPOINT_BYTES = 4 * 1024 * 1024
"""...and checkpoints once it holds this much (about SQLite's own automatic checkpoint of 1000
pages); also the size its file is cut back to when the log starts over (`journal_size_limit`)."""
CHECKPOINT_PASSES = 2
"""Passive checkpoints the worker thread runs back to back (the second copies what was appended
during the first)."""


def limit_log(db: sqlite3.Connection) -> None:
    """Cut the log's file back to `WAL_CHECKPOINT_BYTES` whenever it starts over (per connection)."""
    db.execute(f"PRAGMA journal_size_limit={WAL_CHECKPOINT_BYTES}")


def log_path(path: Path) -> Path:
    """The write-ahead log of the database file `path`."""
    return path.with_name(path.name + "-wal")


def log_size(wal: str) -> int:
    """The size in bytes of the log file `wal` (`log_path`; 0 when there is none)."""
    try:
        return os.stat(wal).st_size
    except OSError:
        return 0


def checkpoint(path: Path) -> None:
    """The bulk of a checkpoint of the database file `path`, on a connection of its own (run in a
    worker thread: its syncs wait for the disk there). Raises `sqlite3.Error`."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for _ in range(CHECKPOINT_PASSES):
            busy, logged, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if busy or logged == copied:
                break
    finally:
        db.close()


def finish_checkpoint(db: sqlite3.Connection, path: Path) -> None:
    """The last pass, on the store's own connection `db` in the event loop's thread: copies what
    was written during `checkpoint`, so that the next write starts the log over. A failure is
    logged (the next round tries again; a write that fails moves the store into memory, §45)."""
    try:
        db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    except sqlite3.Error as exc:
        log.warning("checkpoint of %s failed: %s", path, exc)
