"""The figures the status page's verdicts rest on, and the questions the page asks of them
(docs/operations.md "Status page"): counts by minute under generic keys, client rows, recent
errors. One `Figures` is either this process's own (`StatusRecorder.figures`, read in place) or the
sum of what every process sharing the store flushed (`proxy/observe/lasting.py`): the same questions
are answered the same way for both.

Count keys are tuples whose first item is the kind of count (`REQUESTS`: `("requests", backend,
client dialect, backend dialect, failed)`); a new kind of count needs only a new first item
(`totals`). Items are JSON scalars (str, int, bool, None), so a key survives the store as JSON.
Times are Unix ms, minutes Unix minutes (`ms // 60_000`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from translators.failures import PROXY

from ..faces.call import UNCLASSIFIED

DIALECTS = ("v1", "v2-session", "v2-modern")
REQUESTS = "requests"
"""The kind of the answered-requests count: key `(REQUESTS, backend, client_dialect, backend_dialect, failed)`."""
FAILURES = "failures"
"""Answers that were not ok: `(FAILURES, backend, client_dialect, backend_dialect, reason, by)`
(`translators.failures`: `reason` one of `REASONS`, `by` "proxy" or "backend")."""
CLIENT_FAILURES = "client_failures"
"""A client's failures: `(CLIENT_FAILURES, dialect, name, version, reason)`."""
REPAIRS = "repairs"
"""What the proxy made good for a client: `(REPAIRS, dialect, name, version, repair)` (`translators.failures.REPAIRS`)."""
LEANING = "leaning"
"""A client's requests that needed a repair: `(LEANING, dialect, name, version)`."""
TOOLS = "tools"
"""Tool calls as their clients saw them (`proxy/observe/tools.py`): `(TOOLS, backend, tool, client_dialect, outcome)`."""
OTHER_TOOL = "other"
"""The tool label of a name its backend does not list (or of a task whose creation this process did not see)."""
TOOL_MS = "tool_ms"
"""Their latencies: `(TOOL_MS, backend, tool, bucket)`, `bucket` of `latency_bucket`."""
BUCKET_BASE = 1.25
"""Latency buckets grow by this factor: bucket b holds [1.25^b, 1.25^(b+1)) ms (b = 0 below 1.25 ms)."""
MAX_BUCKET = 64
"""The last bucket (1.25^65 ms: about 6 hours) also holds anything longer."""
LATENCY_BOUNDS_MS = tuple(BUCKET_BASE ** (b + 1) for b in range(MAX_BUCKET))
"""Each bucket's upper bound (ms): a latency's bucket is the number of bounds at or below it."""
LATENCY_BOUNDS_S = tuple(bound / 1000 for bound in LATENCY_BOUNDS_MS)
DAY = 1440
"""Minutes in the per-client failures and repairs (the minutes kept)."""


def latency_bucket(ms: float) -> int:
    """The latency bucket of `ms` milliseconds (`BUCKET_BASE`; `StatusRecorder.tool` finds it
    from seconds, in `LATENCY_BOUNDS_S`)."""
    return bisect.bisect_right(LATENCY_BOUNDS_MS, ms)

CountKey = tuple[Any, ...]
Bucket = dict[CountKey, int]
ClientId = tuple[str, str, str]
"""A client row's key: (dialect, `clientInfo.name`, `clientInfo.version`)."""


class ClientRow:
    """One client (name, version, dialect): requests, first and last seen (Unix ms), backends used,
    and the replicas that saw it (rows read from the store; empty for this process's own)."""

    __slots__ = ("requests", "first_seen_ms", "last_seen_ms", "backends", "flushed", "replicas")

    def __init__(self, now_ms: int, requests: int = 0, last_seen_ms: int | None = None):
        self.requests = requests
        self.first_seen_ms = now_ms
        self.last_seen_ms = now_ms if last_seen_ms is None else last_seen_ms
        self.backends: set[str] = set()
        self.flushed = 0
        """Requests of this row already handed to the store (`StatusRecorder.take`)."""
        self.replicas: set[str] = set()

    def merge(self, other: ClientRow) -> None:
        """Add `other` (the same client seen by another replica) into this row."""
        self.requests += other.requests
        self.first_seen_ms = min(self.first_seen_ms, other.first_seen_ms)
        self.last_seen_ms = max(self.last_seen_ms, other.last_seen_ms)
        self.backends |= other.backends
        self.replicas |= other.replicas


