"""Tool calls as their clients saw them (docs/behaviour.md §6 "Tool results"), counted by the
observer (`proxy/observe/outcome.py`) once per call, never by the layers below.

A tool call ends where its client learns how it went: the answer to a `tools/call` that was not
turned into a task, or the first answer about a task that shows its end (a v2 `tasks/get`, a v1
`tasks/get` or `tasks/result`). What that answer said is the answering layer's report (`SEEN` on
the request: a relay, a proxy session) or, for a translated answer, read here from the result the
pairing built (`translators.tool_results`). A refused or abandoned `tools/call` ends it too:
`refused` when the proxy answered in the backend's stead or could not reach it, `timeout` when the
client left before its answer, `protocol_error` for a JSON-RPC error of the backend's.

A task's tool is remembered from the `tools/call` that created it (`ToolTasks`, by the task id its
client was given, in this process: a task created through another worker or replica, or before a
restart, ends under the tool `other`), and its end is counted once: a second poll of an ended task
counts nothing. Each outcome is counted in `mcp_tasks_proxy_tool_results_total{backend, tool,
outcome}` and, for the status page, under (`TOOLS`, backend, tool, client dialect, outcome) and its
latency under (`TOOL_MS`, backend, tool, bucket) (`proxy/observe/tool_verdicts.py` reads them).
The `tool` label is a name the backend lists (`Backend.lists_tool`), else `other`: a client cannot
grow the label space.
"""

from __future__ import annotations

import collections
import math
import time
from typing import Any

from translators.failures import (
    AUTH_REQUIRED,
    BACKEND_REMOVED,
    BACKEND_UNREACHABLE,
    PROXY_ERROR,
    PROXY_REFUSED,
    STORE_UNREACHABLE,
    Failure,
)
from translators.tool_results import PROTOCOL_ERROR, REFUSED, TIMEOUT, Seen, of_result

from ..faces.call import CANCELLED, SEEN, TRANSLATED, Call, Outcome

TOOLS = "tools"
"""Count kind of the tool outcomes: `(TOOLS, backend, tool, client_dialect, outcome)`."""
TOOL_MS = "tool_ms"
"""Count kind of the tool latencies: `(TOOL_MS, backend, tool, bucket)`, `bucket` of `latency_bucket`."""
OTHER = "other"
"""The tool label of a name the backend does not list (or of a task whose creation this process did not see)."""
MAX_TASKS = 10_000
"""Tasks whose tool this process remembers until their end (the oldest forgotten first), and ended ones it remembers."""
BUCKET_BASE = 1.25
"""Latency buckets grow by this factor: bucket b holds [1.25^b, 1.25^(b+1)) ms (b = 0 below 1.25 ms)."""
MAX_BUCKET = 64
"""The last bucket (1.25^65 ms: about 6 hours) also holds anything longer."""
REFUSALS = frozenset({PROXY_REFUSED, BACKEND_UNREACHABLE, AUTH_REQUIRED, STORE_UNREACHABLE, PROXY_ERROR, BACKEND_REMOVED})
"""Failure reasons of a call the backend never answered: its outcome is `refused`."""
_ENDED = object()


def latency_bucket(ms: float) -> int:
    """The latency bucket of `ms` milliseconds (`BUCKET_BASE`)."""
    if ms < BUCKET_BASE:
        return 0
    return min(MAX_BUCKET, int(math.log(ms, BUCKET_BASE)))


class ToolTasks:
    """The tool of each task created through this process, until its end is counted (bounded)."""

    def __init__(self) -> None:
        self._tasks: collections.OrderedDict[str, Any] = collections.OrderedDict()

    def created(self, task_id: str, tool: str, started: float) -> None:
        """A `tools/call` of `tool` (started at `started`, `time.perf_counter`) created the task the client knows as `task_id`."""
        self._remember(task_id, (tool, started))

    def end(self, task_id: str) -> tuple[str, float | None] | None:
        """The end of `task_id` is seen: its (tool, start) to count, (`OTHER`, None) for a task this
        process did not see created, None when its end was counted already."""
        known = self._tasks.pop(task_id, None)
        self._remember(task_id, _ENDED)
        if known is _ENDED:
            return None
        return known if known is not None else (OTHER, None)

    def _remember(self, task_id: str, value: Any) -> None:
        tasks = self._tasks
        tasks[task_id] = value
        if len(tasks) > MAX_TASKS:
            tasks.popitem(last=False)


def record_tool(call: Call, outcome: Outcome, failure: Failure | None, client_dialect: str) -> None:
    """Count what the answer to `call` (a `tools/call`, `tasks/get` or `tasks/result`) said of its
    tool, if it ended one (module docstring)."""
    message = call.message
    assert message is not None
    method, params = message.method, message.params
    label = outcome.label
    if label == "ok":
        # a modern client's translated answer is read here; any other, the layer that wrote it read
        seen: Seen | None = of_result(method, outcome.answer, v1=False) if outcome.source == TRANSLATED else call.request.get(SEEN)
        if seen is None:
            return
        end = seen.end
        if method == "tools/call" and seen.task_id is not None:
            call.backend.metrics.tool_tasks.created(seen.task_id, _label(call, params.get("name")), call.started)
            return
    elif method != "tools/call":
        return  # a task's poll refused, or left: the task goes on
    elif label == CANCELLED:
        end = TIMEOUT
    else:
        end = REFUSED if failure is not None and failure[0] in REFUSALS else PROTOCOL_ERROR
    if end is None:
        return
    started: float | None = call.started
    if method == "tools/call":
        tool = _label(call, params.get("name"))
    else:
        task_id = params.get("taskId")
        if not isinstance(task_id, str):
            return
        known = call.backend.metrics.tool_tasks.end(task_id)
        if known is None:
            return
        tool, started = known
    backend = call.backend
    metrics = backend.metrics
    metrics.tool_result(backend.name, tool, end)
    recorder = metrics.recorder
    recorder.count((TOOLS, backend.name, tool, client_dialect, end))
    if started is not None and end != REFUSED:
        recorder.count((TOOL_MS, backend.name, tool, latency_bucket((time.perf_counter() - started) * 1000)))


def _label(call: Call, name: Any) -> str:
    return name if call.backend.lists_tool(name) else OTHER


__all__ = ["MAX_TASKS", "OTHER", "PROTOCOL_ERROR", "TOOLS", "TOOL_MS", "ToolTasks", "latency_bucket", "record_tool"]
