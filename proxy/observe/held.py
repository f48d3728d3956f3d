"""Held tasks in `/metrics` and on the status page (docs/behaviour.md §9; docs/configuration.md
"Tasks for servers that have none").

* `mcp_tasks_proxy_held_tasks{backend}` (gauge): held calls open in this process now;
* `mcp_tasks_proxy_held_tasks_promoted_total{backend}`: calls promoted to a held task, in all;
* `mcp_tasks_proxy_held_tasks_ended_total{backend,outcome}`: held tasks ended, by outcome
  (`completed`, `failed`, `cancelled`);
* `mcp_tasks_proxy_held_tasks_refused_total{backend}`: slow calls not promoted (bounds full).

The collectors are made once per registry (every backend shares the application's `Metrics`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge

from ..metrics import Metrics

_COLLECTORS: weakref.WeakKeyDictionary[Any, tuple[Gauge, Counter, Counter, Counter]] = weakref.WeakKeyDictionary()


def _collectors(registry: Any) -> tuple[Gauge, Counter, Counter, Counter]:
    found = _COLLECTORS.get(registry)
    if found is None:
        found = _COLLECTORS[registry] = (
            Gauge("mcp_tasks_proxy_held_tasks", "Held calls open in this process now, by backend", ["backend"], registry=registry),
            Counter("mcp_tasks_proxy_held_tasks_promoted", "Calls promoted to a held task, by backend", ["backend"], registry=registry),
            Counter("mcp_tasks_proxy_held_tasks_ended", "Held tasks ended, by backend and outcome", ["backend", "outcome"],
                    registry=registry),
            Counter("mcp_tasks_proxy_held_tasks_refused", "Slow calls not promoted because the bounds were full, by backend",
                    ["backend"], registry=registry),
        )
    return found


class HeldMetrics:
    """The held-task counters of one backend (no-ops without a registry: `NoMetrics`)."""

    def __init__(self, metrics: Metrics, backend: str):
        self.backend = backend
        self.promoted_total = 0
        self.ended_total: dict[str, int] = {}
        """What the status page shows (also without a registry)."""
        registry = getattr(metrics, "registry", None)
        self._collectors = _collectors(registry) if registry is not None else None

    def track(self, live: Callable[[], int]) -> None:
        """`live()` is the number of held calls open now (read at scrape time)."""
        self.live = live
        if self._collectors is not None:
            self._collectors[0].labels(self.backend).set_function(lambda: float(live()))

    def promoted(self) -> None:
        self.promoted_total += 1
        if self._collectors is not None:
            self._collectors[1].labels(self.backend).inc()

    def ended(self, outcome: str) -> None:
        if outcome not in ("completed", "failed", "cancelled"):
            return  # the process stopped with the call open: its record says how it ended, later
        self.ended_total[outcome] = self.ended_total.get(outcome, 0) + 1
        if self._collectors is not None:
            self._collectors[2].labels(self.backend, outcome).inc()

    def refused(self) -> None:
        if self._collectors is not None:
            self._collectors[3].labels(self.backend).inc()

    def summary(self) -> dict[str, Any]:
        """For the status page's JSON: `{"now", "promoted", "ended": {outcome: n}}`."""
        live = getattr(self, "live", None)
        return {"now": live() if live is not None else 0, "promoted": self.promoted_total, "ended": dict(self.ended_total)}
