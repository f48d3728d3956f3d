"""`mcp-tasks-proxy demo`: a v2 client walks through the proxy in front of the reference v1 server.

:func:`main` starts the reference v1 server (``v1_server.py`` on ``mcp==1.30.0``, its own venv) and
the proxy in this process (ephemeral port, state in a temporary directory), then runs the steps of
:data:`STEPS` in order with the project's own v2-modern client (:mod:`proxy.demo.client`). Each step
prints its title, the requests and answers (pretty JSON, long task ids shortened to ``abcd…wxyz``,
the ``_meta`` envelope in full only the first time a client sends it) and one check line per
expectation (``✔``/``✘``). The last line is the summary, ``N/N steps passed`` when all passed.

Adding a step: write an ``async def`` taking the :class:`Demo` and decorate it with
``@step("title", "one-line explanation")``; steps run in definition order. Inside, use
``demo.call`` / ``demo.task_call`` / ``demo.follow`` / ``demo.answer`` to talk (they print), and ``demo.expect`` /
``demo.check`` to record expectations. ``demo.memory`` carries values between steps (e.g. task ids),
``demo.client`` declares the tasks extension and form elicitation, ``demo.bare`` declares nothing.
The printing, the checks and the run harness are shared with ``demo --reverse``
(:mod:`proxy.demo.narration`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .client import TASKS_EXTENSION, TERMINAL_STATUSES, Exchange, ModernClient
from .narration import (  # noqa: F401  (short_id, summary, Step, StepOutcome: also this module's API)
    _MISSING,
    STEP_TIMEOUT_S,
    Narrator,
    Step,
    StepOutcome,
    _indent,
    registrar,
    run_demo,
    short_id,
    summary,
)

__all__ = ["STEPS", "Demo", "Step", "main", "step"]

#: Upper bound for following one task to the status wanted.
POLL_TIMEOUT_S = 10.0

RELATED_TASK = "io.modelcontextprotocol/related-task"
CLIENT_CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}}}


# ------------------------------------------------------------------------------------------------
# Steps
# ------------------------------------------------------------------------------------------------

#: The steps, in the order they run.
STEPS: list[Step] = []

#: Decorator: append the function to :data:`STEPS` as a step called ``title``.
step = registrar(STEPS)


# ------------------------------------------------------------------------------------------------
# Display
# ------------------------------------------------------------------------------------------------

def _count_inputs(exchange: Exchange) -> int:
    """How many ``inputRequests`` a ``tasks/get`` answer carries (0 when none)."""
    requests = (exchange.result or {}).get("inputRequests")
    return len(requests) if isinstance(requests, dict) else 0


def _poll_label(exchange: Exchange) -> str:
    """One ``tasks/get`` in the printed status sequence: ``working``, ``input_required(2)``, …"""
    if exchange.task_status is None:
        return f"HTTP {exchange.status} error"
    if exchange.task_status == "input_required":
        return f"input_required({_count_inputs(exchange)})"
    return exchange.task_status




# ------------------------------------------------------------------------------------------------
# The demo context
# ------------------------------------------------------------------------------------------------


class Demo(Narrator):
    """What a step works with: the clients, the printer, the check recorder and a memory.

    Attributes:
        client: a :class:`ModernClient` declaring the tasks extension and ``elicitation.form``.
        bare: a :class:`ModernClient` declaring no capability at all (no extension).
        memory: values steps leave for later steps (e.g. ``memory["task_id"]``).
        verbose: print requests, answers and every check (otherwise only titles, failed checks and the summary).
    """

    def __init__(self, url: str, *, verbose: bool) -> None:
        super().__init__(verbose=verbose)
        self.url = url
        self.client = ModernClient(url, declare_tasks=True, capabilities=CLIENT_CAPABILITIES)
        self.bare = ModernClient(url, declare_tasks=False)
        self.memory: dict[str, Any] = {}
        self._envelopes_shown: set[str] = set()

    async def close(self) -> None:
        await self.client.close()
        await self.bare.close()

    # -- printing ------------------------------------------------------------------------------

    def _remember_ids(self, exchange: Exchange) -> None:
        self.remember(
            (exchange.result or {}).get("taskId"),
            (exchange.request.get("params") or {}).get("taskId"),
            exchange.headers.get("Mcp-Name") if exchange.result_type == "task" else None,
        )

    def show(self, exchange: Exchange, *, elide: Iterable[str] = (), note: str = "") -> None:
        """Print one exchange: request line with the MCP headers, request body, status, answer.

        The ``_meta`` envelope is printed in full the first time a given envelope is sent and as
        ``{…}`` afterwards; ``elide`` paths apply to the response (e.g. ``result.tools.*.inputSchema``).
        """
        self._remember_ids(exchange)
        if not self.verbose:
            return
        params = exchange.request.get("params") or {}
        envelope_key = json.dumps(params.get("_meta"), sort_keys=True)
        request_elide = [] if envelope_key not in self._envelopes_shown else ["params._meta"]
        self._envelopes_shown.add(envelope_key)
        self.print_request_line("POST", exchange, note)
        print(_indent(self.pretty(exchange.request, request_elide)))
        self.print_status_line(exchange)
        self.print_response(exchange, elide)

    # -- talking -------------------------------------------------------------------------------

    async def call(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        client: ModernClient | None = None,
        elide: Iterable[str] = (),
        note: str = "",
    ) -> Exchange:
        """Send one request (``client`` defaults to :attr:`client`) and print the exchange."""
        exchange = await (client or self.client).request(method, params)
        self.show(exchange, elide=elide, note=note)
        return exchange

    async def task_call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        extra: Mapping[str, Any] | None = None,
        note: str = "",
    ) -> str | None:
        """Call tool ``name`` and check the answer is a flat v2 ``CreateTaskResult`` with
        ``Mcp-Name`` = its ``taskId``. ``extra`` params are sent beside ``name`` and ``arguments``
        (e.g. ``requestState`` and ``inputResponses`` of an MRTR retry). Returns the task id, or
        ``None`` when no task came back."""
        exchange = await self.call("tools/call", {"name": name, "arguments": dict(arguments or {}), **dict(extra or {})}, note=note)
        result = exchange.result or {}
        self.expect("HTTP 200", exchange.status, 200)
        self.expect_at(exchange, "result.resultType", "task", 'resultType = "task" (the proxy decided: a task)')
        task_id = result.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            self.check(False, "result.taskId is a non-empty string", result.get("taskId", _MISSING))
            return None
        self.expect("response header Mcp-Name = taskId", exchange.headers.get("Mcp-Name", _MISSING), task_id)
        forbidden = sorted(k for k in ("task", "ttl", "pollInterval", "result", "error", "inputRequests", "requestState") if k in result)
        self.check(not forbidden, "flat CreateTaskResult: no task, ttl, pollInterval (nor result, error, inputRequests, requestState)", forbidden)
        missing = sorted(k for k in ("status", "createdAt", "lastUpdatedAt", "ttlMs") if k not in result)
        self.check(not missing, "task fields present: status, createdAt, lastUpdatedAt, ttlMs", {"missing": missing})
        return task_id

    async def follow(
        self,
        task_id: str,
        until: Iterable[str] | None = None,
        *,
        inputs: int = 0,
        client: ModernClient | None = None,
    ) -> Exchange:
        """Poll ``tasks/get`` until ``until`` (default terminal), print the status sequence and the
        last exchange, and check the answer shape. Returns the last exchange.

        With ``inputs`` > 0 it waits instead for ``input_required`` with at least that many
        ``inputRequests`` (questions can show up one by one) and checks that it got there.
        """
        wanted = set(until) if until is not None else {"input_required"} if inputs else set(TERMINAL_STATUSES)
        # Waiting for questions also stops at a terminal status: the task will never ask then.
        stop_at = wanted | (set(TERMINAL_STATUSES) if inputs else set())
        started = time.monotonic()
        deadline = started + POLL_TIMEOUT_S
        polls: list[Exchange] = []
        while True:
            try:
                polls += await (client or self.client).poll(
                    task_id, until=stop_at, timeout_s=max(0.0, deadline - time.monotonic())
                )
            except TimeoutError as exc:
                polls += getattr(exc, "exchanges", [])
                self.check(False, f"task reached {'/'.join(sorted(wanted))} within {POLL_TIMEOUT_S:g} s",
                           polls[-1].task_status if polls else _MISSING)
                if not polls:
                    raise
                break
            if not inputs or polls[-1].task_status != "input_required" or _count_inputs(polls[-1]) >= inputs:
                break
            if time.monotonic() + 0.1 > deadline:
                break
            await asyncio.sleep(0.1)
        self.show_polls(polls, started, _poll_label)
        last = polls[-1]
        self.expect("tasks/get: HTTP 200", last.status, 200)
        self.expect_at(last, "result.resultType", "complete", 'tasks/get: resultType = "complete"')
        self.expect_at(last, "result.taskId", task_id, "tasks/get: taskId = the id the client was given")
        if inputs:
            self.check(last.task_status == "input_required" and _count_inputs(last) >= inputs,
                       f'status = "input_required" with {inputs} input request{"s" if inputs != 1 else ""} within {POLL_TIMEOUT_S:g} s',
                       {"status": last.task_status, "inputRequests": _count_inputs(last)})
        return last

    async def answer(self, task_id: str, responses: Mapping[str, Any], *, note: str = "") -> Exchange:
        """Send ``tasks/update {taskId, inputResponses: responses}`` and check the acknowledgement
        is HTTP 200 with exactly ``{"resultType": "complete"}``."""
        ack = await self.call("tasks/update", {"taskId": task_id, "inputResponses": dict(responses)}, note=note)
        self.expect("tasks/update: HTTP 200", ack.status, 200)
        self.expect('tasks/update: the result is exactly {"resultType": "complete"}', ack.result, {"resultType": "complete"})
        return ack

    # -- running -------------------------------------------------------------------------------

# ------------------------------------------------------------------------------------------------
# The steps of the walkthrough
# ------------------------------------------------------------------------------------------------


@step("Discovery: server/discover", "The proxy answers discovery itself, in v2 terms, from what it probed on the v1 backend.")
async def _discover(demo: Demo) -> None:
    ex = await demo.call("server/discover")
    demo.expect("HTTP 200", ex.status, 200)
    demo.expect_at(ex, "result.resultType", "complete")
    demo.expect_at(ex, "result.supportedVersions", ["2026-07-28"])
    demo.expect_at(ex, ["result", "capabilities", "extensions", TASKS_EXTENSION], {},
                   f'capabilities.extensions["{TASKS_EXTENSION}"] = {{}}')
    caps = demo.dig(ex.response, "result.capabilities")
    demo.check(isinstance(caps, dict) and "tasks" not in caps, "no legacy capabilities.tasks key",
               sorted(caps) if isinstance(caps, dict) else caps)


@step("tools/list", "Forwarded to the v1 server; the 2026 Tool has no execution, and the list is cacheable.")
async def _tools_list(demo: Demo) -> None:
    ex = await demo.call("tools/list", elide=["result.tools.*.inputSchema"])
    demo.expect("HTTP 200", ex.status, 200)
    demo.expect_at(ex, "result.resultType", "complete")
    ttl = demo.dig(ex.response, "result.ttlMs")
    demo.check(isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0, "ttlMs is a non-negative integer", ttl)
    scope = demo.dig(ex.response, "result.cacheScope")
    demo.check(scope in ("public", "private"), 'cacheScope is "public" or "private"', scope)
    tools = demo.dig(ex.response, "result.tools")
    tools = tools if isinstance(tools, list) else []
    names = [t.get("name") for t in tools if isinstance(t, dict)]
    wanted = ["greet", "slow_compute", "failing_job", "protocol_error_job", "confirm_delete", "multi_input",
              "test_tool_with_task"]
    demo.check(all(n in names for n in wanted), f"the reference tools are listed ({', '.join(wanted)})", names)
    with_execution = [t.get("name") for t in tools if isinstance(t, dict) and "execution" in t]
    demo.check(bool(tools) and not with_execution, "no tool carries execution", with_execution or tools)


@step("A synchronous call: greet", "greet has no task support upstream, so the proxy makes a plain call.")
async def _sync_call(demo: Demo) -> None:
    ex = await demo.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})
    demo.expect("HTTP 200", ex.status, 200)
    demo.expect_at(ex, "result.resultType", "complete")
    demo.expect_at(ex, "result.content.0.text", "Hello, Ada!")
    demo.check("taskId" not in (ex.result or {}), "no taskId (not a task)", (ex.result or {}).get("taskId"))


@step("A server-decided task: slow_compute",
      "slow_compute supports tasks upstream; the client declared the extension, so the proxy creates a v1 task.")
async def _server_task(demo: Demo) -> None:
    task_id = await demo.task_call("slow_compute", {"seconds": 1, "label": "demo"})
    if task_id is None:
        return
    demo.memory["task_id"] = task_id
    last = await demo.follow(task_id)
    demo.expect_at(last, "result.status", "completed")
    demo.expect_at(last, "result.result.content.0.text", "computed demo", 'inlined result text = "computed demo"')
    meta = demo.dig(last.response, "result.result._meta")
    demo.check(not (isinstance(meta, dict) and RELATED_TASK in meta), "no related-task _meta in the inlined result", meta)


async def _ended(demo: Demo, tool: str, status: str) -> Exchange | None:
    """Call ``tool`` (no arguments) as a task, follow it to its end and check it ended ``status``.
    Returns the last ``tasks/get``, or ``None`` when no task came back."""
    task_id = await demo.task_call(tool)
    if task_id is None:
        return None
    last = await demo.follow(task_id)
    demo.expect_at(last, "result.status", status)
    return last


@step("A tool error: failing_job", "A v1 task that ends with an isError tool result is a completed v2 task.")
async def _tool_error(demo: Demo) -> None:
    last = await _ended(demo, "failing_job", "completed")
    if last is None:
        return
    demo.expect_at(last, "result.result.isError", True)
    demo.expect_at(last, "result.result.content.0.text", "failing_job always fails")
    demo.check("error" not in (last.result or {}), "no error member (isError is not a JSON-RPC error)", (last.result or {}).get("error"))


@step("A protocol error: protocol_error_job", "A v1 task failed by a JSON-RPC error is a failed v2 task carrying that error.")
async def _protocol_error(demo: Demo) -> None:
    last = await _ended(demo, "protocol_error_job", "failed")
    if last is None:
        return
    demo.expect_at(last, "result.error.code", -32603)
    message = demo.dig(last.response, "result.error.message")
    demo.check(isinstance(message, str) and "simulated internal failure" in message,
               'error.message contains "simulated internal failure"', message)
    demo.check("result" not in (last.result or {}), "no inlined result", (last.result or {}).get("result"))


@step("Cancel: slow_compute for 60 s", "tasks/cancel is acknowledged with an empty result; tasks/get then says cancelled.")
async def _cancel(demo: Demo) -> None:
    task_id = await demo.task_call("slow_compute", {"seconds": 60, "label": "never"})
    if task_id is None:
        return
    ack = await demo.call("tasks/cancel", {"taskId": task_id})
    demo.expect("tasks/cancel: HTTP 200", ack.status, 200)
    demo.expect('tasks/cancel: the result is exactly {"resultType": "complete"}', ack.result, {"resultType": "complete"})
    last = await demo.follow(task_id)
    demo.expect_at(last, "result.status", "cancelled")


CONFIRM_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
VALUE_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}
NAME_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _form(message: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The input request a v1 form elicitation becomes: ``{method: "elicitation/create", params}``."""
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": dict(schema)}}


