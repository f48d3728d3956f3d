"""`mcp-tasks-proxy demo --reverse`: a v1 client walks through the proxy in front of the reference v2 server.

:func:`main` starts the reference v2 server (``v2_server.py`` on ``fastmcp==4.1.4``, its own venv)
and the proxy in this process (ephemeral port, state in a temporary directory), then runs the steps
of :data:`STEPS` in order with the project's own v1 session-wire client
(:mod:`proxy.demo.session_client`). The proxy's session face answers (``docs/behaviour.md`` §5): it
opens the session itself, turns task-augmented ``tools/call`` into nested v1 ``CreateTaskResult``\\ s
over the v2 server's tasks, serves ``tasks/get``, a blocking ``tasks/result`` (putting the task's
questions to the client on that response's event stream), ``tasks/list`` and ``tasks/cancel``, and
announces status changes on the session's GET stream.

Each step prints its title, the requests and answers (pretty JSON, long task and session ids
shortened to ``abcd…wxyz``, requests put to the client on a stream shown with the client's answer)
and one check line per expectation (``✔``/``✘``). The last line is the summary, ``N/N steps
passed`` when all passed. Printing, checks and the run harness are shared with ``demo``
(:mod:`proxy.demo.narration`).

Adding a step: an ``async def`` taking the :class:`Demo`, decorated with
``@step("title", "one-line explanation")``; inside, ``demo.call`` / ``demo.task_call`` /
``demo.follow`` talk (they print) and ``demo.expect`` / ``demo.expect_at`` / ``demo.check`` record.
``demo.answers`` holds what the user would type into an elicitation form, by its message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .narration import _MISSING, SHORT_ID_OVER, Narrator, Step, _indent, registrar, run_demo
from .session_client import (
    PROTOCOL_VERSION,
    RELATED_TASK,
    TERMINAL_STATUSES,
    ClientRequestError,
    Exchange,
    SessionClient,
)

__all__ = ["STEPS", "Demo", "main", "step"]

#: Upper bound for following one task to the status wanted.
POLL_TIMEOUT_S = 10.0
#: The demo polls ``tasks/get`` at the task's ``pollInterval`` but at least this often (the
#: reference v2 server suggests 5 s, longer than a demo should wait).
MAX_POLL_INTERVAL_S = 0.25
#: How long a status notification may take to show up on the GET stream.
NOTIFICATION_WAIT_S = 2.0

CLIENT_CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}}}
TASKS_CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
#: ``execution.taskSupport`` of the reference v2 server's tools, as the proxy should advertise them.
TASK_SUPPORT: dict[str, str] = {
    "greet": "forbidden",
    "slow_compute": "optional",
    "failing_job": "required",
    "protocol_error_job": "required",
    "confirm_delete": "required",
    "multi_input": "required",
    "test_tool_with_task": "required",
}
#: Members of the v2 wire that a v1 answer must not carry.
V2_ONLY = ("resultType", "ttlMs", "pollIntervalMs", "inputRequests", "requestState")
CONFIRM_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}


# ------------------------------------------------------------------------------------------------
# Steps
# ------------------------------------------------------------------------------------------------

#: The steps, in the order they run.
STEPS: list[Step] = []

#: Decorator: append the function to :data:`STEPS` as a step called ``title``.
step = registrar(STEPS)


# ------------------------------------------------------------------------------------------------
# The demo context
# ------------------------------------------------------------------------------------------------


class Demo(Narrator):
    """What a step works with: the v1 client, the printer, the check recorder and a memory.

    Attributes:
        client: a :class:`SessionClient` declaring form elicitation; its requests from the server
            are answered by :meth:`on_request`.
        answers: what the user types into an elicitation form, by the form's message (a form
            not listed here is declined).
        created: the tasks created in this session, task id → tool name, in order.
        last_created: the ``task`` object of the last ``CreateTaskResult``.
        memory: values steps leave for later steps (e.g. ``memory["task_id"]``).
    """

    def __init__(self, url: str, *, verbose: bool) -> None:
        super().__init__(verbose=verbose)
        self.url = url
        self.client = SessionClient(url, capabilities=CLIENT_CAPABILITIES, on_request=self.on_request)
        self.answers: dict[str, dict[str, Any]] = {}
        self.created: dict[str, str] = {}
        self.last_created: dict[str, Any] = {}
        self.memory: dict[str, Any] = {}

    async def close(self) -> None:
        await self.client.close()

    async def on_request(self, message: dict[str, Any]) -> dict[str, Any]:
        """The user at the v1 client: fill in the forms of :attr:`answers`, decline the others."""
        if message.get("method") != "elicitation/create":
            raise ClientRequestError(-32601, f"Method not found: {message.get('method')}")
        content = self.answers.get((message.get("params") or {}).get("message"))
        return {"action": "accept", "content": content} if content is not None else {"action": "decline"}

    # -- printing ------------------------------------------------------------------------------

    def _remember_ids(self, exchange: Exchange) -> None:
        result = exchange.result or {}
        task = result.get("task") if isinstance(result.get("task"), dict) else {}
        listed = [t.get("taskId") for t in result.get("tasks") or () if isinstance(t, dict)]
        self.remember(self.client.session_id, exchange.headers.get("Mcp-Session-Id"), result.get("taskId"),
                      task.get("taskId"), (exchange.request.get("params") or {}).get("taskId"), *listed)

    def show(self, exchange: Exchange, *, elide: Iterable[str] = (), note: str = "") -> None:
        """Print one exchange: request line with the MCP headers, request body, status, answer; for
        an event-stream answer, each request put to the client and the client's POSTed answer."""
        self._remember_ids(exchange)
        if not self.verbose:
            return
        self.print_request_line("DELETE" if exchange.method == "DELETE" else "POST", exchange, note)
        if exchange.request:
            print(_indent(self.pretty(exchange.request)))
        self.print_status_line(exchange, "   text/event-stream" if exchange.streamed else "")
        for answered in exchange.answered:
            print("    ⇠ on the stream, a request to the client:")
            print(_indent(self.pretty(answered.request), "      "))
            print(f"    → POST  the client's answer   ← HTTP {answered.status}")
            print(_indent(self.pretty(answered.reply), "      "))
        for notification in exchange.notifications:
            print("    ⇠ on the stream, a notification:")
            print(_indent(self.pretty(notification), "      "))
        if exchange.streamed:
            print("    ⇠ on the stream, the response:")
        self.print_response(exchange, elide)

    # -- checks --------------------------------------------------------------------------------

    def check_v1_task(self, task: Any, label: str) -> None:
        """Check a v1 ``Task`` object: its required fields present, no v2-only member."""
        task = task if isinstance(task, dict) else {}
        missing = sorted(k for k in ("taskId", "status", "createdAt", "lastUpdatedAt", "ttl") if k not in task)
        self.check(not missing, f"{label}: v1 Task fields present (taskId, status, createdAt, lastUpdatedAt, ttl)",
                   {"missing": missing})
        extra = sorted(k for k in (*V2_ONLY, "result", "error") if k in task)
        self.check(not extra, f"{label}: no v2 members ({', '.join((*V2_ONLY, 'result', 'error'))})", extra)

    def expect_related_task(self, exchange: Exchange, task_id: str, label: str = "result") -> None:
        """Check ``result._meta["io.modelcontextprotocol/related-task"] = {taskId}``."""
        self.expect_at(exchange, ["result", "_meta", RELATED_TASK], {"taskId": task_id},
                       f'{label}._meta["{RELATED_TASK}"] = {{"taskId": the task}}')

    # -- talking -------------------------------------------------------------------------------

    async def call(self, method: str, params: Mapping[str, Any] | None = None, *, elide: Iterable[str] = (),
                   note: str = "") -> Exchange:
        """Send one request in the session and print the exchange."""
        exchange = await self.client.request(method, params)
        self.show(exchange, elide=elide, note=note)
        return exchange

    async def task_call(self, name: str, arguments: Mapping[str, Any] | None = None, *, task: Mapping[str, Any] | None = None,
                        note: str = "") -> str | None:
        """Call tool ``name`` with ``params.task`` (default ``{}``) and check the answer is a nested
        v1 ``CreateTaskResult`` in ``working``. Returns the task id, or ``None`` when no task came back."""
        exchange = await self.call("tools/call", {"name": name, "arguments": dict(arguments or {}), "task": dict(task or {})},
                                   note=note)
        self.expect("HTTP 200", exchange.status, 200)
        task_obj = self.dig(exchange.response, "result.task")
        task_id = task_obj.get("taskId") if isinstance(task_obj, dict) else None
        if not isinstance(task_id, str) or not task_id:
            self.check(False, "result.task.taskId is a non-empty string", exchange.response)
            return None
        self.created[task_id] = name
        self.last_created = task_obj
        self.expect_at(exchange, "result.task.status", "working", 'nested CreateTaskResult: task.status = "working"')
        result = exchange.result or {}
        flat = sorted(k for k in (*V2_ONLY, "taskId", "status") if k in result)
        self.check(not flat, "not flat: no resultType, taskId or status beside task", flat)
        self.check_v1_task(task_obj, "task")
        return task_id

    async def follow(self, task_id: str, until: Iterable[str] | None = None) -> Exchange:
        """Poll ``tasks/get`` until ``until`` (default: terminal), print the status sequence and the
        last exchange, and check its shape. Returns the last exchange."""
        wanted = set(until) if until is not None else set(TERMINAL_STATUSES)
        started = time.monotonic()
        polls: list[Exchange] = []
        while True:
            polls.append(await self.client.request("tasks/get", {"taskId": task_id}))
            last = polls[-1]
            status = last.task_status
            if status is None or status in wanted or status in TERMINAL_STATUSES:
                break
            if time.monotonic() - started > POLL_TIMEOUT_S:
                self.check(False, f"task reached {'/'.join(sorted(wanted))} within {POLL_TIMEOUT_S:g} s", status)
                break
            interval = (last.result or {}).get("pollInterval")
            interval_s = interval / 1000 if isinstance(interval, (int, float)) and interval > 0 else MAX_POLL_INTERVAL_S
            await asyncio.sleep(min(interval_s, MAX_POLL_INTERVAL_S))
        self.show_polls(polls, started, lambda p: p.task_status or f"HTTP {p.status} error")
        self.expect("tasks/get: HTTP 200", last.status, 200)
        self.expect_at(last, "result.taskId", task_id, "tasks/get: taskId = the id the client was given")
        self.check_v1_task(last.result, "tasks/get")
        return last

    async def status_notification(self, task_id: str, status: str) -> None:
        """Check that ``notifications/tasks/status`` with ``status`` for the task came on the GET stream."""
        note = await self.client.stream_message(
            lambda m: m.get("method") == "notifications/tasks/status"
            and (m.get("params") or {}).get("taskId") == task_id and (m.get("params") or {}).get("status") == status,
            NOTIFICATION_WAIT_S,
        )
        if note is not None and self.verbose:
            print("  ⇠ on the session's GET stream:")
            print(_indent(self.pretty(note)))
            print(flush=True)
        self.check(note is not None, f'GET stream: notifications/tasks/status {{taskId, status: "{status}"}}',
                   [m.get("params", {}).get("status") for m in self.client.stream_messages])


