"""What the status page shows (docs/operations.md "Status page"), recorded in process and bounded.

Per answered request one call of `StatusRecorder.request`: a count in the current minute's bucket
under (backend, client dialect, backend dialect, error or not), and a row per client
(`clientInfo` name and version, with its dialect); a failure also under `FAILURES` (backend,
client dialect, backend dialect, reason, by) and `CLIENT_FAILURES` (its client, reason)
(`translators.failures`: a closed set of reasons, so the keys stay bounded); the repairs the proxy
made for the request (`translators.failures.REPAIRS`) under `REPAIRS` and `LEANING` (its client):
every one a count key of figures.py, kept and summed like the requests. Per upstream request one latency sample
(`upstream`). Nothing else is parsed: the client of a request is what the entry already read (a
modern request's `_meta` clientInfo, a proxy session's `initialize`), or what a relayed session's
`initialize` said, remembered by its session id (`remember_session`).

What is recorded here is also handed, as deltas, to the store every second or so
(`take`, called by `proxy/observe/lasting.py`), so that the figures outlive the process and add up
over workers and replicas; the questions the page asks are answered by `proxy/observe/figures.py`.
A new kind of count is one `count((kind, ...))` call: it is kept, flushed and summed like the rest.

Bounds: `MINUTES` buckets of one minute (the last day), `MAX_CLIENTS` client rows (least recently
seen goes first), `MAX_SESSIONS` relayed sessions remembered, `LATENCY_SAMPLES` latencies per
backend, `RECENT_ERRORS` refusals and upstream errors (code, reason and the proxy's own message
only: never a header value, a payload or an argument). A client's failures and repairs are keyed
by closed sets of codes.
"""

from __future__ import annotations

import bisect
import collections
import time
from collections.abc import Callable
from typing import Any

from translators.failures import Failure, of_error, of_status

from ..faces.call import CANCELLED, UNKNOWN_CLIENT, ClientKey, client_key
from .figures import (
    CLIENT_FAILURES,
    DIALECTS,
    FAILURES,
    LATENCY_BOUNDS_S,
    LEANING,
    OTHER_TOOL,
    REPAIRS,
    REQUESTS,
    TOOL_MS,
    TOOLS,
    UNCLASSIFIED,
    Batch,
    Bucket,
    ClientRow,
    CountKey,
    Figures,
)

MINUTES = 1440
"""Minute buckets kept: one day."""
MAX_CLIENTS = 1000
MAX_SESSIONS = 10_000
MAX_BACKENDS_PER_CLIENT = 32
LATENCY_SAMPLES = 512
RECENT_ERRORS = 50
REASON_CHARS = 200
MAX_PENDING_TOOLS = 4096
"""Tool calls kept before they are counted (`StatusRecorder.tool`)."""
__all__ = ["CANCELLED", "DIALECTS", "UNCLASSIFIED", "UNKNOWN_CLIENT", "ClientKey", "ClientRow", "NoRecorder", "StatusRecorder",
           "client_key"]
# `UNCLASSIFIED`, `CANCELLED` and the client's key are the call's vocabulary (`proxy/faces/call.py`).


def default_failure(outcome: str, reason: str | None, method: str | None = None) -> Failure:
    """The failure of an outcome recorded without one: a relayed status (`http_<status>`), or a
    code with the proxy's own message (`reason`; None: the backend's answer) of a `method`."""
    if outcome.startswith("http_") and outcome[5:].isdigit():
        return of_status(int(outcome[5:]), session_wire=False)
    code = int(outcome) if outcome.lstrip("-").isdigit() else 0
    return of_error(code, reason or "", None, by_backend=reason is None, method=method)