class Figures:
    """Counts by minute (`minutes`: (minute, bucket) pairs, any order), client rows by `ClientId`,
    and the recent errors (oldest first), as of `now_ms`; counted since `since_ms`."""

    def __init__(self, minutes: Iterable[tuple[int, Bucket]], clients: Mapping[ClientId, ClientRow],
                 errors: Sequence[dict[str, Any]], now_ms: int, since_ms: int):
        self.minutes = minutes
        self.client_rows = clients
        self.errors = errors
        self.now_ms = now_ms
        self.since_ms = since_ms
        self.counters: dict[str, float] | None = None
        """With `--workers` > 1: this replica's `/metrics` counter samples added up over its workers,
        read with these figures (`Lasting.view`); None where each process counts alone."""

    def _since(self, minutes: int) -> Iterable[Bucket]:
        first = self.now_ms // 60_000 - minutes + 1
        return [bucket for minute, bucket in self.minutes if minute >= first]

    def totals(self, kind: str, minutes: int) -> dict[CountKey, int]:
        """Counts of `kind` in the last `minutes`, by the rest of their key."""
        out: dict[CountKey, int] = {}
        for bucket in self._since(minutes):
            for key, count in bucket.items():
                if key[0] == kind:
                    out[key[1:]] = out.get(key[1:], 0) + count
        return out

    def matrix(self, minutes: int, *, by_backend: bool = False) -> list[dict[str, Any]]:
        """Requests of the last `minutes` per (client dialect, backend dialect): rows
        `{client_dialect, backend_dialect, mode, requests, errors}`, in dialect order, only pairs
        that were used; `mode` is "relayed", "translated", or "refused" (an unclassified request).
        `by_backend`: per (backend, client dialect, backend dialect) instead, each row with
        `backend` first, backends in the order they were first counted."""
        totals: dict[tuple[str, str, str], list[int]] = {}
        for (backend, client, dialect, failed), count in self.totals(REQUESTS, minutes).items():
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

    def backend_counts(self, backend: str, minutes: int) -> tuple[int, int]:
        """(requests, errors) answered by `backend` in the last `minutes`."""
        requests = errors = 0
        for (name, _client, _dialect, failed), count in self.totals(REQUESTS, minutes).items():
            if name == backend:
                requests += count
                errors += count if failed else 0
        return requests, errors

    def request_counts(self, minutes: int) -> tuple[int, int, int]:
        """(requests, errors, requests of v1 clients) of the last `minutes`, all backends."""
        requests = errors = v1 = 0
        for (_name, client, _dialect, failed), count in self.totals(REQUESTS, minutes).items():
            requests += count
            errors += count if failed else 0
            v1 += count if client == "v1" else 0
        return requests, errors, v1

    def failures(self, minutes: int) -> list[dict[str, Any]]:
        """Failures of the last `minutes` per (backend, client dialect, backend dialect, reason,
        by): rows `{backend, client_dialect, backend_dialect, mode, reason, by, count}` (`mode` as
        in `matrix`), most first, then in key order."""
        rows = []
        for (backend, c, b, cause, by), n in sorted(self.totals(FAILURES, minutes).items(), key=lambda kv: (-kv[1], kv[0])):
            mode = "refused" if c == UNCLASSIFIED else ("relayed" if c == b else "translated")
            rows.append({"backend": backend, "client_dialect": c, "backend_dialect": b, "mode": mode, "reason": cause, "by": by, "count": n})
        return rows

    def backend_failures(self, backend: str, minutes: int) -> tuple[int, int]:
        """(the backend's errors, the proxy's refusals) among the failures of `backend`'s requests
        in the last `minutes` (`translators.failures`: by "backend", by "proxy")."""
        errors = refusals = 0
        for (name, _c, _b, _cause, by), count in self.totals(FAILURES, minutes).items():
            if name == backend:
                if by == PROXY:
                    refusals += count
                else:
                    errors += count
        return errors, refusals

    def _per_client(self) -> dict[ClientId, tuple[dict[str, int], dict[str, int], int, int]]:
        """Per client of the last `DAY`: (failures by reason, repairs by repair, requests that needed
        one, the last minute one did)."""
        out: dict[ClientId, tuple[dict[str, int], dict[str, int], int, int]] = {}
        for minute, bucket in self.minutes:
            if minute < self.now_ms // 60_000 - DAY + 1:
                continue
            for key, count in bucket.items():
                kind = key[0]
                if kind not in (CLIENT_FAILURES, REPAIRS, LEANING):
                    continue
                client = (key[1], key[2], key[3])
                entry = out.get(client)
                if entry is None:
                    entry = out[client] = ({}, {}, 0, -1)
                if kind == CLIENT_FAILURES:
                    entry[0][key[4]] = entry[0].get(key[4], 0) + count
                elif kind == REPAIRS:
                    entry[1][key[4]] = entry[1].get(key[4], 0) + count
                else:
                    out[client] = (entry[0], entry[1], entry[2] + count, max(entry[3], minute))
        return out

    def leaning(self) -> list[dict[str, Any]]:
        """The clients the proxy made repairs for in the last `DAY`, most requests repaired first:
        `{dialect, name, version, requests, leaning, repairs, last_leaning_ms}`. `last_leaning_ms`
        is known to the minute: the client's last-seen time when that falls in the last minute it
        needed a repair (its last request did), else that minute's end (docs/decisions.md §98)."""
        per_client = self._per_client()
        rows = []
        for (dialect, name, version), row in sorted(reversed(list(self.client_rows.items())), key=lambda kv: -kv[1].last_seen_ms):
            entry = per_client.get((dialect, name, version))
            if entry is None or not entry[2]:
                continue
            rows.append({"dialect": dialect, "name": name, "version": version, "requests": row.requests, "leaning": entry[2],
                         "repairs": dict(sorted(entry[1].items())),
                         "last_leaning_ms": min(row.last_seen_ms, (entry[3] + 1) * 60_000 - 1)})
        return sorted(rows, key=lambda r: -r["leaning"])

    def timeline(self, minutes: int = 60) -> dict[str, Any]:
        """Requests per minute of the last `minutes`, per client dialect (oldest first):
        `{"start_ms": <first minute, Unix ms>, "minutes": n, "<dialect>": [counts]}`."""
        last = self.now_ms // 60_000
        first = last - minutes + 1
        series = {d: [0] * minutes for d in DIALECTS}
        for minute, bucket in self.minutes:
            if not first <= minute <= last:
                continue
            for key, count in bucket.items():
                if key[0] == REQUESTS and key[2] in series:
                    series[key[2]][minute - first] += count
        return {"start_ms": first * 60_000, "minutes": minutes, **series}

    def clients(self) -> list[dict[str, Any]]:
        """Every client row, most recently seen first: `{dialect, name, version, requests,
        first_seen_ms, last_seen_ms, backends (sorted), errors, failures ({reason: count}, reasons
        sorted), leaning (requests that needed a repair), repairs ({repair: count}, sorted)}` (the
        failures and repairs of the last `DAY`), and `replicas` (sorted) for rows read from the store."""
        # Ties keep the mapping's own order, newest last (the recorder's rows move to the end when used).
        rows = sorted(reversed(list(self.client_rows.items())), key=lambda kv: -kv[1].last_seen_ms)
        per_client = self._per_client()
        out = []
        for (dialect, name, version), row in rows:
            failures, repairs, leaning, _minute = per_client.get((dialect, name, version), ({}, {}, 0, -1))
            entry = {"dialect": dialect, "name": name, "version": version, "requests": row.requests,
                     "first_seen_ms": row.first_seen_ms, "last_seen_ms": row.last_seen_ms, "backends": sorted(row.backends),
                     "errors": sum(failures.values()), "failures": dict(sorted(failures.items())),
                     "leaning": leaning, "repairs": dict(sorted(repairs.items()))}
            if row.replicas:
                entry["replicas"] = sorted(row.replicas)
            out.append(entry)
        return out

    def last_v1_ms(self) -> int | None:
        """When a v1 client was last answered (Unix ms), None if never."""
        seen = [row.last_seen_ms for (dialect, _n, _v), row in self.client_rows.items() if dialect == "v1"]
        return max(seen) if seen else None


