"""Reading a comparison's report: the figures of each row, the tables, the targets, JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .rows import SCENARIOS, Report, Row, Scenario


def _ms(seconds: float) -> float:
    return seconds * 1000


def row_figures(report: Report, scenario: str, row: Row) -> dict[str, float] | None:
    """The medians of one cell, and its ratios to its baseline row (same scenario)."""
    cell = report.cell(scenario, row.key)
    if cell is None or cell.skipped or not cell.windows:
        return None
    figures = {
        "rps": cell.median(lambda w: w.rate),
        "p50_ms": _ms(cell.median(lambda w: w.percentile(50))),
        "p90_ms": _ms(cell.median(lambda w: w.percentile(90))),
        "p99_ms": _ms(cell.median(lambda w: w.percentile(99))),
        "errors": float(cell.errors),
        "ops": float(cell.ops),
        "notifications_per_op": cell.median(lambda w: w.notifications / w.ops if w.ops else float("nan")),
        "proxy_cpu_ms": _ms(cell.median(lambda w: w.cpu_per_op("proxy"))),
        "upstream_cpu_ms": _ms(cell.median(lambda w: w.cpu_per_op("upstream"))),
    }
    figures["load_cores"] = cell.median(lambda w: w.load_cpu_s / w.elapsed_s if w.load_cpu_s is not None and w.elapsed_s else float("nan"))
    figures["proxy_per_upstream"] = cell.median(lambda w: w.cpu_per_op("proxy") / w.cpu_per_op("upstream")
                                                if w.cpu_s.get("upstream") else float("nan"))
    base = report.cell(scenario, row.baseline)
    if base is not None and base.windows and not base.skipped:
        base_rps = base.median(lambda w: w.rate)
        base_p50 = _ms(base.median(lambda w: w.percentile(50)))
        figures["rps_ratio"] = figures["rps"] / base_rps if base_rps else float("nan")
        figures["p50_ratio"] = figures["p50_ms"] / base_p50 if base_p50 else float("nan")
        figures["p50_added_ms"] = figures["p50_ms"] - base_p50
    return figures


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


COLUMNS = ("row", "req/s", "p50 ms", "p90 ms", "p99 ms", "errors", "req/s ÷direct", "p50 ÷direct", "+p50 ms",
           "proxy CPU ms/call", "upstream CPU ms/call", "proxy ÷ upstream CPU")


def table_rows(report: Report, scenario: Scenario) -> list[list[str]]:
    """The printed cells of one scenario's table (strings), one list per row."""
    out = []
    for row in report.rows:
        cell = report.cell(scenario.key, row.key)
        if cell is None:
            continue
        if cell.skipped:
            out.append([row.label, f"skipped: {cell.skipped}"])
            continue
        f = row_figures(report, scenario.key, row)
        assert f is not None
        label = row.label
        if scenario.key == "c":
            label += f" [{_fmt(f['notifications_per_op'], 0)}/100 notifications]"
        baseline = row.key == row.baseline
        out.append([
            label, _fmt(f["rps"], 0 if f["rps"] >= 100 else 1), _fmt(f["p50_ms"]), _fmt(f["p90_ms"]), _fmt(f["p99_ms"]),
            str(int(f["errors"])),
            "1" if baseline else _fmt(f.get("rps_ratio")), "1" if baseline else _fmt(f.get("p50_ratio")),
            "" if baseline else _fmt(f.get("p50_added_ms")),
            "" if row.proxy is None else _fmt(f["proxy_cpu_ms"], 3), _fmt(f["upstream_cpu_ms"], 3),
            "" if row.proxy is None else _fmt(f["proxy_per_upstream"]),
        ])
    return out


def _render_table(header: tuple[str, ...], rows: list[list[str]]) -> str:
    widths = [len(h) for h in header]
    for cells in rows:
        if len(cells) == len(header):
            widths = [max(w, len(c)) for w, c in zip(widths, cells, strict=False)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths, strict=False)))]
    for cells in rows:
        if len(cells) != len(header):
            lines.append(cells[0].ljust(widths[0]) + "  " + "  ".join(cells[1:]))
        else:
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=False))))
    return "\n".join(lines)


