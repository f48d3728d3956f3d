"""The status page's shadow section (docs/configuration.md "Shadowing"): per shadow backend, the
comparisons by method and tool with their match rate, and the last differences as compact diffs.
Input: `snapshot()["shadow"]` (`proxy.shadow.mirror.Shadowing.snapshot`); nothing without a shadow backend."""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

COLUMNS = ("match", "differ", "candidate_error", "primary_error", "timeout", "dropped", "too_large")


COUNTED_BY = {
    "process": "Counted by the process that answered this page: not kept across restarts, not added up over workers or replicas.",
    "workers": "Counts added up over this replica's workers and kept in the store, as /metrics counts them (not over replicas); "
               "queued and the last differences: the worker that answered this page.",
}
"""What a snapshot's `counted_by` means (`proxy/observe/status.py` `_shadow`)."""


def counted_scope(shadow: dict[str, Any]) -> str:
    """The heading's scope: "this process, since its start" or "this replica's workers"."""
    return "this replica's workers" if shadow.get("counted_by") == "workers" else "this process, since its start"


def _rate(rate: float | None) -> str:
    return "—" if rate is None else f"{rate * 100:.1f}%"


def section(shadows: list[dict[str, Any]], now: int, table: Callable[..., str], when: Callable[[int, int], str]) -> str:
    """`<h2>Shadow comparison</h2>` and one table of counts (id `shadow-<backend>`) and one of the
    last differences (id `shadow-diffs-<backend>`) per shadow backend; "" when there is none.
    `table` and `when` are the page's own table and time format (`proxy/observe/page.py`)."""
    if not shadows:
        return ""
    parts = [f"<h2>Shadow comparison ({escape(counted_scope(shadows[0]))})</h2>",
             f'<p class="muted">{escape(COUNTED_BY[shadows[0].get("counted_by", "process")])}</p>']
    for shadow in shadows:
        name = shadow["backend"]
        parts.append(f"<p>{escape(name)} shadows {escape(shadow['shadow_of'])} ({shadow['percent']:g}% of mirrored requests; "
                     f"{shadow['queued']} queued). Match rate: match / (match + differ).</p>")
        rows = [[escape(r["method"]), escape(r["tool"] or "—"), *(str(r[c]) for c in COLUMNS), _rate(r["match_rate"])]
                for r in shadow["rows"]]
        parts.append(table(["method", "tool", *(c.replace("_", " ") for c in COLUMNS), "match rate"], rows,
                            set(range(2, 2 + len(COLUMNS) + 1)), f"shadow-{escape(name)}"))
        diffs = [[escape(when(d["at_ms"], now)), escape(d["method"]), escape(d["tool"] or "—"),
                  f"<pre>{escape(d['diff'])}</pre>"] for d in shadow["last_differences"]]
        parts.append(f"<p>Last differences (primary → {escape(name)})</p>")
        parts.append(table(["when", "method", "tool", "difference"], diffs, set(), f"shadow-diffs-{escape(name)}"))
    return "\n".join(parts)
