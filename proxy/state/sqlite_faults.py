"""The SQLite store's faults (`proxy/state/sqlite_store.py`): its two errors, and the decorator that
moves a store whose file cannot be written into memory (docs/decisions.md §45)."""

from __future__ import annotations

import fcntl
import functools
import inspect
import os
import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar


class StoreDamaged(sqlite3.DatabaseError):
    """The state file is damaged (SQLite's quick check failed); the message names it and the remedy."""


class StoreTooNew(sqlite3.DatabaseError):
    """The file was written by a newer proxy, whose schema this one does not know (docs/deploy.md
    "Upgrade and rollback"): refused at open, never read half-understood."""


class StoreInUse(OSError):
    """Another process has the state file open (its `<file>.lock` is held)."""

    @classmethod
    def of(cls, path: Path) -> StoreInUse:
        return cls(f"{path} is in use by another process (one proxy per state_dir)")


def lock_path(path: Path) -> Path:
    """The file whose POSIX record lock says a process has the state file `path` open."""
    return path.with_name(path.name + ".lock")


def lock_holder(path: Path) -> int | None:
    """The process holding the lock of the state file `path` (`lock_path`), asked without taking
    it (`F_GETLK`: nothing a starting proxy could meet), or None when it is free or the lock file
    does not exist."""
    try:
        fd = os.open(lock_path(path), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        l_type, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    finally:
        os.close(fd)
    return None if l_type == fcntl.F_UNLCK else pid


_FLOCK = "@hhqqi4x"
"""Linux's `struct flock` on 64-bit: l_type, l_whence, l_start, l_len, l_pid (and its padding)."""


_UNWRITABLE = {8, 10, 13}
"""SQLite's primary result codes for a file that cannot be written: READONLY, IOERR, FULL."""
_F = TypeVar("_F", bound=Callable[..., Any])


def _spills(method: _F) -> _F:
    """A store method that, when the file cannot be written (a full disk, an I/O error, a file
    made read-only), moves the store into memory once and runs again (docs/decisions.md §45)."""

    def spills(self: Any, exc: sqlite3.OperationalError) -> None:
        if self.in_memory or (getattr(exc, "sqlite_errorcode", 0) & 0xFF) not in _UNWRITABLE:
            raise exc
        self._spill(exc)

    if inspect.iscoroutinefunction(method):
        @functools.wraps(method)
        async def spilling_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return await method(self, *args, **kwargs)
            except sqlite3.OperationalError as exc:
                spills(self, exc)
            return await method(self, *args, **kwargs)

        return spilling_async  # type: ignore[return-value]

    @functools.wraps(method)
    def spilling(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.OperationalError as exc:
            spills(self, exc)
        return method(self, *args, **kwargs)

    return spilling  # type: ignore[return-value]
