"""What the status page shows (docs/configuration.md "Status page"), recorded in process and bounded.

Per answered request one call of `StatusRecorder.request`: a count in the current minute's bucket
under (backend, client dialect, backend dialect, error or not), and a row per client
(`clientInfo` name and version, with its dialect); a failure also in the minute's failure bucket
under (backend, client dialect, backend dialect, reason, by) and in its client's row by reason
(`translators.failures`: a closed set of reasons, so the keys stay bounded); the repairs the proxy
made for the request (`translators.failures.REPAIRS`) in its client's row. Per upstream request one latency sample
(`upstream`). Nothing else is parsed: the client of a request is what the entry already read (a
modern request's `_meta` clientInfo, a proxy session's `initialize`), or what a relayed session's
`initialize` said, remembered by its session id (`remember_session`).

Bounds: `MINUTES` buckets of one minute (the last day), `MAX_CLIENTS` client rows (least recently
seen goes first), `MAX_SESSIONS` relayed sessions remembered, `LATENCY_SAMPLES` latencies per
backend, `RECENT_ERRORS` refusals and upstream errors (code, reason and the proxy's own message
only: never a header value, a payload or an argument). Failure buckets have the minutes of the
request buckets; a client row's failures and repairs are keyed by closed sets of codes.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

from translators.failures import PROXY, Failure, of_error, of_status

MINUTES = 1440
"""Minute buckets kept: one day."""
MAX_CLIENTS = 1000
MAX_SESSIONS = 10_000
MAX_BACKENDS_PER_CLIENT = 32
LATENCY_SAMPLES = 512
RECENT_ERRORS = 50
REASON_CHARS = 200
DIALECTS = ("v1", "v2-session", "v2-modern")
UNCLASSIFIED = "unclassified"
"""The client dialect of a POST that is neither a modern request nor a session's (no JSON-RPC, no
2026-07-28 envelope, no session): counted in a row of its own, never under a dialect."""
CANCELLED = "cancelled"
"""The outcome of a request whose client left before its answer's end (not an error)."""

ClientKey = tuple[str, str]
"""A client as it names itself: (`clientInfo.name`, `clientInfo.version`); ("unknown", "") without one."""
UNKNOWN_CLIENT: ClientKey = ("unknown", "")


def client_key(info: Any) -> ClientKey:
    """The `ClientKey` of a `clientInfo` object (anything else: `UNKNOWN_CLIENT`). Names and
    versions are cut to 64 characters."""
    if not isinstance(info, dict):
        return UNKNOWN_CLIENT
    name, version = info.get("name"), info.get("version")
    if not isinstance(name, str) or not name:
        return UNKNOWN_CLIENT
    return name[:64], version[:64] if isinstance(version, str) else ""


FailureKey = tuple[str, str, str, str, str]
"""(backend, client dialect, backend dialect, reason, by) of a failure bucket."""


class ClientRow:
    """One client (name, version, dialect): requests, first and last seen (Unix ms), backends used;
    its failures by reason; the repairs the proxy made for it by repair code, how many of its
    requests needed one (`leaning`) and when one last did (Unix ms, 0: never)."""

    __slots__ = ("requests", "first_seen_ms", "last_seen_ms", "backends", "failures", "repairs", "leaning", "leaning_ms")

    def __init__(self, now_ms: int):
        self.requests = 0
        self.first_seen_ms = now_ms
        self.last_seen_ms = now_ms
        self.backends: set[str] = set()
        self.failures: dict[str, int] = {}
        self.repairs: dict[str, int] = {}
        self.leaning = 0
        self.leaning_ms = 0


def default_failure(outcome: str, reason: str | None, method: str | None = None) -> Failure:
    """The failure of an outcome recorded without one: a relayed status (`http_<status>`), or a
    code with the proxy's own message (`reason`; None: the backend's answer) of a `method`."""
    if outcome.startswith("http_") and outcome[5:].isdigit():
        return of_status(int(outcome[5:]), session_wire=False)
    code = int(outcome) if outcome.lstrip("-").isdigit() else 0
    return of_error(code, reason or "", None, by_backend=reason is None, method=method)


