"""`mcp-tasks-proxy bench --soak`: many clients, v1 and v2, running task lifecycles with a question
for minutes through proxy replicas on Redis behind a plain round-robin nginx (docs/performance.md
"Soak").

Started here, each stopped by its own handle: a Redis server (`redis_server.py`), the fast upstream
(its `ask` tool asks one question per task), `replicas` proxy replicas (two by default; `serve`, one
sealing key in `MCP_TASKS_PROXY_KEY`, the Redis store, `task_ttl_ms = 60000`) and nginx in front
of them, round robin with no hashing and no stickiness. One replica and enough clients saturate it
on a small host: the soak then shows what an overloaded proxy does (issue 44). `kill_at_s`: replica
b is killed (SIGKILL) that many seconds in; a lifecycle that fails is then told apart by whether it
began before the kill (in flight on the killed replica, expected) or after (not expected).

Every failed lifecycle has one kind (`KINDS`): `refused` (HTTP 503 with `Retry-After`, the
proxy's admission control: the client waits as asked and goes on), `reset` (nginx's 502: the
replica reset or closed the connection, or refused it; or the connection to nginx broke),
`timeout` (`LIFECYCLE_TIMEOUT_S`), `wrong` (a question or result not this lifecycle's) and
`error` (anything else). nginx's error log is read at the end and its lines counted by cause.
After the load, the soak watches for up to `RECOVERY_S` seconds how soon one call through nginx
is answered again within `RECOVERED_MS`, and each replica's RSS then. Half the clients are v1 (session wire,
relayed), half v2 (2026-07-28 with the tasks extension, translated); each has its own
`Authorization` (its own principal) and two connections, and runs `asking.v1_ask` or
`asking.v2_ask` back to back until the time is up (a v1 client ends its session and opens a new
one every `SESSION_LIFECYCLES`). Every lifecycle checks its question and its exact result.

Bounded: clients (`MAX_CLIENTS`, and the file descriptors they need: the soft `RLIMIT_NOFILE` is
raised to the hard one first, inherited by every process started here), minutes (`MAX_MINUTES`),
each lifecycle (`LIFECYCLE_TIMEOUT_S`). Every `sample_interval` (30 s; a tenth of a run shorter
than 5 minutes) each replica's RSS and the Redis key count (`DBSIZE`) are read. "Memory flat": a
replica's RSS at the end exceeds its RSS at the end of the first fifth of the run (minute 1 of 5)
by at most `FLAT_MIB` MiB or `FLAT_SHARE` of it, whichever is more; a verdict, never a failure.
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from yarl import URL

from . import targets
from .asking import WrongAnswer, v1_ask, v2_ask
from .clients import BenchError, GatewayFailed, ModernClient, Refused, SessionClient
from .rows import POLL_INTERVAL_MS

SAMPLE_S = 30.0
SETTLE_SHARE = 0.2
"""The first fifth of the run (minute 1 of 5) is warm-up for the memory verdict."""
FLAT_MIB = 20.0
FLAT_SHARE = 0.10
SESSION_LIFECYCLES = 20
LIFECYCLE_TIMEOUT_S = 60.0
MAX_CLIENTS = 5000
MAX_MINUTES = 60.0
FDS_PER_CLIENT = 4
"""File descriptors a client may need in the busiest process (nginx: two client connections, and
one upstream connection for each)."""
MAX_ERROR_TEXTS = 10
KINDS = ("refused", "reset", "timeout", "wrong", "error")
"""The kinds of a failed lifecycle (the module's docstring)."""
RECOVERY_S = 60.0
RECOVERED_MS = 500.0
NGINX_CAUSES = {"reset": "reset by peer", "closed": "prematurely closed", "refused": "Connection refused",
                "timed out": "timed out", "no live upstreams": "no live upstreams"}
"""nginx error-log lines counted at the end, by the words that name their cause."""


def kind_of(exc: BaseException) -> str:
    """The kind (`KINDS`) of the exception a lifecycle failed with."""
    if isinstance(exc, Refused):
        return "refused"
    if isinstance(exc, WrongAnswer):
        return "wrong"
    if isinstance(exc, (GatewayFailed, aiohttp.ServerDisconnectedError, ConnectionResetError)) or (
            isinstance(exc, aiohttp.ClientOSError) and not isinstance(exc, aiohttp.ClientConnectorError)):
        return "reset"
    if isinstance(exc, TimeoutError):
        return "timeout"
    return "error"


@dataclass
class Tally:
    lifecycles: dict[str, int] = field(default_factory=lambda: {"v1": 0, "v2": 0})
    failures: dict[str, dict[str, int]] = field(default_factory=lambda: {kind: {"v1": 0, "v2": 0} for kind in KINDS})
    latencies_s: dict[str, list[float]] = field(default_factory=lambda: {"v1": [], "v2": []})
    settled_s: dict[str, list[float]] = field(default_factory=lambda: {"v1": [], "v2": []})
    """The latencies of lifecycles begun after `settle_at` (the first fifth of the run: its start's burst of connections)."""
    settle_at: float = 0.0

    def right(self, dialect: str, started: float) -> None:
        """Count a lifecycle that ended right, begun at `started` (`time.monotonic()`)."""
        self.lifecycles[dialect] += 1
        took = time.monotonic() - started
        self.latencies_s[dialect].append(took)
        if started >= self.settle_at:
            self.settled_s[dialect].append(took)
    refusal_s: list[float] = field(default_factory=list)
    """How long each refused lifecycle took to be refused."""
    error_texts: list[str] = field(default_factory=list)
    killed_at: float | None = None
    """`time.monotonic()` when replica b, killed (`kill_at_s`), was gone (a zombie: every socket of
    it closed) and nginx had closed its connections to it (`targets.connected_to`), else None. A request
    sent to it before then was in flight on it, or sent by nginx on a connection it had not yet
    seen end."""
    after_kill: dict[str, int] = field(default_factory=lambda: {kind: 0 for kind in KINDS})
    """Failed lifecycles that began after the kill, by kind."""
    after_kill_ms: list[float] = field(default_factory=list)
    """How long after the kill each of those began."""

    def failed(self, dialect: str, exc: BaseException, started: float) -> float:
        """Count a failed lifecycle begun at `started` (`time.monotonic()`); the seconds its
        client waits before the next one (a refusal's `Retry-After`)."""
        kind = kind_of(exc)
        self.failures[kind][dialect] += 1
        if self.killed_at is not None and started >= self.killed_at:
            self.after_kill[kind] += 1
            self.after_kill_ms.append(round((started - self.killed_at) * 1000, 1))
        if kind == "refused":
            self.refusal_s.append(time.monotonic() - started)
            return exc.retry_after_s  # type: ignore[attr-defined, no-any-return]
        if len(self.error_texts) < MAX_ERROR_TEXTS and sum(text.split(" ", 2)[1] == kind for text in self.error_texts) < 3:
            self.error_texts.append(f"{dialect} {kind}: {exc.__class__.__name__}: {exc}"[:300])  # 3 of each kind at most
        return 0.1


def raise_nofile() -> tuple[int, int]:
    """Raise the soft `RLIMIT_NOFILE` to the hard limit (inherited by the processes started after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def refusal(clients: int, minutes: float, nofile_soft: int, replica_count: int = 2, kill_at_s: float | None = None) -> str | None:
    """Why a soak of `clients` for `minutes` cannot run here, or None."""
    if not 2 <= clients <= MAX_CLIENTS:
        return f"--soak-clients takes 2 to {MAX_CLIENTS}"
    if not 0 < minutes <= MAX_MINUTES:
        return f"--soak-minutes takes more than 0 and at most {MAX_MINUTES:g}"
    if replica_count not in (1, 2):
        return "--soak-replicas takes 1 or 2"
    if kill_at_s is not None and (replica_count != 2 or not 0 < kill_at_s < minutes * 60):
        return "--soak-kill-at needs two replicas and a time within the run (seconds, more than 0)"
    if nofile_soft != resource.RLIM_INFINITY and clients * FDS_PER_CLIENT + 256 > nofile_soft:
        return (f"{clients} clients need about {clients * FDS_PER_CLIENT + 256} file descriptors; "
                f"RLIMIT_NOFILE allows {nofile_soft} (raise the hard limit, e.g. ulimit -Hn)")
    return None


async def _dbsize(port: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"DBSIZE\r\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 10)
        return int(line[1:])
    finally:
        writer.close()


async def _requests_answered(http: aiohttp.ClientSession, url: str) -> int | None:
    """The sum of a replica's `mcp_tasks_proxy_requests_total` (its `/metrics`), or None."""
    from urllib.parse import urlsplit

    try:
        async with http.get(f"http://{urlsplit(url).netloc}/metrics") as response:
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError):
        return None
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("mcp_tasks_proxy_requests_total{")))


