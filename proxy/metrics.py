"""Prometheus metrics (docs/behaviour.md §6 "Observability"), one registry per application.

* `mcp_tasks_proxy_requests_total{face, backend_dialect, method, outcome}`: every request the proxy
  answered; `outcome` is "ok", the JSON-RPC error code ("-32601"), "http_<status>" for a
  transport refusal (406, 413, 415) that carries no JSON-RPC meaning, or "cancelled" for a
  relayed request whose client left before the end of its answer (it may have read it all).
* `mcp_tasks_proxy_upstream_seconds{backend, method}`: latency of each upstream request (held
  `tasks/result` requests included, hence buckets up to 300 s).
* `mcp_tasks_proxy_live_tasks{backend}`: tasks the proxy knows are not finished, per backend (read
  at scrape time from the sources registered with `track_live`).
* `mcp_tasks_proxy_failures_total{backend, client_dialect, backend_dialect, reason, by}`: every
  answer that was not ok, by the client dialect and pairing that saw it and its reason
  (`translators.failures.REASONS`; `by` "proxy" for the proxy's own refusals, else "backend").
* `mcp_tasks_proxy_repairs_total{client_dialect, repair}`: what the proxy made good for clients
  (`translators.failures.REPAIRS`: a missing `Mcp-Method` or `Mcp-Name`, an `Accept` without both
  media types); which clients, the status page says.
* `mcp_tasks_proxy_tool_results_total{backend, tool, outcome}`: every tool call as its client saw
  it, an answered `tools/call` or a task's end (`translators.tool_results.OUTCOMES`: "ok",
  "tool_error", "protocol_error", "timeout", "refused"); `tool` is a name the backend lists, else
  "other" (`proxy/observe/tools.py`).
* `mcp_tasks_proxy_dropped_fields_total{field}`: task fields dropped in translation (a hub task's
  `dropped`, e.g. `parentTaskId`); each drop is also logged at debug level.

Label values that a client chooses (methods) are folded into a fixed set (`method_label`), so a
client cannot grow the label space. `NO_METRICS` is the do-nothing stand-in used where no
application wired a `Metrics` in (connectors built by `probe`, unit tests).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from translators.errors import McpError

from .observe.counted import CountedFamily, LatencyFamily
from .observe.recorder import NoRecorder, StatusRecorder
from .observe.tools import ToolTasks

log = logging.getLogger(__name__)

KNOWN_METHODS = frozenset({
    # both eras
    "tools/list", "tools/call", "prompts/list", "prompts/get", "resources/list", "resources/read",
    "resources/templates/list", "resources/subscribe", "resources/unsubscribe", "completion/complete",
    "tasks/get", "tasks/cancel",
    # 2025-11-25 (session wire)
    "initialize", "ping", "logging/setLevel", "tasks/result", "tasks/list", "notifications/initialized",
    "notifications/cancelled", "notifications/progress", "notifications/roots/list_changed",
    # 2026-07-28 and SEP-2663
    "server/discover", "subscriptions/listen", "tasks/update",
    # server→client requests (answers sent upstream)
    "elicitation/create", "sampling/createMessage", "roots/list",
})
"""Method label values kept as they are; any other method is counted as "other"."""

OTHER_METHOD = "other"
NO_METHOD = "none"
"""Method label of a request refused before its method was known (transport refusal, bad JSON),
or of a JSON-RPC response POSTed by a client."""

TRANSPORT_STATUSES = frozenset({406, 413, 415})
"""HTTP statuses counted as `http_<status>` rather than by JSON-RPC code."""

UPSTREAM_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def method_label(method: str | None) -> str:
    """The `method` label of a request: the method if it is a known MCP method, "other" if not,
    "none" when there is none."""
    if not method:
        return NO_METHOD
    return method if method in KNOWN_METHODS else OTHER_METHOD


def outcome_of(error: McpError) -> str:
    """The `outcome` label of a refusal: "http_<status>" for transport refusals, else the code."""
    if error.http_status in TRANSPORT_STATUSES:
        return f"http_{error.http_status}"
    return str(error.code)


class Metrics:
    """The proxy's metrics in their own `CollectorRegistry` (several proxies may share a process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests = CountedFamily(
            "mcp_tasks_proxy_requests", "Requests answered, by face, backend dialect, method and outcome",
            ["face", "backend_dialect", "method", "outcome"], self.registry,
        )
        self._upstream = LatencyFamily(
            "mcp_tasks_proxy_upstream_seconds", "Latency of each upstream request, by backend and method",
            ["backend", "method"], UPSTREAM_BUCKETS, self.registry,
        )
        self._live = Gauge("mcp_tasks_proxy_live_tasks", "Tasks the proxy knows are not finished, by backend", ["backend"],
                           registry=self.registry)
        self._failures = CountedFamily(
            "mcp_tasks_proxy_failures", "Answers that were not ok, by backend, client dialect, backend dialect, reason and by whom",
            ["backend", "client_dialect", "backend_dialect", "reason", "by"], self.registry,
        )
        self._repairs = CountedFamily(
            "mcp_tasks_proxy_repairs", "Repairs the proxy made for clients (a missing routing header, an Accept), by client dialect",
            ["client_dialect", "repair"], self.registry,
        )
        self._dropped = CountedFamily(
            "mcp_tasks_proxy_dropped_fields", "Task fields dropped in translation, by field", ["field"], self.registry,
        )
        self._live_sources: dict[str, list[Callable[[], int]]] = {}
        self.tool_tasks = ToolTasks()
        """The tool of each task created through this process, until its end is counted (`proxy/observe/tools.py`)."""
        self.recorder = StatusRecorder()
        """What the status page shows (`proxy/observe/recorder.py`), recorded beside these metrics;
        it also counts the tool results (`StatusRecorder.tool`), exported at scrape time (`_ToolResults`)."""
        self.registry.register(_ToolResults(self.recorder))
        self.lasting: Any = None
        """`proxy.observe.lasting.Lasting` once the application keeps the figures in its store."""

    def watch_loop(self, lag: Any) -> None:
        """Export `lag` (`proxy.overload.LoopLag`) at scrape time: `mcp_tasks_proxy_event_loop_lag_seconds`
        (its last sample) and `mcp_tasks_proxy_overloaded` (1 while this process sheds new work)."""
        self.registry.register(_LoopLag(lag))

    # -- recording ----------------------------------------------------------------------------------

    def request(self, face: str, backend_dialect: str, method: str | None, outcome: str) -> None:
        """Count one answered request."""
        self._requests.inc((face, backend_dialect, method_label(method), outcome))

    def failure(self, backend: str, client_dialect: str, backend_dialect: str, failure: tuple[str, str]) -> None:
        """Count one answer that was not ok under its (reason, by) (`translators.failures`)."""
        self._failures.inc((backend, client_dialect, backend_dialect, *failure))

    def repaired(self, client_dialect: str, repairs: tuple[str, ...]) -> None:
        """Count the repairs the proxy made for one request (`translators.failures.REPAIRS`)."""
        for repair in repairs:
            self._repairs.inc((client_dialect, repair))

    def upstream(self, backend: str, method: str, seconds: float) -> None:
        """Record the latency of one upstream request."""
        self._upstream.observe((backend, method_label(method)), seconds)
        self.recorder.upstream(backend, seconds)

    def dropped(self, fields: Iterable[str], where: str) -> None:
        """Count (and log at debug level) task fields dropped in translation; `where` names the
        message they came in (for the log line)."""
        for field in fields:
            self._dropped.inc((field,))
            log.debug("dropped task field %s from %s (the other dialect cannot carry it)", field, where)

    def track_live(self, source: Callable[[], int], backend: str = "main") -> None:
        """Add a count of `backend`'s unfinished tasks to `mcp_tasks_proxy_live_tasks` (called at
        scrape time, and by `live_tasks`)."""
        sources = self._live_sources.get(backend)
        if sources is None:
            sources = self._live_sources[backend] = []
            self._live.labels(backend).set_function(lambda: float(self.live_tasks(backend)))
        sources.append(source)

    def live_tasks(self, backend: str) -> int:
        """The tasks of `backend` the proxy knows are not finished, from every source tracked."""
        return sum(source() for source in self._live_sources.get(backend, ()))

    # -- export -------------------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class NoMetrics(Metrics):
    """Records nothing: the default of connectors and components no application wired up."""

    def __init__(self) -> None:  # no registry at all
        self.tool_tasks = ToolTasks()
        self.recorder = NoRecorder()
        self.lasting = None

    def request(self, face: str, backend_dialect: str, method: str | None, outcome: str) -> None:
        pass

    def upstream(self, backend: str, method: str, seconds: float) -> None:
        pass

    def dropped(self, fields: Iterable[str], where: str) -> None:
        for field in fields:
            log.debug("dropped task field %s from %s (the other dialect cannot carry it)", field, where)

    def failure(self, backend: str, client_dialect: str, backend_dialect: str, failure: tuple[str, str]) -> None:
        pass

    def repaired(self, client_dialect: str, repairs: tuple[str, ...]) -> None:
        pass

    def track_live(self, source: Callable[[], int], backend: str = "main") -> None:
        pass

    def live_tasks(self, backend: str) -> int:
        return 0

    def exposition(self) -> bytes:
        return b""


