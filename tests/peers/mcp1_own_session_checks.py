"""Drive the real v1 client (``mcp==1.30.0``) to see what its GET stream gets from a v2-session backend.

Run it with the ``mcp-v1`` peer environment's python (see ``proxy/demo/peers.py``)::

    python mcp1_own_session_checks.py --url http://127.0.0.1:<port>/mcp [--check NAME ...]

The endpoint is meant to be the proxy's v1 face in front of the minimal v2-session peer with its opt-in
(``v2_session_server.start(lists=True)``, ``v2_session_lists.py``; ``docs/behaviour.md`` §5.9), which
announces on each session's own GET stream. Every check opens two ``ClientSession``\\s of the same
(anonymous) principal over ``streamablehttp_client``, which hold their GET streams open. Output: one JSON
line per check, as ``mcp1_client_checks.py``.

=========================  =====================================================================
check                      what must happen
=========================  =====================================================================
session_logs_at_level      session A ``logging/setLevel("warning")``, session B ``("debug")``;
                           A calls ``log_to_session``: A's GET stream brings exactly the
                           session-wide messages ``warning`` then ``error`` (logger ``session``);
                           B then calls it too and gets all four (debug, info, warning, error)
                           and nothing of A's
changes_to_their_session   A subscribes ``reference://notes``, B ``reference://other``; A calls
                           ``add_tool``, ``touch_resource`` of ``reference://elsewhere`` and of
                           the notes; then B touches ``reference://other``: A gets exactly
                           ``tools/list_changed`` then ``resources/updated`` for the notes; B
                           exactly ``resources/updated`` for ``reference://other``
=========================  =====================================================================
"""

from __future__ import annotations

import secrets
import sys
import warnings

import check_lines  # beside this file, which runs as a script
from check_lines import Check, Detail, expect

warnings.simplefilter("ignore", DeprecationWarning)  # the experimental tasks API warns on every use

from mcp1_session import Recorder, exc_detail, get_stream_answered, open_session, until_pushed  # noqa: E402
from pydantic import AnyUrl  # noqa: E402

CHECK_TIMEOUT_S = 30.0
NOTES, OTHER, ELSEWHERE = "reference://notes", "reference://other", "reference://elsewhere"


def _session_log(level: str) -> Detail:
    return {"level": level, "logger": "session", "data": f"session log at {level}"}


async def _until(recorder: Recorder, what: str, count: int) -> None:
    """Until the recorder holds ``count`` of ``what`` (``logs``, ``updates``), or fail."""
    await until_pushed(
        lambda: len(getattr(recorder, what)) >= count,
        f"fewer than {count} {what}",
        lambda: {"notifications": recorder.notifications},
    )


async def check_session_logs_at_level(url: str) -> tuple[bool, Detail]:
    async with open_session(url) as (first, a), open_session(url) as (second, b):
        await get_stream_answered(a)
        await get_stream_answered(b)
        await first.set_logging_level("warning")
        await second.set_logging_level("debug")
        await first.call_tool("log_to_session", {})
        await _until(a, "logs", 2)
        await second.call_tool("log_to_session", {})
        await _until(b, "logs", 4)
        await first.send_ping()
        detail: Detail = {"first": a.notifications, "first_logs": a.logs, "second": b.notifications, "second_logs": b.logs}
    expect(a.logs == [_session_log("warning"), _session_log("error")], "A: not exactly warning then error", detail)
    expect(b.logs == [_session_log(level) for level in ("debug", "info", "warning", "error")], "B: not its four messages", detail)
    expect(a.notifications == ["notifications/message"] * 2, "A got other notifications", detail)
    expect(b.notifications == ["notifications/message"] * 4, "B got other notifications", detail)
    return True, detail


async def check_changes_to_their_session(url: str) -> tuple[bool, Detail]:
    name = f"added_{secrets.token_hex(4)}"
    async with open_session(url) as (first, a), open_session(url) as (second, b):
        await get_stream_answered(a)
        await get_stream_answered(b)
        await first.subscribe_resource(AnyUrl(NOTES))
        await second.subscribe_resource(AnyUrl(OTHER))
        await first.call_tool("add_tool", {"name": name})
        await first.call_tool("touch_resource", {"uri": ELSEWHERE})
        await first.call_tool("touch_resource", {"uri": NOTES})
        await _until(a, "updates", 1)
        await second.call_tool("touch_resource", {"uri": OTHER})
        await _until(b, "updates", 1)
        tools = [tool.name for tool in (await first.list_tools()).tools]
        detail: Detail = {
            "first": a.notifications,
            "first_updates": a.updates,
            "second": b.notifications,
            "second_updates": b.updates,
        }
    expect(
        a.notifications == ["notifications/tools/list_changed", "notifications/resources/updated"],
        "A: not exactly those two",
        detail,
    )
    expect(a.updates == [{"uri": NOTES}], "A: not the notes only", detail)
    expect(b.notifications == ["notifications/resources/updated"], "B: not exactly its own update", detail)
    expect(b.updates == [{"uri": OTHER}], "B: not reference://other only", detail)
    expect(name in tools, "tools/list does not list the new tool", detail)
    return True, detail


#: Every check, in run order.
CHECKS: dict[str, Check] = {
    "session_logs_at_level": check_session_logs_at_level,
    "changes_to_their_session": check_changes_to_their_session,
}


def main(argv: list[str] | None = None) -> int:
    return check_lines.mcp1_main(__doc__, CHECKS, CHECK_TIMEOUT_S, exc_detail, argv)


if __name__ == "__main__":
    sys.exit(main())