# ------------------------------------------------------------------------------------------------
# The steps of the walkthrough
# ------------------------------------------------------------------------------------------------


@step("initialize", "The proxy answers initialize itself, with v1 task capabilities and a sealed Mcp-Session-Id; "
      "the client then opens the session's GET stream.")
async def _initialize(demo: Demo) -> None:
    answer, initialized = await demo.client.initialize()
    demo.show(answer)
    demo.show(initialized)
    demo.expect("initialize: HTTP 200", answer.status, 200)
    session_id = answer.headers.get("Mcp-Session-Id", _MISSING)
    demo.check(isinstance(session_id, str) and len(session_id) > SHORT_ID_OVER, "response header Mcp-Session-Id (a sealed id)",
               session_id)
    demo.expect_at(answer, "result.protocolVersion", PROTOCOL_VERSION)
    demo.expect_at(answer, "result.capabilities.tasks", TASKS_CAPABILITY)
    demo.expect_at(answer, "result.capabilities.tools", {})
    demo.expect_at(answer, "result.serverInfo.name", "mcp-tasks-proxy")
    demo.expect("notifications/initialized: HTTP 202", initialized.status, 202)
    status, content_type = await demo.client.listen()
    demo.say(f"  → GET  Accept: text/event-stream  Mcp-Session-Id: {demo._shorten(str(session_id))}")
    demo.say(f"  ← HTTP {status}  {content_type}   (left open: status notifications arrive here)\n")
    demo.check(status == 200 and content_type.startswith("text/event-stream"), "GET stream: HTTP 200 text/event-stream",
               {"http": status, "Content-Type": content_type})