def workers_figures(report: Report) -> dict[str, dict[str, dict[int, dict[str, float]]]]:
    """Per scenario and proxy row measured with more than one worker count: each count's
    throughput, median latency and proxy CPU per call (over every worker process), and its
    throughput ÷ the smallest count's."""
    out: dict[str, dict[str, dict[int, dict[str, float]]]] = {}
    if len(report.options.workers) < 2:
        return out
    for scenario in SCENARIOS:
        for row in report.rows:
            f = row_figures(report, scenario.key, row)
            if f is None:
                continue
            family = out.setdefault(scenario.key, {}).setdefault(row.family, {})
            family[row.workers] = {"rps": f["rps"], "p50_ms": f["p50_ms"], "proxy_cpu_ms": f["proxy_cpu_ms"],
                                   "upstream_cpu_ms": f["upstream_cpu_ms"], "errors": f["errors"], "load_cores": f["load_cores"]}
        for key, family in list(out.get(scenario.key, {}).items()):
            if len(family) < 2:
                del out[scenario.key][key]
                continue
            first = family[min(family)]["rps"]
            for figures in family.values():
                figures["rps_ratio"] = figures["rps"] / first if first else float("nan")
    return {s: rows for s, rows in out.items() if rows}


def format_workers(report: Report) -> list[str]:
    """The side-by-side lines of `--workers 1,2`."""
    figures = workers_figures(report)
    if not figures:
        return []
    lines = ["", f"worker processes (serve --workers; concurrency {report.options.concurrency}; "
                 "proxy CPU per call summed over every worker process):"]
    for scenario, rows in figures.items():
        for key, family in rows.items():
            parts = [f"{w} worker{'s' if w > 1 else ''}: {_fmt(f['rps'], 0)} /s ({_fmt(f['rps_ratio'])} ×), "
                     f"p50 {_fmt(f['p50_ms'])} ms, proxy CPU {_fmt(f['proxy_cpu_ms'], 3)} ms/call, "
                     f"upstream CPU {_fmt(f['upstream_cpu_ms'], 3)} ms/call"
                     + ("" if math.isnan(f["load_cores"]) else f", load generator {_fmt(f['load_cores'])} cores")
                     for w, f in sorted(family.items())]
            lines.append(f"  ({scenario}) {key}: " + "; ".join(parts))
    return lines


@dataclass
class Target:
    name: str
    goal: str
    value: str
    met: bool | None
    """None: not measured in this run."""