async def _v1_client(http: aiohttp.ClientSession, url: str, n: int, stop: float, tally: Tally) -> None:
    client = SessionClient(http, url, authorization=f"Bearer soak-v1-{n}", capabilities={"elicitation": {}})
    done = in_session = 0
    while time.monotonic() < stop:
        done += 1
        started = time.monotonic()
        try:
            async with asyncio.timeout(LIFECYCLE_TIMEOUT_S):
                if client.session_id is None:
                    await client.open()
                    in_session = 0
                await v1_ask(client, f"v1-{n}-{done}")
                tally.right("v1", started)
                in_session += 1
                if in_session == SESSION_LIFECYCLES:
                    await _end_session(client)
        except Exception as exc:  # noqa: BLE001 - every failure is counted
            await asyncio.sleep(tally.failed("v1", exc, started))
    if client.session_id is not None:
        started = time.monotonic()
        try:
            async with asyncio.timeout(LIFECYCLE_TIMEOUT_S):
                await _end_session(client)
        except Exception as exc:  # noqa: BLE001
            tally.failed("v1", exc, started)


async def _end_session(client: SessionClient) -> None:
    """DELETE the session (a new one is opened for the next lifecycle)."""
    async with client.http.delete(client.url, headers=client._headers()) as response:
        await response.read()
        client.session_id = None
        if response.status not in (200, 202, 204):
            raise BenchError(f"DELETE of the session: HTTP {response.status}")


