"""The task state replicas would have to share, behind one small interface (issue 5 item 5).

Two proxy replicas with one sealing key already serve each other's task ids for status, results and
cancel: everything those need is in the sealed id or asked of the backend again. What one replica
alone knows about a task of a v1 backend is:

* the **terminal outcome** it folded (re-fetchable from the backend, so sharing it saves round trips);
* the **requests for input it captured** from the backend (the backend sends each once, to the
  replica holding the stream): key, the backend's JSON-RPC request id and the request. Anyone who
  has them can answer: the answer is a JSON-RPC response POSTed on the task's upstream session,
  which the sealed id names. This is what `tasks/update` on another replica needs.

`TaskStateStore` is that state; `V1Follower` and `TaskInputs` are its only users, so a shared
implementation (e.g. over Redis) is a new class passed to `BackendHandle(store=...)`, without
touching the faces. Deliberately not in it, because it cannot leave the process: held upstream
streams (the `tasks/result` and GET listeners that *capture* requests, MRTR exchanges waiting on
an open upstream response — a retry must reach the replica holding it) and the proxy's own sessions
for v1 clients (their clients stay on one replica, TRANSLATION.md §6).

Keys are `TaskRef`s (backend, upstream session, upstream task id). Every entry is bounded in time
(`keep_s`, the task's ttl or `max_task_state_ms`) and the memory store also in count (least
recently used first), per TRANSLATION.md §6 "Bounded state".
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from cachetools import TLRUCache

from translators import jsonrpc
from translators.inputs import input_key
from translators.model import CanonicalTask, InputRequest
from translators.sealing import TaskRef


@dataclass(frozen=True, slots=True)
class CapturedInput:
    """A request for input held by the proxy: the key shown to clients (`inputRequests`), the
    backend's JSON-RPC request id to answer, and what it asks."""

    key: str
    upstream_id: jsonrpc.RequestId
    request: InputRequest


class TaskStateStore(Protocol):
    """Shared task state (see the module docstring). Implementations must be safe to call from one
    event loop without awaiting (the memory store) — a networked store would make these async in
    its own adapter and cache locally."""

    def outcome(self, ref: TaskRef) -> CanonicalTask | None:
        """The terminal task remembered for `ref`, or None."""

    def keep_outcome(self, ref: TaskRef, task: CanonicalTask, keep_s: float) -> None:
        """Remember a terminal task for `keep_s` seconds."""

    def forget_outcome(self, ref: TaskRef) -> None:
        """Drop the remembered outcome (e.g. after a cancel)."""

    def capture_input(self, ref: TaskRef, upstream_id: jsonrpc.RequestId, request: InputRequest, keep_s: float) -> str | None:
        """Hold a request for input under a fresh key (keys are never reused within a task: `input-1`,
        `input-2`, …, also after the store had to forget the task); None when a request with this
        `upstream_id` was held before."""

    def inputs(self, ref: TaskRef) -> dict[str, CapturedInput]:
        """The outstanding requests of a task by key, in the order they arrived."""

    def claim_input(self, ref: TaskRef, key: str) -> CapturedInput | None:
        """Take the right to answer `key` (atomically: of two concurrent claims, on any replica,
        one wins): the request, or None when it is not outstanding or already claimed. End the
        claim with `answered` (delivered) or `release_input` (the backend did not take it)."""

    def release_input(self, ref: TaskRef, key: str) -> None:
        """Give up a claim (the answer did not reach the backend): `key` may be answered again."""

    def answered(self, ref: TaskRef, key: str) -> None:
        """The backend took the answer to `key`: it is no longer outstanding."""

    def drop_inputs(self, ref: TaskRef) -> None:
        """The task ended: forget its requests."""

    def outcome_count(self, backend: str) -> int:
        """Terminal outcomes of `backend`'s tasks remembered now (for `mcp_tasks_proxy_live_tasks`)."""


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

    def __init__(self, *, max_tasks: int):
        self._outcomes: TLRUCache[TaskRef, tuple[CanonicalTask, float]] = TLRUCache(
            maxsize=max_tasks, ttu=lambda _ref, entry, now: now + entry[1], timer=time.monotonic)
        self._inputs: _Forgetful = _Forgetful(maxsize=max_tasks, ttu=lambda _ref, entry, now: now + entry.keep_s, timer=time.monotonic)
        self._highest = 0
        """The highest key number handed out: once an entry was let go while its task may live on,
        new entries number after it, so a task whose entry was forgotten never gets a key again."""

    def outcome(self, ref: TaskRef) -> CanonicalTask | None:
        entry = self._outcomes.get(ref)
        return entry[0] if entry is not None else None

    def keep_outcome(self, ref: TaskRef, task: CanonicalTask, keep_s: float) -> None:
        self._outcomes[ref] = (task, keep_s)

    def forget_outcome(self, ref: TaskRef) -> None:
        self._outcomes.pop(ref, None)

    def capture_input(self, ref: TaskRef, upstream_id: jsonrpc.RequestId, request: InputRequest, keep_s: float) -> str | None:
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

    def inputs(self, ref: TaskRef) -> dict[str, CapturedInput]:
        entry = self._inputs.get(ref)
        return dict(entry.outstanding) if entry is not None else {}

    def claim_input(self, ref: TaskRef, key: str) -> CapturedInput | None:
        entry = self._inputs.get(ref)
        if entry is None or key not in entry.outstanding or key in entry.claimed:
            return None
        entry.claimed.add(key)
        return entry.outstanding[key]

    def release_input(self, ref: TaskRef, key: str) -> None:
        entry = self._inputs.get(ref)
        if entry is not None:
            entry.claimed.discard(key)

    def answered(self, ref: TaskRef, key: str) -> None:
        entry = self._inputs.get(ref)
        if entry is not None:
            entry.outstanding.pop(key, None)
            entry.claimed.discard(key)

    def drop_inputs(self, ref: TaskRef) -> None:
        self._inputs.pop(ref, None)

    def outcome_count(self, backend: str) -> int:
        self._outcomes.expire()
        return sum(1 for ref in self._outcomes if ref.backend == backend)
