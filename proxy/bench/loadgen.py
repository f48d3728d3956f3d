"""The load generator: N concurrent clients for a fixed duration against one target.

Each client has its own aiohttp session (one keep-alive connection), is opened (`initialize` on
the session wire) before the clock starts, runs the scenario back to back for a short warm-up that
is not counted, then for `duration` seconds. Operations still running when the time is up finish
and count; the CPU seconds of the measured processes are read just before the first counted
operation starts and just after the last one ends. Every operation is bounded by `OP_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import aiohttp

from .clients import Client
from .targets import Measured

OP_TIMEOUT_S = 30.0
MAX_ERROR_TEXTS = 3


@dataclass
class Window:
    """What one target did under load for one window."""

    ops: int = 0
    errors: int = 0
    elapsed_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    notifications: int = 0
    error_texts: list[str] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def percentile(self, q: float) -> float:
        """The `q`-th percentile of latency in seconds (nearest rank), NaN without samples."""
        if not self.latencies_s:
            return float("nan")
        ordered = sorted(self.latencies_s)
        rank = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
        return ordered[rank]

    def cpu_per_op(self, name: str) -> float:
        """CPU seconds of process `name` per operation (NaN when none completed)."""
        if not self.ops or name not in self.cpu_s:
            return float("nan")
        return self.cpu_s[name] / self.ops


ClientFactory = Callable[[aiohttp.ClientSession, int], Client]


async def drive(factory: ClientFactory, scenario: str, *, concurrency: int, duration_s: float, warmup_s: float,
                measured: Mapping[str, Measured]) -> Window:
    """Run `scenario` (a method name of the clients) on `concurrency` clients for `duration_s`."""
    window = Window()
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1, force_close=False),
                                      timeout=aiohttp.ClientTimeout(total=OP_TIMEOUT_S)) for _ in range(concurrency)]
    clients = [factory(http, i) for i, http in enumerate(sessions)]
    try:
        await asyncio.gather(*(client.open() for client in clients))

        async def one(client: Client, counted: bool) -> None:
            operation: Callable[[], Awaitable[int]] = getattr(client, scenario)
            started = time.perf_counter()
            try:
                async with asyncio.timeout(OP_TIMEOUT_S):
                    notified = await operation()
            except Exception as exc:  # noqa: BLE001 - every failure is an error of the row
                if counted:
                    window.errors += 1
                    if len(window.error_texts) < MAX_ERROR_TEXTS:
                        window.error_texts.append(f"{exc.__class__.__name__}: {exc}"[:300])
                await asyncio.sleep(0.01)
                return
            if counted:
                window.latencies_s.append(time.perf_counter() - started)
                window.ops += 1
                window.notifications += notified

        async def worker(client: Client, until: float, counted: bool) -> None:
            while time.perf_counter() < until:
                await one(client, counted)

        warm_until = time.perf_counter() + warmup_s
        await asyncio.gather(*(worker(client, warm_until, False) for client in clients))
        before = {name: target.cpu() for name, target in measured.items()}
        started = time.perf_counter()
        await asyncio.gather(*(worker(client, started + duration_s, True) for client in clients))
        window.elapsed_s = time.perf_counter() - started
        window.cpu_s = {name: target.cpu() - before[name] for name, target in measured.items()}
    finally:
        await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)
        await asyncio.gather(*(http.close() for http in sessions), return_exceptions=True)
    return window
