"""The load generator: N concurrent clients for a fixed duration against one target.

Each client has its own aiohttp session (one keep-alive connection), is opened (`initialize` on
the session wire) before the clock starts, runs the scenario back to back for a short warm-up that
is not counted, then for `duration` seconds. Operations still running when the time is up finish
and count; the CPU seconds of the measured processes are read just before the first counted
operation starts and just after the last one ends. Every operation is bounded by `OP_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from .clients import FAST_TOOLS, BenchError, Client, ModernClient, SessionClient, Tools
from .targets import Measured

OP_TIMEOUT_S = 30.0
ANSWER_LIMIT = 256 * 1024 * 1024
"""The longest line a load process may answer: its counts with every latency (about 20 bytes each)."""
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
    load_cpu_s: float | None = None
    """CPU seconds of the load processes over the window (`--load-processes` above 1), else None."""

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


@dataclass(frozen=True)
class ClientSpec:
    """Which clients a row drives, as a value another process can be given: `kind` "v1" (the
    session wire, `SessionClient`) or "modern" (`ModernClient`), the `urls` they use (client `i`
    the `i % len(urls)`-th: one per upstream on direct rows with `--upstreams N`) and the `tools`."""

    kind: str
    urls: tuple[str, ...]
    tools: Tools = FAST_TOOLS

    def __call__(self, http: aiohttp.ClientSession, index: int) -> Client:
        url = self.urls[index % len(self.urls)]
        if self.kind == "modern":
            return ModernClient(http, url, tools=self.tools)
        return SessionClient(http, url, tools=self.tools)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "urls": list(self.urls), "tools": asdict(self.tools)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClientSpec:
        return cls(data["kind"], tuple(data["urls"]), Tools(**data["tools"]))


ClientFactory = Callable[[aiohttp.ClientSession, int], Client]


async def _clients(factory: ClientFactory, first: int, count: int) -> tuple[list[aiohttp.ClientSession], list[Client]]:
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1, force_close=False),
                                      timeout=aiohttp.ClientTimeout(total=OP_TIMEOUT_S)) for _ in range(count)]
    clients = [factory(http, first + i) for i, http in enumerate(sessions)]
    try:
        await asyncio.gather(*(client.open() for client in clients))
    except BaseException:
        await _close(sessions, clients)
        raise
    return sessions, clients


async def _close(sessions: list[aiohttp.ClientSession], clients: list[Client]) -> None:
    await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)
    await asyncio.gather(*(http.close() for http in sessions), return_exceptions=True)


async def _run(clients: list[Client], scenario: str, window: Window, warm_until: float, duration_s: float,
               counting: Callable[[], Awaitable[None]] | None = None) -> float:
    """Every client runs `scenario` back to back: uncounted until `warm_until` (a `time.perf_counter`
    value), then, once `counting` has run, counted into `window` for `duration_s`; operations
    running at the end finish and count. Returns when the counted part started."""

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

    async def worker(client: Client, end: float, counted: bool) -> None:
        while time.perf_counter() < end:
            await one(client, counted)

    await asyncio.gather(*(worker(client, warm_until, False) for client in clients))
    if counting is not None:
        await counting()
    started = time.perf_counter()
    await asyncio.gather(*(worker(client, started + duration_s, True) for client in clients))
    return started


async def drive(factory: ClientFactory, scenario: str, *, concurrency: int, duration_s: float, warmup_s: float,
                measured: Mapping[str, Measured], processes: int = 1) -> Window:
    """Run `scenario` (a method name of the clients) on `concurrency` clients for `duration_s`;
    with `processes` above 1 (`--load-processes`), the clients are spread over that many load
    processes (`factory` must then be a `ClientSpec`), so that the load generator is not what
    bounds the rate."""
    if processes > 1:
        assert isinstance(factory, ClientSpec), "a row driven from several processes needs a ClientSpec"
        return await _drive_processes(factory, scenario, concurrency, duration_s, warmup_s, measured, processes)
    window = Window()
    sessions, clients = await _clients(factory, 0, concurrency)
    before: dict[str, float] = {}

    async def counting() -> None:
        before.update({name: target.cpu() for name, target in measured.items()})

    try:
        started = await _run(clients, scenario, window, time.perf_counter() + warmup_s, duration_s, counting)
        window.elapsed_s = time.perf_counter() - started
        window.cpu_s = {name: target.cpu() - before[name] for name, target in measured.items()}
    finally:
        await _close(sessions, clients)
    return window


async def _drive_processes(spec: ClientSpec, scenario: str, concurrency: int, duration_s: float, warmup_s: float,
                           measured: Mapping[str, Measured], processes: int) -> Window:
    """`drive` over `processes` load processes (`python -m proxy.bench.loadgen`): each opens its
    share of the clients and says "ready"; then all are told the wall-clock time their counted
    window starts (after `warmup_s`), run, and answer their counts as one JSON line. The CPU of
    `measured` is read at that start and once the last process has answered."""
    shares = [concurrency // processes + (1 if i < concurrency % processes else 0) for i in range(processes)]
    children: list[asyncio.subprocess.Process] = []
    try:
        first = 0
        for share in shares:
            child = await asyncio.create_subprocess_exec(sys.executable, "-m", "proxy.bench.loadgen", stdin=asyncio.subprocess.PIPE,
                                                         stdout=asyncio.subprocess.PIPE, limit=ANSWER_LIMIT)
            job = {"spec": spec.to_json(), "scenario": scenario, "first": first, "count": share, "duration_s": duration_s}
            assert child.stdin is not None
            child.stdin.write(json.dumps(job).encode() + b"\n")
            children.append(child)
            first += share
        for child in children:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), OP_TIMEOUT_S * 2)
            if line.strip() != b"ready":
                raise BenchError(f"a load process could not open its clients: {line.decode(errors='replace').strip() or 'it exited'}")
        start_at = time.time() + warmup_s
        for child in children:
            assert child.stdin is not None
            child.stdin.write(f"go {start_at!r}\n".encode())
        await asyncio.sleep(max(0.0, start_at - time.time()))
        before = {name: target.cpu() for name, target in measured.items()}
        answers = []
        for child in children:
            assert child.stdout is not None
            answers.append(json.loads(await asyncio.wait_for(child.stdout.readline(), warmup_s + duration_s + OP_TIMEOUT_S * 2)))
        window = Window(cpu_s={name: target.cpu() - before[name] for name, target in measured.items()})
    finally:
        for child in children:
            if child.returncode is None:
                child.kill()
            await child.wait()
    for answer in answers:
        window.ops += answer["ops"]
        window.errors += answer["errors"]
        window.notifications += answer["notifications"]
        window.latencies_s += answer["latencies_s"]
        window.error_texts += answer["error_texts"][: MAX_ERROR_TEXTS - len(window.error_texts)]
    window.elapsed_s = max(answer["ended_at"] for answer in answers) - start_at
    window.load_cpu_s = sum(answer["cpu_s"] for answer in answers)
    return window


async def _child() -> None:
    """One load process (see `_drive_processes`): a job line on stdin, "ready", "go <time>", its counts."""
    loop = asyncio.get_running_loop()
    job = json.loads(await loop.run_in_executor(None, sys.stdin.readline))
    try:
        sessions, clients = await _clients(ClientSpec.from_json(job["spec"]), job["first"], job["count"])
    except Exception as exc:  # noqa: BLE001 - told to the parent, which names the row's failure
        print(f"{exc.__class__.__name__}: {exc}"[:300], flush=True)
        return
    window = Window()
    try:
        print("ready", flush=True)
        start_at = float((await loop.run_in_executor(None, sys.stdin.readline)).split()[1])
        cpu = 0.0

        async def counting() -> None:
            nonlocal cpu
            cpu = time.process_time()

        await _run(clients, job["scenario"], window, start_at + time.perf_counter() - time.time(), job["duration_s"], counting)
        ended_at = time.time()
        cpu = time.process_time() - cpu
    finally:
        await _close(sessions, clients)
    print(json.dumps({"ops": window.ops, "errors": window.errors, "notifications": window.notifications, "latencies_s": window.latencies_s,
                      "error_texts": window.error_texts, "ended_at": ended_at, "cpu_s": cpu}), flush=True)


if __name__ == "__main__":
    asyncio.run(_child())
