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
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from . import targets
from .clients import FAST_TOOLS, REFERENCE_TOOLS, Tools
from .loadgen import ClientSpec, Window, drive
from .report import format_memory, format_report, report_json
from .rows import POLL_INTERVAL_MS, SCENARIOS, Cell, Options, Report, Row, expand_rows, machine_facts

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
        self.redis: Any = None
        """The Redis server of `--store redis` (stopped after the proxies)."""

    def start(self) -> None:
        wanted = {r.target for r in _rows_for(self.options)}
        if self.options.upstream == "reference":
            from proxy.demo.processes import start_reference_v1_server

            self.log("starting the reference v1 server (mcp 1.30)")
            server = start_reference_v1_server()
            # Starlette's Mount answers /mcp with a 307 to /mcp/: every row uses /mcp/ at once.
            self.procs["upstream"] = targets.ChildServer("reference v1 server (mcp 1.30)", server)
            self.procs["upstream"].url = server.url.rstrip("/") + "/"
            self.tools = REFERENCE_TOOLS
            for name in ("upstream-modern", "proxy-modern", "proxy-shadow", "proxy-shadow-10"):
                self.skipped[name] = "no modern-wire reference rows (run with the fast upstream)"
        else:
            count = self.options.upstreams
            self.log(f"starting the fast upstreams ({count} of each wire)" if count > 1 else "starting the fast upstreams")
            self.procs["upstream"] = targets.start_fast_upstreams("v1", count, poll_interval_ms=POLL_INTERVAL_MS)
            if any(t == "upstream-modern" or t.startswith(("proxy-modern", "proxy-shadow")) for t in wanted):
                self.procs["upstream-modern"] = targets.start_fast_upstreams("modern", count, poll_interval_ms=POLL_INTERVAL_MS)
            if count > 1:
                for name in ("fastmcp3", "proxy-shadow", "proxy-shadow-10", "proxy-stdio"):
                    self.skipped[name] = "one upstream only (run without --upstreams)"
                # A session's requests must reach the upstream that began it; nginx has nothing to pin one by.
                self.skipped["nginx"] = "the session wire through several upstreams needs stickiness nginx cannot give it"
        upstream = self.procs["upstream"].url
        store: dict[str, object] = {}
        if self.options.store == "redis":
            from .redis_server import start_redis

            self.log("starting redis-server")
            self.redis = start_redis(self.log)
            store = {"store": self.redis.url}
        loop = self.options.event_loop
        for workers in self.options.workers:
            suffix = "" if workers == 1 else f"-w{workers}"
            if "proxy" + suffix in wanted:
                self.log(f"starting mcp-tasks-proxy ({workers} worker{'s' if workers > 1 else ''})")
                self.procs["proxy" + suffix] = targets.start_proxy(upstream, self.workdir / ("proxy" + suffix), event_loop=loop,
                                                                   workers=workers, tables=_tables(self.procs["upstream"]), **store)
            if "proxy-modern" + suffix in wanted and "upstream-modern" in self.procs:
                modern = self.procs["upstream-modern"]
                self.procs["proxy-modern" + suffix] = targets.start_proxy(
                    modern.url, self.workdir / ("proxy-modern" + suffix), event_loop=loop, workers=workers, tables=_tables(modern), **store)
        for name, percent in (("proxy-shadow", 100), ("proxy-shadow-10", 10)):
            if name in wanted and "upstream-modern" in self.procs:
                self.log(f"starting mcp-tasks-proxy with a shadow backend ({percent} % mirrored)")
                tables = shadow_tables(upstream, self.procs["upstream-modern"].url, percent)
                self.procs[name] = targets.start_proxy(upstream, self.workdir / name, event_loop=loop, tables=tables, **store)
        if "proxy-stdio" in wanted and self.options.upstream != "reference" and "proxy-stdio" not in self.skipped:
            self.procs["proxy-stdio"] = targets.start_stdio_proxy(self.workdir / "proxy-stdio", event_loop=self.options.event_loop,
                                                                  poll_interval_ms=POLL_INTERVAL_MS)
            self.procs["upstream-stdio"] = targets.ChildrenOf("fast upstream (stdio)", self.procs["proxy-stdio"])
        if "nginx" in wanted and "nginx" not in self.skipped:
            if not self.options.nginx:
                self.skipped["nginx"] = "left out (--no-nginx)"
            else:
                try:
                    self.procs["nginx"] = targets.start_nginx(upstream, self.log)
                except targets.NginxUnavailable as exc:
                    self.skipped["nginx"] = f"nginx unavailable: {exc}"
                    self.log(f"skipping the nginx row: {exc}")
        if "fastmcp3" in wanted and "fastmcp3" not in self.skipped:
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
        if self.redis is not None:
            self.redis.stop()
            self.redis = None
        import shutil

        shutil.rmtree(self.workdir, ignore_errors=True)

    def factory(self, row: Row) -> ClientSpec:
        """The row's clients: through its target, or spread over every upstream on a direct row."""
        return ClientSpec(row.wire, tuple(self.procs[row.target].urls), self.tools)

    def measured(self, row: Row) -> dict[str, targets.Measured]:
        out = {"upstream": self.procs[row.upstream]}
        if row.proxy is not None:
            out["proxy"] = self.procs[row.proxy]
        if row.proxy is not None and row.proxy.startswith("proxy-shadow"):
            out["shadow"] = targets.ChildrenOf("the proxy's shadow process", self.procs[row.proxy])
            out["candidate"] = self.procs["upstream-modern"]
        return out

    async def shadow_counts(self) -> dict[str, dict[str, int]]:
        """Each shadow row's comparisons as its proxy counted them since its start (warm-up calls
        included): `{row target: {match, differ, candidate_error, primary_error, timeout, dropped, too_large}}`."""
        out: dict[str, dict[str, int]] = {}
        async with aiohttp.ClientSession() as http:
            for name in ("proxy-shadow", "proxy-shadow-10"):
                if name not in self.procs:
                    continue
                base = self.procs[name].url.rsplit("/mcp", 1)[0]
                try:
                    async with http.get(base + "/status.json") as response:
                        shadow = (await response.json())["shadow"]
                except (aiohttp.ClientError, ValueError, KeyError) as exc:
                    self.log(f"reading {name}'s shadow counts: {exc}")
                    continue
                totals = dict.fromkeys(SHADOW_OUTCOMES, 0)
                for candidate in shadow:
                    for counts in candidate["rows"]:
                        for key in SHADOW_OUTCOMES:
                            totals[key] += int(counts[key])
                out[name] = totals
        return out