@step("An elicitation answered through tasks/update",
      "confirm_delete asks inside its v1 task; tasks/get shows the question as an input request, "
      "tasks/update answers it.")
async def _task_elicitation(demo: Demo) -> None:
    task_id = await demo.task_call("confirm_delete", {"filename": "report.txt"})
    if task_id is None:
        return
    waiting = await demo.follow(task_id, inputs=1)
    demo.expect_at(waiting, "result.inputRequests", {"input-1": _form("Delete report.txt?", CONFIRM_SCHEMA)},
                   'inputRequests = {"input-1": elicitation/create "Delete report.txt?" {confirm: boolean}}')
    await demo.answer(task_id, {"input-1": {"action": "accept", "content": {"confirm": True}}})
    last = await demo.follow(task_id)
    demo.expect_at(last, "result.status", "completed")
    demo.expect_at(last, "result.result.content.0.text", "deleted report.txt", 'inlined result text = "deleted report.txt"')
    demo.check("inputRequests" not in (last.result or {}), "no inputRequests left", (last.result or {}).get("inputRequests"))


@step("Two questions, answered one at a time",
      "multi_input asks two questions at once; answering one leaves the other waiting until it is answered too.")
async def _two_questions(demo: Demo) -> None:
    task_id = await demo.task_call("multi_input")
    if task_id is None:
        return
    waiting = await demo.follow(task_id, inputs=2)
    demo.expect_at(waiting, "result.inputRequests",
                   {"input-1": _form("value for a", VALUE_SCHEMA), "input-2": _form("value for b", VALUE_SCHEMA)},
                   'inputRequests = {"input-1": "value for a", "input-2": "value for b"} (each {value: string})')
    await demo.answer(task_id, {"input-1": {"action": "accept", "content": {"value": "alpha"}}}, note="the first answer only")
    partial = await demo.call("tasks/get", {"taskId": task_id}, note="right after the first answer")
    demo.expect_at(partial, "result.status", "input_required", 'tasks/get: status still "input_required"')
    demo.expect_at(partial, "result.inputRequests", {"input-2": _form("value for b", VALUE_SCHEMA)},
                   'tasks/get: inputRequests = only "input-2" ("value for b")')
    await demo.answer(task_id, {"input-2": {"action": "accept", "content": {"value": "beta"}}}, note="the second answer")
    last = await demo.follow(task_id)
    demo.expect_at(last, "result.status", "completed")
    demo.expect_at(last, "result.result.content.0.text", "got both: a=alpha, b=beta",
                   'inlined result text = "got both: a=alpha, b=beta"')