class StatusRecorder:
    """The status page's data as this process counted it. `clock`: Unix seconds (a test may replace it)."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.started_ms = int(clock() * 1000)
        self._minute = -1
        self._bucket: Bucket = {}
        self._minutes: collections.deque[tuple[int, Bucket]] = collections.deque(maxlen=MINUTES)
        self._clients: collections.OrderedDict[tuple[str, str, str], ClientRow] = collections.OrderedDict()
        self._sessions: collections.OrderedDict[str, ClientKey] = collections.OrderedDict()
        self._latency: dict[str, collections.deque[float]] = {}
        self.errors: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT_ERRORS)
        self._tool_calls: list[tuple[Any, str | None, str, str, int]] = []
        self.tool_totals: dict[tuple[str, str, str], int] = {}
        # What `take` has handed to the store: the minute it last looked at and its counts then,
        # when it looked (ms), how many errors had been recorded, and sessions not handed yet.
        self._taken_minute = -1
        self._taken: Bucket = {}
        self._taken_ms = 0
        self._error_count = 0
        self._taken_errors = 0
        self._new_sessions: dict[str, ClientKey] = {}
        self.renew_sessions = False
        """Note the relayed sessions used (`take_used`): set for a shared store, whose bindings expire unused."""
        self._used_sessions: set[str] = set()

    # -- recording (the hot path: no parsing, a few dict operations) -------------------------------

    def _now_bucket(self) -> Bucket:
        """This minute's bucket (a new one when the minute turned)."""
        minute = int(self.clock() // 60)
        if minute != self._minute:
            self._turn(minute)
        return self._bucket

    def _turn(self, minute: int) -> None:
        """A new minute: the tool calls of the last one counted in its bucket, then a new bucket."""
        if self._tool_calls:
            self._tally()
        self._bucket = {}
        self._minutes.append((minute, self._bucket))
        self._minute = minute

    def count(self, key: CountKey) -> None:
        """One more of `key` (its first item the kind of count, figures.py) in this minute."""
        bucket = self._now_bucket()
        bucket[key] = bucket.get(key, 0) + 1

    def tool(self, backend: Any, name: str | None, client_dialect: str, outcome: str, started: float | None) -> None:
        """One tool call that ended now as its client saw it (`proxy/observe/tools.py`): `backend`
        (a `proxy.upstream.backend.Backend`), the tool `name` the client gave (bounded when counted,
        by `backend.lists_tool`, else `OTHER_TOOL`), its `outcome` and when it `started`
        (`time.perf_counter`; None: no latency to count). Kept as a tuple, with its latency bucket
        (figures.py), on the request path, and counted (`_tally`: `tool_totals`, figures.py `TOOLS`
        and `TOOL_MS`) when the figures are next read or handed over, when the minute turns, or
        every `MAX_PENDING_TOOLS`: alike tuples are counted together."""
        calls = self._tool_calls
        calls.append((backend, name, client_dialect, outcome,
                      -1 if started is None else bisect.bisect_right(LATENCY_BOUNDS_S, time.perf_counter() - started)))
        if len(calls) >= MAX_PENDING_TOOLS:
            self._tally()

    def _tally(self) -> None:
        """Count the tool calls kept since the last tally, in this minute's bucket (they all ended in
        it: the minute's turn tallies first)."""
        calls, self._tool_calls = self._tool_calls, []
        if self._minute < 0:
            self._turn(int(self.clock() // 60))
        bucket = self._bucket
        totals = self.tool_totals
        for (backend, name, dialect, outcome, latency), n in collections.Counter(calls).items():
            tool = name if name is not None and backend.lists_tool(name) else OTHER_TOOL
            key: CountKey = (backend.name, tool, outcome)
            totals[key] = totals.get(key, 0) + n
            key = (TOOLS, backend.name, tool, dialect, outcome)
            bucket[key] = bucket.get(key, 0) + n
            if latency >= 0:
                key = (TOOL_MS, backend.name, tool, latency)
                bucket[key] = bucket.get(key, 0) + n

    def tools_counted(self) -> dict[tuple[str, str, str], int]:
        """Tool calls counted since the start, by (backend, tool, outcome): `mcp_tasks_proxy_tool_results_total`."""
        if self._tool_calls:
            self._tally()
        return self.tool_totals

    def request(self, backend: str, client_dialect: str, backend_dialect: str, outcome: str,
                client: ClientKey = UNKNOWN_CLIENT, method: str | None = None, reason: str | None = None, *,
                failure: Failure | None = None, repairs: tuple[str, ...] = ()) -> None:
        """One answered request: `outcome` "ok", a JSON-RPC code ("-32602") or "http_<status>".
        A request that is not "ok" also enters the recent errors with `method`, `reason` (its
        message: the proxy's own, already free of header values, or the backend's as the proxy
        read it; None: not read) and `failure` (reason code and by whom, `translators.failures`;
        None: worked out from `outcome` by `default_failure`). `repairs`: what the proxy made good
        for this request (`translators.failures.REPAIRS`), counted under its client (figures.py's
        `LEANING`, `REPAIRS`)."""
        now = self.clock()
        minute = int(now // 60)
        if minute != self._minute:
            self._turn(minute)
        failed = outcome != "ok" and outcome != CANCELLED
        key = (REQUESTS, backend, client_dialect, backend_dialect, failed)
        bucket = self._bucket
        bucket[key] = bucket.get(key, 0) + 1
        now_ms = int(now * 1000)
        row_key = (client_dialect, *client)
        clients = self._clients
        row = clients.get(row_key)
        if row is None:
            row = clients[row_key] = ClientRow(now_ms)
            if len(clients) > MAX_CLIENTS:
                clients.popitem(last=False)
        else:
            clients.move_to_end(row_key)
        row.requests += 1
        row.last_seen_ms = now_ms
        if len(row.backends) < MAX_BACKENDS_PER_CLIENT:
            row.backends.add(backend)
        if repairs:
            key = (LEANING, *row_key)
            bucket[key] = bucket.get(key, 0) + 1
            for repair in repairs:
                key = (REPAIRS, *row_key, repair)
                bucket[key] = bucket.get(key, 0) + 1
        if failed:
            cause, by = failure if failure is not None else default_failure(outcome, reason, method)
            key = (FAILURES, backend, client_dialect, backend_dialect, cause, by)
            bucket[key] = bucket.get(key, 0) + 1
            key = (CLIENT_FAILURES, *row_key, cause)
            bucket[key] = bucket.get(key, 0) + 1
            self.errors.append({"at_ms": now_ms, "backend": backend, "client_dialect": client_dialect, "backend_dialect": backend_dialect,
                                "client": client[0], "client_version": client[1], "method": method, "code": outcome,
                                "reason": cause, "by": by, "detail": reason[:REASON_CHARS] if reason else None})
            self._error_count += 1

    def upstream(self, backend: str, seconds: float) -> None:
        """One upstream request's latency."""
        samples = self._latency.get(backend)
        if samples is None:
            samples = self._latency[backend] = collections.deque(maxlen=LATENCY_SAMPLES)
        samples.append(seconds)

    def remember_session(self, session_id: str, *, client: ClientKey) -> None:
        """A relayed session's client, from its `initialize`, by the session id its client was given
        (also handed to the store with the next `take`: a restart, or another worker, still knows it)."""
        self.learn_session(session_id, client)
        if len(self._new_sessions) < MAX_SESSIONS:
            self._new_sessions[session_id] = client

    def learn_session(self, session_id: str, client: ClientKey) -> None:
        """Remember a relayed session's client that the store knew (`session_client` answers it from now on)."""
        sessions = self._sessions
        sessions[session_id] = client
        if len(sessions) > MAX_SESSIONS:
            sessions.popitem(last=False)

    def session_client(self, session_id: str | None) -> ClientKey:
        """The client of a relayed session (`UNKNOWN_CLIENT` when its `initialize` was not seen here)."""
        if session_id is None:
            return UNKNOWN_CLIENT
        if self.renew_sessions and len(self._used_sessions) < MAX_SESSIONS:
            self._used_sessions.add(session_id)
        return self._sessions.get(session_id, UNKNOWN_CLIENT)

    def take_used(self) -> dict[str, ClientKey]:
        """The relayed sessions used since the last call, with their clients (those known here)."""
        used, self._used_sessions = self._used_sessions, set()
        sessions = self._sessions
        return {sid: sessions[sid] for sid in used if sid in sessions}

    # -- handing over to the store (proxy/observe/lasting.py) --------------------------------------

    def take(self) -> Batch:
        """What was counted since the last `take` (at most `MINUTES` minutes back): counts, the
        client rows used (their new requests, first and last seen, backends), relayed sessions
        and errors. Only the minute buckets from the last take's minute on can have changed."""
        if self._tool_calls:
            self._tally()
        batch = Batch()
        now_ms = int(self.clock() * 1000)
        for minute, bucket in reversed(self._minutes):
            if minute < self._taken_minute:
                break
            before = self._taken if minute == self._taken_minute else {}
            for key, count in bucket.items():
                delta = count - before.get(key, 0)
                if delta:
                    batch.counts[(minute, key)] = delta
        if self._minutes:
            self._taken_minute, last = self._minutes[-1]
            self._taken = dict(last)
        for client, row in reversed(self._clients.items()):  # most recently used first
            if row.last_seen_ms < self._taken_ms:
                break
            if row.requests != row.flushed:
                batch.clients[client] = (row.requests - row.flushed, row.first_seen_ms, row.last_seen_ms, sorted(row.backends))
                row.flushed = row.requests
        self._taken_ms = now_ms
        fresh = min(self._error_count - self._taken_errors, len(self.errors))
        if fresh:
            batch.errors = list(self.errors)[-fresh:]
        self._taken_errors = self._error_count
        batch.sessions, self._new_sessions = self._new_sessions, {}
        return batch

    # -- reading -------------------------------------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def figures(self) -> Figures:
        """This process's own figures (read in place, not copied)."""
        if self._tool_calls:
            self._tally()
        return Figures(self._minutes, self._clients, self.errors, self.now_ms(), self.started_ms)

    def matrix(self, minutes: int, *, by_backend: bool = False) -> list[dict[str, Any]]:
        """`Figures.matrix` of this process."""
        return self.figures().matrix(minutes, by_backend=by_backend)

    def failures(self, minutes: int) -> list[dict[str, Any]]:
        """`Figures.failures` of this process."""
        return self.figures().failures(minutes)

    def backend_failures(self, backend: str, minutes: int) -> tuple[int, int]:
        """`Figures.backend_failures` of this process."""
        return self.figures().backend_failures(backend, minutes)

    def backend_counts(self, backend: str, minutes: int) -> tuple[int, int]:
        """(requests, errors) answered by `backend` in the last `minutes`."""
        return self.figures().backend_counts(backend, minutes)

    def timeline(self, minutes: int = 60) -> dict[str, Any]:
        """`Figures.timeline` of this process."""
        return self.figures().timeline(minutes)

    def latency_ms(self, backend: str) -> dict[str, Any]:
        """Percentiles (nearest rank, milliseconds) of the backend's last upstream latencies:
        `{"samples", "p50", "p90", "p99"}` (None without samples)."""
        samples = sorted(self._latency.get(backend, ()))
        if not samples:
            return {"samples": 0, "p50": None, "p90": None, "p99": None}

        def rank(q: float) -> float:
            return round(samples[min(len(samples) - 1, max(0, int(q * len(samples) + 0.999999) - 1))] * 1000, 3)

        return {"samples": len(samples), "p50": rank(0.5), "p90": rank(0.9), "p99": rank(0.99)}

    def clients(self) -> list[dict[str, Any]]:
        """`Figures.clients` of this process."""
        return self.figures().clients()

    def leaning(self) -> list[dict[str, Any]]:
        """`Figures.leaning` of this process."""
        return self.figures().leaning()

    def last_v1_ms(self) -> int | None:
        """When a v1 client was last answered (Unix ms), None if never since the start."""
        return self.figures().last_v1_ms()


class NoRecorder(StatusRecorder):
    """Records nothing (components no application wired up)."""

    def count(self, key: CountKey) -> None:
        pass

    def request(self, backend: str, client_dialect: str, backend_dialect: str, outcome: str,
                client: ClientKey = UNKNOWN_CLIENT, method: str | None = None, reason: str | None = None, *,
                failure: Failure | None = None, repairs: tuple[str, ...] = ()) -> None:
        pass

    def upstream(self, backend: str, seconds: float) -> None:
        pass

    def tool(self, backend: Any, name: str | None, client_dialect: str, outcome: str, started: float | None) -> None:
        pass

    def remember_session(self, session_id: str, *, client: ClientKey) -> None:
        pass