@step("tools/list", "Forwarded to the v2 server; the proxy adds each tool's execution.taskSupport from what it probed.")
async def _tools_list(demo: Demo) -> None:
    ex = await demo.call("tools/list", elide=["result.tools.*.inputSchema", "result.tools.*.outputSchema"])
    demo.expect("HTTP 200", ex.status, 200)
    tools = demo.dig(ex.response, "result.tools")
    support = {t.get("name"): demo.dig(t, "execution.taskSupport") for t in tools if isinstance(t, dict)} if isinstance(tools, list) else {}
    for name, wanted in TASK_SUPPORT.items():
        demo.expect(f'{name}: execution.taskSupport = "{wanted}"', support.get(name, _MISSING), wanted)
    extra = sorted(k for k in ("resultType", "ttlMs", "cacheScope") if k in (ex.result or {}))
    demo.check(not extra, "no v2 members (resultType, ttlMs, cacheScope)", extra)


@step("A synchronous call: greet", "No params.task: the proxy forwards the call and answers the plain result.")
async def _sync_call(demo: Demo) -> None:
    ex = await demo.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})
    demo.expect("HTTP 200", ex.status, 200)
    demo.expect_at(ex, "result.content.0.text", "Hello, Ada!")
    demo.expect_at(ex, "result.isError", False)
    result = ex.result or {}
    extra = sorted(k for k in ("task", "resultType", "taskId") if k in result)
    demo.check(not extra, "no task, resultType or taskId (not a task)", extra)


