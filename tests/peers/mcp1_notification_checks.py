"""Drive the real v1 client (``mcp==1.30.0``) to see the notifications it gets from a 2026-07-28 backend.

Run it with the ``mcp-v1`` peer environment's python (see ``proxy/demo/peers.py``)::

    python mcp1_notification_checks.py --url http://127.0.0.1:<port>/mcp [--check NAME ...]

The endpoint is meant to be the proxy's v1 face in front of the reference v2 server opted in to list
changes (``v2_server.py`` with ``REFERENCE_V2_LIST_CHANGED=1``; ``docs/behaviour.md`` §5.1, §5.9), or in
front of the minimal v2-session peer with its opt-in (``v2_session_server.start(lists=True)``), which has
the same tools, resource and message shapes.
Every check opens its own ``ClientSession``\\s over ``streamablehttp_client``, which hold their GET
streams open; the client's callbacks record what arrives (``mcp1_session.Recorder``). Output: one
JSON line per check, as ``mcp1_client_checks.py``.

========================  ======================================================================
check                     what must happen
========================  ======================================================================
capabilities              ``initialize`` shows ``logging {}``, ``listChanged: true`` for tools,
                          prompts and resources, and ``resources.subscribe: true``
logs_at_level             session A: ``logging/setLevel("warning")``, then ``report_progress(3)``
                          with a progress callback: progress 1, 2, 3, and log messages exactly
                          ``warning`` then ``error`` (logger ``report_progress``); the answer
                          ``progress done``. Session B (another session, level ``debug``, its GET
                          stream open meanwhile) gets no notification at all
no_level_no_logs          no ``logging/setLevel``: ``report_progress(2)`` brings the two progress
                          notifications and no log message
tools_list_changed_once   with the GET stream open: ``resources/subscribe(reference://notes)``,
                          ``add_tool(<a new name>)``, ``touch_resource`` of an unsubscribed URI,
                          then of ``reference://notes``: the session gets exactly
                          ``tools/list_changed`` then ``resources/updated`` for
                          ``reference://notes``, without the subscription id; ``tools/list`` then
                          lists the new tool
========================  ======================================================================
"""

from __future__ import annotations

import secrets
import sys
import warnings
from typing import Any

import check_lines  # beside this file, which runs as a script
from check_lines import Check, Detail, expect, texts

warnings.simplefilter("ignore", DeprecationWarning)  # the experimental tasks API warns on every use

from mcp1_session import Recorder, exc_detail, get_stream_answered, open_session, until_pushed  # noqa: E402
from pydantic import AnyUrl  # noqa: E402

CHECK_TIMEOUT_S = 30.0
NOTES = "reference://notes"
LOGGER = "report_progress"


def _log(level: str) -> Detail:
    """A log message of ``report_progress`` as the reference v2 server (FastMCP 4) sends it."""
    return {"level": level, "logger": LOGGER, "data": {"msg": f"report_progress at {level}", "extra": None}}


async def _until(recorder: Recorder, method: str) -> None:
    await until_pushed(
        lambda: method in recorder.notifications, f"no {method}", lambda: {"notifications": recorder.notifications}
    )


async def check_capabilities(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (_session, recorder):
        capabilities = recorder.initialized.get("capabilities", {})
    detail: Detail = {"capabilities": capabilities}
    expect(capabilities.get("logging") == {}, "logging is not {}", detail)
    for name in ("tools", "prompts", "resources"):
        expect(capabilities.get(name, {}).get("listChanged") is True, f"{name}.listChanged is not true", detail)
    expect(capabilities["resources"].get("subscribe") is True, "resources.subscribe is not true", detail)
    return True, detail


async def _report(session: Any, count: int) -> tuple[Any, list[Detail]]:
    progress: list[Detail] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append({"progress": done, "total": total, "message": message})

    result = await session.call_tool("report_progress", {"count": count}, progress_callback=on_progress)
    return result, progress


async def check_logs_at_level(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (other, other_recorder):
        await other.set_logging_level("debug")
        await get_stream_answered(other_recorder)
        async with open_session(url) as (session, recorder):
            await session.set_logging_level("warning")
            result, progress = await _report(session, 3)
        await other.send_ping()  # anything still on its way to the other session would come before this answer
    detail: Detail = {
        "logs": recorder.logs,
        "progress": progress,
        "result": texts(result.content),
        "other_notifications": other_recorder.notifications,
    }
    expect(recorder.logs == [_log("warning"), _log("error")], "not exactly the warning and error messages, in order", detail)
    expect([step["progress"] for step in progress] == [1, 2, 3], "not progress 1, 2, 3", detail)
    expect(detail["result"] == ["progress done"], "unexpected report_progress result", detail)
    expect(other_recorder.notifications == [], "the other session got notifications", detail)
    return True, detail


async def check_no_level_no_logs(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (session, recorder):
        result, progress = await _report(session, 2)
    detail: Detail = {"logs": recorder.logs, "progress": progress, "result": texts(result.content)}
    expect(recorder.logs == [], "log messages without logging/setLevel", detail)
    expect([step["progress"] for step in progress] == [1, 2], "not progress 1, 2", detail)
    return True, detail


async def check_tools_list_changed_once(url: str) -> tuple[bool, Detail]:
    name = f"added_{secrets.token_hex(4)}"
    updates: list[Detail] = []
    async with open_session(url) as (session, recorder):
        await get_stream_answered(recorder)
        await session.subscribe_resource(AnyUrl(NOTES))
        added = await session.call_tool("add_tool", {"name": name})
        await session.call_tool("touch_resource", {"uri": "reference://elsewhere"})
        await session.call_tool("touch_resource", {"uri": NOTES})
        await _until(recorder, "notifications/resources/updated")
        tools = [tool.name for tool in (await session.list_tools()).tools]
        updates = recorder.updates
    detail: Detail = {
        "added": texts(added.content),
        "notifications": recorder.notifications,
        "updates": updates,
        "new_tool_listed": name in tools,
    }
    wanted = ["notifications/tools/list_changed", "notifications/resources/updated"]
    expect(recorder.notifications == wanted, f"notifications {recorder.notifications}, not {wanted}", detail)
    expect(updates == [{"uri": NOTES}], "resources/updated did not name only reference://notes, unstamped", detail)
    expect(detail["added"] == [f"added {name}"], "unexpected add_tool result", detail)
    expect(detail["new_tool_listed"], "tools/list does not list the new tool", detail)
    return True, detail


#: Every check, in run order.
CHECKS: dict[str, Check] = {
    "capabilities": check_capabilities,
    "logs_at_level": check_logs_at_level,
    "no_level_no_logs": check_no_level_no_logs,
    "tools_list_changed_once": check_tools_list_changed_once,
}


def main(argv: list[str] | None = None) -> int:
    return check_lines.mcp1_main(__doc__, CHECKS, CHECK_TIMEOUT_S, exc_detail, argv)


if __name__ == "__main__":
    sys.exit(main())
