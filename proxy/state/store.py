"""The task state only this proxy knows, behind one small interface (docs/decisions.md, "State
that survives a restart").

Two proxy replicas with one sealing key already serve each other's task ids for status, results and
cancel: everything those need is in the sealed id or asked of the backend again. What one proxy
alone knows is:

* the **terminal outcome** of a v1 backend's task it folded (re-fetchable from the backend, so
  keeping it saves round trips);
* the **requests for input it captured** from a v1 backend (the backend sends each once, to the
  proxy holding the stream): key, the backend's JSON-RPC request id and the request, and the
  task's key counter. Whoever has them can answer: the answer is a JSON-RPC response POSTed on the
  task's upstream session, which the sealed id names;
* the proxy's **own sessions** for v1 clients (`SessionRecord`, `faces/session.py`) and their
  **task registry** (`Entry`, `registry.py`: `tasks/list`, sticky cancels, failures the proxy
  made, input keys already answered, results of tasks the proxy holds itself).

`TaskStateStore` is that state. `MemoryTaskStore` keeps outcomes and captured requests in this
process; the sessions and registry are then only the live objects of the faces (its session and
entry methods keep nothing). `SqliteTaskStore` (`proxy/state/sqlite_store.py`) keeps all of it in a file
in `state_dir`, so that it survives a crash and restart. Deliberately not in it, because it cannot
outlive the process: held upstream streams (the `tasks/result` and GET listeners that *capture*
requests — re-opened on the next poll — and MRTR exchanges waiting on an open upstream response)
and a session's pending server→client requests and GET-stream replay buffer.

Keys of task state are `TaskRef`s (backend, upstream session, upstream task id). Every entry is
bounded in time (`keep_s`, seconds: the task's ttl, `max_task_state_ms` or `session_idle_ms`) and
in count.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from cachetools import TLRUCache

from translators import jsonrpc
from translators.inputs import input_key
from translators.model import CanonicalTask, InputRequest, TaskError
from translators.sealing import TaskRef

from .held_tasks import HeldTaskStore, MemoryHeldStore


@dataclass(frozen=True, slots=True)
class CapturedInput:
    """A request for input held by the proxy: the key shown to clients (`inputRequests`), the
    backend's JSON-RPC request id to answer, and what it asks."""

    key: str
    upstream_id: jsonrpc.RequestId
    request: InputRequest


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A proxy session as kept across restarts: its sealed id, principal, face ("v1" or
    "v2-session"), the backend its rules are for, the client's `initialize` params and the
    negotiated protocol version."""

    session_id: str
    principal: str
    face: str
    backend: str
    params: dict[str, Any]
    protocol_version: str


@dataclass
class Entry:
    """One task as the v1 face knows it (`registry.py`).

    `order` sorts listings; `owner` is the principal, or "anonymous:<session id>";
    `last`: the last hub task seen (for listings and change notifications); `cancelled`: sticky;
    `failure`: an error that ended the task through the proxy (a client error answer);
    `asked`: input keys put to the client and answered upstream; `asking`: keys being put to the
    client right now (never kept across a restart: that client's stream is gone, so they are asked
    again); `held_expires_at`: wall-clock deadline (seconds since the epoch) of a held task;
    `saved_at`: when the entry was last written to the store (wall clock, seconds).
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
    asking: set[str] = field(default_factory=set)
    saved_at: float = 0.0