@step("A task-augmented call: slow_compute",
      "params.task asks for a task; the v2 server makes one and the proxy answers a nested v1 CreateTaskResult.")
async def _task_call(demo: Demo) -> None:
    task_id = await demo.task_call("slow_compute", {"seconds": 1, "label": "demo"}, task={"ttl": 60000})
    if task_id is None:
        return
    demo.memory["task_id"] = task_id
    ttl = demo.last_created.get("ttl", _MISSING)
    demo.say("  (a v1 ttl hint cannot be forwarded to a v2 server: the task's ttl is the server's)")
    demo.check(isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0, "task.ttl is a positive integer (milliseconds)", ttl)


@step("tasks/get until completed", "Each tasks/get reads the v2 task and answers a flat v1 Task; the change to "
      "completed is also announced on the GET stream.")
async def _get_until_completed(demo: Demo) -> None:
    task_id = demo.memory.get("task_id")
    if not demo.check(isinstance(task_id, str), "a task from the step before", task_id):
        return
    last = await demo.follow(task_id)
    demo.expect_at(last, "result.status", "completed")
    await demo.status_notification(task_id, "completed")


@step("tasks/result", "The payload of the completed task, with related-task _meta naming it.")
async def _result(demo: Demo) -> None:
    task_id = demo.memory.get("task_id")
    if not demo.check(isinstance(task_id, str), "a task from an earlier step", task_id):
        return
    ex = await demo.call("tasks/result", {"taskId": task_id})
    demo.expect("HTTP 200", ex.status, 200)
    demo.expect_at(ex, "result.content.0.text", "computed demo")
    demo.expect_at(ex, "result.isError", False)
    demo.expect_related_task(ex, task_id)
    demo.check("resultType" not in (ex.result or {}), "no resultType", (ex.result or {}).get("resultType"))