class Batch:
    """What one process counted since its last flush, for the store (`proxy/state/figures_store.py`):
    `counts` {(minute, key): n}; `clients` {ClientId: (requests, first_seen_ms, last_seen_ms,
    backends)}; `sessions` {relayed session id: (name, version)}; `errors`, oldest first."""

    __slots__ = ("counts", "clients", "sessions", "errors")

    def __init__(self) -> None:
        self.counts: dict[tuple[int, CountKey], int] = {}
        self.clients: dict[ClientId, tuple[int, int, int, list[str]]] = {}
        self.sessions: dict[str, tuple[str, str]] = {}
        self.errors: list[dict[str, Any]] = []

    def __bool__(self) -> bool:
        return bool(self.counts or self.clients or self.sessions or self.errors)

    def merge(self, other: Batch) -> None:
        """Add `other` (an older batch the store did not take) into this one."""
        for key, n in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + n
        for client, (n, first, last, backends) in other.clients.items():
            mine = self.clients.get(client)
            if mine is None:
                self.clients[client] = (n, first, last, backends)
            else:
                self.clients[client] = (mine[0] + n, min(mine[1], first), max(mine[2], last), sorted({*mine[3], *backends}))
        self.sessions = {**other.sessions, **self.sessions}
        self.errors = [*other.errors, *self.errors]


