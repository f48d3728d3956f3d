"""The rollout as it runs (docs/configuration.md "Rollout"; docs/decisions.md §174): one driver per
serving process, one loop every `TICK_S`.

Each tick reads the record from the store (`proxy/state/rollouts.py`) and applies its weights to
this process's fleet (`proxy/rollout/state.py` `weights`), so every worker and replica sharing the
store routes new work alike within a tick; a reload applies them at once (`reconfigured`). The
process holding the store's lease decides: it begins the rollout when the `[rollout]` table
appears (or changes), and once a step's time is up it reads the figures (every process's, through
the store: `proxy/observe/lasting.py`), judges the step (`proxy/rollout/judge.py`) and writes
what follows, logged with its figures. A held step is judged again every `RECHECK_S`.

Operators act through any process (`act`: `POST /rollout`, `mcp-tasks-proxy rollout ...`): the
record is written by compare and set, so an action and a decision never overwrite each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..config import Settings
from ..eventloop import cancel_and_wait
from ..fleet import Fleet
from ..observe.figures import Figures
from ..state.rollouts import RolloutStore
from . import judge
from .settings import Rollout
from .state import ACTIONS, COMPLETED, ROLLED_BACK, RUNNING, STATES, Record, acted, begin, judged, shown, weights

log = logging.getLogger(__name__)

TICK_S = 0.5
"""How often every process reads the record and applies its weights."""
IDLE_TICK_S = 5.0
"""How often a process without a `[rollout]` table reads the record when its store is its own
(`quiet`): only to end one a removed table left (a reload ticks at once, `reconfigured`)."""
LEASE_MS = 5_000
"""How long the deciding process's lease lasts unless renewed (renewed every tick)."""
RECHECK_S = 1.0
"""A held step is judged again after this long."""
WRITE_TRIES = 5
"""An operator's action is tried again this often when a decision wrote the record meanwhile."""


