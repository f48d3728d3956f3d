"""Tool calls as their clients saw them (docs/behaviour.md §6 "Tool results"), counted by the
observer (`proxy/observe/outcome.py`) once per call, never by the layers below.

A tool call ends where its client learns how it went: the answer to a `tools/call` that was not
turned into a task, or the first answer about a task that shows its end (a v2 `tasks/get`, a v1
`tasks/get` or `tasks/result`). What that answer said is the answering layer's report (a relay's
`call.seen`; `SEEN` on the request: a proxy session, the held v1 calls) or, for a translated answer, read here from the result the
pairing built (`translators.tool_results`). A refused or abandoned `tools/call` ends it too:
`refused` when the proxy answered in the backend's stead or could not reach it, `timeout` when the
client left before its answer, `protocol_error` for a JSON-RPC error of the backend's.

A task's tool is remembered from the `tools/call` that created it (`ToolTasks`, by the task id its
client was given and the session it was given on, since a relayed session's task ids are the
backend's own and two sessions may hold the same one (docs/decisions.md §190), in this process: a
task created through another worker or replica, or before a restart, ends under the tool `other`),
and its end is counted once: a second poll of an ended task counts nothing. Each outcome goes to
the recorder as it came, one append on the request path (`StatusRecorder.tool`), which counts them
when it is read: `mcp_tasks_proxy_tool_results_total{backend, tool, outcome}` and, for the status
page, figures.py's `TOOLS` and `TOOL_MS` (`proxy/observe/tool_verdicts.py` reads them). The `tool`
label is a name the backend lists (`Backend.lists_tool`), else `other`: a client cannot grow the
label space.
"""

from __future__ import annotations

import collections
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
from .figures import OTHER_TOOL

MAX_TASKS = 10_000
"""Tasks whose tool this process remembers until their end (the oldest forgotten first), and ended ones it remembers."""
REFUSALS = frozenset({PROXY_REFUSED, BACKEND_UNREACHABLE, AUTH_REQUIRED, STORE_UNREACHABLE, PROXY_ERROR, BACKEND_REMOVED})
"""Failure reasons of a call the backend never answered: its outcome is `refused`."""
_ENDED = object()
TaskKey = tuple[str | None, str | None, str]
"""A task as its client knows it: (the client's `Mcp-Session-Id`, None on the modern wire; there its
principal, since a modern task id may be the backend's own, which two callers may share
(docs/decisions.md §192); its task id)."""


class ToolTasks:
    """The tool of each task created through this process, until its end is counted (bounded)."""

    def __init__(self) -> None:
        self._tasks: collections.OrderedDict[TaskKey, Any] = collections.OrderedDict()

    def created(self, task_id: TaskKey, tool: str | None, started: float) -> None:
        """A `tools/call` of `tool` (the name its client gave: bounded when counted, `StatusRecorder.tool`;
        started at `started`, `time.perf_counter`) created the task the client knows as `task_id`
        (with its session)."""
        self._remember(task_id, (tool, started))

    def end(self, task_id: TaskKey) -> tuple[str | None, float | None] | None:
        """The end of `task_id` is seen: its (tool, start) to count, (`OTHER_TOOL`, None) for a task this
        process did not see created, None when its end was counted already."""
        known = self._tasks.pop(task_id, None)
        self._remember(task_id, _ENDED)
        if known is _ENDED:
            return None
        return known if known is not None else (OTHER_TOOL, None)

    def _remember(self, task_id: TaskKey, value: Any) -> None:
        tasks = self._tasks
        tasks[task_id] = value
        if len(tasks) > MAX_TASKS:
            tasks.popitem(last=False)


def record_tool(call: Call, outcome: Outcome, failure: Failure | None, client_dialect: str) -> None:
    """Count what the answer to `call` (a `tools/call`, `tasks/get` or `tasks/result`) said of its
    tool, if it ended one (module docstring)."""
    message = call.message
    assert message is not None
    method = message.method
    label = outcome.label
    backend = call.backend
    if label == "ok":
        # a modern client's translated answer is read here; any other, the layer that wrote it read
        seen: Seen | None = (of_result(method, outcome.answer, v1=False) if outcome.source == TRANSLATED
                             else call.seen if call.seen is not None else call.request.get(SEEN))
        if seen is None:
            return
        end = seen.end
        if end is None:
            if seen.task_id is not None and method == "tools/call":
                name = message.params.get("name")
                backend.metrics.tool_tasks.created(task_key(call, seen.task_id), name if name.__class__ is str else None, call.started)
            return
    elif method != "tools/call":
        return  # a task's poll refused, or left: the task goes on
    elif label == CANCELLED:
        end = TIMEOUT
    else:
        end = REFUSED if failure is not None and failure[0] in REFUSALS else PROTOCOL_ERROR
    if method == "tools/call":
        name = message.params.get("name")
        backend.metrics.recorder.tool(backend, name if name.__class__ is str else None, client_dialect, end,
                                      call.started if end != REFUSED else None)
        return
    task_id = message.params.get("taskId")
    if isinstance(task_id, str):
        known = backend.metrics.tool_tasks.end(task_key(call, task_id))
        if known is not None:
            backend.metrics.recorder.tool(backend, known[0], client_dialect, end, known[1])


def task_key(call: Call, task_id: str) -> TaskKey:
    """`call`'s task `task_id` as `ToolTasks` knows it (`TaskKey`)."""
    session = call.session_id
    return (session, call.principal if session is None else None, task_id)


__all__ = ["MAX_TASKS", "ToolTasks", "record_tool", "task_key"]