class TaskStateStore(Protocol):
    """Shared task state (see the module docstring). Every method but `outcome_count` is a
    coroutine: the memory and SQLite stores answer without suspending, the Redis store
    (`proxy/state/redis_store.py`) makes one round trip (docs/decisions.md, "A shared store").

    `shared` is True for a store several processes use at once (Redis): what a process holds of
    the state in its own memory may then be stale, and is read from the store again."""

    shared: bool

    async def outcome(self, ref: TaskRef) -> CanonicalTask | None:
        """The terminal task remembered for `ref`, or None."""

    async def keep_outcome(self, ref: TaskRef, task: CanonicalTask, keep_s: float) -> None:
        """Remember a terminal task for `keep_s` seconds."""

    async def forget_outcome(self, ref: TaskRef) -> None:
        """Drop the remembered outcome (e.g. after a cancel)."""

    async def capture_input(self, ref: TaskRef, upstream_id: jsonrpc.RequestId, request: InputRequest, keep_s: float) -> str | None:
        """Hold a request for input under a fresh key (keys are never reused within a task: `input-1`,
        `input-2`, …, also after the store had to forget the task); None when a request with this
        `upstream_id` was held before."""

    async def inputs(self, ref: TaskRef) -> dict[str, CapturedInput]:
        """The outstanding requests of a task by key, in the order they arrived."""

    async def claim_input(self, ref: TaskRef, key: str) -> CapturedInput | None:
        """Take the right to answer `key` (atomically: of two concurrent claims, on any replica,
        one wins): the request, or None when it is not outstanding or already claimed. End the
        claim with `answered` (delivered) or `release_input` (the backend did not take it)."""

    async def release_input(self, ref: TaskRef, key: str) -> None:
        """Give up a claim (the answer did not reach the backend): `key` may be answered again."""

    async def answered(self, ref: TaskRef, key: str) -> None:
        """The backend took the answer to `key`: it is no longer outstanding."""

    async def drop_inputs(self, ref: TaskRef) -> None:
        """The task ended: forget its requests."""

    def outcome_count(self, backend: str) -> int:
        """Terminal outcomes of `backend`'s tasks remembered now (for `mcp_tasks_proxy_live_tasks`)."""

    # -- the proxy's own sessions (faces/session.py) ------------------------------------------------

    async def keep_session(self, record: SessionRecord, keep_s: float) -> None:
        """Remember a session for `keep_s` seconds (again: its idle time starts anew)."""

    async def session(self, session_id: str) -> SessionRecord | None:
        """The session remembered under `session_id`, or None (unknown, expired, ended)."""

    async def forget_session(self, session_id: str) -> None:
        """The session ended (DELETE, or evicted)."""

    # -- the v1 face's task registry (registry.py) -----------------------------------------------

    async def keep_entry(self, backend: str, entry: Entry, keep_s: float) -> None:
        """Remember (or update) a registry entry of `backend` for `keep_s` seconds; `asking` and
        `saved_at` are not kept."""

    async def entry(self, backend: str, task_id: str) -> Entry | None:
        """The entry of `backend` under the client-facing `task_id`, or None."""

    async def entries_of(self, backend: str, owner: str) -> list[Entry]:
        """`owner`'s live entries of `backend`, in creation order."""

    async def forget_entry(self, backend: str, task_id: str) -> None:
        """Drop an entry (its task is unknown upstream, or it expired)."""

    async def next_order(self, backend: str) -> int:
        """A new `Entry.order` for `backend`, higher than every one handed out before (by any
        process sharing the store, and before a restart): new entries sort after the others."""

    def held_tasks(self) -> HeldTaskStore:
        """The held tasks' records in this store (`proxy/state/held_tasks.py`), the same object each time."""

    async def close(self) -> None:
        """Release what the store holds open (its file)."""


@dataclass
class _Inputs:
    keep_s: float
    first: int = 1
    outstanding: dict[str, CapturedInput] = field(default_factory=dict)
    seen: set[jsonrpc.RequestId] = field(default_factory=set)
    claimed: set[str] = field(default_factory=set)
    numbers: itertools.count = field(init=False)

    def __post_init__(self) -> None:
        self.numbers = itertools.count(self.first)