def evaluate_targets(report: Report) -> list[Target]:
    """The issue's targets, read from the figures (never asserted anywhere)."""
    rows = {r.key: r for r in report.rows}
    out: list[Target] = []

    def fig(scenario: str, key: str) -> dict[str, float] | None:
        return row_figures(report, scenario, rows[key]) if key in rows else None

    relay_a, translate_a, fastmcp_a = fig("a", "relay"), fig("a", "translate"), fig("a", "fastmcp3")
    c1 = report.options.concurrency == 1
    note = "" if c1 else f" (measured at concurrency {report.options.concurrency}; the target is at 1)"
    if relay_a and "p50_added_ms" in relay_a:
        added = relay_a["p50_added_ms"]
        out.append(Target("relay latency", "relay adds ≤ 1 ms median per sync call at concurrency 1",
                          f"+{added:.2f} ms (p50 {relay_a['p50_ms']:.2f} ms vs direct)" + note, added <= 1.0 if c1 else None))
    if relay_a:
        ratio = relay_a["proxy_per_upstream"]
        out.append(Target("relay CPU", "proxy CPU per relayed sync call ≤ 2 × upstream CPU per call",
                          f"{ratio:.2f} × ({relay_a['proxy_cpu_ms']:.3f} vs {relay_a['upstream_cpu_ms']:.3f} ms)",
                          None if math.isnan(ratio) else ratio <= 2.0))
    if translate_a:
        ratio = translate_a["proxy_per_upstream"]
        out.append(Target("translation CPU", "proxy CPU per translated sync call ≤ 3 × upstream CPU per call",
                          f"{ratio:.2f} × ({translate_a['proxy_cpu_ms']:.3f} vs {translate_a['upstream_cpu_ms']:.3f} ms)",
                          None if math.isnan(ratio) else ratio <= 3.0))
    if fastmcp_a and (relay_a or translate_a):
        for label, mine in (("relayed", relay_a), ("translated", translate_a)):
            if not mine:
                continue
            share = mine["proxy_cpu_ms"] / fastmcp_a["proxy_cpu_ms"] if fastmcp_a["proxy_cpu_ms"] else float("nan")
            out.append(Target(f"vs FastMCP ({label})", f"proxy CPU per {label} sync call ≤ ⅓ of FastMCP 3.4.11 proxy's",
                              f"{share:.3f} ({mine['proxy_cpu_ms']:.3f} vs {fastmcp_a['proxy_cpu_ms']:.3f} ms, 1/{1 / share:.0f})"
                              if share == share and share > 0 else "–",
                              None if math.isnan(share) else share <= 1 / 3))
    else:
        out.append(Target("vs FastMCP", "proxy CPU per sync call ≤ ⅓ of FastMCP 3.4.11 proxy's", "not measured", None))
    translate_b = fig("b", "translate")
    if translate_b and "p50_added_ms" in translate_b:
        added = translate_b["p50_added_ms"]
        out.append(Target("translated lifecycle", "translated task lifecycle adds ≤ 5 ms median to a direct v1 client's",
                          f"+{added:.2f} ms (p50 {translate_b['p50_ms']:.2f} ms vs direct)" + note, added <= 5.0 if c1 else None))
    memory = report.memory
    if memory:
        per_task = memory.get("per_live_task_bytes")
        if per_task is not None:
            out.append(Target("memory per live task", "≤ 4 KiB proxy memory per live polled task",
                              f"{per_task / 1024:.2f} KiB ({memory['live_tasks']} tasks)", per_task <= 4096))
        growth = memory.get("completed_growth_bytes")
        if growth is not None:
            out.append(Target("memory after completed tasks", "flat after 100,000 completed tasks",
                              f"{growth / 1024 / 1024:+.1f} MiB over the second half of {memory['completed_tasks']:,} tasks",
                              memory.get("completed_flat")))
    else:
        out.append(Target("memory", "≤ 4 KiB per live task; flat after 100,000 completed tasks",
                          "not measured in this run (mcp-tasks-proxy bench --memory)", None))
    return out


def format_report(report: Report) -> str:
    o = report.options
    m = report.machine
    lines = [
        f"mcp-tasks-proxy benchmark: {o.upstream} upstream, concurrency {o.concurrency}, "
        f"{o.duration_s:g} s per row × {o.runs} run(s) (medians), {report.elapsed_s:.0f} s in all"
        + (f"; load from {o.load_processes} processes" if o.load_processes > 1 else "")
        + (f"; {o.upstreams} upstream processes of each wire" if o.upstreams > 1 else ""),
        f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']}, "
        f"Python {m['python']}, aiohttp {m['aiohttp']}, proxy on {m['proxy_event_loop']}; load generator, proxies and "
        "upstream share the cores",
    ]
    scenarios = [s for s in SCENARIOS if any(k[0] == s.key for k in report.cells)]
    for scenario in scenarios:
        lines += ["", scenario.title, _render_table(COLUMNS, table_rows(report, scenario))]
    errors = [(s.key, r.key, report.cells[(s.key, r.key)].error_texts) for s in scenarios for r in report.rows
              if (s.key, r.key) in report.cells and report.cells[(s.key, r.key)].errors]
    if errors:
        lines += ["", "errors:"]
        lines += [f"  ({s}) {r}: {'; '.join(texts)}" for s, r, texts in errors]
    lines += format_workers(report)
    lines += format_shadow(report)
    if report.memory:
        lines += ["", format_memory(report.memory)]
    lines += ["", "targets (read from the figures above):"]
    reference = report.options.upstream != "fast"
    if reference:
        lines.append("  (the targets are defined on the fast upstream; against this one the figures are for realism only)")
    for target in evaluate_targets(report):
        verdict = "n/a" if reference else {True: "met", False: "NOT met", None: "n/a"}[target.met]
        lines.append(f"  [{verdict:>7}] {target.goal}: {target.value}")
    if report.notes:
        lines += ["", "notes:"] + [f"  {n}" for n in report.notes]
    return "\n".join(lines)