class ReplicaFigures:
    """What one replica (every worker of one proxy) flushed to the store: `since_ms` (its first
    process's start), `last_flush_ms`, counts by minute, client rows."""

    __slots__ = ("name", "since_ms", "last_flush_ms", "minutes", "clients")

    def __init__(self, name: str, since_ms: int, last_flush_ms: int):
        self.name = name
        self.since_ms = since_ms
        self.last_flush_ms = last_flush_ms
        self.minutes: dict[int, Bucket] = {}
        self.clients: dict[ClientId, ClientRow] = {}

    def figures(self, now_ms: int, errors: Sequence[dict[str, Any]] = ()) -> Figures:
        return Figures(self.minutes.items(), self.clients, errors, now_ms, self.since_ms)


def fleet_figures(replicas: Sequence[ReplicaFigures], errors: Sequence[dict[str, Any]], now_ms: int) -> Figures:
    """Every replica's figures added up (client rows merged, with the replicas that saw them)."""
    minutes: dict[int, Bucket] = {}
    clients: dict[ClientId, ClientRow] = {}
    for replica in replicas:
        for minute, bucket in replica.minutes.items():
            total = minutes.setdefault(minute, {})
            for key, n in bucket.items():
                total[key] = total.get(key, 0) + n
        for client, row in replica.clients.items():
            mine = clients.get(client)
            if mine is None:
                mine = clients[client] = ClientRow(row.first_seen_ms, 0, row.last_seen_ms)
            mine.merge(row)
    since = min((r.since_ms for r in replicas), default=now_ms)
    return Figures(minutes.items(), clients, errors, now_ms, since)