async def _v2_client(http: aiohttp.ClientSession, url: str, n: int, stop: float, tally: Tally) -> None:
    client = ModernClient(http, url, authorization=f"Bearer soak-v2-{n}", capabilities={"elicitation": {"form": {}}})
    done = 0
    while time.monotonic() < stop:
        done += 1
        started = time.monotonic()
        try:
            async with asyncio.timeout(LIFECYCLE_TIMEOUT_S):
                await v2_ask(client, f"v2-{n}-{done}")
            tally.right("v2", started)
        except Exception as exc:  # noqa: BLE001 - every failure is counted
            await asyncio.sleep(tally.failed("v2", exc, started))


def sample_interval(duration_s: float) -> float:
    return min(SAMPLE_S, duration_s / 10)


async def _recovery(http: aiohttp.ClientSession, url: str, replicas: list[targets.Measured]) -> dict[str, Any]:
    """After the load: one v2 `echo` call through nginx each second until one is answered within
    `RECOVERED_MS` (at most `RECOVERY_S`); the seconds that took, and each live replica's RSS then."""
    client = ModernClient(http, url, authorization="Bearer soak-recovery")
    start = time.monotonic()
    while True:
        sent = time.monotonic()
        try:
            async with asyncio.timeout(RECOVERY_S):
                await client.echo()
            answered_ms: float | None = (time.monotonic() - sent) * 1000
        except Exception:  # noqa: BLE001 - not recovered yet
            answered_ms = None
        if (answered_ms is not None and answered_ms <= RECOVERED_MS) or time.monotonic() - start >= RECOVERY_S:
            break
        await asyncio.sleep(1.0)
    recovered = answered_ms is not None and answered_ms <= RECOVERED_MS
    return {"recovered": recovered, "after_s": round(time.monotonic() - start, 2), "answered_ms": answered_ms,
            "rss_bytes": [r.rss() for r in replicas]}


