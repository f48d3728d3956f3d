"""Real FastMCP peers around the proxy: the FastMCP 4 v2 client in front, FastMCP 3 behind.

* ``tests/peers/fastmcp4_client_checks.py`` runs the real v2 client (``fastmcp==4.1.4`` +
  ``fastmcp-tasks==4.1.4``, in the ``fastmcp4`` peer environment) through the proxy in front of
  each v1 backend: the reference server (mcp 1.30) and the FastMCP 3 fixture server
  (``proxy/demo/servers/v1_fastmcp3_server.py``, ``fastmcp[tasks]==3.4.11``). One pytest test per
  (backend, check); the script runs once per backend and its JSON lines are shared.
* Direct tests drive the FastMCP 3 server through the proxy with plain HTTP (``support.Caller``),
  for the FastMCP 3 shapes docs/behaviour.md §4 has rules for (failed tasks with ``isError``
  payloads, questions on the GET stream, asked one after the other).

The first run builds the ``fastmcp3`` and ``fastmcp4`` peer environments (PyPI access needed once).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from peer_checks import ChecksRun, run_script, run_without_url, script_check_names, serving
from support import Caller, running_proxy

from proxy.demo.peers import ensure_peer_env
from proxy.demo.processes import ServerProcess, start_fastmcp3_server

pytestmark = pytest.mark.peers

CHECKS_SCRIPT = Path(__file__).resolve().parents[2] / "peers" / "fastmcp4_client_checks.py"
#: The checks of ``fastmcp4_client_checks.py``, in its run order (kept in step by a test below).
CHECK_NAMES = ["greet", "slow_compute", "task_lifecycle", "tool_error", "protocol_error", "elicitation", "cancel"]
#: backend id -> the fixture that yields its running ServerProcess.
BACKENDS = {"reference": "reference_v1_server", "fastmcp3": "fastmcp3_server", "v2-relay": "reference_v2_server"}
"""Backends behind the proxy: two v1 servers (translated) and the reference v2 server (relayed)."""
#: Bound for one whole run of the checks script (seven checks of at most 45 s each, normally ~10 s).
CHECKS_RUN_TIMEOUT_S = 420.0
TOOLS = ["greet", "slow_compute", "failing_job", "protocol_error_job", "confirm_delete", "multi_input", "test_tool_with_task"]


# ============================================================================================
# Fixtures
# ============================================================================================


@pytest.fixture(scope="module")
def fastmcp3_server() -> Iterator[ServerProcess]:
    """The FastMCP 3 v1 fixture server, one per module, stopped by its own handle."""
    yield from serving(start_fastmcp3_server)


@pytest.fixture(scope="session")
def fastmcp4_python() -> Path:
    """The python of the ``fastmcp4`` peer environment (built on first use)."""
    return ensure_peer_env("fastmcp4")


async def _run_checks(python: Path, upstream_url: str, state_dir: Path) -> tuple[int | None, str, str]:
    async with running_proxy(upstream_url, state_dir) as proxy:
        return await run_script(python, CHECKS_SCRIPT, proxy.url, CHECKS_RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def checks_runs(request: pytest.FixtureRequest, fastmcp4_python: Path) -> Iterator[Any]:
    """``get(backend)``: run the checks script once per backend (through a fresh proxy), cached."""
    cache: dict[str, ChecksRun] = {}

    with tempfile.TemporaryDirectory(prefix="fastmcp-checks-") as tmp:

        def get(backend: str) -> ChecksRun:
            if backend not in cache:
                server: ServerProcess = request.getfixturevalue(BACKENDS[backend])
                state_dir = Path(tmp) / backend
                state_dir.mkdir()
                returncode, stdout, stderr = asyncio.run(_run_checks(fastmcp4_python, server.url, state_dir))
                cache[backend] = ChecksRun(f"backend {backend}", returncode, stdout, stderr)
            return cache[backend]

        yield get


@pytest.fixture
async def fm3(fastmcp3_server: ServerProcess, tmp_path: Path):
    """A raw modern-wire caller on a proxy in front of the FastMCP 3 server."""
    async with running_proxy(fastmcp3_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        yield Caller(http, proxy.url)


# ============================================================================================
# The FastMCP 4 client through the proxy
# ============================================================================================


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("check", CHECK_NAMES)
def test_fastmcp4_client_check(checks_runs: Any, backend: str, check: str) -> None:
    run: ChecksRun = checks_runs(backend)
    line = run.lines.get(check)
    assert line is not None, f"no JSON line for check {check!r}\n{run.explain()}"
    assert line["ok"] is True, f"{backend}/{check} failed: {json.dumps(line['detail'], indent=1)}"


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_fastmcp4_client_checks_script_reports_every_check_and_its_exit_status(checks_runs: Any, backend: str) -> None:
    run: ChecksRun = checks_runs(backend)
    assert list(run.lines) == CHECK_NAMES, run.explain()
    assert run.stray == [], run.explain()
    assert run.returncode == (0 if all(line["ok"] for line in run.lines.values()) else 1), run.explain()


def test_fastmcp4_client_checks_script_rejects_a_missing_url(fastmcp4_python: Path) -> None:
    completed = run_without_url(fastmcp4_python, CHECKS_SCRIPT)
    assert completed.returncode == 2
    assert "--url" in completed.stderr


# ============================================================================================
# The FastMCP 3 server through the proxy, plain HTTP
# ============================================================================================


async def _until(caller: Caller, task_id: str, statuses: tuple[str, ...], timeout: float = 20) -> dict[str, Any]:
    return await caller.poll(task_id, until=statuses, timeout=timeout)


def _only_request(task: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    requests = task["inputRequests"]
    assert len(requests) == 1, requests
    ((key, request),) = requests.items()
    return key, request


async def test_fastmcp3_server_announces_itself_once_and_binds_loopback(fastmcp3_server: ServerProcess) -> None:
    assert fastmcp3_server.url.startswith("http://127.0.0.1:") and fastmcp3_server.url.endswith("/mcp")
    assert fastmcp3_server.is_running()
    assert fastmcp3_server.output_tail().count("LISTENING ") == 1


async def test_fastmcp3_discover_offers_the_tasks_extension(fm3: Caller) -> None:
    result = (await fm3.call("server/discover")).result
    assert result["supportedVersions"] == ["2026-07-28"]
    assert result["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"] == {}
    assert "tasks" not in result["capabilities"]


async def test_fastmcp3_tools_list_has_the_fixture_tools_without_execution(fm3: Caller) -> None:
    result = (await fm3.call("tools/list")).result
    assert [tool["name"] for tool in result["tools"]] == TOOLS
    assert all("execution" not in tool for tool in result["tools"])


async def test_fastmcp3_greet_is_a_plain_call_with_fastmcp_structured_content(fm3: Caller) -> None:
    answer = await fm3.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})
    assert answer.status == 200
    result = answer.result
    assert result["content"] == [{"type": "text", "text": "Hello, Ada!"}]
    assert result["structuredContent"] == {"result": "Hello, Ada!"}
    assert (result["isError"], result["resultType"]) == (False, "complete")
    assert "Mcp-Name" not in answer.headers


async def test_fastmcp3_slow_compute_becomes_a_task_that_completes(fm3: Caller) -> None:
    answer = await fm3.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.3, "label": "fm3"}})
    created = answer.result
    assert (created["resultType"], created["status"]) == ("task", "working")
    assert answer.headers["Mcp-Name"] == created["taskId"]
    assert created["pollIntervalMs"] == 5000
    final = await fm3.poll(created["taskId"])
    assert final["status"] == "completed"
    assert final["result"]["content"] == [{"type": "text", "text": "computed fm3"}]
    assert final["result"]["isError"] is False
    assert "io.modelcontextprotocol/related-task" not in final["result"].get("_meta", {})


@pytest.mark.parametrize(
    ("tool", "text"),
    [("failing_job", "failing_job always fails"), ("protocol_error_job", "protocol_error_job: simulated internal failure")],
)
async def test_fastmcp3_failed_task_with_an_isError_payload_ends_completed_with_isError(
    fm3: Caller, tool: str, text: str
) -> None:
    # FastMCP 3 ends both failed, with an isError tool result (docs/behaviour.md §4.4, "failed, payload
    # is a tool result with content").
    created = (await fm3.call("tools/call", {"name": tool})).result
    final = await fm3.poll(created["taskId"])
    assert final["status"] == "completed"
    assert final["result"]["isError"] is True
    assert final["result"]["content"] == [{"type": "text", "text": text}]
    assert "error" not in final
    assert "io.modelcontextprotocol/related-task" not in final["result"].get("_meta", {})


async def test_fastmcp3_confirm_delete_question_from_the_get_stream_is_answered_with_tasks_update(fm3: Caller) -> None:
    created = (await fm3.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "probe.txt"}})).result
    parked = await _until(fm3, created["taskId"], ("input_required", "completed", "failed", "cancelled"))
    assert parked["status"] == "input_required", parked
    key, request = _only_request(parked)
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "Delete probe.txt?"
    assert request["params"]["requestedSchema"]["properties"] == {"confirm": {"title": "Confirm", "type": "boolean"}}
    ack = await fm3.call(
        "tasks/update", {"taskId": created["taskId"], "inputResponses": {key: {"action": "accept", "content": {"confirm": True}}}}
    )
    assert (ack.status, ack.result) == (200, {"resultType": "complete"})
    final = await fm3.poll(created["taskId"])
    assert final["status"] == "completed"
    assert final["result"]["content"] == [{"type": "text", "text": "deleted probe.txt"}]


async def test_fastmcp3_multi_input_asks_its_two_questions_one_after_the_other(fm3: Caller) -> None:
    created = (await fm3.call("tools/call", {"name": "multi_input"})).result
    answers = {"value for a": "A", "value for b": "B"}
    asked: list[str] = []
    for _ in answers:
        parked = await _until(fm3, created["taskId"], ("input_required", "completed", "failed", "cancelled"))
        assert parked["status"] == "input_required", parked
        key, request = _only_request(parked)
        message = request["params"]["message"]
        asked.append(message)
        ack = await fm3.call(
            "tasks/update",
            {"taskId": created["taskId"], "inputResponses": {key: {"action": "accept", "content": {"value": answers[message]}}}},
        )
        assert ack.status == 200
        # Wait until the answered key is gone before looking for the next question.
        for _attempt in range(100):
            current = (await fm3.call("tasks/get", {"taskId": created["taskId"]})).result
            if key not in (current.get("inputRequests") or {}):
                break
            await asyncio.sleep(0.1)
    assert asked == ["value for a", "value for b"]
    final = await fm3.poll(created["taskId"])
    assert final["status"] == "completed"
    assert final["result"]["content"] == [{"type": "text", "text": "got both: a=A, b=B"}]


async def test_fastmcp3_test_tool_with_task_asks_inside_its_task(fm3: Caller) -> None:
    answer = await fm3.call("tools/call", {"name": "test_tool_with_task"})
    created = answer.result
    assert created["resultType"] == "task"  # FastMCP 3 cannot ask before the task exists
    parked = await _until(fm3, created["taskId"], ("input_required", "completed", "failed", "cancelled"))
    assert parked["status"] == "input_required", parked
    key, request = _only_request(parked)
    assert request["params"]["message"] == "What is your name?"
    await fm3.call(
        "tasks/update", {"taskId": created["taskId"], "inputResponses": {key: {"action": "accept", "content": {"name": "Alice"}}}}
    )
    final = await fm3.poll(created["taskId"])
    assert final["status"] == "completed"
    assert final["result"]["content"] == [{"type": "text", "text": "Hello, Alice! test_tool_with_task finished."}]


async def test_fastmcp3_cancel_is_acknowledged_twice_and_the_task_ends_cancelled(fm3: Caller) -> None:
    created = (await fm3.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "c"}})).result
    ack = await fm3.call("tasks/cancel", {"taskId": created["taskId"]})
    assert (ack.status, ack.result) == (200, {"resultType": "complete"})
    final = await fm3.poll(created["taskId"])
    assert final["status"] == "cancelled"
    assert not {"result", "error", "inputRequests"} & final.keys()
    again = await fm3.call("tasks/cancel", {"taskId": created["taskId"]})
    assert (again.status, again.result) == (200, {"resultType": "complete"})


async def test_fastmcp3_required_tool_without_extension_is_refused_with_32021(fm3: Caller) -> None:
    answer = await fm3.call("tools/call", {"name": "failing_job"}, declare=False)
    assert (answer.status, answer.error["code"]) == (400, -32021)


def test_checks_script_and_this_module_name_the_same_checks() -> None:
    names = script_check_names(CHECKS_SCRIPT)
    assert names == CHECK_NAMES
