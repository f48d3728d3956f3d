"""`mcp-tasks-proxy bench`: the comparison, side by side in one run, and the targets it reads.

One invocation starts one fast upstream (session wire, v1 tasks) and, in front of it, the proxy,
nginx and FastMCP 3.4.11's proxy; plus a fast modern-wire upstream with a proxy relaying to it.
Every process is separate from this one (the load generator), so each one's CPU seconds are its
own. Then, `runs` times, for each scenario, every row in turn (alternating, on the same upstream)
drives `concurrency` clients for `duration` seconds. The table holds the median of the runs.
"""

from __future__ import annotations

import asyncio
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import aiohttp

from . import targets
from .clients import FAST_TOOLS, REFERENCE_TOOLS, ModernClient, SessionClient, Tools
from .loadgen import Window, drive

POLL_INTERVAL_MS = 100
"""The no-work task's poll interval on the fast upstream (scenario b)."""


@dataclass(frozen=True)
class Scenario:
    key: str
    operation: str
    title: str


SCENARIOS = (
    Scenario("a", "echo", "(a) sync tools/call of an echo tool"),
    Scenario("b", "lifecycle", "(b) task lifecycle: a no-work task created, polled at its interval, result read "
                               "(one call = the whole lifecycle)"),
    Scenario("c", "progress", "(c) a tool streaming 100 progress notifications over SSE"),
)


@dataclass(frozen=True)
class Row:
    """One way of reaching the upstream. `target`: the URL's owner; `proxy`: the process measured as
    the intermediary (None when direct); `upstream`: the upstream process; `baseline`: the row
    the ratios divide by."""

    key: str
    label: str
    wire: str
    target: str
    proxy: str | None
    upstream: str
    baseline: str
    scenarios: str = "abc"


ROWS = (
    Row("direct", "direct: v1 client → upstream", "v1", "upstream", None, "upstream", "direct"),
    Row("nginx", "nginx (plain reverse proxy), v1 client", "v1", "nginx", "nginx", "upstream", "direct"),
    Row("relay", "mcp-tasks-proxy relaying, v1 client", "v1", "proxy", "proxy", "upstream", "direct"),
    Row("translate", "mcp-tasks-proxy translating, v2 client", "modern", "proxy", "proxy", "upstream", "direct"),
    Row("fastmcp3", "FastMCP 3.4.11 proxy, v1 client", "v1", "fastmcp3", "fastmcp3", "upstream", "direct", "a"),
    Row("direct-modern", "direct: v2 client → modern upstream", "modern", "upstream-modern", None, "upstream-modern",
        "direct-modern"),
    Row("relay-modern", "mcp-tasks-proxy relaying, v2 client", "modern", "proxy-modern", "proxy-modern", "upstream-modern",
        "direct-modern"),
)


@dataclass
class Options:
    duration_s: float = 3.0
    warmup_s: float = 0.5
    concurrency: int = 1
    runs: int = 3
    upstream: str = "fast"
    """"fast" (`proxy.bench.upstream`) or "reference" (the reference v1 server, mcp 1.30)."""
    nginx: bool = True
    fastmcp: bool = True
    rows: tuple[str, ...] = ()
    """Only these rows (empty: all)."""
    scenarios: str = "abc"
    event_loop: str = "auto"
    """The proxy's event loop: auto (uvloop when installed), uvloop or asyncio."""


@dataclass
class Cell:
    """One (scenario, row): every run's window, and what kept it from running."""

    windows: list[Window] = field(default_factory=list)
    skipped: str | None = None

    def median(self, value: Callable[[Window], float]) -> float:
        values = [v for v in (value(w) for w in self.windows) if not math.isnan(v)]
        return statistics.median(values) if values else float("nan")

    @property
    def errors(self) -> int:
        return sum(w.errors for w in self.windows)

    @property
    def ops(self) -> int:
        return sum(w.ops for w in self.windows)

    @property
    def error_texts(self) -> list[str]:
        return [t for w in self.windows for t in w.error_texts][:3]


@dataclass
class Report:
    options: Options
    machine: dict[str, Any]
    rows: list[Row]
    cells: dict[tuple[str, str], Cell]
    notes: list[str]
    started_at: str
    elapsed_s: float = 0.0
    memory: dict[str, Any] | None = None

    def cell(self, scenario: str, row: str) -> Cell | None:
        return self.cells.get((scenario, row))


def machine_facts(event_loop: str = "auto") -> dict[str, Any]:
    """CPU model, core count, memory, kernel, Python and aiohttp versions, the proxy's event loop."""
    model = ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        pass
    memory_kib = 0
    try:
        with open("/proc/meminfo") as fh:
            memory_kib = int(next(line.split()[1] for line in fh if line.startswith("MemTotal:")))
    except (OSError, StopIteration):
        pass
    import os

    from proxy.eventloop import ENV_EVENT_LOOP, loop_factory

    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": round(memory_kib / 1024 / 1024, 1),
            "kernel": platform.release(), "python": platform.python_version(), "aiohttp": aiohttp.__version__,
            "proxy_event_loop": loop_factory({ENV_EVENT_LOOP: event_loop})[0]}