async def _drive(url: str, replicas: list[targets.Measured], redis_port: int, clients: int, duration_s: float,
                 log: Callable[[str], None], kill_at_s: float | None = None) -> dict[str, Any]:
    tally = Tally()
    v1_clients = clients - clients // 2
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=2),
                                      timeout=aiohttp.ClientTimeout(total=LIFECYCLE_TIMEOUT_S)) for _ in range(clients)]
    samples: list[dict[str, Any]] = []
    interval = sample_interval(duration_s)
    count = max(1, round(duration_s / interval))
    start = time.monotonic()
    stop = start + duration_s
    tally.settle_at = start + SETTLE_SHARE * duration_s

    async def sampler() -> None:
        for k in range(count + 1):
            await asyncio.sleep(max(0.0, start + k * interval - time.monotonic()))
            rss = [r.rss() for r in replicas]
            cpu = [r.cpu() for r in replicas]
            try:
                keys: int | None = await _dbsize(redis_port)
            except (OSError, ValueError, TimeoutError):
                keys = None
            samples.append({"t_s": round(time.monotonic() - start, 2), "rss_bytes": rss, "cpu_s": cpu, "redis_keys": keys,
                            "lifecycles": sum(tally.lifecycles.values()),
                            "refused": sum(tally.failures["refused"].values()),
                            "errors": sum(sum(tally.failures[kind].values()) for kind in KINDS if kind != "refused")})
            log(f"soak {samples[-1]['t_s']:.0f} s: {samples[-1]['lifecycles']} lifecycles, {samples[-1]['refused']} refused, "
                f"{samples[-1]['errors']} failed, RSS {' / '.join(f'{b / 2**20:.1f}' for b in rss)} MiB, {keys} Redis keys")

    async def killer() -> None:
        await asyncio.sleep(max(0.0, start + (kill_at_s or 0.0) - time.monotonic()))
        pids = replicas[1].pids()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        signalled = time.monotonic()
        while not all(targets.gone(pid) for pid in pids):
            await asyncio.sleep(0.005)
        gone = time.monotonic()
        port = URL(replicas[1].url).port
        while port is not None and targets.connected_to(port) and time.monotonic() - gone < targets.SEEN_CLOSED_S:
            await asyncio.sleep(0.005)
        tally.killed_at = time.monotonic()
        log(f"soak {tally.killed_at - start:.0f} s: replica b killed (SIGKILL), gone {1000 * (gone - signalled):.0f} ms later, "
            f"nginx's connections to it closed {1000 * (tally.killed_at - gone):.0f} ms after that")

    try:
        watcher = asyncio.ensure_future(sampler())
        loops = [_v1_client(sessions[n], url, n, stop, tally) for n in range(v1_clients)]
        loops += [_v2_client(sessions[n], url, n, stop, tally) for n in range(v1_clients, clients)]
        if kill_at_s is not None:
            loops.append(killer())
        await asyncio.gather(*loops)
        elapsed = time.monotonic() - start
        await watcher
        live = replicas if kill_at_s is None else replicas[:1]
        recovery = await _recovery(sessions[0], url, live)
        answered = [await _requests_answered(sessions[0], r.url) for r in live]
    finally:
        await asyncio.gather(*(http.close() for http in sessions), return_exceptions=True)
    out = figures(tally, samples, clients={"v1": v1_clients, "v2": clients - v1_clients}, duration_s=duration_s, elapsed_s=elapsed)
    out["requests_per_replica"] = answered
    out["recovery"] = recovery
    if tally.killed_at is not None:
        out["killed_at_s"] = round(tally.killed_at - start, 2)
        out["after_kill"] = tally.after_kill
        out["after_kill_ms"] = tally.after_kill_ms[:MAX_ERROR_TEXTS]
    return out