SHADOW_OUTCOMES = ("match", "differ", "candidate_error", "primary_error", "timeout", "dropped", "too_large")


def _tables(upstream: targets.Measured) -> str:
    """`[[upstream]]` tables for every process of `upstream` when there are several (`--upstreams`), else none."""
    urls = upstream.urls
    return "".join(f'[[upstream]]\nname = "u{i + 1}"\nurl = "{url}"\n\n' for i, url in enumerate(urls)) if len(urls) > 1 else ""


def shadow_tables(primary: str, candidate: str, percent: int = 100) -> str:
    """The shadow rows' backends: the v1 fast upstream as primary, the modern one shadowing it with
    every tool the scenarios call mirrored (the fast upstream annotates none `readOnlyHint`), `percent`
    of the calls sampled."""
    return (f'[[upstream]]\nname = "legacy"\nurl = "{primary}"\n\n[[upstream]]\nname = "next"\nurl = "{candidate}"\n'
            f'shadow_of = "legacy"\nshadow_tools = ["echo", "nowork"]\nshadow_queue = 1024\nshadow_percent = {percent}\n')


def _rows_for(options: Options) -> list[Row]:
    rows = [r for r in expand_rows(options.workers) if not options.rows or r.key in options.rows or r.family in options.rows]
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
                                             measured=bench.measured(row), processes=options.load_processes)
                    except Exception as exc:  # noqa: BLE001 - a row that cannot even open is all errors
                        window = Window(errors=1, error_texts=[f"{exc.__class__.__name__}: {exc}"[:300]])
                    cell.windows.append(window)
        report.shadow = await bench.shadow_counts()
    finally:
        await asyncio.to_thread(bench.stop)
    for name, reason in bench.skipped.items():
        report.notes.append(f"{name}: {reason}")
    report.elapsed_s = time.monotonic() - started
    return report


