"""Drive the real v1 client (``mcp==1.30.0``) to see what its GET stream carries for its tasks.

Run it with the ``mcp-v1`` peer environment's python (see ``proxy/demo/peers.py``)::

    python mcp1_stream_checks.py --url http://127.0.0.1:<port>/mcp [--check NAME ...]

The endpoint is meant to be the proxy's v1 face in front of the reference v2 server
(``v2_server.py``, ``docs/behaviour.md`` §5.7–§5.8). Every check opens its own ``ClientSession``
over ``streamablehttp_client``, which holds the session's GET stream open; the client's
``message_handler`` records each ``notifications/tasks/status`` and its callbacks answer questions
(``mcp1_session.Recorder``). Output: one JSON line per check, as ``mcp1_client_checks.py``.

==========================  ====================================================================
check                       what must happen
==========================  ====================================================================
status_pushed               ``slow_compute(1, "pushed")`` as a task and *no* ``tasks/get``: the
                            GET stream brings ``notifications/tasks/status`` for that task, the
                            statuses exactly ``["completed"]``; then ``tasks/result`` gives
                            ``computed pushed``
question_on_get_stream      ``confirm_delete("notes.txt")`` as a task, followed by ``tasks/get``
                            only: the ``elicitation_callback`` is asked ``Delete notes.txt?``
                            exactly once, not during a ``tasks/result``, with related-task
                            ``_meta`` = the task id; the task ends ``completed``, the pushed
                            statuses start ``input_required`` and end ``completed``, and
                            ``tasks/result`` afterwards gives ``deleted notes.txt``
two_questions_once          ``multi_input()`` the same way: two questions (``value for a``,
                            ``value for b``), each asked once; result ``got both: a=Ada, b=Ada``
==========================  ====================================================================
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import check_lines  # beside this file, which runs as a script
from check_lines import Check, Detail, expect

warnings.simplefilter("ignore", DeprecationWarning)  # the experimental tasks API warns on every use

from mcp1_session import (  # noqa: E402
    PUSH_WAIT_S,
    Recorder,
    create_task,
    exc_detail,
    open_session,
    result_detail,
    task_result,
    until_pushed,
    wait_status,
)

CHECK_TIMEOUT_S = 30.0


def _statuses(recorder: Recorder, task_id: str) -> list[str]:
    return [params["status"] for params in recorder.task_statuses if params.get("taskId") == task_id]


async def _until_pushed(recorder: Recorder, task_id: str, status: str) -> list[str]:
    await until_pushed(
        lambda: status in _statuses(recorder, task_id), f"no pushed {status!r}", lambda: {"pushed": _statuses(recorder, task_id)}
    )
    return _statuses(recorder, task_id)


async def check_status_pushed(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (session, recorder):
        task = await create_task(session, "slow_compute", {"seconds": 1, "label": "pushed"})
        pushed = await _until_pushed(recorder, task.taskId, "completed")
        result = await task_result(session, recorder, task.taskId)
    detail: Detail = {"pushed": pushed, "result": result_detail(result), "notifications": recorder.notifications}
    expect(pushed == ["completed"], f"pushed statuses {pushed}, not ['completed']", detail)
    expect(detail["result"]["texts"] == ["computed pushed"], "unexpected slow_compute result", detail)
    return True, detail


async def _poll_only(url: str, tool: str, arguments: dict[str, Any]) -> tuple[Detail, Any, Recorder]:
    async with open_session(url) as (session, recorder):
        task = await create_task(session, tool, arguments)
        final = await wait_status(session, task.taskId, timeout_s=PUSH_WAIT_S)
        asked = list(recorder.elicitations)
        await _until_pushed(recorder, task.taskId, final.status)
        result = await task_result(session, recorder, task.taskId)
    detail: Detail = {
        "final": final.status,
        "elicitations": asked,
        "pushed": _statuses(recorder, task.taskId),
        "result": result_detail(result),
    }
    return detail, task, recorder


async def check_question_on_get_stream(url: str) -> tuple[bool, Detail]:
    detail, task, recorder = await _poll_only(url, "confirm_delete", {"filename": "notes.txt"})
    expect(detail["final"] == "completed", f"the task ended {detail['final']!r}", detail)
    asked = detail["elicitations"]
    expect(len(asked) == 1, f"the callback was asked {len(asked)} times before the task ended, not once", detail)
    expect(asked[0]["message"] == "Delete notes.txt?", "unexpected question", detail)
    expect(not asked[0]["during_tasks_result"], "the question came during a tasks/result", detail)
    expect(asked[0]["related_task"] == {"taskId": task.taskId}, "the question lacks related-task _meta for this task", detail)
    pushed = detail["pushed"]
    expect(pushed[:1] == ["input_required"] and pushed[-1:] == ["completed"], f"pushed statuses {pushed}", detail)
    expect(detail["result"]["texts"] == ["deleted notes.txt"], "unexpected confirm_delete result", detail)
    expect(len(recorder.elicitations) == 1, "asked again during tasks/result", detail)
    return True, detail


async def check_two_questions_once(url: str) -> tuple[bool, Detail]:
    detail, task, recorder = await _poll_only(url, "multi_input", {})
    expect(detail["final"] == "completed", f"the task ended {detail['final']!r}", detail)
    messages = sorted(question["message"] for question in detail["elicitations"])
    expect(messages == ["value for a", "value for b"], f"asked {messages}", detail)
    expect(
        all(q["related_task"] == {"taskId": task.taskId} for q in detail["elicitations"]),
        "a question lacks related-task _meta",
        detail,
    )
    expect(detail["result"]["texts"] == ["got both: a=Ada, b=Ada"], "unexpected multi_input result", detail)
    expect(len(recorder.elicitations) == 2, "asked again during tasks/result", detail)
    return True, detail


#: Every check, in run order.
CHECKS: dict[str, Check] = {
    "status_pushed": check_status_pushed,
    "question_on_get_stream": check_question_on_get_stream,
    "two_questions_once": check_two_questions_once,
}


def main(argv: list[str] | None = None) -> int:
    return check_lines.mcp1_main(__doc__, CHECKS, CHECK_TIMEOUT_S, exc_detail, argv)


if __name__ == "__main__":
    sys.exit(main())