def _replica_memory(samples: list[dict[str, Any]], index: int, settle_s: float) -> dict[str, Any]:
    series = [(s["t_s"], s["rss_bytes"][index]) for s in samples]
    settled = min(series, key=lambda ts: abs(ts[0] - settle_s))
    window = [rss for t, rss in series if t >= settled[0]]
    growth = series[-1][1] - settled[1]
    threshold = max(FLAT_MIB * 2**20, FLAT_SHARE * settled[1])
    return {"rss_start": series[0][1], "settled_at_s": settled[0], "rss_settled": settled[1], "rss_end": series[-1][1],
            "window_min": min(window), "window_max": max(window), "window_spread": max(window) - min(window),
            "growth": growth, "threshold": threshold, "flat": growth <= threshold,
            "growth_share": growth / settled[1] if settled[1] else 0.0}


def _cores(samples: list[dict[str, Any]], index: int) -> float:
    """A replica's CPU over the samples in cores (1.0: a full core), up to its last sample alive."""
    series = [(s["t_s"], s["cpu_s"][index]) for s in samples]
    last = 0
    while last + 1 < len(series) and series[last + 1][1] >= series[last][1] and series[last + 1][1] > 0:
        last += 1
    span = series[last][0] - series[0][0]
    return round((series[last][1] - series[0][1]) / span, 3) if span > 0 else 0.0


def figures(tally: Tally, samples: list[dict[str, Any]], *, clients: dict[str, int], duration_s: float,
            elapsed_s: float) -> dict[str, Any]:
    """Everything the soak measured, for the report and `--json`."""
    def latency(values: list[float]) -> dict[str, float | None]:
        ordered = sorted(values)
        pick = (lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000) if ordered else (lambda _q: None)
        return {"p50": statistics.median(ordered) * 1000 if ordered else None, "p99": pick(0.99), "max": pick(1.0)}

    keys = [s["redis_keys"] for s in samples if s["redis_keys"] is not None]
    replicas = [_replica_memory(samples, i, SETTLE_SHARE * duration_s) for i in range(len(samples[0]["rss_bytes"]))]
    total = sum(tally.lifecycles.values())
    kinds = {kind: {**by, "total": sum(by.values())} for kind, by in tally.failures.items()}
    errors = {d: sum(tally.failures[kind][d] for kind in ("reset", "timeout", "error")) for d in ("v1", "v2")}
    return {
        "clients": clients, "duration_s": duration_s, "elapsed_s": elapsed_s, "sample_interval_s": sample_interval(duration_s),
        "lifecycles": {**tally.lifecycles, "total": total}, "failures": kinds,
        "errors": {**errors, "total": sum(errors.values())}, "wrong": kinds["wrong"], "error_texts": tally.error_texts,
        "rate_per_s": total / elapsed_s if elapsed_s else 0.0,
        "latency_ms": {d: latency(v) for d, v in tally.latencies_s.items()},
        "settled_latency_ms": {d: latency(v) for d, v in tally.settled_s.items()},
        "refusal_ms": latency(tally.refusal_s),
        "samples": samples, "replicas": replicas,
        "redis_keys": {"min": min(keys) if keys else None, "max": max(keys) if keys else None, "end": keys[-1] if keys else None,
                       "samples": keys},
        "memory_flat": all(r["flat"] for r in replicas),
        "replica_cores": [_cores(samples, i) for i in range(len(samples[0]["cpu_s"]))],
        "flat_rule": f"RSS growth from {SETTLE_SHARE:.0%} of the run to its end ≤ {FLAT_MIB:g} MiB or {FLAT_SHARE:.0%}, "
                     "whichever is more",
    }


def nginx_errors(text: str) -> dict[str, int]:
    """nginx's error-log lines by cause (`NGINX_CAUSES`; `other` for the rest of the errors)."""
    counts = dict.fromkeys([*NGINX_CAUSES, "other"], 0)
    for line in text.splitlines():
        if "[error]" not in line and "[crit]" not in line and "[warn]" not in line:
            continue
        cause = next((name for name, words in NGINX_CAUSES.items() if words in line), "other")
        counts[cause] += 1
    return counts


