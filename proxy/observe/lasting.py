"""Figures that last (docs/operations.md "Status page"; docs/decisions.md §95, §96): what the
`StatusRecorder` counts in memory is flushed to the store as deltas every `FLUSH_S` and at
shutdown, and the page, `/status.json` and `mcp-tasks-proxy status` read the figures back from the
store: kept across restarts (SQLite, Redis), added up over every worker and replica (Redis).

The request path never waits on the store for this: it records in memory (`StatusRecorder`), and
the one store read it may make is for a relayed session whose client this process has not seen
(`session_client`, once per session, its misses remembered for `MISS_RETRY_S`).

A read (`view`) first flushes this process; with a shared store it then waits, at most
`BARRIER_S`, until every live process has flushed after the read began (`RedisFigures.flushed`),
so every request answered before the read is in it; a process that did not make it in time is
named in `counting.late`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import secrets
import socket
import time
from typing import TYPE_CHECKING, Any

from .figures import Batch, Figures, fleet_figures
from .recorder import UNKNOWN_CLIENT, ClientKey, StatusRecorder

if TYPE_CHECKING:
    from ..metrics import Metrics

log = logging.getLogger(__name__)

FLUSH_S = 1.0
"""How often a process hands its deltas to the store."""
BARRIER_S = 3.0
"""A read waits at most this long for the other processes' flushes."""
POLL_S = 0.05
MISS_RETRY_S = 5.0
"""A relayed session the store did not know is asked about again after this long (another worker
may flush it meanwhile)."""
MAX_MISSES = 10_000
"""Sessions remembered as missed, and as renewed."""
MAX_PENDING = 100_000
"""Deltas kept while the store does not take them; beyond, they are dropped (logged)."""
SHARED_RETRIES = 3
RETRY_S = 0.02


def replica_name(configured: str | None, port: int) -> str:
    """The name a replica's figures go under: `replica` from the configuration, else `<host name>:<port>`."""
    return configured or f"{socket.gethostname()}:{port}"