@step("A question before the task exists (MRTR)",
      "test_tool_with_task asks before creating its task: tools/call returns an InputRequiredResult, and "
      "the same call retried with the answer and the requestState returns the task.")
async def _mrtr(demo: Demo) -> None:
    first = await demo.call("tools/call", {"name": "test_tool_with_task", "arguments": {}}, note="first round")
    round1 = first.result or {}
    demo.expect("first round: HTTP 200", first.status, 200)
    demo.expect_at(first, "result.resultType", "input_required", 'first round: resultType = "input_required" (an InputRequiredResult)')
    demo.check("taskId" not in round1, "first round: no taskId (no task yet)", round1.get("taskId"))
    demo.expect_at(first, "result.inputRequests", {"r1": _form("What is your name?", NAME_SCHEMA)},
                   'first round: inputRequests = {"r1": elicitation/create "What is your name?" {name: string}}')
    state = round1.get("requestState", _MISSING)
    if not demo.check(isinstance(state, str) and bool(state), "first round: requestState is a non-empty string", state):
        return
    demo.abbreviate(state)
    demo.say(f"  (the requestState, {len(state)} characters, is shown as {short_id(state)} from here on;"
             " the retry sends the same tools/call with it and the answer)")
    task_id = await demo.task_call("test_tool_with_task", extra={
        "requestState": state,
        "inputResponses": {"r1": {"action": "accept", "content": {"name": "Grace"}}},
    }, note="the retry, with the answer and the requestState")
    if task_id is None:
        return
    last = await demo.follow(task_id)
    demo.expect_at(last, "result.status", "completed")
    demo.expect_at(last, "result.result.content.0.text", "Hello, Grace! test_tool_with_task finished.",
                   'inlined result text = "Hello, Grace! test_tool_with_task finished."')


