"""Each tool, backend beside backend, and whether a newer backend serves it worse (docs/migration.md
"Gates"; docs/operations.md "Status page"): what the page, `status.json` and `status` show of
the tool outcomes counted by `proxy/observe/tools.py`.

Per tool, one row per backend that answered it in the window: its calls, each outcome, the
tool-error rate (`tool_error` over calls), the error rate (`protocol_error`, `timeout` and
`refused` over calls) and p50/p95 (from latency buckets 25 % wide: the bucket's upper bound).
A tool answered by two backends or more gets a verdict for each but its baseline, the first of
them in the fleet's configuration order (a migration adds the new backend after the old):

* `worse` when the tool-error rate or the error rate is above the baseline's beyond chance: a
  one-sided two-proportion z-test, z above `Z_99` (99 % confidence); or when p95 is above
  `P95_RATIO` times the baseline's;
* `no_worse` otherwise;
* `too_few_calls` while either side has fewer than `MIN_CALLS` calls in the window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from translators.tool_results import OK, OUTCOMES, PROTOCOL_ERROR, REFUSED, TIMEOUT, TOOL_ERROR

from .figures import BUCKET_BASE, TOOL_MS, TOOLS, Figures

WINDOW_MINUTES = 60
"""The minutes the tool rows and verdicts cover."""
MIN_CALLS = 20
"""Calls each side needs in the window before any verdict."""
Z_99 = 2.326
"""The one-sided 99 % quantile of the standard normal distribution."""
P95_RATIO = 2.0
"""A p95 above this many times the baseline's is worse."""
ERRORS = (PROTOCOL_ERROR, TIMEOUT, REFUSED)
"""The outcomes counted in the error rate (tool errors have their own)."""


def percentile(buckets: dict[int, int], q: float) -> float | None:
    """The upper bound (ms) of the bucket holding the `q` quantile (nearest rank)."""
    total = sum(buckets.values())
    if not total:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for bucket in sorted(buckets):
        seen += buckets[bucket]
        if seen >= rank:
            return round(BUCKET_BASE ** (bucket + 1), 1)
    return None  # not reached: the ranks add up to the total


def z_score(errors: int, calls: int, base_errors: int, base_calls: int) -> float:
    """The two-proportion z statistic of `errors`/`calls` over `base_errors`/`base_calls` (0 when
    the pooled rate is 0 or 1: nothing tells them apart)."""
    pooled = (errors + base_errors) / (calls + base_calls)
    spread = math.sqrt(pooled * (1 - pooled) * (1 / calls + 1 / base_calls))
    if spread == 0:
        return 0.0
    return (errors / calls - base_errors / base_calls) / spread


def _verdict(row: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    name = base["backend"]
    if row["calls"] < MIN_CALLS or base["calls"] < MIN_CALLS:
        return {"against": name, "outcome": "too_few_calls",
                "reason": f"{row['calls']} calls here and {base['calls']} on {name}: {MIN_CALLS} each before a verdict"}
    reasons = []
    for label, key in (("tool errors", TOOL_ERROR), ("errors", "errors")):
        mine = row[key] if key != "errors" else sum(row[k] for k in ERRORS)
        theirs = base[key] if key != "errors" else sum(base[k] for k in ERRORS)
        z = z_score(mine, row["calls"], theirs, base["calls"])
        if z > Z_99:
            reasons.append(f"{label} {100 * mine / row['calls']:.1f} % of {row['calls']} against {100 * theirs / base['calls']:.1f} % "
                           f"of {base['calls']} on {name} (z = {z:.2f} > {Z_99}, 99 % one-sided)")
    if row["p95_ms"] is not None and base["p95_ms"] is not None and row["p95_ms"] > P95_RATIO * base["p95_ms"]:
        reasons.append(f"p95 {row['p95_ms']} ms above {P95_RATIO:g} × {base['p95_ms']} ms on {name}")
    if reasons:
        return {"against": name, "outcome": "worse", "reason": "; ".join(reasons)}
    return {"against": name, "outcome": "no_worse",
            "reason": f"error rates within chance of {name}'s and p95 within {P95_RATIO:g} × ({row['calls']} and {base['calls']} calls)"}


def tool_rows(figures: Figures, backends: Sequence[str], minutes: int = WINDOW_MINUTES) -> list[dict[str, Any]]:
    """Per tool (sorted by name): `{"tool", "backends": [row, ...]}`, a row per backend that
    answered it in the last `minutes`, in the order of `backends` (the fleet's; others after, by
    name): `{backend, calls, <each outcome>, tool_error_rate, error_rate, p50_ms, p95_ms, verdict}`
    (module docstring)."""
    counts: dict[str, dict[str, dict[str, int]]] = {}
    for (backend, tool, _dialect, outcome), n in figures.totals(TOOLS, minutes).items():
        cell = counts.setdefault(tool, {}).setdefault(backend, dict.fromkeys(OUTCOMES, 0))
        if outcome in cell:
            cell[outcome] += n
    latency: dict[tuple[str, str], dict[int, int]] = {}
    for (backend, tool, bucket), n in figures.totals(TOOL_MS, minutes).items():
        buckets = latency.setdefault((backend, tool), {})
        buckets[bucket] = buckets.get(bucket, 0) + n
    order = {name: i for i, name in enumerate(backends)}
    out = []
    for tool in sorted(counts):
        rows: list[dict[str, Any]] = []
        for backend in sorted(counts[tool], key=lambda name: (order.get(name, len(order)), name)):
            cell = counts[tool][backend]
            calls = sum(cell.values())
            buckets = latency.get((backend, tool), {})
            rows.append({"backend": backend, "calls": calls, **cell,
                         "tool_error_rate": round(cell[TOOL_ERROR] / calls, 4) if calls else 0.0,
                         "error_rate": round(sum(cell[k] for k in ERRORS) / calls, 4) if calls else 0.0,
                         "p50_ms": percentile(buckets, 0.5), "p95_ms": percentile(buckets, 0.95), "verdict": None})
        for row in rows[1:]:
            row["verdict"] = _verdict(row, rows[0])
        out.append({"tool": tool, "backends": rows})
    return out


__all__ = ["MIN_CALLS", "OK", "P95_RATIO", "WINDOW_MINUTES", "Z_99", "percentile", "tool_rows", "z_score"]