class Lasting:
    """Flushes `recorder` into `store` (`proxy/state/figures_sqlite.py` or `figures_redis.py`) and
    reads the figures back. `replica`: this proxy's name (None until it is known: nothing is
    flushed before);
    `metrics`: with `--workers` > 1, the registry whose samples are added up in the store too."""

    def __init__(self, recorder: StatusRecorder, store: Any, *, replica: str | None, store_name: str, process: str | None = None,
                 metrics: Metrics | None = None):
        self.recorder = recorder
        self.store = store
        self.replica = replica
        self.store_name = store_name
        self.process = process or secrets.token_hex(8)
        self.metrics = metrics
        self._pending = Batch()
        self._metric_sent: dict[str, float] = {}
        self._lock = asyncio.Lock()
        self._misses: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._failing = False
        self._writes: set[asyncio.Future[None]] = set()
        self._renewed: collections.OrderedDict[str, int] = collections.OrderedDict()
        """When this process last wrote each relayed session's binding (Unix ms; shared store)."""
        recorder.renew_sessions = bool(getattr(store, "shared", False))

    # -- writing -----------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Hand what was counted since the last flush to the store (one call). When the store does
        not take it, it is kept and handed with the next flush (logged once until it works again).
        A caller cancelled meanwhile (a reader that left, the flush loop at shutdown) does not
        cancel the flush: what it took from the recorder reaches the store all the same."""
        if self.replica is None:
            return
        if self.store.suspends:
            await asyncio.shield(self._flush())
        else:  # nothing in it waits (the SQLite file): it cannot be cancelled halfway, and a task a second is saved
            await self._flush()

    async def _flush(self) -> None:
        async with self._lock:
            try:
                stamp = await self._clock()  # before the take: every request counted before it is in the batch
            except Exception as exc:
                self._failed(exc)
                return
            batch = self.recorder.take()
            if self.store.shared:
                self._renew(batch, stamp)
            batch.merge(self._pending)
            self._pending = Batch()
            now_ms = stamp
            extra: dict[str, Any] = {}
            sent: dict[str, float] = {}
            if self.metrics is not None:
                deltas, gauges, sent = self._metric_deltas()
                extra = {"metrics": deltas, "gauges": gauges}
            try:
                await self.store.add(self.replica, self.process, batch, self.recorder.started_ms, now_ms, **extra)
            except Exception as exc:
                if len(batch.counts) + len(batch.clients) + len(batch.sessions) <= MAX_PENDING:
                    self._pending = batch
                else:  # the store has refused for long: what it missed is given up, not held without bound
                    log.warning("status figures: %d counts not taken by the store dropped", len(batch.counts))
                self._failed(exc)
                return
            self._metric_sent.update(sent)
            if self._failing:
                log.warning("status figures flushed to the store again")
                self._failing = False

    def _renew(self, batch: Batch, now_ms: int) -> None:
        """Relayed sessions begun or used since the last flush whose binding this process wrote
        more than a quarter of its lifetime ago are written again (a shared store forgets a binding
        unused for `session_keep_s`): at most one write per session per quarter, never per request."""
        renewed = self._renewed
        for sid in batch.sessions:
            renewed[sid] = now_ms
            renewed.move_to_end(sid)
        due = now_ms - self.store.session_keep_s * 250
        for sid, client in self.recorder.take_used().items():
            if renewed.get(sid, 0) < due:
                batch.sessions[sid] = client
                renewed[sid] = now_ms
                renewed.move_to_end(sid)
        while len(renewed) > MAX_MISSES:
            renewed.popitem(last=False)

    def _failed(self, exc: Exception) -> None:
        if not self._failing:
            log.warning("status figures not flushed to the store (%s): kept in memory, tried again every %g s", exc, FLUSH_S)
            self._failing = True

    async def _clock(self) -> int:
        """Now, Unix ms, by the clock every process sharing the store reads (the Redis server's:
        replicas on hosts whose clocks differ by seconds still agree on which flush came after a
        read began); this process's own for a store only it writes."""
        clock = getattr(self.store, "clock_ms", None)
        return int(await clock()) if clock is not None else self.recorder.now_ms()

    def _metric_deltas(self) -> tuple[list[tuple[str, float]], list[tuple[str, float]], dict[str, float]]:
        """(counter and histogram samples' increase since the last flush, gauge samples now, the
        values sent) of `metrics`, each sample named `<family> <sample> <labels as JSON>`."""
        import json

        assert self.metrics is not None
        deltas, gauges, values = [], [], {}
        for family in self.metrics.registry.collect():
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                name = f"{family.name} {sample.name} {json.dumps(sorted(sample.labels.items()))}"
                if family.type == "gauge":
                    gauges.append((name, float(sample.value)))
                    continue
                delta = sample.value - self._metric_sent.get(name, 0.0)
                if delta:
                    deltas.append((name, delta))
                    values[name] = sample.value
        return deltas, gauges, values

    async def run(self) -> None:
        """Flush every `FLUSH_S` until cancelled (a first flush at once: reads wait for this process from its start)."""
        while True:
            await self.flush()
            await asyncio.sleep(FLUSH_S)

    async def close(self) -> None:
        """The last flush, at shutdown (after the bindings still being written); reads stop waiting for this process."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        await self.flush()
        try:
            await self.store.done(self.process)
        except Exception as exc:
            log.warning("status figures: could not sign off from the store: %s", exc)

    # -- reading -----------------------------------------------------------------------------------

    async def _barrier(self, since_ms: int) -> tuple[dict[str, tuple[str, int]], list[str]]:
        """Wait until every live process flushed at or after `since_ms`: (the live processes,
        those that did not in `BARRIER_S`)."""
        flushed = getattr(self.store, "flushed", None)
        if flushed is None:
            return {self.process: (self.replica or "", since_ms)}, []
        deadline = time.monotonic() + BARRIER_S
        while True:
            stamps = await flushed()
            late = sorted(f"{replica} ({process})" for process, (replica, at) in stamps.items() if at < since_ms)
            if not late or time.monotonic() >= deadline:
                return stamps, late
            await asyncio.sleep(POLL_S)

    async def view(self) -> tuple[Figures, dict[str, Any]]:
        """The fleet's figures (every replica added up) and what they cover (`counting` in
        `/status.json`). Raises the store's errors."""
        began = await self._clock()
        await self.flush()
        processes, late = await self._barrier(began)
        now = self.recorder.now_ms()
        replicas, errors = await self.store.read(now)
        fleet = fleet_figures(replicas, errors, now)
        rows = []
        for replica in replicas:
            figures = replica.figures(now)
            hour, day = figures.request_counts(60), figures.request_counts(1440)
            rows.append({"name": replica.name, "since_ms": replica.since_ms, "last_flush_ms": replica.last_flush_ms,
                         "processes": sum(1 for name, _ in processes.values() if name == replica.name),
                         "requests_last_hour": hour[0], "errors_last_hour": hour[1], "requests_last_day": day[0],
                         "v1_requests_last_day": day[2], "last_v1_ms": figures.last_v1_ms()})
        counting = {"covers": "fleet" if self.store.shared else "proxy", "store": self.store_name, "since_ms": fleet.since_ms,
                    "replica": self.replica, "replicas": rows, "late": late}
        if self.metrics is not None:  # workers: the counters they flushed with these figures (the shadow comparisons)
            fleet.counters = (await self.store.metrics(self.replica, set(processes)))[0]
        return fleet, counting

    async def metric_totals(self) -> tuple[dict[str, float], dict[str, float]]:
        """This replica's `/metrics` samples added up over its workers (after the same wait as `view`)."""
        began = await self._clock()
        await self.flush()
        processes, _late = await self._barrier(began)
        totals: tuple[dict[str, float], dict[str, float]] = await self.store.metrics(self.replica, set(processes))
        return totals

    def session_begun(self, session_id: str, client: ClientKey) -> None:
        """A relayed session's `initialize` named its client. With a shared store the binding is
        written at once (a task: the request does not wait), not with the next flush: the
        session's next request may reach another worker within the second (docs/decisions.md §97)."""
        if not self.store.shared:
            return
        task = asyncio.ensure_future(self._keep_session(session_id, client))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _keep_session(self, session_id: str, client: ClientKey) -> None:
        try:
            await self.store.keep_session(session_id, client)
        except Exception as exc:
            log.debug("status figures: relayed session's client not written at once (the next flush has it): %s", exc)

    async def session_client(self, session_id: str) -> ClientKey:
        """The client of a relayed session this process has not seen begin (after a restart, or
        begun on another worker or replica), from the store; `UNKNOWN_CLIENT` when it does not know.
        With a shared store a miss is asked again `SHARED_RETRIES` times `RETRY_S` apart (the
        binding being written by the process that saw the `initialize`, `session_begun`)."""
        missed = self._misses.get(session_id)
        if missed is not None and time.monotonic() - missed < MISS_RETRY_S:
            return UNKNOWN_CLIENT
        found = await self._stored_session(session_id)
        for _ in range(SHARED_RETRIES if self.store.shared else 0):
            if found is not None:
                break
            await asyncio.sleep(RETRY_S)
            found = await self._stored_session(session_id)
        if found is None:
            self._misses[session_id] = time.monotonic()
            self._misses.move_to_end(session_id)
            if len(self._misses) > MAX_MISSES:
                self._misses.popitem(last=False)
            return UNKNOWN_CLIENT
        self._misses.pop(session_id, None)
        self.recorder.learn_session(session_id, found)
        return found

    async def _stored_session(self, session_id: str) -> ClientKey | None:
        try:
            found: ClientKey | None = await self.store.session_client(session_id)
        except Exception as exc:
            log.debug("status figures: relayed session's client not read from the store: %s", exc)
            return None
        return found


def process_view(recorder: StatusRecorder) -> tuple[Figures, dict[str, Any]]:
    """The figures of a proxy without a store for them (`store = "memory"`): this process's, since its start."""
    figures = recorder.figures()
    return figures, {"covers": "process", "store": "memory", "since_ms": recorder.started_ms, "replica": None,
                     "replicas": [], "late": []}