NO_METRICS = NoMetrics()

clock = time.perf_counter
"""The clock upstream latencies are measured with."""


class _ToolResults(Collector):
    """`mcp_tasks_proxy_tool_results_total{backend, tool, outcome}` from the recorder's counts
    (`StatusRecorder.tools_counted`; read on the event loop's thread, like every write to them):
    a tuple appended on the request path instead of a counter child's lock and label lookup."""

    def __init__(self, recorder: StatusRecorder):
        self._recorder = recorder

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily("mcp_tasks_proxy_tool_results", "Tool calls as their clients saw them (an answered "
                                     "tools/call or a task's end), by backend, tool and outcome", labels=["backend", "tool", "outcome"])
        for key, count in list(self._recorder.tools_counted().items()):
            family.add_metric(list(key), count)
        yield family

    def describe(self) -> Iterable[CounterMetricFamily]:
        return self.collect()


class _LoopLag(Collector):
    """The event loop's lag and the admission control's state (`proxy/overload.py`), read at scrape time."""

    def __init__(self, lag: Any):
        self._lag = lag

    def collect(self) -> Iterable[GaugeMetricFamily]:
        yield GaugeMetricFamily("mcp_tasks_proxy_event_loop_lag_seconds", "How late the event loop ran its last sample (every 100 ms)",
                                value=self._lag.lag_s)
        yield GaugeMetricFamily("mcp_tasks_proxy_overloaded", "1 while this process sheds requests that start work (overload_lag_ms)",
                                value=1.0 if self._lag.shedding else 0.0)

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self.collect()