# -- the processes ---------------------------------------------------------------------------------------


class Bench:
    """The started processes, by name, and the rows they make possible."""

    def __init__(self, options: Options, log: Callable[[str], None]):
        self.options = options
        self.log = log
        self.procs: dict[str, targets.Measured] = {}
        self.skipped: dict[str, str] = {}
        self.workdir = Path(tempfile.mkdtemp(prefix="mcp-tasks-proxy-bench-"))
        self.tools: Tools = FAST_TOOLS

    def start(self) -> None:
        wanted = {r.target for r in ROWS if not self.options.rows or r.key in self.options.rows}
        if self.options.upstream == "reference":
            from proxy.demo.processes import start_reference_v1_server

            self.log("starting the reference v1 server (mcp 1.30)")
            server = start_reference_v1_server()
            # Starlette's Mount answers /mcp with a 307 to /mcp/: every row uses /mcp/ at once.
            self.procs["upstream"] = targets.ChildServer("reference v1 server (mcp 1.30)", server)
            self.procs["upstream"].url = server.url.rstrip("/") + "/"
            self.tools = REFERENCE_TOOLS
            for name in ("upstream-modern", "proxy-modern"):
                self.skipped[name] = "no modern-wire reference rows (run with the fast upstream)"
        else:
            self.log("starting the fast upstreams")
            self.procs["upstream"] = targets.start_fast_upstream("v1", poll_interval_ms=POLL_INTERVAL_MS)
            if wanted & {"upstream-modern", "proxy-modern"}:
                self.procs["upstream-modern"] = targets.start_fast_upstream("modern", poll_interval_ms=POLL_INTERVAL_MS)
        upstream = self.procs["upstream"].url
        if "proxy" in wanted:
            self.log("starting mcp-tasks-proxy")
            self.procs["proxy"] = targets.start_proxy(upstream, self.workdir / "proxy", event_loop=self.options.event_loop)
        if "proxy-modern" in wanted and "upstream-modern" in self.procs:
            self.procs["proxy-modern"] = targets.start_proxy(self.procs["upstream-modern"].url, self.workdir / "proxy-modern",
                                                             event_loop=self.options.event_loop)
        if "nginx" in wanted:
            if not self.options.nginx:
                self.skipped["nginx"] = "left out (--no-nginx)"
            else:
                try:
                    self.procs["nginx"] = targets.start_nginx(upstream, self.log)
                except targets.NginxUnavailable as exc:
                    self.skipped["nginx"] = f"nginx unavailable: {exc}"
                    self.log(f"skipping the nginx row: {exc}")
        if "fastmcp3" in wanted:
            if not self.options.fastmcp:
                self.skipped["fastmcp3"] = "left out (--no-fastmcp)"
            else:
                self.log("starting FastMCP 3.4.11's proxy (builds its environment on first use)")
                try:
                    self.procs["fastmcp3"] = targets.start_fastmcp3_proxy(upstream)
                except (RuntimeError, OSError) as exc:
                    self.skipped["fastmcp3"] = f"FastMCP 3 proxy unavailable: {str(exc).splitlines()[0]}"
                    self.log(f"skipping the FastMCP row: {exc}")

    def stop(self) -> None:
        for name in list(self.procs)[::-1]:
            try:
                self.procs[name].stop()
            except Exception as exc:  # noqa: BLE001 - stop the others anyway
                self.log(f"stopping {name}: {exc}")
        self.procs.clear()
        import shutil

        shutil.rmtree(self.workdir, ignore_errors=True)

    def factory(self, row: Row) -> Callable[[aiohttp.ClientSession, int], Any]:
        url = self.procs[row.target].url
        tools = self.tools
        if row.wire == "modern":
            return lambda http, _i: ModernClient(http, url, tools=tools)
        return lambda http, _i: SessionClient(http, url, tools=tools)

    def measured(self, row: Row) -> dict[str, targets.Measured]:
        out = {"upstream": self.procs[row.upstream]}
        if row.proxy is not None:
            out["proxy"] = self.procs[row.proxy]
        return out


def _rows_for(options: Options) -> list[Row]:
    rows = [r for r in ROWS if not options.rows or r.key in options.rows]
    if options.upstream == "reference":
        rows = [r for r in rows if r.upstream == "upstream"]
    return rows


