"""Whether a rollout's step passed (docs/configuration.md "Rollout"; docs/decisions.md §174): pure
functions of the tool outcomes clients saw (`proxy/observe/tools.py`, counted by minute in the
figures: `TOOLS`, `TOOL_MS`), no I/O.

A step's counts are the figures now less those there when it began (`baseline`: the counts of the
minute it began in, as they were then; the minutes after it held nothing yet), so a step of a few
seconds is judged on its own calls, on one process or added up over every replica.

The gates compare `to` with `from` on the tools both answered (a tool only one of them has is not
compared), `from` in the same step, or, where it answered fewer than `min_calls` there (the 100 %
step), since the rollout began:

* `max_tool_error_increase`, `max_error_increase`: `to`'s rate minus `from`'s. Above the maximum
  and beyond chance (the one-sided two-proportion z-test of the status page's verdicts, z above
  `Z_99`) fails; above it within chance holds the step for more calls; else it passes.
* `max_p95_ratio`: `to`'s p95 over `from`'s (latency buckets 25 % wide) above it fails.
* `min_shadow_match`: of the comparisons of `to`'s answers with `from`'s made in the step (by the
  deciding process), the share that matched below it fails; no comparison, not judged.

A check needs `to` and the baseline to have `min_calls` calls on the shared tools: with fewer it holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from translators.tool_results import PROTOCOL_ERROR, REFUSED, TIMEOUT, TOOL_ERROR

from ..observe.figures import TOOL_MS, TOOLS, Bucket
from ..observe.tool_verdicts import Z_99, percentile, z_score
from .settings import Rollout

ERRORS = (PROTOCOL_ERROR, TIMEOUT, REFUSED)
PASS, HOLD, FAIL = "pass", "hold", "fail"

Minutes = Iterable[tuple[int, Bucket]]


class Counts:
    """Tool calls by backend and tool: `calls[backend][tool][outcome]`, `latency[backend][tool][bucket]`."""

    def __init__(self) -> None:
        self.calls: dict[str, dict[str, dict[str, int]]] = {}
        self.latency: dict[str, dict[str, dict[int, int]]] = {}

    def add(self, key: tuple[Any, ...], n: int) -> None:
        kind, backend, tool = key[0], key[1], key[2]
        if kind == TOOLS:
            cell = self.calls.setdefault(backend, {}).setdefault(tool, {})
            cell[key[4]] = cell.get(key[4], 0) + n
        else:
            cell_ms = self.latency.setdefault(backend, {}).setdefault(tool, {})
            cell_ms[key[3]] = cell_ms.get(key[3], 0) + n

    def total(self, backend: str, tools: Iterable[str], outcomes: Iterable[str] | None = None) -> int:
        mine = self.calls.get(backend, {})
        wanted = tuple(outcomes) if outcomes is not None else None
        return sum(n for tool in tools for outcome, n in mine.get(tool, {}).items() if wanted is None or outcome in wanted)

    def p95(self, backend: str, tools: Iterable[str]) -> float | None:
        buckets: dict[int, int] = {}
        for tool in tools:
            for bucket, n in self.latency.get(backend, {}).get(tool, {}).items():
                buckets[bucket] = buckets.get(bucket, 0) + n
        return percentile(buckets, 0.95)


def _ours(key: tuple[Any, ...], backends: tuple[str, str]) -> bool:
    return key[0] in (TOOLS, TOOL_MS) and key[1] in backends


def baseline(minutes: Minutes, backends: tuple[str, str], now_ms: int, shadow: dict[str, int] | None = None) -> dict[str, Any]:
    """What a step (or the rollout) begins from: the counts of `backends` in the minute of `now_ms`,
    and the deciding process's shadow comparisons so far (`{"match", "differ"}`)."""
    minute = now_ms // 60_000
    counts = [[list(key), n] for m, bucket in minutes if m == minute for key, n in bucket.items() if _ours(key, backends)]
    return {"minute": minute, "counts": counts, "shadow": shadow or {"match": 0, "differ": 0}}


def since(minutes: Minutes, begun: dict[str, Any], backends: tuple[str, str]) -> Counts:
    """The counts of `backends` from `begun` (`baseline`) to now; once the minute it began in is no
    longer in the figures (they keep a day), the counts of every minute they keep."""
    counts = Counts()
    first = begun["minute"]
    kept = False
    for minute, bucket in minutes:
        kept = kept or minute == first
        if minute >= first:
            for key, n in bucket.items():
                if _ours(key, backends):
                    counts.add(key, n)
    if kept:  # the minute it began is still in the figures (a day of them): its earlier counts out
        for key, n in begun["counts"]:
            counts.add(tuple(key), -n)
    return counts


