"""The comparison's plan and its results: scenarios, rows, options, and the report they fill
(`proxy.bench.run` runs it, `proxy.bench.report` reads it)."""

from __future__ import annotations

import math
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

from .loadgen import Window

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
    workers: int = 1
    """The proxy's worker processes (`serve --workers N`)."""
    base: str = ""
    """The row this one repeats with more workers ("" for a row of its own)."""

    @property
    def family(self) -> str:
        """The key of the one-worker row of the same path (`--rows` names these)."""
        return self.base or self.key


ROWS = (
    Row("direct", "direct: v1 client → upstream", "v1", "upstream", None, "upstream", "direct"),
    Row("nginx", "nginx (plain reverse proxy), v1 client", "v1", "nginx", "nginx", "upstream", "direct"),
    Row("relay", "mcp-tasks-proxy relaying, v1 client", "v1", "proxy", "proxy", "upstream", "direct"),
    Row("translate", "mcp-tasks-proxy translating, v2 client", "modern", "proxy", "proxy", "upstream", "direct"),
    Row("stdio", "mcp-tasks-proxy relaying to the upstream on stdio, v1 client", "v1", "proxy-stdio", "proxy-stdio",
        "upstream-stdio", "direct"),
    Row("stdio-translate", "mcp-tasks-proxy translating to the upstream on stdio, v2 client", "modern", "proxy-stdio",
        "proxy-stdio", "upstream-stdio", "direct"),
    Row("fastmcp3", "FastMCP 3.4.11 proxy, v1 client", "v1", "fastmcp3", "fastmcp3", "upstream", "direct", "a"),
    Row("shadow", "mcp-tasks-proxy translating, v2 client, every call also compared on a v2 shadow", "modern", "proxy-shadow",
        "proxy-shadow", "upstream", "direct", "ab"),
    Row("shadow-10", "mcp-tasks-proxy translating, v2 client, 10 % of calls also compared on a v2 shadow", "modern",
        "proxy-shadow-10", "proxy-shadow-10", "upstream", "direct", "a"),
    Row("direct-modern", "direct: v2 client → modern upstream", "modern", "upstream-modern", None, "upstream-modern",
        "direct-modern"),
    Row("relay-modern", "mcp-tasks-proxy relaying, v2 client", "modern", "proxy-modern", "proxy-modern", "upstream-modern",
        "direct-modern"),
)


WORKER_ROWS = ("relay", "translate", "relay-modern")
"""The rows run with each worker count of `--workers` (the HTTP-backend proxy rows)."""


def with_workers(row: Row, workers: int) -> Row:
    """`row` through `serve --workers N` (`row` itself for 1): its own key, label and processes."""
    if workers == 1:
        return row
    suffix = f"-w{workers}"
    return replace(row, key=row.key + suffix, label=f"{row.label} ({workers} workers)", target=row.target + suffix,
                   proxy=(row.proxy or "") + suffix, workers=workers, base=row.key)


def expand_rows(workers: tuple[int, ...]) -> list[Row]:
    """Every row, the proxy rows of `WORKER_ROWS` once per worker count, side by side."""
    return [variant for row in ROWS
            for variant in ([with_workers(row, w) for w in workers] if row.key in WORKER_ROWS else [row])]


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
    store: str = "sqlite"
    """The proxy rows' state store: "sqlite" (the default store) or "redis" (a Redis server the
    benchmark starts on loopback, `proxy/bench/redis_server.py`); "redis" whenever a worker count
    is above 1."""
    workers: tuple[int, ...] = (1,)
    """Worker counts of the proxy rows of `WORKER_ROWS` (`--workers 1,2`: each row twice)."""
    load_processes: int = 1
    """Processes the clients are spread over (`--load-processes`): the load generator's own ceiling raised."""
    upstreams: int = 1
    """Fast upstream processes of each wire (`--upstreams`), one `[[upstream]]` each in the proxies."""


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
    shadow: dict[str, dict[str, int]] = field(default_factory=dict)
    """The shadow rows' comparisons by outcome, as their proxies counted them (`Bench.shadow_counts`)."""

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