async def run_comparison(options: Options, log: Callable[[str], None] = lambda _m: None) -> Report:
    """Start everything, run every (scenario, row) `options.runs` times alternating, stop everything."""
    started = time.monotonic()
    bench = Bench(options, log)
    scenarios = [s for s in SCENARIOS if s.key in options.scenarios]
    if options.upstream == "reference":
        scenarios = [s for s in scenarios if s.key != "c"]
    report = Report(options, machine_facts(options.event_loop), [], {}, [], time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    try:
        await asyncio.to_thread(bench.start)
        report.rows = _rows_for(options)
        for scenario in scenarios:
            for row in report.rows:
                if scenario.key not in row.scenarios:
                    continue
                cell = report.cells[(scenario.key, row.key)] = Cell()
                missing = [n for n in (row.target, row.upstream) if n not in bench.procs]
                if missing:
                    cell.skipped = bench.skipped.get(missing[0], f"{missing[0]} not started")
        for run in range(options.runs):
            for scenario in scenarios:
                # Alternate: every row of a scenario in turn, the order rotated from run to run.
                order = [r for r in report.rows if (scenario.key, r.key) in report.cells]
                shift = run % len(order) if order else 0
                for row in order[shift:] + order[:shift]:
                    cell = report.cells[(scenario.key, row.key)]
                    if cell.skipped:
                        continue
                    log(f"run {run + 1}/{options.runs} {scenario.key} {row.key}")
                    try:
                        window = await drive(bench.factory(row), scenario.operation, concurrency=options.concurrency,
                                             duration_s=options.duration_s, warmup_s=options.warmup_s,
                                             measured=bench.measured(row))
                    except Exception as exc:  # noqa: BLE001 - a row that cannot even open is all errors
                        window = Window(errors=1, error_texts=[f"{exc.__class__.__name__}: {exc}"[:300]])
                    cell.windows.append(window)
    finally:
        await asyncio.to_thread(bench.stop)
    for name, reason in bench.skipped.items():
        report.notes.append(f"{name}: {reason}")
    report.elapsed_s = time.monotonic() - started
    return report


# -- reading the results -------------------------------------------------------------------------------------


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
            widths = [max(w, len(c)) for w, c in zip(widths, cells)]
    lines = ["  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths)))]
    for cells in rows:
        if len(cells) != len(header):
            lines.append(cells[0].ljust(widths[0]) + "  " + "  ".join(cells[1:]))
        else:
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    return "\n".join(lines)


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
        f"{o.duration_s:g} s per row × {o.runs} run(s) (medians), {report.elapsed_s:.0f} s in all",
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
                      "cpu_s": w.cpu_s, "notifications": w.notifications, "error_texts": w.error_texts} for w in cell.windows],
        }
    return {"options": report.options.__dict__ | {"rows": list(report.options.rows)}, "machine": report.machine,
            "started_at": report.started_at, "elapsed_s": report.elapsed_s, "cells": cells, "memory": report.memory,
            "targets": [t.__dict__ for t in evaluate_targets(report)], "notes": report.notes}


def main(args: Any) -> int:
    """The CLI: run, print the table (and write JSON when asked). Exit 0 unless nothing ran."""
    options = Options()
    if args.quick:
        options.duration_s, options.warmup_s, options.runs = 0.4, 0.1, 1
    if args.duration is not None:
        options.duration_s = args.duration
    if args.runs is not None:
        options.runs = args.runs
    options.concurrency = args.concurrency
    options.upstream = args.upstream
    options.event_loop = args.event_loop
    options.nginx = not args.no_nginx
    options.fastmcp = not args.no_fastmcp
    if args.rows:
        options.rows = tuple(r.strip() for r in args.rows.split(",") if r.strip())
        unknown = sorted(set(options.rows) - {r.key for r in ROWS})
        if unknown:
            print(f"mcp-tasks-proxy bench: unknown rows {', '.join(unknown)} (rows: {', '.join(r.key for r in ROWS)})",
                  file=sys.stderr)
            return 2
    if args.scenarios:
        options.scenarios = args.scenarios
        if not set(options.scenarios) <= {s.key for s in SCENARIOS}:
            print("mcp-tasks-proxy bench: --scenarios takes letters among a, b and c", file=sys.stderr)
            return 2
    if options.concurrency < 1 or options.duration_s <= 0 or options.runs < 1:
        print("mcp-tasks-proxy bench: --concurrency and --runs must be at least 1, --duration above 0", file=sys.stderr)
        return 2

    def log(message: str) -> None:
        print(f"[bench] {message}", file=sys.stderr, flush=True)

    progress = log if not args.quiet else (lambda _m: None)
    if args.memory_only:
        from .memory import run_memory

        memory = run_memory(live_tasks=args.live_tasks, clients=args.memory_clients, completed=args.completed, log=progress)
        print(format_memory(memory), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"machine": machine_facts(), "memory": memory}, indent=2, default=str) + "\n")
        return 0 if memory.get("live_tasks") or memory.get("completed_tasks") else 1
    report = asyncio.run(run_comparison(options, progress))
    if args.memory:
        from .memory import run_memory

        report.memory = run_memory(live_tasks=args.live_tasks, clients=args.memory_clients, completed=args.completed,
                                   log=progress)
    print(format_report(report), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report_json(report), indent=2, default=str) + "\n")
    ran = any(cell.windows for cell in report.cells.values())
    return 0 if ran else 1