async def _failed_then_result(demo: Demo, tool: str, message: str) -> tuple[str, Exchange] | None:
    """Call ``tool`` (no arguments) as a task, follow it to its end, check it ended ``failed`` with
    ``statusMessage`` ``message``, then ask ``tasks/result``. Returns the task id and that
    exchange, or ``None`` when no task came back."""
    task_id = await demo.task_call(tool)
    if task_id is None:
        return None
    last = await demo.follow(task_id)
    demo.expect_at(last, "result.status", "failed")
    demo.expect_at(last, "result.statusMessage", message)
    return task_id, await demo.call("tasks/result", {"taskId": task_id})


@step("A tool error: failing_job", "A v2 task completed with an isError result is a failed v1 task; "
      "tasks/result answers that isError result.")
async def _tool_error(demo: Demo) -> None:
    ended = await _failed_then_result(demo, "failing_job", "failing_job always fails")
    if ended is None:
        return
    task_id, ex = ended
    demo.expect("tasks/result: HTTP 200", ex.status, 200)
    demo.expect_at(ex, "result.isError", True, "tasks/result: result.isError = true")
    demo.expect_at(ex, "result.content.0.text", "failing_job always fails", 'tasks/result: content text = "failing_job always fails"')
    demo.expect_related_task(ex, task_id, "tasks/result: result")


@step("A protocol error: protocol_error_job", "A failed v2 task is a failed v1 task; tasks/result answers its "
      "JSON-RPC error.")
async def _protocol_error(demo: Demo) -> None:
    ended = await _failed_then_result(demo, "protocol_error_job", "protocol_error_job: simulated internal failure")
    if ended is None:
        return
    _, ex = ended
    demo.expect_error(ex, 200, -32603, "tasks/result")
    demo.expect_at(ex, "error.message", "protocol_error_job: simulated internal failure",
                   'tasks/result: error.message = "protocol_error_job: simulated internal failure"')


@step("An elicitation answered during tasks/result",
      "confirm_delete asks inside its task: tasks/get says input_required, and tasks/result puts the question to "
      "the client on its event stream; the client POSTs the answer.")
async def _elicitation(demo: Demo) -> None:
    demo.answers["Delete report.txt?"] = {"confirm": True}
    task_id = await demo.task_call("confirm_delete", {"filename": "report.txt"})
    if task_id is None:
        return
    waiting = await demo.follow(task_id, until={"input_required"})
    demo.expect_at(waiting, "result.status", "input_required")
    ex = await demo.call("tasks/result", {"taskId": task_id}, note="blocks; the question comes on its stream")
    demo.expect("tasks/result: HTTP 200, an event stream", (ex.status, ex.streamed), (200, True))
    asked = [a.request for a in ex.answered]
    demo.expect("one request put to the client: elicitation/create", [m.get("method") for m in asked], ["elicitation/create"])
    params = (asked[0].get("params") or {}) if asked else {}
    demo.expect('elicitation: message = "Delete report.txt?"', params.get("message", _MISSING), "Delete report.txt?")
    demo.expect("elicitation: requestedSchema = {confirm: boolean}", params.get("requestedSchema", _MISSING), CONFIRM_SCHEMA)
    demo.expect(f'elicitation: _meta["{RELATED_TASK}"] = {{"taskId": the task}}',
                demo.dig(params, ["_meta", RELATED_TASK]), {"taskId": task_id})
    demo.expect("the client's answer: HTTP 202", [a.status for a in ex.answered], [202])
    demo.expect_at(ex, "result.content.0.text", "deleted report.txt")
    demo.expect_related_task(ex, task_id)
    last = await demo.follow(task_id)
    demo.expect_at(last, "result.status", "completed")