def _soak(args: Any, log: Callable[[str], None]) -> int:
    """`--soak`: print the figures (and write them as JSON when asked). Exit 1 on any error or wrong
    answer (with `--soak-kill-at`: any of a lifecycle begun after the kill), or when no lifecycle
    ran; refusals (503 with `Retry-After`) are answers, and the memory verdict is printed, never
    failed on."""
    from .soak import raise_nofile, refusal, run_soak
    from .soak_report import format_soak

    reason = refusal(args.soak_clients, args.soak_minutes, raise_nofile()[0], args.soak_replicas, args.soak_kill_at)
    if reason:
        print(f"mcp-tasks-proxy bench: {reason}", file=sys.stderr)
        return 2
    soak = run_soak(clients=args.soak_clients, minutes=args.soak_minutes, event_loop=args.event_loop, replica_count=args.soak_replicas,
                    kill_at_s=args.soak_kill_at, overload_lag_ms=args.soak_overload_lag_ms, log=log)
    print(format_soak(soak), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine_facts(args.event_loop), "soak": soak}, indent=2, default=str) + "\n")
    errors = soak["errors"]["total"]
    if "after_kill" in soak:  # those begun before it may have been in flight on the killed replica
        errors = sum(n for kind, n in soak["after_kill"].items() if kind != "refused")
    failed = errors or soak["wrong"]["total"] or not soak["lifecycles"]["total"]
    return 1 if failed else 0


MAX_DURATION_S = 3600.0
"""The longest `--duration` of one row's run (an hour; not a number, infinity, are refused)."""


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
    options.store = args.store
    try:
        options.workers = tuple(sorted({int(w) for w in str(args.workers).split(",") if w.strip()}))
    except ValueError:
        options.workers = ()
    if not options.workers or min(options.workers) < 1:
        print("mcp-tasks-proxy bench: --workers takes worker counts of at least 1, e.g. 2 or 1,2", file=sys.stderr)
        return 2
    if max(options.workers) > 1:
        options.store = "redis"  # worker processes share a Redis store (docs/decisions.md §52)
    options.nginx = not args.no_nginx
    options.fastmcp = not args.no_fastmcp
    if args.rows is not None:
        options.rows = tuple(r.strip() for r in args.rows.split(",") if r.strip())
        if not options.rows:
            print("mcp-tasks-proxy bench: --rows names at least one row, e.g. relay or direct,relay", file=sys.stderr)
            return 2
        unknown = sorted(set(options.rows) - {r.key for r in expand_rows(options.workers)})
        if unknown:
            print(f"mcp-tasks-proxy bench: unknown rows {', '.join(unknown)} (rows: {', '.join(r.key for r in expand_rows(options.workers))})",
                  file=sys.stderr)
            return 2
    if args.scenarios:
        options.scenarios = args.scenarios
        known = [s.key for s in SCENARIOS]
        unknown_letters = [letter for letter in options.scenarios if letter not in known]
        if unknown_letters:
            print(f"mcp-tasks-proxy bench: unknown scenario {unknown_letters[0]!r} (scenarios: {', '.join(known)})", file=sys.stderr)
            return 2
    if options.concurrency < 1 or not 0 < options.duration_s <= MAX_DURATION_S or options.runs < 1:
        print(f"mcp-tasks-proxy bench: --concurrency and --runs must be at least 1, --duration above 0 and at most {MAX_DURATION_S:g} s",
              file=sys.stderr)
        return 2
    options.load_processes, options.upstreams = args.load_processes, args.upstreams
    if options.load_processes < 1 or options.upstreams < 1 or options.load_processes > options.concurrency:
        print("mcp-tasks-proxy bench: --load-processes and --upstreams must be at least 1, and --concurrency at least --load-processes",
              file=sys.stderr)
        return 2
    if options.upstreams > 1 and options.upstream == "reference":
        print("mcp-tasks-proxy bench: --upstreams is for the fast upstream", file=sys.stderr)
        return 2
    if (args.memory or args.memory_only) and min(args.live_tasks, args.memory_clients, args.completed) < 1:
        print("mcp-tasks-proxy bench: --live-tasks, --memory-clients and --completed must be at least 1", file=sys.stderr)
        return 2

    def log(message: str) -> None:
        print(f"[bench] {message}", file=sys.stderr, flush=True)

    progress = log if not args.quiet else (lambda _m: None)
    if args.soak:
        return _soak(args, progress)
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