class RolloutDriver:
    """The rollout of `settings.rollout` over `fleet` (module docstring). `store`: where the record
    lives; `figures`: reads every process's figures; `shadow`: `to`'s shadow comparisons so far, as the
    figures read with them count them (`shadow_counts`: `{"match", "differ"}`, None without any); `process`: this process's name in the lease."""

    def __init__(self, settings: Settings, fleet: Fleet, store: RolloutStore, figures: Callable[[], Awaitable[Figures]],
                 shadow: Callable[[str, Figures], dict[str, int] | None]):
        self.settings = settings
        self.fleet = fleet
        self.store = store
        self.figures = figures
        self.shadow = shadow
        self.process = ""
        """This process's name in the lease (set by the application: the store's process name, or the pid)."""
        self.record: Record | None = None
        """The record last read (or written) for the configured rollout; None without one."""
        self.leading = False
        self.leader: str | None = None
        self._next_check = 0.0
        self._trouble: str | None = None
        self._loop: asyncio.Future[None] | None = None
        self._other: str | None = None

    async def start(self) -> None:
        """The first tick (a restart applies the rollout's weights before it serves), then the loop."""
        await self.tick_safely()
        self._loop = asyncio.ensure_future(self.run())

    async def close(self) -> None:
        """Stop ticking, and hand the lease on at once (another process decides without waiting for it to lapse)."""
        if self._loop is not None:
            await cancel_and_wait(self._loop)
        if self.leading:
            with contextlib.suppress(Exception):  # a store that does not answer: the lease lapses by itself
                await self.store.release(self.process)

    @property
    def rollout(self) -> Rollout | None:
        return self.settings.rollout

    def snapshot(self) -> dict[str, Any] | None:
        """The rollout as `status.json` shows it (`proxy/rollout/state.py` `shown`), None without one."""
        view = shown(self.record, self.rollout, self.leader)
        return None if view is None else {**view, "decides_here": self.leading}

    # -- every tick ----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Tick every `TICK_S` (every `IDLE_TICK_S` while `quiet`) until cancelled; a store that does
        not answer is logged once per outage."""
        loop = asyncio.get_running_loop()
        while True:
            await self.tick_safely()
            quiet_until = loop.time() + IDLE_TICK_S
            await asyncio.sleep(TICK_S)
            while self.quiet() and loop.time() < quiet_until:  # a reload that adds the table ticks at once, then every TICK_S
                await asyncio.sleep(TICK_S)

    def quiet(self) -> bool:
        """Whether the record needs reading only every `IDLE_TICK_S`: no `[rollout]` table, and a
        store only this process writes (SQLite, memory), so nothing but this process's own ticks
        and actions can change the record or the lease. On a shared store (Redis) every tick
        counts as before: the lease is renewed in each, and a process without the table that holds
        it keeps a rollout another process's older table would begin again ended
        (docs/decisions.md §189)."""
        return self.rollout is None and not self.store.shared

    async def tick_safely(self) -> None:
        try:
            await self.tick()
        except Exception as exc:  # the store, or the figures, could not be read: the weights stay as they are
            reason = f"{type(exc).__name__}: {exc}"
            if reason != self._trouble:
                log.warning("rollout: cannot read or write its record (%s); the weights stay as they are until it can", reason)
            self._trouble = reason
        else:
            if self._trouble is not None:
                log.info("rollout: its record is read again")
            self._trouble = None

    async def tick(self) -> None:
        """Read, lead, begin or judge, apply (module docstring)."""
        rollout = self.rollout
        stored = await self.store.read()
        self.leading = await self.store.lead(self.process, LEASE_MS)
        self.leader = self.process if self.leading else await self.store.leader()
        if rollout is None:
            self.record = None
            if self.leading and stored is not None and stored.get("fingerprint"):
                await self._end(stored)
            return
        record = self._ours(stored, rollout)
        self._differs(stored, rollout)
        if self.leading:
            if record is None:
                record = await self._begin(rollout, stored)
            elif record.state == RUNNING and self._due(record, rollout):
                record = await self._judge(record, rollout)
        self.record = record
        self.apply()

    async def _end(self, stored: dict[str, Any]) -> None:
        """The table was removed: the record is ended, so that a table added again (the same one
        too) is a new rollout from its first step."""
        ended = {"fingerprint": "", "version": stored["version"] + 1, "ended_ms": int(time.time() * 1000), "was": stored.get("state")}
        if await self.store.write(ended, stored["version"]):
            log.info("rollout: the [rollout] table was removed; the rollout is ended (it was %s)", stored.get("state"))

    def _differs(self, stored: dict[str, Any] | None, rollout: Rollout) -> None:
        """Log once when the store holds another table's rollout than this process's (a replica or
        worker reloaded with another file): the deciding process's table runs, and this one waits."""
        other = stored.get("fingerprint") if stored is not None else None
        if other and other != rollout.fingerprint() and not self.leading:
            if self._other != other:
                log.warning("rollout: this process's [rollout] table differs from the one the deciding process (%s) runs; "
                            "this process keeps its configured weights: reload every replica with the same file", self.leader)
            self._other = other
        else:
            self._other = None

    def apply(self) -> None:
        """The record's weights on this process's fleet (nothing without a record: the configured ones stand)."""
        record, rollout = self.record, self.rollout
        if record is None or rollout is None or record.fingerprint != rollout.fingerprint():
            return
        for name, (weight, draining) in weights(record, rollout, self.settings.upstream).items():
            member = self.fleet.get(name)
            if member is not None:
                member.weight, member.draining = weight, draining  # type: ignore[assignment]  # a share: float

    async def reconfigured(self) -> None:
        """A reload applied: the rollout's weights again at once (the reload set the configured ones), then a tick."""
        self.apply()
        await self.tick_safely()

    @staticmethod
    def _ours(stored: dict[str, Any] | None, rollout: Rollout) -> Record | None:
        if stored is None or stored.get("fingerprint") != rollout.fingerprint():
            return None
        return Record.from_json(stored)

    def _due(self, record: Record, rollout: Rollout) -> bool:
        return time.time() * 1000 - record.step_started_ms >= rollout.step_ms and time.monotonic() >= self._next_check

    async def _baseline(self, rollout: Rollout, figures: Figures | None = None) -> dict[str, Any]:
        figures = figures if figures is not None else await self.figures()
        return judge.baseline(figures.minutes, (rollout.from_, rollout.to), figures.now_ms, self.shadow(rollout.to, figures))

    async def _begin(self, rollout: Rollout, stored: dict[str, Any] | None) -> Record | None:
        version = stored["version"] if stored is not None else 0
        record = begin(rollout, int(time.time() * 1000), await self._baseline(rollout), version + 1)
        if not await self.store.write(record.to_json(), version):
            return None  # another process began it: read at the next tick
        log.info("rollout: %s", record.history[-1]["reason"])
        return record

    async def _judge(self, record: Record, rollout: Rollout) -> Record:
        figures = await self.figures()
        pair = (rollout.from_, rollout.to)
        step = judge.since(figures.minutes, record.baseline, pair)
        whole = judge.since(figures.minutes, record.start_baseline, pair)
        shadow = self.shadow(rollout.to, figures)
        if shadow is not None:
            begun = record.baseline.get("shadow") or {}
            shadow = {k: shadow[k] - begun.get(k, 0) if shadow[k] >= begun.get(k, 0) else shadow[k] for k in ("match", "differ")}
        verdict = self._unreachable(rollout) or judge.verdict(rollout, step, whole, shadow)
        after = judged(record, rollout, verdict, figures.now_ms, await self._baseline(rollout, figures))
        self._next_check = time.monotonic() + RECHECK_S
        if not await self.store.write(after.to_json(), record.version):
            return record  # an operator acted meanwhile: read again at the next tick
        if after.history and after.history[-1] is not (record.history[-1] if record.history else None):
            self._log(after, rollout)
        return after

    def _unreachable(self, rollout: Rollout) -> dict[str, Any] | None:
        """A failed check when `to` cannot be reached now: the fleet gives its share of new work to
        the others, so it answers nothing, and no count would ever judge it."""
        member = self.fleet.get(rollout.to)
        if member is None or (member.backend.unreachable_at is None and member.backend.down is None):
            return None
        reason = member.backend.down or "its connections are refused"
        return {"outcome": judge.FAIL, "figures": {"to_reachable": False, "gates": []},
                "reason": f"{rollout.to} cannot be reached ({reason}): new work meant for it goes to the others"}

    @staticmethod
    def _log(record: Record, rollout: Rollout) -> None:
        event = record.history[-1]
        where = f"{rollout.from_} -> {rollout.to}"
        text = f"rollout {where}: step {event['step'] + 1} ({event['percent']:g} %) {event['event']}: {event['reason']}"
        if record.state == ROLLED_BACK:
            log.warning("%s; rolled back: all new work on %s again", text, rollout.from_)
        elif record.state == COMPLETED:
            log.info("%s; completed: all new work on %s%s", text, rollout.to, f", {rollout.from_} draining" if rollout.then == "drain" else "")
        elif event["event"] == "failed":
            log.warning("%s; the step runs again", text)
        else:
            log.info("%s; now %g %% of new work on %s", text, event["percent_after"], rollout.to)

    # -- the operator --------------------------------------------------------------------------------

    async def act(self, action: str) -> tuple[int, dict[str, Any]]:
        """An operator's `action` (`ACTIONS`, or "status"): (HTTP status, the rollout it left with
        `done`: what was done, or why nothing was)."""
        rollout = self.rollout
        if action not in (*ACTIONS, "status"):
            return 400, {"error": f"unknown action {action!r} (one of status, {', '.join(ACTIONS)})"}
        if rollout is None:
            return 404, {"error": "no rollout is configured (add a [rollout] table and reload)"}
        try:
            await self.tick()
        except Exception as exc:  # the store does not answer: nothing can be decided or recorded
            return 503, {"error": f"the rollout's record cannot be read ({type(exc).__name__}: {exc}); try again"}
        shown = self.snapshot()
        if shown is None and self._other is not None:
            return 409, {"error": f"this process's [rollout] table differs from the one the deciding process ({self.leader}) runs: "
                                  "reload every replica with the same file"}
        if shown is None:
            return 409, {"error": "the rollout has not begun yet: try again in a moment"}
        if action == "status":
            return 200, {**shown, "done": "status"}
        for _ in range(WRITE_TRIES):
            try:
                done, answer = await self._act_once(rollout, action)
            except Exception as exc:
                return 503, {"error": f"the rollout's record cannot be written ({type(exc).__name__}: {exc}); try again"}
            if done:
                return answer
        return 409, {"error": "the rollout's record kept changing: try again"}

    async def _act_once(self, rollout: Rollout, action: str) -> tuple[bool, tuple[int, dict[str, Any]]]:
        """One try of `act`: (True, its answer), or (False, _) when a decision wrote the record meanwhile."""
        record = self._ours(await self.store.read(), rollout)
        if record is None:
            return True, (409, {"error": "the rollout has not begun yet: try again in a moment"})
        baseline = await self._baseline(rollout) if action == "resume" else record.baseline
        after, done = acted(record, rollout, action, int(time.time() * 1000), baseline)
        if after is not record and not await self.store.write(after.to_json(), record.version):
            return False, (409, {})
        if after is not record:
            log.info("rollout %s -> %s: %s by the operator; now %s", rollout.from_, rollout.to, done, after.state)
        self.record = after
        self.apply()
        return True, (200, {**(self.snapshot() or {}), "done": done})