@step("A client without the extension (-32021)",
      "failing_job cannot run without a task; a client that did not declare the extension is told what is missing.")
async def _missing_extension(demo: Demo) -> None:
    ex = await demo.call("tools/call", {"name": "failing_job", "arguments": {}}, client=demo.bare)
    demo.expect_error(ex, 400, -32021, "tools/call failing_job")
    demo.expect_at(ex, ["error", "data", "requiredCapabilities", "extensions", TASKS_EXTENSION], {},
                   f'error.data.requiredCapabilities.extensions["{TASKS_EXTENSION}"] = {{}}')
    task_id = demo.memory.get("task_id", "no-such-task")
    ex = await demo.call("tasks/get", {"taskId": task_id}, client=demo.bare, note="tasks/get without the extension")
    demo.expect_error(ex, 400, -32021, "tasks/get")


@step("Removed methods: tasks/result and tasks/list", "Neither exists in v2 (tasks/get inlines results; there is no listing).")
async def _removed(demo: Demo) -> None:
    task_id = demo.memory.get("task_id", "no-such-task")
    ex = await demo.call("tasks/result", {"taskId": task_id})
    demo.check(ex.status == 404 and ex.error_code == -32601, "tasks/result: HTTP 404, error.code = -32601",
               {"http": ex.status, "code": ex.error_code})
    ex = await demo.call("tasks/list")
    demo.check(ex.status == 404 and ex.error_code == -32601, "tasks/list: HTTP 404, error.code = -32601",
               {"http": ex.status, "code": ex.error_code})


# ------------------------------------------------------------------------------------------------
# Running the walkthrough
# ------------------------------------------------------------------------------------------------


def main(verbose: bool = True, *, stdio: bool = False) -> int:
    """Run the walkthrough; return 0 when every step saw exactly what it should, 1 otherwise.
    With `stdio`, the reference v1 server is a stdio server the proxy runs (`v1_server.py --stdio`).

    The reference v1 server and the proxy are stopped at the end, also on failure or Ctrl-C.
    """
    from .narration import StdioServer
    from .processes import start_reference_v1_server, stdio_commands

    return run_demo(
        verbose=verbose,
        steps=STEPS,
        make_demo=lambda url: Demo(url, verbose=verbose),
        start_server=(lambda: StdioServer(stdio_commands()["v1"])) if stdio else start_reference_v1_server,  # type: ignore[arg-type,return-value]
        banner="mcp-tasks-proxy demo: a v2 (2026-07-28 + tasks extension) client → the proxy → a v1 (2025-11-25) server"
               + (" on stdio" if stdio else ""),
        server_name="reference v1 server",
        server_note="mcp 1.30.0" + (", run by the proxy on stdio" if stdio else ""),
        face_note="v2-modern face → v1 backend" + (" (stdio)" if stdio else ""),
    )
