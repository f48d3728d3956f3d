"""Opening the task state store `settings.store` names, and reaching it once at start (the
application's: `proxy/app.py`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..config import ConfigError, Settings
from .health import StoreUnreachable
from .sqlite_faults import StoreDamaged, StoreInUse, StoreTooNew
from .sqlite_store import SqliteTaskStore
from .store import TaskStateStore


def open_store(settings: Settings) -> TaskStateStore | None:
    """The store `settings.store` names: the SQLite file `<state_dir>/tasks.sqlite3`, or None
    (in memory). Raises `ConfigError` when the file cannot be opened."""
    if settings.store == "memory":
        return None
    if settings.store != "sqlite":
        try:
            from .redis_store import RedisTaskStore
        except ImportError:
            raise ConfigError("store: a Redis URL needs the redis client: pip install 'mcp-tasks-proxy[redis]'") from None
        return RedisTaskStore(settings.store, timeout_ms=settings.store_timeout_ms)
    path = Path(settings.state_dir).expanduser() / "tasks.sqlite3"
    try:
        return SqliteTaskStore(path, max_tasks=settings.max_tasks * len(settings.upstream), max_sessions=settings.max_sessions)
    except (StoreDamaged, StoreInUse, StoreTooNew) as exc:
        raise ConfigError(f"store: {exc}") from None
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"store: cannot open {path}: {exc}") from None


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