@step("tasks/list", "The proxy lists the tasks this client created through it, from its own registry.")
async def _list(demo: Demo) -> None:
    ex = await demo.call("tasks/list")
    demo.expect("HTTP 200", ex.status, 200)
    final = {"slow_compute": "completed", "failing_job": "failed", "protocol_error_job": "failed", "confirm_delete": "completed"}
    expected = {task_id: final.get(tool, "?") for task_id, tool in demo.created.items()}
    listed = demo.dig(ex.response, "result.tasks")
    got = {t.get("taskId"): t.get("status") for t in listed if isinstance(t, dict)} if isinstance(listed, list) else listed
    demo.expect(f"tasks = the {len(expected)} tasks created so far, with their statuses "
                f"({', '.join(f'{tool} {final.get(tool)}' for tool in demo.created.values())})", got, expected)
    demo.check("nextCursor" not in (ex.result or {}), "no nextCursor (one page)", (ex.result or {}).get("nextCursor"))
    if isinstance(listed, list) and listed:
        demo.check_v1_task(listed[0], "tasks[0]")


@step("Cancel: slow_compute for 60 s", "tasks/cancel cancels the v2 task and answers the v1 task, cancelled; "
      "an ended task cannot be cancelled again.")
async def _cancel(demo: Demo) -> None:
    task_id = await demo.task_call("slow_compute", {"seconds": 60, "label": "never"})
    if task_id is None:
        return
    ex = await demo.call("tasks/cancel", {"taskId": task_id})
    demo.expect("tasks/cancel: HTTP 200", ex.status, 200)
    demo.expect_at(ex, "result.status", "cancelled", 'tasks/cancel: status = "cancelled"')
    demo.expect_at(ex, "result.taskId", task_id, "tasks/cancel: taskId = the task")
    last = await demo.follow(task_id)
    demo.expect_at(last, "result.status", "cancelled")
    again = await demo.call("tasks/cancel", {"taskId": task_id}, note="again")
    demo.expect_error(again, 200, -32602, "tasks/cancel again")


@step("A forbidden tool with a task (-32601)", "greet does not support tasks; asking for one is refused.")
async def _forbidden(demo: Demo) -> None:
    ex = await demo.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}, "task": {}})
    demo.expect_error(ex, 200, -32601, "tools/call greet with params.task")


@step("DELETE ends the session", "After DELETE the proxy no longer knows the session id.")
async def _delete(demo: Demo) -> None:
    ex = await demo.client.delete()
    demo.show(ex)
    demo.expect("DELETE: HTTP 200", ex.status, 200)
    after = await demo.call("tasks/list", note="with the ended session's id")
    demo.expect_error(after, 404, -32600, "tasks/list")
    demo.expect_at(after, "error.message", "Session not found", 'tasks/list: error.message = "Session not found"')


# ------------------------------------------------------------------------------------------------
# Running the walkthrough
# ------------------------------------------------------------------------------------------------


def main(verbose: bool = True) -> int:
    """Run the reverse walkthrough; return 0 when every step saw exactly what it should, 1 otherwise.

    The reference v2 server and the proxy are stopped at the end, also on failure or Ctrl-C.
    """
    from .processes import start_reference_v2_server

    return run_demo(
        verbose=verbose,
        steps=STEPS,
        make_demo=lambda url: Demo(url, verbose=verbose),
        start_server=start_reference_v2_server,
        banner="mcp-tasks-proxy demo --reverse: a v1 (2025-11-25) client → the proxy → a v2 (2026-07-28 + tasks extension) server",
        server_name="reference v2 server",
        server_note="fastmcp 4.1.4",
        face_note="session face → v2-modern backend",
        temp_prefix="mcp-tasks-proxy-reverse-demo-",
    )
