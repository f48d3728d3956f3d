"""Drive the real v1 client (official SDK ``mcp==1.30.0``, experimental tasks API) against a tasks endpoint.

Run it with the ``mcp-v1`` peer environment's python (see ``proxy/demo/peers.py``)::

    python mcp1_client_checks.py --url http://127.0.0.1:<port>/mcp [--check NAME ...]

The endpoint is meant to be the proxy's v1 face in front of a v2 backend (the reference v2 server
``v2_server.py`` on FastMCP 4.1.4 + fastmcp-tasks, ``docs/behaviour.md`` §5); any v1 server with the
fixture tools works too (see "Against the reference v1 server" below). Every check opens its own
``ClientSession`` over ``streamablehttp_client`` (2025-11-25 session wire: ``initialize``,
``Mcp-Session-Id``), with an ``elicitation_callback``, a ``sampling_callback`` and a
``message_handler`` that record what the server asks and notifies, so one broken check cannot
poison the next. Tasks go through ``session.experimental``: ``call_tool_as_task(name, args,
ttl=...)``, ``get_task``, ``poll_task``, ``get_task_result(id, CallToolResult)``, ``list_tasks``,
``cancel_task``. Raw results (to see exactly which keys are on the wire) are read with
``session.send_request(..., RawResult)``, a ``Result`` that keeps every key it was given.

Output: one JSON line per check on stdout, ``{"check": name, "ok": bool, "detail": ...}``, in
the order of :data:`CHECKS`. Exit status 0 iff every selected check is ok (2 for bad arguments).
Each check is bounded by ``--timeout`` seconds (default 20).

Checks (each asserts exact values):

==========================  ====================================================================
check                       what must happen
==========================  ====================================================================
sync_tool                   ``call_tool("greet", {"name": "Ada"})`` -> text ``Hello, Ada!``
create_task_shape           ``call_tool_as_task("slow_compute", {"seconds": 1, "label": "x"},
                            ttl=60000)`` -> a ``working`` task with a non-empty ``taskId``,
                            ``createdAt``, ``lastUpdatedAt`` and an integer ``ttl`` > 0
get_is_flat                 raw ``tasks/get`` (while working and once completed) is a flat Task:
                            ``taskId``, ``status``, ``createdAt``, ``lastUpdatedAt``, ``ttl``;
                            no ``task`` wrapper, no ``result``/``error``/``inputRequests``, no
                            ``resultType``, no v2 names ``ttlMs``/``pollIntervalMs``
tool_error_failed           ``failing_job`` as a task, followed with ``poll_task``: ends
                            ``failed`` with ``statusMessage`` ``failing_job always fails``;
                            ``tasks/result`` is the ``isError`` ``CallToolResult`` with that text
result_related_meta         ``tasks/result`` carries ``_meta["io.modelcontextprotocol/related-
                            task"] == {"taskId": id}``; raw ``tasks/get`` has no such key
cancel                      ``tasks/cancel`` of a running ``slow_compute(60)`` answers that task
                            with ``status: cancelled``; ``tasks/get`` 1 s later still says
                            ``cancelled``
cancel_finished_and_unknown ``tasks/cancel`` of a completed task -> ``-32602``; ``tasks/get``
                            and ``tasks/cancel`` of ``no-such-task`` -> ``-32602``
required_without_task       plain ``call_tool("failing_job", {})`` returns the tool's own result:
                            ``isError`` with ``failing_job always fails``
forbidden_with_task         ``call_tool_as_task("greet", {"name": "Ada"})`` -> error ``-32601``
list_tasks                  two sessions with different ``Authorization`` headers each create a
                            task; each ``tasks/list`` (all pages) shows its own task and not the
                            other's, and ``tasks/get`` of the other's id is ``-32602``
concurrent_creations        five concurrent ``call_tool_as_task`` on one session -> five distinct
                            ids, all ``working``
finished_still_readable     1 s after a task completed, ``tasks/get`` says ``completed`` and
                            ``tasks/result`` gives ``computed late``
elicitation_in_task         ``confirm_delete`` as a task: ``tasks/get`` reaches
                            ``input_required``; during ``tasks/result`` the
                            ``elicitation_callback`` is asked ``Delete notes.txt?`` exactly once
                            (related-task ``_meta`` = the task id), answers ``confirm: true``,
                            and the result is ``deleted notes.txt``; ``tasks/get`` ends
                            ``completed``
sampling_in_task            same with ``summarize`` and the ``sampling_callback`` (asked
                            ``Summarize: <text>``, answers :data:`SAMPLED_TEXT`, which is the
                            result)
progress_well_formed        a plain and a tasked ``slow_compute`` with progress tokens: every
                            ``notifications/progress`` that arrives has a ``progressToken`` and a
                            numeric ``progress`` (none arriving is ok), and the SDK rejected none
==========================  ====================================================================

Against the reference v1 server (``v1_server.py``, mcp 1.30) directly, which is how this script's
logic is validated until the proxy serves v1 clients over a v2 backend, these checks cannot pass
because of mcp 1.30's own behaviour (``docs/wire.md`` §7), not because of the script:
``tool_error_failed`` (mcp 1.30 ends an ``isError`` task ``completed``), ``required_without_task``
and ``forbidden_with_task`` (it answers a task-support mismatch with an ``isError`` result, not the
tool's result or ``-32601``), ``sampling_in_task`` (it has no ``summarize`` tool). ``list_tasks``
passes there only because its tasks are session-scoped; it ignores ``Authorization``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
import warnings
from typing import Any

import check_lines  # beside this file, which runs as a script
from check_lines import Check, CheckFailed, Detail, expect

warnings.simplefilter("ignore", DeprecationWarning)  # the experimental tasks API warns on every use

import mcp.types as types  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp1_session import (  # noqa: E402  (beside this file, too)
    RELATED_TASK,
    SAMPLED_TEXT,
    TERMINAL,
    RejectedMessages,
    create_task,
    dump,
    exc_detail,
    expect_error,
    open_session,
    raw_get,
    result_detail,
    task_result,
    wait_status,
)

#: Default bound for one check, seconds.
CHECK_TIMEOUT_S = 20.0

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
#: The text ``summarize`` is asked to summarize.
SUMMARIZE_INPUT = "MCP tasks let a server run a tool call in the background."
#: The two principals of ``list_tasks``.
AUTH_A = "Bearer mcp1-checks-alice"
AUTH_B = "Bearer mcp1-checks-bob"
UNKNOWN_TASK_ID = "no-such-task"


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------


async def check_sync_tool(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (session, _):
        result = await session.call_tool("greet", {"name": "Ada"})
    detail = result_detail(result)
    expect(not detail["is_error"] and detail["texts"] == ["Hello, Ada!"], "unexpected greet result", detail)
    return True, detail


async def check_create_task_shape(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (session, _):
        created = await session.experimental.call_tool_as_task("slow_compute", {"seconds": 1, "label": "x"}, ttl=60000)
    task = created.task
    detail: Detail = {"created": dump(created)}
    expect(isinstance(task.taskId, str) and task.taskId != "", "no taskId", detail)
    expect(task.status == "working", f"a new task says {task.status!r}, not 'working'", detail)
    expect(task.createdAt is not None and task.lastUpdatedAt is not None, "createdAt/lastUpdatedAt missing", detail)
    expect(isinstance(task.ttl, int) and task.ttl > 0, f"ttl is {task.ttl!r}, not a positive integer", detail)
    return True, detail


#: Keys a v1 ``tasks/get`` result must not carry.
NOT_ON_V1_GET = ("task", "result", "error", "inputRequests", "resultType", "ttlMs", "pollIntervalMs")
#: Keys a v1 ``tasks/get`` result must carry.
ON_V1_GET = ("taskId", "status", "createdAt", "lastUpdatedAt", "ttl")


def _flat_problems(raw: dict[str, Any], task_id: str) -> list[str]:
    problems = [f"has {key!r}" for key in NOT_ON_V1_GET if key in raw]
    problems += [f"lacks {key!r}" for key in ON_V1_GET if key not in raw]
    if raw.get("taskId") != task_id:
        problems.append(f"taskId is {raw.get('taskId')!r}")
    return problems


async def check_get_is_flat(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (session, _):
        task = await create_task(session, "slow_compute", {"seconds": 1, "label": "flat"})
        working = await raw_get(session, task.taskId)
        await wait_status(session, task.taskId)
        finished = await raw_get(session, task.taskId)
    detail: Detail = {"while_working": working, "when_finished": finished}
    problems = {"while_working": _flat_problems(working, task.taskId), "when_finished": _flat_problems(finished, task.taskId)}
    detail["problems"] = problems
    expect(not problems["while_working"] and not problems["when_finished"], "tasks/get is not a flat v1 Task", detail)
    expect(finished.get("status") == "completed", f"slow_compute ended {finished.get('status')!r}", detail)
    return True, detail


async def check_tool_error_failed(url: str) -> tuple[bool, Detail]:
    expected = "failing_job always fails"
    async with open_session(url) as (session, recorder):
        task = await create_task(session, "failing_job", {})
        statuses: list[str] = []
        final: types.GetTaskResult | None = None
        async for status in session.experimental.poll_task(task.taskId):
            statuses.append(status.status)
            final = status
        result = await task_result(session, recorder, task.taskId)
    assert final is not None
    detail: Detail = {"statuses": statuses, "final": dump(final), "result": result_detail(result)}
    expect(final.status == "failed", f"failing_job ended {final.status!r}, not 'failed'", detail)
    expect(final.statusMessage == expected, f"statusMessage is {final.statusMessage!r}", detail)
    expect(
        detail["result"]["is_error"] and detail["result"]["texts"] == [expected],
        "tasks/result is not the isError CallToolResult",
        detail,
    )
    return True, detail


async def check_result_related_meta(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (session, recorder):
        task = await create_task(session, "slow_compute", {"seconds": 0.2, "label": "meta"})
        await wait_status(session, task.taskId)
        got = await raw_get(session, task.taskId)
        result = await task_result(session, recorder, task.taskId)
    detail: Detail = {"task_id": task.taskId, "tasks_get": got, "tasks_result": result_detail(result)}
    expect(
        (result.meta or {}).get(RELATED_TASK) == {"taskId": task.taskId},
        "tasks/result lacks the related-task _meta naming this task",
        detail,
    )
    expect(RELATED_TASK not in (got.get("_meta") or {}), "tasks/get carries related-task _meta", detail)
    expect(detail["tasks_result"]["texts"] == ["computed meta"], "unexpected tasks/result content", detail)
    return True, detail


async def check_cancel(url: str) -> tuple[bool, Detail]:
    started = time.monotonic()
    async with open_session(url) as (session, _):
        task = await create_task(session, "slow_compute", {"seconds": 60, "label": "cancel"})
        before = await session.experimental.get_task(task.taskId)
        answer = await session.experimental.cancel_task(task.taskId)
        await asyncio.sleep(1.0)
        later = await session.experimental.get_task(task.taskId)
    detail: Detail = {
        "before": dump(before),
        "cancel_answer": dump(answer),
        "one_second_later": dump(later),
        "elapsed_s": round(time.monotonic() - started, 2),
    }
    expect(before.status == "working", f"status before cancel is {before.status!r}", detail)
    expect(answer.taskId == task.taskId, "tasks/cancel answered another task", detail)
    expect(answer.status == "cancelled", f"tasks/cancel answered status {answer.status!r}", detail)
    expect(later.status == "cancelled", f"tasks/get after cancel says {later.status!r}", detail)
    return True, detail


async def check_cancel_finished_and_unknown(url: str) -> tuple[bool, Detail]:
    detail: Detail = {}
    async with open_session(url) as (session, _):
        task = await create_task(session, "slow_compute", {"seconds": 0, "label": "done"})
        finished = await wait_status(session, task.taskId)
        detail["finished"] = dump(finished)
        expect(finished.status == "completed", f"slow_compute ended {finished.status!r}", detail)
        await expect_error(session.experimental.cancel_task(task.taskId), INVALID_PARAMS, "cancel_finished", detail)
        await expect_error(session.experimental.get_task(UNKNOWN_TASK_ID), INVALID_PARAMS, "get_unknown", detail)
        await expect_error(session.experimental.cancel_task(UNKNOWN_TASK_ID), INVALID_PARAMS, "cancel_unknown", detail)
    return True, detail


async def check_required_without_task(url: str) -> tuple[bool, Detail]:
    started = time.monotonic()
    async with open_session(url) as (session, _):
        result = await session.call_tool("failing_job", {})
    detail = {**result_detail(result), "elapsed_s": round(time.monotonic() - started, 2)}
    expect(
        detail["is_error"] and detail["texts"] == ["failing_job always fails"],
        "a plain call of failing_job did not return the tool's own isError result",
        detail,
    )
    return True, detail


async def check_forbidden_with_task(url: str) -> tuple[bool, Detail]:
    detail: Detail = {}
    async with open_session(url) as (session, _):
        await expect_error(
            session.experimental.call_tool_as_task("greet", {"name": "Ada"}, ttl=60000),
            METHOD_NOT_FOUND,
            "greet_as_task",
            detail,
        )
    return True, detail


async def _all_task_ids(session: ClientSession) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    for _page in range(20):
        page = await session.experimental.list_tasks(cursor)
        ids.extend(task.taskId for task in page.tasks)
        cursor = page.nextCursor
        if not cursor:
            return ids
    raise CheckFailed("tasks/list still had a nextCursor after 20 pages", {"ids": ids})


async def check_list_tasks(url: str) -> tuple[bool, Detail]:
    async with contextlib.AsyncExitStack() as stack:
        session_a, _ = await stack.enter_async_context(open_session(url, authorization=AUTH_A))
        session_b, _ = await stack.enter_async_context(open_session(url, authorization=AUTH_B))
        task_a = await create_task(session_a, "slow_compute", {"seconds": 1, "label": "list-a"})
        task_b = await create_task(session_b, "slow_compute", {"seconds": 1, "label": "list-b"})
        listed_a = await _all_task_ids(session_a)
        listed_b = await _all_task_ids(session_b)
        detail: Detail = {"task_a": task_a.taskId, "task_b": task_b.taskId, "listed_a": listed_a, "listed_b": listed_b}
        expect(task_a.taskId in listed_a, "client A's tasks/list lacks its own task", detail)
        expect(task_b.taskId in listed_b, "client B's tasks/list lacks its own task", detail)
        expect(task_b.taskId not in listed_a, "client A's tasks/list shows client B's task", detail)
        expect(task_a.taskId not in listed_b, "client B's tasks/list shows client A's task", detail)
        await expect_error(session_b.experimental.get_task(task_a.taskId), INVALID_PARAMS, "b_gets_a", detail)
    return True, detail


async def check_concurrent_creations(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (session, _):
        tasks = await asyncio.gather(
            *(create_task(session, "slow_compute", {"seconds": 0.5, "label": f"c{i}"}) for i in range(5))
        )
    ids = [task.taskId for task in tasks]
    detail: Detail = {"ids": ids, "statuses": [task.status for task in tasks]}
    expect(len(set(ids)) == 5 and all(ids), "five creations did not give five distinct ids", detail)
    expect(all(task.status == "working" for task in tasks), "not every new task says 'working'", detail)
    return True, detail


async def check_finished_still_readable(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (session, recorder):
        task = await create_task(session, "slow_compute", {"seconds": 0.2, "label": "late"})
        finished = await wait_status(session, task.taskId)
        await asyncio.sleep(1.0)
        later = await session.experimental.get_task(task.taskId)
        result = await task_result(session, recorder, task.taskId)
    detail: Detail = {"finished": dump(finished), "one_second_later": dump(later), "result": result_detail(result)}
    expect(finished.status == "completed", f"slow_compute ended {finished.status!r}", detail)
    expect(later.status == "completed", f"1 s after it ended, tasks/get says {later.status!r}", detail)
    expect(
        not detail["result"]["is_error"] and detail["result"]["texts"] == ["computed late"],
        "unexpected tasks/result 1 s after the end",
        detail,
    )
    return True, detail


async def check_elicitation_in_task(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (session, recorder):
        task = await create_task(session, "confirm_delete", {"filename": "notes.txt"})
        parked = await wait_status(session, task.taskId, ("input_required", *TERMINAL))
        asked_before_result = len(recorder.elicitations)
        result = await task_result(session, recorder, task.taskId)
        final = await wait_status(session, task.taskId)
    detail: Detail = {
        "parked": dump(parked),
        "elicitations": recorder.elicitations,
        "asked_before_tasks_result": asked_before_result,
        "result": result_detail(result),
        "final": dump(final),
        "notifications": recorder.notifications,
    }
    expect(parked.status == "input_required", f"tasks/get never said input_required (got {parked.status!r})", detail)
    expect(len(recorder.elicitations) == 1, f"the callback was asked {len(recorder.elicitations)} times, not once", detail)
    question = recorder.elicitations[0]
    expect(question["message"] == "Delete notes.txt?", "unexpected question", detail)
    expect(
        (question["requestedSchema"].get("properties") or {}).get("confirm", {}).get("type") == "boolean",
        "the question does not ask for a boolean 'confirm'",
        detail,
    )
    expect(question["during_tasks_result"], "the question did not come while tasks/result was pending", detail)
    expect(question["related_task"] == {"taskId": task.taskId}, "the question lacks related-task _meta for this task", detail)
    expect(
        not detail["result"]["is_error"] and detail["result"]["texts"] == ["deleted notes.txt"],
        "unexpected confirm_delete result",
        detail,
    )
    expect(final.status == "completed", f"the task ended {final.status!r}", detail)
    return True, detail


async def check_sampling_in_task(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (session, recorder):
        task = await create_task(session, "summarize", {"text": SUMMARIZE_INPUT})
        parked = await wait_status(session, task.taskId, ("input_required", *TERMINAL))
        result = await task_result(session, recorder, task.taskId)
        final = await wait_status(session, task.taskId)
    detail: Detail = {
        "parked": dump(parked),
        "samplings": recorder.samplings,
        "elicitations": recorder.elicitations,
        "result": result_detail(result),
        "final": dump(final),
    }
    expect(parked.status == "input_required", f"tasks/get never said input_required (got {parked.status!r})", detail)
    expect(len(recorder.samplings) == 1, f"the sampling callback was asked {len(recorder.samplings)} times, not once", detail)
    request = recorder.samplings[0]
    expect(request["texts"] == [f"Summarize: {SUMMARIZE_INPUT}"], "unexpected sampling messages", detail)
    expect(request["during_tasks_result"], "the sampling request did not come while tasks/result was pending", detail)
    expect(request["related_task"] == {"taskId": task.taskId}, "the request lacks related-task _meta for this task", detail)
    expect(
        not detail["result"]["is_error"] and detail["result"]["texts"] == [SAMPLED_TEXT],
        "summarize did not return the model's text",
        detail,
    )
    expect(final.status == "completed", f"the task ended {final.status!r}", detail)
    return True, detail


async def check_progress_well_formed(url: str) -> tuple[bool, Detail]:
    rejected = RejectedMessages()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING)  # the SDK reports what it drops with logging.warning
    root.addHandler(rejected)
    callback_calls: list[Detail] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        callback_calls.append({"progress": progress, "total": total, "message": message})

    try:
        async with open_session(url) as (session, recorder):
            plain = await session.call_tool("slow_compute", {"seconds": 1, "label": "progress"}, progress_callback=on_progress)
            task = await create_task(
                session, "slow_compute", {"seconds": 1, "label": "progress-task"}, meta={"progressToken": "mcp1-checks-progress"}
            )
            await wait_status(session, task.taskId)
            tasked = await task_result(session, recorder, task.taskId)
            await asyncio.sleep(0.2)  # let trailing notifications arrive
    finally:
        root.removeHandler(rejected)
        root.setLevel(level)
    detail: Detail = {
        "plain": result_detail(plain),
        "tasked": result_detail(tasked),
        "progress_notifications": recorder.progress,
        "progress_callback_calls": callback_calls,
        "rejected_by_sdk": rejected.messages,
    }
    expect(detail["plain"]["texts"] == ["computed progress"], "unexpected plain slow_compute result", detail)
    expect(detail["tasked"]["texts"] == ["computed progress-task"], "unexpected tasked slow_compute result", detail)
    bad_progress = [text for text in rejected.messages if "notifications/progress" in text]
    expect(not bad_progress, "the SDK rejected malformed notifications/progress", detail)
    for params in recorder.progress:
        token = params.get("progressToken")
        progress = params.get("progress")
        expect(
            isinstance(token, (str, int)) and not isinstance(token, bool), "a progress notification lacks progressToken", detail
        )
        expect(
            isinstance(progress, (int, float)) and not isinstance(progress, bool),
            "a progress notification has no numeric progress",
            detail,
        )
    return True, detail


#: Every check, in run order.
CHECKS: dict[str, Check] = {
    "sync_tool": check_sync_tool,
    "create_task_shape": check_create_task_shape,
    "get_is_flat": check_get_is_flat,
    "tool_error_failed": check_tool_error_failed,
    "result_related_meta": check_result_related_meta,
    "cancel": check_cancel,
    "cancel_finished_and_unknown": check_cancel_finished_and_unknown,
    "required_without_task": check_required_without_task,
    "forbidden_with_task": check_forbidden_with_task,
    "list_tasks": check_list_tasks,
    "concurrent_creations": check_concurrent_creations,
    "finished_still_readable": check_finished_still_readable,
    "elicitation_in_task": check_elicitation_in_task,
    "sampling_in_task": check_sampling_in_task,
    "progress_well_formed": check_progress_well_formed,
}


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    return check_lines.mcp1_main(__doc__, CHECKS, CHECK_TIMEOUT_S, exc_detail, argv)


if __name__ == "__main__":
    sys.exit(main())
