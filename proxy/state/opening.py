"""Opening the task state store `settings.store` names, and reaching it once at start (the
application's: `proxy/app.py`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..config import ConfigError, Settings
from .health import StoreUnreachable
from .sqlite_faults import StoreDamaged, StoreInUse, StoreTooNew
from .sqlite_store import SqliteTaskStore, inspect_read_only
from .store import TaskStateStore

T = TypeVar("T")


def beside(store: Any, sqlite: Callable[[Callable[[], sqlite3.Connection]], T], redis: Callable[[Any, str], T],
           memory: Callable[[], T]) -> T:
    """What keeps a record beside the task state store `store` (the rollout's, the fleet's notes):
    `sqlite(db)` in a SQLite store's file (`db()`: its connection, also after a spill into memory),
    `redis(client, key prefix)` in a shared Redis store, else `memory()` (None, or the memory store)."""
    if isinstance(store, SqliteTaskStore):
        return sqlite(lambda: store.db)
    client = getattr(store, "redis", None)
    if store is not None and getattr(store, "shared", False) and client is not None:
        from .redis_store import PREFIX

        return redis(client, PREFIX)
    return memory()


def sqlite_path(settings: Settings) -> Path:
    """The SQLite store's file: `<state_dir>/tasks.sqlite3`."""
    return Path(settings.state_dir).expanduser() / "tasks.sqlite3"


def redis_store_class() -> type:
    """`RedisTaskStore`; `ConfigError` when the redis client is not installed."""
    try:
        from .redis_store import RedisTaskStore
    except ImportError:
        raise ConfigError("store: a Redis URL needs the redis client: pip install 'mcp-tasks-proxy[redis]'") from None
    return RedisTaskStore


def _refused(exc: Exception, path: Path) -> ConfigError:
    """Why the SQLite file `path` is refused, `exc` being what opening or inspecting it raised."""
    if isinstance(exc, (StoreDamaged, StoreInUse, StoreTooNew)):
        return ConfigError(f"store: {exc}")
    return ConfigError(f"store: cannot open {path}: {exc}")


def open_store(settings: Settings) -> TaskStateStore | None:
    """The store `settings.store` names: the SQLite file `<state_dir>/tasks.sqlite3`, or None
    (in memory). Raises `ConfigError` when the file cannot be opened."""
    if settings.store == "memory":
        return None
    if settings.store != "sqlite":
        store: TaskStateStore = redis_store_class()(settings.store, timeout_ms=settings.store_timeout_ms)
        return store
    path = sqlite_path(settings)
    try:
        return SqliteTaskStore(path, max_tasks=settings.max_tasks * len(settings.upstream), max_sessions=settings.max_sessions)
    except (OSError, sqlite3.Error) as exc:
        raise _refused(exc, path) from None


def inspect_store(settings: Settings) -> bool:
    """What `open_store` would refuse in the SQLite file, found without writing anything or taking
    its lock (`inspect_read_only`: damaged, too new, cannot be opened), with `open_store`'s words
    (`ConfigError`); a Redis store needs its client. False when the SQLite file does not exist yet
    (it is created at the first start); True otherwise. Neither Redis nor the lock is tried: a
    running proxy holds its own file's lock (`mcp-tasks-proxy check`, `serve`: proxy/check.py)."""
    if settings.store == "memory":
        return True
    if settings.store != "sqlite":
        redis_store_class()
        return True
    path = sqlite_path(settings)
    if not path.exists():
        return False
    try:
        inspect_read_only(path)
    except (OSError, sqlite3.Error) as exc:
        raise _refused(exc, path) from None
    return True


async def reach(store: TaskStateStore) -> None:
    """A shared store is reached once at start (its heartbeat written): an unreachable Redis
    refuses the start with `ConfigError` instead of failing the first requests."""
    beat = getattr(store, "heartbeat", None)
    if beat is None:
        return
    try:
        await beat()
    except StoreUnreachable as exc:
        raise ConfigError(f"store: cannot reach {exc.store}: {exc.reason}") from None
    except Exception as exc:  # the client's other errors
        raise ConfigError(f"store: cannot reach {getattr(store, 'url', 'the store')}: {exc}") from None