class _Forgetful(TLRUCache):
    """A TLRU cache that notes when it let an entry go before its owner dropped it (bounds, age)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.forgot = False

    def expire(self, time: float | None = None) -> list[tuple[Any, Any]]:  # type: ignore[override]
        expired = super().expire(time)
        self.forgot = self.forgot or bool(expired)
        return expired

    def popitem(self) -> tuple[Any, Any]:
        self.forgot = True
        return super().popitem()


class MemoryTaskStore:
    """`TaskStateStore` in this process: two TLRU caches of at most `max_tasks` entries each."""

    shared = False

    def __init__(self, *, max_tasks: int):
        self._orders: dict[str, int] = {}
        self._held: MemoryHeldStore | None = None
        self._outcomes: TLRUCache[TaskRef, tuple[CanonicalTask, float]] = TLRUCache(
            maxsize=max_tasks, ttu=lambda _ref, entry, now: now + entry[1], timer=time.monotonic)
        self._inputs: _Forgetful = _Forgetful(maxsize=max_tasks, ttu=lambda _ref, entry, now: now + entry.keep_s, timer=time.monotonic)
        self._highest = 0
        """The highest key number handed out: once an entry was let go while its task may live on,
        new entries number after it, so a task whose entry was forgotten never gets a key again."""

    async def outcome(self, ref: TaskRef) -> CanonicalTask | None:
        entry = self._outcomes.get(ref)
        return entry[0] if entry is not None else None

    async def keep_outcome(self, ref: TaskRef, task: CanonicalTask, keep_s: float) -> None:
        self._outcomes[ref] = (task, keep_s)

    async def forget_outcome(self, ref: TaskRef) -> None:
        self._outcomes.pop(ref, None)

    async def capture_input(self, ref: TaskRef, upstream_id: jsonrpc.RequestId, request: InputRequest, keep_s: float) -> str | None:
        entry = self._inputs.get(ref)
        if entry is None:
            entry = self._inputs[ref] = _Inputs(keep_s, self._highest + 1 if self._inputs.forgot else 1)
        if upstream_id in entry.seen:
            return None
        entry.seen.add(upstream_id)
        number = next(entry.numbers)
        self._highest = max(self._highest, number)
        key = input_key("input-", number)
        entry.outstanding[key] = CapturedInput(key, upstream_id, request)
        return key

    async def inputs(self, ref: TaskRef) -> dict[str, CapturedInput]:
        entry = self._inputs.get(ref)
        return dict(entry.outstanding) if entry is not None else {}

    async def claim_input(self, ref: TaskRef, key: str) -> CapturedInput | None:
        entry = self._inputs.get(ref)
        if entry is None or key not in entry.outstanding or key in entry.claimed:
            return None
        entry.claimed.add(key)
        return entry.outstanding[key]

    async def release_input(self, ref: TaskRef, key: str) -> None:
        entry = self._inputs.get(ref)
        if entry is not None:
            entry.claimed.discard(key)

    async def answered(self, ref: TaskRef, key: str) -> None:
        entry = self._inputs.get(ref)
        if entry is not None:
            entry.outstanding.pop(key, None)
            entry.claimed.discard(key)

    async def drop_inputs(self, ref: TaskRef) -> None:
        self._inputs.pop(ref, None)

    def outcome_count(self, backend: str) -> int:
        self._outcomes.expire()
        return sum(1 for ref in self._outcomes if ref.backend == backend)

    # Sessions and registry entries live in the faces' own objects while the process runs; this
    # store keeps no second copy of them (nothing of them survives the process, as before).

    async def keep_session(self, record: SessionRecord, keep_s: float) -> None:
        pass

    async def session(self, session_id: str) -> SessionRecord | None:
        return None

    async def forget_session(self, session_id: str) -> None:
        pass

    async def keep_entry(self, backend: str, entry: Entry, keep_s: float) -> None:
        pass

    async def entry(self, backend: str, task_id: str) -> Entry | None:
        return None

    async def entries_of(self, backend: str, owner: str) -> list[Entry]:
        return []

    async def forget_entry(self, backend: str, task_id: str) -> None:
        pass

    async def next_order(self, backend: str) -> int:
        self._orders[backend] = order = self._orders.get(backend, 0) + 1
        return order

    def held_tasks(self) -> HeldTaskStore:
        if self._held is None:
            self._held = MemoryHeldStore()
        return self._held

    async def close(self) -> None:
        pass