def format_shadow(report: Report) -> list[str]:
    """The shadow rows' lines: what each comparison cost outside the proxy's event loop (its shadow
    process and the candidate, CPU ms per client call, medians), and how many calls were compared
    and how many dropped, as the proxy counted them."""
    lines: list[str] = []
    for scenario in SCENARIOS:
        for row in report.rows:
            cell = report.cell(scenario.key, row.key)
            if row.proxy is None or not row.proxy.startswith("proxy-shadow") or cell is None or cell.skipped or not cell.windows:
                continue
            shadow = _ms(cell.median(lambda w: w.cpu_per_op("shadow")))
            candidate = _ms(cell.median(lambda w: w.cpu_per_op("candidate")))
            lines.append(f"  ({scenario.key}) {row.key}: shadow process CPU {_fmt(shadow, 3)} ms/call, candidate CPU "
                         f"{_fmt(candidate, 3)} ms/call, {cell.ops} calls measured")
    for name, counts in report.shadow.items():
        compared = counts["match"] + counts["differ"]
        lines.append(f"  {name}: {compared} compared ({counts['match']} match, {counts['differ']} differ), "
                     f"{counts['dropped']} dropped, {counts['timeout']} timeouts, "
                     f"{counts['candidate_error'] + counts['primary_error']} errors, {counts.get('too_large', 0)} too large "
                     "(since the proxy started, warm-up calls included)")
    return ["", "shadow comparisons:", *lines] if lines else []


def format_memory(memory: dict[str, Any]) -> str:
    lines = ["memory (proxy RSS, v1_session_scope = \"principal\"):"]
    for label, key in (("after start and warm-up", "baseline_rss"), (f"{memory.get('live_tasks', 0):,} live tasks being polled",
                                                                      "live_rss")):
        if key in memory:
            lines.append(f"  {label}: {memory[key] / 1024 / 1024:.1f} MiB")
    if "per_live_task_bytes" in memory:
        lines.append(f"  per live task: {memory['per_live_task_bytes'] / 1024:.2f} KiB; polls answered: "
                     f"{memory.get('polls', 0):,} in {memory.get('poll_s', 0):.0f} s "
                     f"({memory.get('poll_rate', 0):.0f}/s, {memory.get('poll_errors', 0)} errors)")
    for count, rss in memory.get("completed_checkpoints", []):
        lines.append(f"  after {count:,} completed tasks: {rss / 1024 / 1024:.1f} MiB")
    if memory.get("completed_errors"):
        lines.append(f"  errors while completing tasks: {memory['completed_errors']}")
    return "\n".join(lines)


def report_json(report: Report) -> dict[str, Any]:
    """Everything measured, for `--json`."""
    cells = {}
    for (scenario, key), cell in report.cells.items():
        row = next(r for r in report.rows if r.key == key)
        cells[f"{scenario}/{key}"] = {
            "skipped": cell.skipped,
            "figures": row_figures(report, scenario, row),
            "runs": [{"ops": w.ops, "errors": w.errors, "elapsed_s": w.elapsed_s, "rps": w.rate,
                      "p50_ms": _ms(w.percentile(50)), "p90_ms": _ms(w.percentile(90)), "p99_ms": _ms(w.percentile(99)),
                      "cpu_s": w.cpu_s, "load_cpu_s": w.load_cpu_s,
                      "notifications": w.notifications, "error_texts": w.error_texts} for w in cell.windows],
        }
    return {"options": report.options.__dict__ | {"rows": list(report.options.rows)}, "machine": report.machine,
            "started_at": report.started_at, "elapsed_s": report.elapsed_s, "cells": cells, "workers": workers_figures(report),
            "memory": report.memory, "shadow": report.shadow, "targets": [t.__dict__ for t in evaluate_targets(report)], "notes": report.notes}
