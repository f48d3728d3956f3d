"""Per-tool rows and verdicts (proxy/observe/tool_verdicts.py) from counts as the recorder keeps them."""

from __future__ import annotations

from aiohttp.test_utils import make_mocked_request

from proxy.faces.call import Call
from proxy.observe.figures import TOOL_MS, TOOLS, Figures, latency_bucket
from proxy.observe.tool_verdicts import tool_rows, z_score
from proxy.observe.tools import ToolTasks, task_key

NOW_MS = 1_000 * 60_000


def figures(counts: dict[tuple, int]) -> Figures:
    return Figures([(NOW_MS // 60_000, dict(counts))], {}, [], NOW_MS, 0)


def test_z_score() -> None:
    assert round(z_score(20, 20, 0, 20), 3) == 6.325
    assert z_score(0, 20, 0, 20) == 0.0
    assert z_score(20, 20, 20, 20) == 0.0
    assert round(z_score(3, 30, 1, 30), 3) == 1.035


def test_latency_buckets() -> None:
    assert [latency_bucket(ms) for ms in (0.1, 1.24, 1.25, 1.6, 10.0, 1000.0, 1e12)] == [0, 0, 1, 2, 10, 30, 64]


def test_a_failing_newer_backend_is_worse() -> None:
    rows = tool_rows(
        figures(
            {
                (TOOLS, "old", "lookup", "v1", "ok"): 25,
                (TOOLS, "new", "lookup", "v2-modern", "tool_error"): 22,
                (TOOLS, "new", "lookup", "v1", "ok"): 3,
                (TOOL_MS, "old", "lookup", 10): 25,
                (TOOL_MS, "new", "lookup", 11): 25,
            }
        ),
        ["old", "new"],
    )
    assert [tool["tool"] for tool in rows] == ["lookup"]
    old, new = rows[0]["backends"]
    assert old == {
        "backend": "old",
        "calls": 25,
        "ok": 25,
        "tool_error": 0,
        "protocol_error": 0,
        "timeout": 0,
        "refused": 0,
        "tool_error_rate": 0.0,
        "error_rate": 0.0,
        "p50_ms": 11.6,
        "p95_ms": 11.6,
        "verdict": None,
    }
    assert new["calls"] == 25 and new["tool_error"] == 22 and new["tool_error_rate"] == 0.88 and new["p95_ms"] == 14.6
    assert new["verdict"] == {
        "against": "old",
        "outcome": "worse",
        "reason": "tool errors 88.0 % of 25 against 0.0 % of 25 on old (z = 6.27 > 2.326, 99 % one-sided)",
    }


def test_too_few_calls_and_no_worse() -> None:
    rows = tool_rows(
        figures(
            {
                (TOOLS, "a", "t", "v1", "ok"): 19,
                (TOOLS, "b", "t", "v1", "tool_error"): 19,
                (TOOLS, "a", "u", "v1", "ok"): 30,
                (TOOLS, "b", "u", "v1", "ok"): 29,
                (TOOLS, "b", "u", "v1", "refused"): 1,
            }
        ),
        ["a", "b"],
    )
    t, u = rows
    assert t["backends"][1]["verdict"] == {
        "against": "a",
        "outcome": "too_few_calls",
        "reason": "19 calls here and 19 on a: 20 each before a verdict",
    }
    assert u["backends"][1]["verdict"]["outcome"] == "no_worse"
    assert u["backends"][1]["error_rate"] == round(1 / 30, 4)


def test_a_slow_newer_backend_is_worse() -> None:
    rows = tool_rows(
        figures(
            {
                (TOOLS, "a", "t", "v1", "ok"): 20,
                (TOOLS, "b", "t", "v1", "ok"): 20,
                (TOOL_MS, "a", "t", 10): 20,
                (TOOL_MS, "b", "t", 14): 20,
            }
        ),
        ["a", "b"],
    )
    assert rows[0]["backends"][1]["verdict"] == {
        "against": "a",
        "outcome": "worse",
        "reason": "p95 28.4 ms above 2 × 11.6 ms on a",
    }


def test_a_task_ends_once() -> None:
    tasks = ToolTasks()
    tasks.created((None, "t-1"), "lookup", 5.0)
    assert tasks.end((None, "t-1")) == ("lookup", 5.0)
    assert tasks.end((None, "t-1")) is None
    assert tasks.end((None, "t-2")) == ("other", None)
    assert tasks.end((None, "t-2")) is None


def test_two_sessions_tasks_of_the_same_id_are_two_tasks() -> None:
    """A relayed session's task ids are the backend's own (decision 190): a backend that numbers
    its tasks per session gives two sessions the same id, and each ends under its own tool."""
    tasks = ToolTasks()
    tasks.created(("s-1", "1"), "lookup", 5.0)
    tasks.created(("s-2", "1"), "failing_job", 6.0)
    assert [tasks.end(("s-2", "1")), tasks.end(("s-1", "1")), tasks.end(("s-1", "1"))] == [
        ("failing_job", 6.0),
        ("lookup", 5.0),
        None,
    ]


def test_two_callers_modern_tasks_of_the_same_id_are_two_tasks() -> None:
    """A modern client of one backend gets the backend's own task ids (decision 192): two callers
    may be given the same one, and each task ends under its own tool, keyed with the caller's principal."""
    calls = []
    for session, principal in ((None, "alice"), (None, "bob"), ("s-1", "alice")):
        call = Call(make_mocked_request("POST", "/mcp", headers={"Mcp-Session-Id": session} if session else {}), None)
        call.principal = principal
        calls.append(call)
    assert [task_key(call, "t-1") for call in calls] == [(None, "alice", "t-1"), (None, "bob", "t-1"), ("s-1", None, "t-1")]
    tasks = ToolTasks()
    tasks.created(task_key(calls[0], "t-1"), "lookup", 5.0)
    tasks.created(task_key(calls[1], "t-1"), "failing_job", 6.0)
    assert [tasks.end(task_key(calls[1], "t-1")), tasks.end(task_key(calls[0], "t-1"))] == [("failing_job", 6.0), ("lookup", 5.0)]
