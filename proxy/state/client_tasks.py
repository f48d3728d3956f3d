"""Tasks created through the proxy by v1 clients, per principal (docs/behaviour.md §5.3–§5.6).

The registry backs `tasks/list` (only the caller's tasks; for anonymous callers only the same proxy
session's), remembers sticky cancels (a v1 task the client cancelled is `cancelled` forever), the
last status seen (for status notifications), which input requests were already put to the client,
and the tasks the proxy holds itself (a plain result the backend gave to a task-augmented call).

Bounded in count (least recently used first) and time (`max_task_state_ms` after the last use);
what is evicted is reported unknown, never wrong. Every entry is also written to the
`TaskStateStore` (`proxy/state/store.py`) when it is created or changes, and read from it when this
process does not hold it (after a restart), so listings and sticky cancels survive a restart with
the SQLite store (docs/decisions.md, "State that survives a restart").
"""

from __future__ import annotations

import time
from typing import Any

from cachetools import TTLCache

from translators.model import CanonicalTask
from translators.sealing import ANONYMOUS, TaskRef

from .store import Entry, MemoryTaskStore, TaskStateStore

HELD = "@held"
"""`TaskRef.session` of a task the proxy holds itself (no backend task behind it)."""

TOUCH_FRACTION = 10
"""An entry read from this process is written to the store again (its lifetime renewed) once a
tenth of its lifetime has passed since it was written: not on every read."""


class TaskRegistry:
    """Entries by client-facing task id, and per owner in creation order, for one `backend`."""

    def __init__(self, *, max_tasks: int, max_task_state_ms: int, store: TaskStateStore | None = None, backend: str = "main"):
        self.keep_s = max_task_state_ms / 1000
        self.store: TaskStateStore = store if store is not None else MemoryTaskStore(max_tasks=1)
        self.backend = backend
        self._entries: TTLCache[str, Entry] = TTLCache(maxsize=max_tasks, ttl=self.keep_s, timer=time.monotonic)
        self._by_owner: dict[str, dict[str, None]] = {}

    @staticmethod
    def owner(principal: str, session_id: str) -> str:
        """Who may list a task: the principal, or for anonymous callers the proxy session."""
        return f"{ANONYMOUS}:{session_id}" if principal == ANONYMOUS else principal

    async def add(self, task_id: str, ref: TaskRef, principal: str, session_id: str, task: CanonicalTask,
            *, held_ttl_ms: int | None = None) -> Entry:
        owner = self.owner(principal, session_id)
        entry = Entry(task_id, ref, owner, await self.store.next_order(self.backend), task, session_id)
        if held_ttl_ms is not None:
            entry.held_expires_at = time.time() + held_ttl_ms / 1000
        self._hold(entry)
        await self.save(entry)
        return entry

    def _hold(self, entry: Entry) -> None:
        self._entries[entry.task_id] = entry
        self._by_owner.setdefault(entry.owner, {})[entry.task_id] = None

    async def save(self, entry: Entry) -> None:
        """Write the entry to the store (it was created or changed: status, cancel, failure, an
        answered input key)."""
        entry.saved_at = time.time()
        await self.store.keep_entry(self.backend, entry, self.keep_s)

    async def get(self, task_id: str) -> Entry | None:
        """The entry under `task_id`, or None. With a shared store (several processes) it is read
        from the store every time: another process may have changed it (a cancel, an answer)."""
        entry = None if self.store.shared else self._entries.get(task_id)
        if entry is None:
            entry = await self.store.entry(self.backend, task_id)
            if entry is None:
                return None
            entry.saved_at = time.time()
            self._hold(entry)
        if entry.held_expires_at is not None and entry.held_expires_at <= time.time():
            await self.remove(task_id)
            return None
        self._entries[task_id] = entry  # refresh its time and recency
        if time.time() - entry.saved_at > self.keep_s / TOUCH_FRACTION:
            await self.save(entry)
        return entry

    async def remove(self, task_id: str) -> None:
        entry = self._entries.pop(task_id, None)
        if entry is not None:
            self._by_owner.get(entry.owner, {}).pop(task_id, None)
        await self.store.forget_entry(self.backend, task_id)

    async def listing(self, principal: str, session_id: str) -> list[Entry]:
        """The owner's live entries in creation order (forgotten ids pruned), those only the
        store still has (from before a restart) included."""
        owner = self.owner(principal, session_id)
        for kept in await self.store.entries_of(self.backend, owner):
            if self.store.shared or kept.task_id not in self._entries:
                kept.saved_at = time.time()
                self._hold(kept)
        ids = self._by_owner.get(owner, {})
        entries = []
        for task_id in list(ids):
            entry = await self.get(task_id)
            if entry is None:
                ids.pop(task_id, None)
            else:
                entries.append(entry)
        if not ids:
            self._by_owner.pop(owner, None)
        return sorted(entries, key=lambda e: e.order)

    def __len__(self) -> int:
        return len(self._entries)

    def unfinished(self) -> int:
        """Entries held here whose task is not known to be finished (not terminal as last seen,
        not cancelled, not failed through the proxy): `mcp_tasks_proxy_live_tasks`."""
        return sum(1 for entry in list(self._entries.values()) if not (entry.last.terminal or entry.cancelled or entry.failure))


def held_result_payload(entry: Entry) -> dict[str, Any] | None:
    """The result a held task carries (its hub task is `completed` with it)."""
    return entry.last.result
