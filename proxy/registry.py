"""Tasks created through the proxy by v1 clients, per principal (TRANSLATION.md §5.3–§5.6).

The registry backs `tasks/list` (only the caller's tasks; for anonymous callers only the same proxy
session's), remembers sticky cancels (a v1 task the client cancelled is `cancelled` forever), the
last status seen (for status notifications), which input requests were already put to the client,
and the tasks the proxy holds itself (a plain result the backend gave to a task-augmented call).

Bounded in count (least recently used first) and time (`max_task_state_ms` after the last use);
what is evicted is reported unknown, never wrong.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from cachetools import TTLCache

from translators.model import CanonicalTask, TaskError
from translators.sealing import ANONYMOUS, TaskRef

HELD = "@held"
"""`TaskRef.session` of a task the proxy holds itself (no backend task behind it)."""


@dataclass
class Entry:
    """One task as the v1 face knows it.

    `order` sorts listings; `owner` is the principal, or "anonymous:<session id>";
    `last`: the last hub task seen (for listings and change notifications); `cancelled`: sticky;
    `failure`: an error that ended the task through the proxy (a client error answer, §5.4);
    `asked`: input keys put to the client; `held_expires_at`: monotonic deadline of a held task.
    """

    task_id: str
    ref: TaskRef
    owner: str
    order: int
    last: CanonicalTask
    session_id: str
    cancelled: bool = False
    failure: TaskError | None = None
    asked: set[str] = field(default_factory=set)
    held_expires_at: float | None = None


class TaskRegistry:
    """Entries by client-facing task id, and per owner in creation order."""

    def __init__(self, *, max_tasks: int, max_task_state_ms: int):
        self._entries: TTLCache[str, Entry] = TTLCache(maxsize=max_tasks, ttl=max_task_state_ms / 1000, timer=time.monotonic)
        self._by_owner: dict[str, dict[str, None]] = {}
        self._order = itertools.count()

    @staticmethod
    def owner(principal: str, session_id: str) -> str:
        """Who may list a task: the principal, or for anonymous callers the proxy session."""
        return f"{ANONYMOUS}:{session_id}" if principal == ANONYMOUS else principal

    def add(self, task_id: str, ref: TaskRef, principal: str, session_id: str, task: CanonicalTask,
            *, held_ttl_ms: int | None = None) -> Entry:
        owner = self.owner(principal, session_id)
        entry = Entry(task_id, ref, owner, next(self._order), task, session_id)
        if held_ttl_ms is not None:
            entry.held_expires_at = time.monotonic() + held_ttl_ms / 1000
        self._entries[task_id] = entry
        self._by_owner.setdefault(owner, {})[task_id] = None
        return entry

    def get(self, task_id: str) -> Entry | None:
        entry = self._entries.get(task_id)
        if entry is not None and entry.held_expires_at is not None and entry.held_expires_at <= time.monotonic():
            self.remove(task_id)
            return None
        if entry is not None:
            self._entries[task_id] = entry  # refresh its time and recency
        return entry

    def remove(self, task_id: str) -> None:
        entry = self._entries.pop(task_id, None)
        if entry is not None:
            self._by_owner.get(entry.owner, {}).pop(task_id, None)

    def listing(self, principal: str, session_id: str) -> list[Entry]:
        """The owner's live entries in creation order (forgotten ids pruned)."""
        owner = self.owner(principal, session_id)
        ids = self._by_owner.get(owner, {})
        entries = []
        for task_id in list(ids):
            entry = self.get(task_id)
            if entry is None:
                ids.pop(task_id, None)
            else:
                entries.append(entry)
        if not ids:
            self._by_owner.pop(owner, None)
        return sorted(entries, key=lambda e: e.order)

    def __len__(self) -> int:
        return len(self._entries)


def held_result_payload(entry: Entry) -> dict[str, Any] | None:
    """The result a held task carries (its hub task is `completed` with it)."""
    return entry.last.result