class StatusRecorder:
    """The status page's data. `clock`: Unix seconds (a test may replace it)."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.started_ms = int(clock() * 1000)
        self._minute = -1
        self._bucket: dict[tuple[str, str, str, bool], int] = {}
        self._minutes: collections.deque[tuple[int, dict[tuple[str, str, str, bool], int]]] = collections.deque(maxlen=MINUTES)
        self._failed: dict[FailureKey, int] = {}
        self._failure_minutes: collections.deque[tuple[int, dict[FailureKey, int]]] = collections.deque(maxlen=MINUTES)
        self._clients: collections.OrderedDict[tuple[str, str, str], ClientRow] = collections.OrderedDict()
        self._sessions: collections.OrderedDict[str, ClientKey] = collections.OrderedDict()
        self._latency: dict[str, collections.deque[float]] = {}
        self.errors: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT_ERRORS)

    # -- recording (the hot path: no parsing, a few dict operations) -------------------------------

    def request(self, backend: str, client_dialect: str, backend_dialect: str, outcome: str,
                client: ClientKey = UNKNOWN_CLIENT, method: str | None = None, reason: str | None = None, *,
                failure: Failure | None = None, repairs: tuple[str, ...] = ()) -> None:
        """One answered request: `outcome` "ok", a JSON-RPC code ("-32602") or "http_<status>".
        A request that is not "ok" also enters the recent errors with `method`, `reason` (its
        message: the proxy's own, already free of header values, or the backend's as the proxy
        read it; None: not read) and `failure` (reason code and by whom, `translators.failures`;
        None: worked out from `outcome` by `default_failure`). `repairs`: what the proxy made good
        for this request (`translators.failures.REPAIRS`), counted in its client's row."""
        now = self.clock()
        minute = int(now // 60)
        if minute != self._minute:
            self._bucket = {}
            self._minutes.append((minute, self._bucket))
            self._failed = {}
            self._failure_minutes.append((minute, self._failed))
            self._minute = minute
        failed = outcome != "ok" and outcome != CANCELLED
        key = (backend, client_dialect, backend_dialect, failed)
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
            row.leaning += 1
            row.leaning_ms = now_ms
            for repair in repairs:
                row.repairs[repair] = row.repairs.get(repair, 0) + 1
        if failed:
            cause, by = failure if failure is not None else default_failure(outcome, reason, method)
            failure_key = (backend, client_dialect, backend_dialect, cause, by)
            self._failed[failure_key] = self._failed.get(failure_key, 0) + 1
            row.failures[cause] = row.failures.get(cause, 0) + 1
            self.errors.append({"at_ms": now_ms, "backend": backend, "client_dialect": client_dialect, "backend_dialect": backend_dialect,
                                "client": client[0], "client_version": client[1], "method": method, "code": outcome,
                                "reason": cause, "by": by, "detail": reason[:REASON_CHARS] if reason else None})

    def upstream(self, backend: str, seconds: float) -> None:
        """One upstream request's latency."""
        samples = self._latency.get(backend)
        if samples is None:
            samples = self._latency[backend] = collections.deque(maxlen=LATENCY_SAMPLES)
        samples.append(seconds)

    def remember_session(self, session_id: str, *, client: ClientKey) -> None:
        """A relayed session's client, from its `initialize`, by the session id its client was given."""
        sessions = self._sessions
        sessions[session_id] = client
        if len(sessions) > MAX_SESSIONS:
            sessions.popitem(last=False)

    def session_client(self, session_id: str | None) -> ClientKey:
        """The client of a relayed session (`UNKNOWN_CLIENT` when its `initialize` was not seen)."""
        if session_id is None:
            return UNKNOWN_CLIENT
        return self._sessions.get(session_id, UNKNOWN_CLIENT)

    # -- reading -------------------------------------------------------------------------------------

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _since(self, minutes: int) -> list[dict[tuple[str, str, str, bool], int]]:
        first = int(self.clock() // 60) - minutes + 1
        return [bucket for minute, bucket in self._minutes if minute >= first]

    def matrix(self, minutes: int, *, by_backend: bool = False) -> list[dict[str, Any]]:
        """Requests of the last `minutes` per (client dialect, backend dialect): rows
        `{client_dialect, backend_dialect, mode, requests, errors}`, in dialect order, only pairs
        that were used; `mode` is "relayed", "translated", or "refused" (an unclassified request).
        `by_backend`: per (backend, client dialect, backend dialect) instead, each row with
        `backend` first, backends in the order they were first counted."""
        totals: dict[tuple[str, str, str], list[int]] = {}
        for bucket in self._since(minutes):
            for (backend, client, dialect, failed), count in bucket.items():
                cell = totals.setdefault((backend if by_backend else "", client, dialect), [0, 0])
                cell[0] += count
                cell[1] += count if failed else 0
        order = {d: i for i, d in enumerate((*DIALECTS, UNCLASSIFIED, "unknown"))}
        first_seen = {name: i for i, name in enumerate(dict.fromkeys(k[0] for k in totals))}
        rows = []
        for (backend, c, b), (n, e) in sorted(totals.items(),
                                              key=lambda kv: (first_seen[kv[0][0]], order.get(kv[0][1], 9), order.get(kv[0][2], 9))):
            mode = "refused" if c == UNCLASSIFIED else ("relayed" if c == b else "translated")
            row = {"client_dialect": c, "backend_dialect": b, "mode": mode, "requests": n, "errors": e}
            rows.append({"backend": backend, **row} if by_backend else row)
        return rows

    def failures(self, minutes: int) -> list[dict[str, Any]]:
        """Failures of the last `minutes` per (backend, client dialect, backend dialect, reason,
        by): rows `{backend, client_dialect, backend_dialect, mode, reason, by, count}` (`mode` as
        in `matrix`), most first, then in key order."""
        first = int(self.clock() // 60) - minutes + 1
        totals: dict[FailureKey, int] = {}
        for minute, bucket in self._failure_minutes:
            if minute >= first:
                for key, count in bucket.items():
                    totals[key] = totals.get(key, 0) + count
        rows = []
        for (backend, c, b, cause, by), n in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])):
            mode = "refused" if c == UNCLASSIFIED else ("relayed" if c == b else "translated")
            rows.append({"backend": backend, "client_dialect": c, "backend_dialect": b, "mode": mode, "reason": cause, "by": by, "count": n})
        return rows

    def backend_failures(self, backend: str, minutes: int) -> tuple[int, int]:
        """(the backend's errors, the proxy's refusals) among the failures of `backend`'s requests
        in the last `minutes` (`translators.failures`: by "backend", by "proxy")."""
        first = int(self.clock() // 60) - minutes + 1
        errors = refusals = 0
        for minute, bucket in self._failure_minutes:
            if minute >= first:
                for (name, _c, _b, _cause, by), count in bucket.items():
                    if name == backend:
                        if by == PROXY:
                            refusals += count
                        else:
                            errors += count
        return errors, refusals

    def backend_counts(self, backend: str, minutes: int) -> tuple[int, int]:
        """(requests, errors) answered by `backend` in the last `minutes`."""
        requests = errors = 0
        for bucket in self._since(minutes):
            for (name, _client, _dialect, failed), count in bucket.items():
                if name == backend:
                    requests += count
                    errors += count if failed else 0
        return requests, errors

    def timeline(self, minutes: int = 60) -> dict[str, Any]:
        """Requests per minute of the last `minutes`, per client dialect (oldest first):
        `{"start_ms": <first minute, Unix ms>, "minutes": n, "<dialect>": [counts]}`."""
        last = int(self.clock() // 60)
        first = last - minutes + 1
        series = {d: [0] * minutes for d in DIALECTS}
        for minute, bucket in self._minutes:
            if minute < first:
                continue
            for (_backend, client, _dialect, _failed), count in bucket.items():
                if client in series:
                    series[client][minute - first] += count
        return {"start_ms": first * 60_000, "minutes": minutes, **series}

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
        """Every client row, most recently seen first: `{dialect, name, version, requests,
        first_seen_ms, last_seen_ms, backends (sorted), errors, failures ({reason: count}, reasons
        sorted), leaning (requests that needed a repair), repairs ({repair: count}, sorted)}`."""
        return [{"dialect": dialect, "name": name, "version": version, "requests": row.requests,
                 "first_seen_ms": row.first_seen_ms, "last_seen_ms": row.last_seen_ms, "backends": sorted(row.backends),
                 "errors": sum(row.failures.values()), "failures": dict(sorted(row.failures.items())),
                 "leaning": row.leaning, "repairs": dict(sorted(row.repairs.items()))}
                for (dialect, name, version), row in reversed(self._clients.items())]

    def leaning(self) -> list[dict[str, Any]]:
        """The clients the proxy made repairs for, most requests repaired first: `{dialect, name,
        version, requests, leaning, repairs, last_leaning_ms}`."""
        rows = [{"dialect": dialect, "name": name, "version": version, "requests": row.requests, "leaning": row.leaning,
                 "repairs": dict(sorted(row.repairs.items())), "last_leaning_ms": row.leaning_ms}
                for (dialect, name, version), row in self._clients.items() if row.leaning]
        return sorted(rows, key=lambda r: -r["leaning"])

    def last_v1_ms(self) -> int | None:
        """When a v1 client was last answered (Unix ms), None if never since the start."""
        seen = [row.last_seen_ms for (dialect, _n, _v), row in self._clients.items() if dialect == "v1"]
        return max(seen) if seen else None


class NoRecorder(StatusRecorder):
    """Records nothing (components no application wired up)."""

    def request(self, backend: str, client_dialect: str, backend_dialect: str, outcome: str,
                client: ClientKey = UNKNOWN_CLIENT, method: str | None = None, reason: str | None = None, *,
                failure: Failure | None = None, repairs: tuple[str, ...] = ()) -> None:
        pass

    def upstream(self, backend: str, seconds: float) -> None:
        pass

    def remember_session(self, session_id: str, *, client: ClientKey) -> None:
        pass
