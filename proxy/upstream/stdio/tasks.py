"""Which virtual session created each task of a stdio process, kept as long as the process may
still know the task (docs/decisions.md §134).

The mux answers a task request of a session for a task it did not create "Unknown task" without
sending it (decision 57), and routes what the process says about a task to the session that
created it (decision 56): it must remember each task's creator. A pooled upstream session lives
as long as the proxy, so that memory is bounded here: a task is forgotten `GRACE_S` after its
`ttl` (the time the server promised to keep it; past it the server may answer "unknown" itself),
and beyond `MAX_TASKS` tasks of one process the oldest are forgotten first. A forgotten task's
requests are then answered "Unknown task" by the mux, as the server would. Sans clock: `now` is
given (seconds, monotonic).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar


class _Creator(Protocol):
    tasks: set[str]
    running_tasks: set[str]
    settled: set[str]


S = TypeVar("S", bound=_Creator)


GRACE_S = 600.0
"""How long past its `ttl` a task is still remembered (a server may keep it a little longer)."""
MAX_TASKS = 100_000
"""Tasks remembered for one process at most; beyond, the oldest are forgotten first."""


class TaskOwners(Generic[S]):
    """task id → the session that created it (`get`, `in`, `values()`, `pop`), each with the
    time it may be forgotten; `add` forgets what is due first (`forget_due`)."""

    __slots__ = ("_owners", "_due", "max_tasks")

    def __init__(self, max_tasks: int = MAX_TASKS):
        self._owners: dict[str, tuple[S, float]] = {}
        """In creation order: the oldest first (what the cap forgets first)."""
        self._due: list[tuple[float, str]] = []
        """A heap of (when it may be forgotten, task id); entries of tasks forgotten otherwise are skipped."""
        self.max_tasks = max_tasks

    def add(self, task: str, session: S, ttl_ms: int | None, now: float) -> None:
        """`session` created `task`, which its server keeps `ttl_ms` (None: without a limit)."""
        self.forget_due(now)
        due = math.inf if ttl_ms is None else now + ttl_ms / 1000 + GRACE_S
        previous = self._owners.pop(task, None)  # a server that gave an id twice: the newest creator has it
        if previous is not None and previous[0] is not session:
            previous[0].tasks.discard(task)
            previous[0].running_tasks.discard(task)
            previous[0].settled.discard(task)
        self._owners[task] = (session, due)
        session.tasks.add(task)
        session.running_tasks.add(task)
        if due != math.inf:
            heapq.heappush(self._due, (due, task))
        while len(self._owners) > self.max_tasks:
            self._forget(next(iter(self._owners)))

    def forget_due(self, now: float) -> int:
        """Forget every task whose time has come; returns how many."""
        forgotten = 0
        due = self._due
        while due and due[0][0] <= now:
            when, task = heapq.heappop(due)
            entry = self._owners.get(task)
            if entry is not None and entry[1] == when:
                self._forget(task)
                forgotten += 1
        return forgotten

    def _forget(self, task: str) -> None:
        session, _ = self._owners.pop(task)
        session.tasks.discard(task)
        session.running_tasks.discard(task)
        session.settled.discard(task)

    def get(self, task: str) -> S | None:
        entry = self._owners.get(task)
        return entry[0] if entry is not None else None

    def pop(self, task: str) -> S | None:
        """Forget `task` (its session forgets it itself)."""
        entry = self._owners.pop(task, None)
        return entry[0] if entry is not None else None

    def values(self) -> Iterator[S]:
        return (session for session, _ in self._owners.values())

    def clear(self) -> None:
        self._owners.clear()
        self._due.clear()

    def __contains__(self, task: object) -> bool:
        return task in self._owners

    def __len__(self) -> int:
        return len(self._owners)

    def __bool__(self) -> bool:
        return bool(self._owners)
