"""`mcp-tasks-proxy bench --instructions`: instructions per call of the proxy process, counted
by valgrind's callgrind, the CPU figure that does not move with the machine's load.

CPU seconds per call (the comparison table) drift by several percent from run to run on a shared
machine; the instruction count of the same calls varies by about 2 % at most. So a change
on the relay path is judged by this count, before and after (docs/performance.md, "Instructions
per call").

For each row and scenario: the fast upstream (`proxy.bench.upstream`) in a process of its own,
the proxy under `valgrind --tool=callgrind` in front of it, one client that warms the proxy up
(imports, caches, its session), then `callgrind_control --zero`, `calls` calls, and
`callgrind_control --dump`; the dump's total is the instructions of exactly those calls (every
thread of the proxy, its SQLite and event loop included). Valgrind (Debian's package) is
installed with apt-get when missing. The proxy runs on the loop `serve` would choose here (uvloop
where it is installed, as it is by default); `--event-loop asyncio` counts asyncio's own. The two
count differently: both sides of a comparison must use the same. With
`--against-upstream` the fast upstream runs under callgrind too, zeroed and dumped with the
proxy: its instructions for the same calls, and the proxy's ÷ the upstream's (issue 45's CPU
ratio, counted rather than timed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

from ..eventloop import ENV_EVENT_LOOP, loop_factory
from . import targets
from .clients import PROGRESS_COUNT, BenchError, ModernClient, SessionClient
from .packages import PackageUnavailable, ensure_package
from .rows import POLL_INTERVAL_MS

ROWS = {
    "relay": ("v1", SessionClient, "relaying, v1 client → v1 upstream"),
    "relay-modern": ("modern", ModernClient, "relaying, v2 client → modern upstream"),
    "translate": ("v1", ModernClient, "translating, v2 client → v1 upstream"),
    "stdio": ("stdio", SessionClient, "relaying, v1 client → v1 upstream on stdio"),
    "stdio-translate": ("stdio", ModernClient, "translating, v2 client → v1 upstream on stdio"),
}
"""Row → (the upstream's wire, the client, what it measures). On the "stdio" wire the proxy runs the
fast upstream as its child (`--upstream-command`); callgrind counts the proxy alone, not the child."""
SCENARIOS = {"a": "echo", "b": "lifecycle", "c": "progress"}
"""Scenario letter → the client's method (`proxy.bench.clients`): (a) a sync echo `tools/call`,
(b) a no-work task's whole lifecycle (how often it is polled depends on timing: compare (a) first),
(c) a call answered with 100 `notifications/progress` before its result (each must arrive)."""
DEFAULT_CALLS = 300
"""Calls counted per row when `--calls` is not given."""
LIFECYCLE_SHARE = 5
"""Scenarios (b) and (c) make `calls / LIFECYCLE_SHARE` calls (each is several requests or
a hundred notifications)."""
CONTROL_TIMEOUT_S = 60.0


@dataclass
class Count:
    row: str
    scenario: str
    calls: int
    instructions: int
    wall_s: float
    """Seconds the counted calls took under valgrind (tens of times slower than without)."""
    upstream_instructions: int | None = None
    """The fast upstream's instructions for the same calls (`--against-upstream`), else None."""

    @property
    def per_call(self) -> float:
        return self.instructions / self.calls

    @property
    def upstream_per_call(self) -> float | None:
        return None if self.upstream_instructions is None else self.upstream_instructions / self.calls

    @property
    def ratio(self) -> float | None:
        """The proxy's instructions ÷ the upstream's for the same calls (issue 45's "CPU per call ÷
        the upstream's", counted rather than timed)."""
        return None if not self.upstream_instructions else self.instructions / self.upstream_instructions


def ensure_valgrind(log: Callable[[str], None] = lambda _m: None) -> tuple[str, str]:
    """`valgrind` and `callgrind_control`, installing Debian's `valgrind` package when missing.
    Raises `PackageUnavailable`."""
    valgrind = ensure_package("valgrind", "valgrind", log)
    control = shutil.which("callgrind_control")
    if control is None:
        raise PackageUnavailable("callgrind_control (part of valgrind) is not on PATH")
    return valgrind, control


def measure(row: str, scenario: str, calls: int, *, event_loop: str = "asyncio", against_upstream: bool = False,
            log: Callable[[str], None] = lambda _m: None) -> Count:
    """Instructions the proxy spends on `calls` calls of `scenario` ("echo", "lifecycle" or "progress") on
    `row` (a key of `ROWS`); with `against_upstream` (an HTTP row), the fast upstream's for the
    same calls too, counted the same way in the same run. Raises `PackageUnavailable` without
    valgrind, `BenchError` when a call is answered wrongly, `ServerStartError` when a process does not start."""
    from proxy.keys import new_key_text

    valgrind, control = ensure_valgrind(log)
    wire, client_class, _what = ROWS[row]
    workdir = Path(tempfile.mkdtemp(prefix="mcp-tasks-proxy-instructions-"))
    upstream_dir = workdir / "upstream"
    upstream_dir.mkdir()
    counted_upstream = against_upstream and wire != "stdio"
    under = [valgrind, "--tool=callgrind", f"--callgrind-out-file={upstream_dir / 'callgrind.out'}"] if counted_upstream else []
    upstream = None if wire == "stdio" else targets.start_fast_upstream(wire, poll_interval_ms=POLL_INTERVAL_MS, under=under,
                                                                        ready_timeout_s=600 if under else 30)
    proxy: targets.ServerProcess | None = None
    try:
        config = workdir / "proxy.toml"
        config.write_text(f'state_dir = "{workdir / "state"}"\n')
        dump = workdir / "callgrind.out"
        if upstream is None:
            command = f"{sys.executable} -m proxy.bench.upstream --wire stdio --poll-interval-ms {POLL_INTERVAL_MS}"
            target = ["--upstream-command", command]
        else:
            target = ["--upstream", upstream.url]
        argv = [valgrind, "--tool=callgrind", f"--callgrind-out-file={dump}", sys.executable, "-m", "proxy", "serve",
                "--config", str(config), "--listen", "127.0.0.1:0", *target]
        log(f"starting the proxy under callgrind for {row} {scenario}")
        proxy = targets.AnnouncingProcess.start(argv, env={"MCP_TASKS_PROXY_KEY": new_key_text(), ENV_EVENT_LOOP: event_loop},
                                                ready_timeout_s=600)
        url = proxy.url
        asyncio.run(_drive(client_class, url, scenario, max(20, calls // 5)))  # warm-up, not counted
        counted = [proxy.pid] + ([upstream.process.pid] if counted_upstream and upstream is not None else [])
        for pid in counted:
            _control(control, "--zero", pid)
        started = time.monotonic()
        asyncio.run(_drive(client_class, url, scenario, calls))
        wall_s = time.monotonic() - started
        for pid in counted:
            _control(control, "--dump", pid)
        return Count(row, scenario, calls, _total(workdir), round(wall_s, 2), _total(upstream_dir) if len(counted) > 1 else None)
    finally:
        if proxy is not None:
            proxy.stop()
        if upstream is not None:
            upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)


async def _drive(client_class: type[SessionClient] | type[ModernClient], url: str, scenario: str, calls: int) -> None:
    async with aiohttp.ClientSession() as http:
        client = client_class(http, url)
        await client.open()
        try:
            for _ in range(calls):
                received = await getattr(client, scenario)()  # raises BenchError on a wrong answer
                if scenario == "progress" and received != PROGRESS_COUNT:
                    raise BenchError(f"a progress call delivered {received} of {PROGRESS_COUNT} notifications")
        finally:
            await client.close()


def _control(control: str, command: str, pid: int) -> None:
    subprocess.run([control, command, str(pid)], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=CONTROL_TIMEOUT_S)


def _total(workdir: Path) -> int:
    """The instruction total of the last dump callgrind wrote (`callgrind.out.<n>` after --dump)."""
    deadline = time.monotonic() + CONTROL_TIMEOUT_S
    while time.monotonic() < deadline:
        dumps = sorted(workdir.glob("callgrind.out.*"), key=lambda p: p.stat().st_mtime)
        for line in (dumps[-1].read_text().splitlines() if dumps else []):
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
        time.sleep(0.2)  # the dump is being written
    raise RuntimeError(f"callgrind wrote no dump with a total in {workdir}")


def _refusal(args: argparse.Namespace) -> str | None:
    """Why these options cannot be counted, or None."""
    if args.calls is not None and args.calls < 1:
        return "--calls must be at least 1"
    if (str(args.workers) != "1" or args.store != "sqlite" or args.soak or args.memory or args.memory_only or args.concurrency != 1
            or args.load_processes != 1 or args.upstreams != 1):
        return ("counts one proxy process on the SQLite store with one client: --workers, --store, --concurrency, --load-processes, "
                "--upstreams, --soak and --memory do not apply")
    if args.upstream != "fast":
        return "counts the proxy in front of the fast upstream: --upstream reference does not apply"
    return None


def _parts(args: argparse.Namespace, log: Callable[[str], None]) -> int:
    """`--parts`: the parts of a relayed call, each counted alone (`proxy/bench/parts.py`)."""
    from .parts import PARTS, REPEAT, table

    names = list(PARTS) if args.parts == "all" else [n.strip() for n in args.parts.split(",") if n.strip()]
    unknown = [n for n in names if n not in PARTS] or ([] if names else ["(none)"])
    if unknown:
        print(f"mcp-tasks-proxy bench --instructions: unknown part {unknown[0]!r} (parts: {', '.join(PARTS)})", file=sys.stderr)
        return 2
    try:
        valgrind, _ = ensure_valgrind(log)
        rows = table(valgrind, log, names)
    except PackageUnavailable as exc:
        print(f"mcp-tasks-proxy bench --instructions: {exc}", file=sys.stderr)
        return 1
    print(f"Instructions per run of each part of a relayed call, counted alone (valgrind callgrind; {REPEAT} runs less none)")
    print(f"{'part':<16} {'instructions':>12}   what")
    for name, per_run, what in rows:
        print(f"{name:<16} {per_run:>12,.0f}   {what}")
    if args.json:
        Path(args.json).write_text(json.dumps({"parts": [{"part": n, "per_run": round(p), "what": w} for n, p, w in rows]},
                                              indent=2) + "\n")
    return 0


def main(args: argparse.Namespace) -> int:
    """Print (and with --json write) instructions per call for the chosen rows and scenarios."""
    refusal = _refusal(args)
    if refusal is not None:
        print(f"mcp-tasks-proxy bench --instructions: {refusal}", file=sys.stderr)
        return 2
    rows = [r.strip() for r in (args.rows if args.rows is not None else "relay,relay-modern,translate").split(",") if r.strip()]
    if not rows:
        print(f"mcp-tasks-proxy bench --instructions: --rows names at least one row ({', '.join(ROWS)})", file=sys.stderr)
        return 2
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        print(f"mcp-tasks-proxy bench --instructions: unknown row {unknown[0]!r} (rows: {', '.join(ROWS)})", file=sys.stderr)
        return 2
    letters = args.scenarios or "ab"
    unknown_letters = [letter for letter in letters if letter not in SCENARIOS]
    if unknown_letters:
        print(f"mcp-tasks-proxy bench --instructions: unknown scenario {unknown_letters[0]!r} (scenarios: {', '.join(SCENARIOS)})",
              file=sys.stderr)
        return 2
    if args.against_upstream and all(ROWS[row][0] == "stdio" for row in rows):
        print("mcp-tasks-proxy bench --instructions: --against-upstream needs an HTTP row (a stdio row's upstream is the proxy's "
              "child, not counted)", file=sys.stderr)
        return 2
    calls = args.calls if args.calls is not None else DEFAULT_CALLS
    try:  # refused here, in one line, rather than by the proxy failing to start under valgrind
        # auto: the loop `serve` would run on here (uvloop where it is installed), named, so that the table says which
        event_loop = loop_factory({ENV_EVENT_LOOP: args.event_loop})[0]
    except RuntimeError as exc:
        print(f"mcp-tasks-proxy bench --instructions: {exc}", file=sys.stderr)
        return 2

    def log(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    if args.parts:
        return _parts(args, log)

    counts: list[Count] = []
    try:
        for letter in letters:
            scenario = SCENARIOS[letter]
            for row in rows:
                counts.append(measure(row, scenario, calls if letter == "a" else max(1, calls // LIFECYCLE_SHARE),
                                      event_loop=event_loop, against_upstream=args.against_upstream, log=log))
    except PackageUnavailable as exc:
        print(f"mcp-tasks-proxy bench --instructions: {exc}", file=sys.stderr)
        return 1
    print(f"Instructions per call in the proxy process (valgrind callgrind; event loop {event_loop}; after a warm-up)")
    if args.against_upstream:
        print("and the fast upstream's for the same calls, counted the same way (stdio rows: not counted, the upstream is the proxy's child)")
        print(f"{'row':<14} {'scenario':<12} {'calls':>6} {'instructions/call':>18} {'upstream/call':>14} {'÷ upstream':>10}   what")
    else:
        print(f"{'row':<14} {'scenario':<12} {'calls':>6} {'instructions/call':>18}   what")
    for count in counts:
        figures = f"{count.row:<14} {count.scenario:<12} {count.calls:>6} {count.per_call:>18,.0f}"
        if args.against_upstream:
            upstream, ratio = count.upstream_per_call, count.ratio
            figures += f" {'—' if upstream is None else f'{upstream:,.0f}':>14} {'—' if ratio is None else f'{ratio:.2f} ×':>10}"
        print(f"{figures}   {ROWS[count.row][2]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"event_loop": event_loop, "counts": [
            {**asdict(c), "per_call": round(c.per_call),
             **({"upstream_per_call": round(c.upstream_per_call), "ratio": round(c.instructions / c.upstream_instructions, 3)}
                if c.upstream_instructions else {})} for c in counts]}, indent=2) + "\n")
    return 0