def _rate_gate(label: str, limit: float, counts: Counts, base: Counts, pair: tuple[str, str], tools: list[str],
               outcomes: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    source, target = pair
    calls, base_calls = counts.total(target, tools), base.total(source, tools)
    bad, base_bad = counts.total(target, tools, outcomes), base.total(source, tools, outcomes)
    rate, base_rate = bad / calls, base_bad / base_calls
    z = z_score(bad, calls, base_bad, base_calls)
    figures = {"gate": label, "to": round(rate, 4), "from": round(base_rate, 4), "increase": round(rate - base_rate, 4),
               "max": limit, "z": round(z, 2)}
    if rate - base_rate <= limit:
        return PASS, figures
    return (FAIL if z > Z_99 else HOLD), figures


def verdict(rollout: Rollout, step: Counts, whole: Counts, shadow: dict[str, int] | None) -> dict[str, Any]:
    """The check of a step whose time is up: `{"outcome": "pass" | "hold" | "fail", "reason", "figures"}`
    (module docstring). `step`: the counts of the step; `whole`: since the rollout began; `shadow`:
    the step's comparisons (`{"match", "differ"}`), None without a shadow gate."""
    pair = (rollout.from_, rollout.to)
    source, target = pair
    base = step if step.total(source, step.calls.get(source, {})) >= rollout.min_calls else whole
    tools = sorted(set(step.calls.get(target, {})) & set(base.calls.get(source, {})))
    calls, base_calls = step.total(target, tools), base.total(source, tools)
    figures: dict[str, Any] = {"to_calls": calls, "from_calls": base_calls, "from_counted": "step" if base is step else "rollout",
                               "tools": tools, "gates": []}
    if calls < rollout.min_calls or base_calls < rollout.min_calls:
        return {"outcome": HOLD, "figures": figures,
                "reason": f"{calls} calls on {target} and {base_calls} on {source} on the tools both answered: "
                          f"{rollout.min_calls} each before a check"}
    outcomes: list[tuple[str, dict[str, Any]]] = [
        _rate_gate("tool errors", rollout.max_tool_error_increase, step, base, pair, tools, (TOOL_ERROR,)),
        _rate_gate("errors", rollout.max_error_increase, step, base, pair, tools, ERRORS),
    ]
    if rollout.max_p95_ratio is not None:
        p95, base_p95 = step.p95(target, tools), base.p95(source, tools)
        ratio = p95 / base_p95 if p95 is not None and base_p95 else None
        outcomes.append((FAIL if ratio is not None and ratio > rollout.max_p95_ratio else PASS,
                         {"gate": "p95", "to": p95, "from": base_p95, "ratio": None if ratio is None else round(ratio, 2),
                          "max": rollout.max_p95_ratio}))
    if rollout.min_shadow_match is not None and shadow is not None:
        compared = shadow["match"] + shadow["differ"]
        share = shadow["match"] / compared if compared else None
        outcomes.append((FAIL if share is not None and share < rollout.min_shadow_match else PASS,
                         {"gate": "shadow match", "to": None if share is None else round(share, 4), "compared": compared,
                          "min": rollout.min_shadow_match}))
    figures["gates"] = [gate for _, gate in outcomes]
    failed = [gate for outcome, gate in outcomes if outcome == FAIL]
    held = [gate for outcome, gate in outcomes if outcome == HOLD]
    if failed:
        return {"outcome": FAIL, "figures": figures, "reason": "; ".join(_said(gate, target, source) for gate in failed)}
    if held:
        return {"outcome": HOLD, "figures": figures,
                "reason": "; ".join(_said(gate, target, source) + " (within chance: more calls)" for gate in held)}
    return {"outcome": PASS, "figures": figures, "reason": f"every gate within its bound ({calls} calls on {target}, {base_calls} on {source})"}


def _said(gate: dict[str, Any], target: str, source: str) -> str:
    """One gate's figures in words."""
    if gate["gate"] == "p95":
        return f"p95 {gate['to']} ms on {target} is {gate['ratio']} × {gate['from']} ms on {source} (max {gate['max']:g})"
    if gate["gate"] == "shadow match":
        return f"{100 * gate['to']:.1f} % of {gate['compared']} shadow comparisons matched (min {100 * gate['min']:.1f} %)"
    return (f"{gate['gate']} {100 * gate['to']:.1f} % on {target} against {100 * gate['from']:.1f} % on {source}: "
            f"+{100 * gate['increase']:.1f} points, max {100 * gate['max']:.1f} (z = {gate['z']})")