def nginx_timings(text: str) -> dict[str, Any]:
    """Each request's times as nginx logged them (`targets.TIMINGS_LOG`), in ms: p50, p99 and max of
    the whole request at nginx (`request`), of the replica's answer head from the request's hand-over
    (`replica`) and of the connect to it (`connect`). Where the two first agree, the wait is in the
    replica; a request nginx tried on two replicas counts its last try."""
    columns: dict[str, list[float]] = {"request": [], "connect": [], "replica": []}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) != 3:
            continue
        for name, value in zip(("request", "connect", "replica"), fields, strict=True):
            last = value.replace(" : ", ",").rsplit(",", 1)[-1].strip()
            if last not in ("", "-"):
                columns[name].append(float(last) * 1000)
    out: dict[str, Any] = {"count": len(columns["request"])}
    for name, values in columns.items():
        values.sort()
        out[name] = ({"p50": _rank(values, 0.50), "p99": _rank(values, 0.99), "max": values[-1]} if values else None)
    return out


def _rank(ordered: list[float], share: float) -> float:
    """The nearest-rank percentile of `ordered` (ascending, not empty), rounded to 0.1 ms."""
    return round(ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))], 1)


def run_soak(*, clients: int = 500, minutes: float = 5.0, event_loop: str | None = None, replica_count: int = 2,
             kill_at_s: float | None = None, overload_lag_ms: int | None = None,
             log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Start everything, run the clients for `minutes`, stop everything; the figures."""
    from proxy.keys import new_key_text

    from .redis_server import start_redis

    nofile = raise_nofile()
    reason = refusal(clients, minutes, nofile[0], replica_count, kill_at_s)
    if reason:
        raise ValueError(reason)
    workdir = Path(tempfile.mkdtemp(prefix="mcp-tasks-proxy-soak-"))
    started: list[Any] = []
    connections = max(4096, clients * FDS_PER_CLIENT + 256)
    try:
        log(f"soak: starting redis-server, the fast upstream, {replica_count} replica(s) and nginx")
        redis = start_redis(log)
        started.append(redis)
        upstream = targets.start_fast_upstream("v1", poll_interval_ms=POLL_INTERVAL_MS)
        started.append(upstream)
        key = new_key_text()
        replicas: list[targets.Measured] = []
        for name in "ab"[:replica_count]:
            chosen = {} if overload_lag_ms is None else {"overload_lag_ms": overload_lag_ms}
            replica = targets.start_proxy(upstream.url, workdir / name, event_loop=event_loop, key=key, store=redis.url,
                                          replicas=replica_count, task_ttl_ms=60_000, **chosen)
            started.append(replica)
            replicas.append(replica)
        nginx = targets.start_nginx(replicas[0].url, log, more=[r.url for r in replicas[1:]], connections=connections, timings=True)
        started.append(nginx)
        log(f"soak: {clients} clients for {minutes:g} min through {nginx.url}")
        cpu: dict[str, Callable[[], float]] = {
            **{f"replica {name}": r.cpu for name, r in zip("ab", replicas, strict=False)}, "upstream": upstream.cpu,
            "nginx": nginx.cpu, "redis": lambda: targets.cpu_seconds(redis.popen.pid), "load generator": time.process_time}
        before = {name: read() for name, read in cpu.items()}
        out = asyncio.run(_drive(nginx.url, replicas, redis.port, clients, minutes * 60, log, kill_at_s))
        out["cpu_s"] = {name: round(read() - before[name], 2) for name, read in cpu.items()}
        out["nginx_errors"] = nginx_errors((nginx.dir / "error.log").read_text(errors="replace"))
        out["nginx_timings_ms"] = nginx_timings(nginx.timings.read_text(errors="replace") if nginx.timings else "")
    finally:
        for process in started[::-1]:
            try:
                process.stop()
            except Exception as exc:  # noqa: BLE001 - stop the others anyway
                log(f"soak: stopping {getattr(process, 'name', process)}: {exc}")
        shutil.rmtree(workdir, ignore_errors=True)
    out["nofile"] = list(nofile)
    out["nginx_worker_connections"] = connections
    out["settings"] = {"replicas": replica_count, "kill_at_s": kill_at_s, "overload_lag_ms": overload_lag_ms, "store": "redis",
                       "task_ttl_ms": 60_000,
                       "poll_interval_ms": POLL_INTERVAL_MS, "session_lifecycles": SESSION_LIFECYCLES}
    return out