def shadow_counts(fleet: Fleet) -> Callable[[str, Figures], dict[str, int] | None]:
    """The shadow comparisons of a backend's answers, all methods and tools together
    (`proxy.shadow.mirror.Shadowing.snapshot`): with `--workers`, every worker's of this replica
    (`figures.counters`), else this process's; None for a backend that shadows nothing."""

    def counts(name: str, figures: Figures) -> dict[str, int] | None:
        shadowing = getattr(fleet, "shadow", None)
        for entry in shadowing.snapshot(figures.counters) if shadowing is not None else ():
            if entry["backend"] == name:
                return {"match": sum(row["match"] for row in entry["rows"]), "differ": sum(row["differ"] for row in entry["rows"])}
        return None

    return counts


class _RolloutMetrics(Collector):
    """`mcp_tasks_proxy_rollout_state{state}` (1 for the rollout's state, 0 for the others) and
    `mcp_tasks_proxy_rollout_percent` (the share of new work on `to`), as this process last read them."""

    def __init__(self, driver: RolloutDriver):
        self._driver = driver

    def collect(self) -> Iterable[GaugeMetricFamily]:
        shown = self._driver.snapshot()
        state = GaugeMetricFamily("mcp_tasks_proxy_rollout_state", "The configured rollout's state (1) by state", labels=["state"])
        percent = GaugeMetricFamily("mcp_tasks_proxy_rollout_percent", "Percent of the rollout's new work on its new backend "
                                    "(0 rolled back, 100 completed)", labels=["from", "to"])
        if shown is not None:
            for name in STATES:
                state.add_metric([name], 1.0 if shown["state"] == name else 0.0)
            percent.add_metric([shown["from"], shown["to"]], shown["percent"])
        yield state
        yield percent

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self.collect()


def rollout_driver(settings: Settings, fleet: Fleet, store: Any, metrics: Any, lasting: Any) -> RolloutDriver:
    """The application's driver: its record beside the task state `store` (`proxy/state/rollouts.py`),
    judged on the figures the status page reads (`metrics.recorder`, `lasting`: `proxy/observe/status.py`),
    shown on `/metrics` (`_RolloutMetrics`)."""
    from ..observe.status import read_view
    from ..state.rollouts import rollouts_for

    async def figures() -> Figures:
        return (await read_view(metrics.recorder, lasting))[0]

    driver = RolloutDriver(settings, fleet, rollouts_for(store), figures, shadow_counts(fleet))
    driver.process = str(getattr(store, "process", None) or f"pid {os.getpid()}")
    fleet.rollout = driver
    if getattr(metrics, "registry", None) is not None:
        metrics.registry.register(_RolloutMetrics(driver))
    return driver
