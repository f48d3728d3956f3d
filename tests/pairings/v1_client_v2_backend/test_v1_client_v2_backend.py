"""The real v1 client (mcp 1.30) through the proxy to the reference v2 backend (FastMCP 4), docs/behaviour.md §5.

* ``tests/peers/mcp1_client_checks.py`` runs the official v1 client (``mcp==1.30.0``, experimental
  tasks API, ``mcp-v1`` peer environment) against the proxy's session face, in front of the
  reference v2 server ``proxy/demo/servers/v2_server.py`` (``fastmcp==4.1.4`` + ``fastmcp-tasks==4.1.4``,
  ``fastmcp4`` peer environment). The script runs once per module; one pytest test per check reads
  its JSON line.
* Direct tests check that the reference v2 server itself puts the shapes of
  ``docs/wire.md`` §7 "FastMCP 4.1.4" on the wire (raw HTTP, no proxy), so a failing check above points
  at the proxy, not at the peer.

Status: these checks are the acceptance tests of the "v1 clients over a v2 backend" feature. A proxy
without it fails them all: it refuses a non-v1 backend at start, the fixture records that start error,
and every check test reports it. They were written before the feature and pass with it.

The checks script's own logic is validated against the reference v1 server (mcp 1.30) *directly*,
no proxy, by ``test_checks_script_against_the_reference_v1_server_directly``: every check passes
there except four that mcp 1.30 itself cannot satisfy (docs/wire.md §7):

* ``tool_error_failed``: mcp 1.30 ends an ``isError`` task ``completed``, not ``failed``;
* ``required_without_task``: a plain call of a required tool gets mcp 1.30's ``isError`` "This tool
  requires task-augmented invocation", not the tool's own result;
* ``forbidden_with_task``: a forbidden tool called with a task gets an ``isError`` result, not
  ``-32601`` (the SDK client then fails to read it as a ``CreateTaskResult``);
* ``sampling_in_task``: the reference v1 server has no ``summarize`` tool.

``list_tasks`` passes there only because mcp 1.30's tasks are session-scoped (it ignores
``Authorization``); through the proxy the isolation comes from the principal (docs/behaviour.md §5.5).

The first run builds the ``mcp-v1`` and ``fastmcp4`` peer environments (PyPI access needed once).
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
from support import MODERN, Answer, meta, running_proxy

from proxy.demo.peers import ensure_peer_env
from proxy.demo.processes import ServerProcess, start_reference_v2_server

pytestmark = pytest.mark.peers

CHECKS_SCRIPT = Path(__file__).resolve().parents[2] / "peers" / "mcp1_client_checks.py"
#: The checks of ``mcp1_client_checks.py``, in its run order (kept in step by a test below).
CHECK_NAMES = [
    "sync_tool",
    "create_task_shape",
    "get_is_flat",
    "tool_error_failed",
    "result_related_meta",
    "cancel",
    "cancel_finished_and_unknown",
    "required_without_task",
    "forbidden_with_task",
    "list_tasks",
    "concurrent_creations",
    "finished_still_readable",
    "elicitation_in_task",
    "sampling_in_task",
    "progress_well_formed",
]
#: Checks that mcp 1.30 itself cannot pass when the script talks to the reference v1 server directly.
NOT_PASSABLE_ON_REFERENCE_V1 = {"tool_error_failed", "required_without_task", "forbidden_with_task", "sampling_in_task"}
#: Bound for one whole run of the checks script (normally ~25 s; each check is bounded at 20 s).
CHECKS_RUN_TIMEOUT_S = 150.0
TOOLS = [
    "greet",
    "slow_compute",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
    "summarize",
    "report_progress",
]


# ============================================================================================
# Fixtures
# ============================================================================================


@pytest.fixture(scope="module")
def reference_v2_server() -> Iterator[ServerProcess]:
    """The reference v2 server (FastMCP 4.1.4 + fastmcp-tasks), one per module, stopped by its own handle."""
    yield from serving(start_reference_v2_server)


@pytest.fixture(scope="session")
def mcp_v1_python() -> Path:
    """The python of the ``mcp-v1`` peer environment (built on first use)."""
    return ensure_peer_env("mcp-v1")


async def _run_script(python: Path, url: str) -> tuple[int | None, str, str]:
    return await run_script(python, CHECKS_SCRIPT, url, CHECKS_RUN_TIMEOUT_S)


async def _run_through_proxy(python: Path, upstream_url: str, state_dir: Path) -> tuple[int | None, str, str]:
    try:
        async with running_proxy(upstream_url, state_dir) as proxy:
            return await _run_script(python, proxy.url)
    except Exception as exc:  # the proxy did not start (or stop) in front of the v2 backend
        return None, "", f"the proxy in front of the reference v2 server failed: {type(exc).__name__}: {exc}"


@pytest.fixture(scope="module")
def proxied_run(reference_v2_server: ServerProcess, mcp_v1_python: Path) -> ChecksRun:
    """The checks script, run once through a fresh proxy whose upstream is the reference v2 server."""
    with tempfile.TemporaryDirectory(prefix="mcp1-checks-") as tmp:
        returncode, stdout, stderr = asyncio.run(_run_through_proxy(mcp_v1_python, reference_v2_server.url, Path(tmp)))
    return ChecksRun("proxy -> reference v2", returncode, stdout, stderr)


# ============================================================================================
# The mcp 1.30 client through the proxy to the v2 backend
# ============================================================================================


@pytest.mark.parametrize("check", CHECK_NAMES)
def test_mcp1_client_check_through_the_proxy(proxied_run: ChecksRun, check: str) -> None:
    line = proxied_run.lines.get(check)
    assert line is not None, f"no JSON line for check {check!r}\n{proxied_run.explain()}"
    assert line["ok"] is True, f"{check} failed: {json.dumps(line['detail'], indent=1)}"


def test_mcp1_client_checks_script_reports_every_check_and_its_exit_status(proxied_run: ChecksRun) -> None:
    assert list(proxied_run.lines) == CHECK_NAMES, proxied_run.explain()
    assert proxied_run.stray == [], proxied_run.explain()
    assert proxied_run.returncode == (0 if all(line["ok"] for line in proxied_run.lines.values()) else 1), proxied_run.explain()


# ============================================================================================
# The checks script itself
# ============================================================================================


def test_checks_script_against_the_reference_v1_server_directly(reference_v1_server: ServerProcess, mcp_v1_python: Path) -> None:
    """Validates the script's logic: on mcp 1.30 directly, exactly the checks mcp 1.30 cannot pass fail."""
    run = ChecksRun("reference v1 directly", *asyncio.run(_run_script(mcp_v1_python, reference_v1_server.url)))
    assert list(run.lines) == CHECK_NAMES, run.explain()
    failing = {name for name, line in run.lines.items() if not line["ok"]}
    details = {name: run.lines[name]["detail"] for name in failing ^ NOT_PASSABLE_ON_REFERENCE_V1 if name in run.lines}
    assert failing == NOT_PASSABLE_ON_REFERENCE_V1, json.dumps(details, indent=1)
    assert run.returncode == 1, run.explain()


def test_mcp1_client_checks_script_rejects_a_missing_url(mcp_v1_python: Path) -> None:
    completed = run_without_url(mcp_v1_python, CHECKS_SCRIPT)
    assert completed.returncode == 2
    assert "--url" in completed.stderr


def test_checks_script_and_this_module_name_the_same_checks() -> None:
    names = script_check_names(CHECKS_SCRIPT)
    assert names == CHECK_NAMES


# ============================================================================================
# The reference v2 server itself (raw modern wire, no proxy)
# ============================================================================================


class V2Caller:
    """Raw 2026-07-28 requests with the routing headers a direct call needs (``Mcp-Name`` included)."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http = http
        self.url = url
        self._id = 0

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        declare: bool = True,
        capabilities: dict[str, Any] | None = None,
    ) -> Answer:
        self._id += 1
        body_params = dict(params or {})
        body_params["_meta"] = meta(declare=declare, capabilities=capabilities)
        headers = {
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        name = body_params.get("name") if method == "tools/call" else body_params.get("taskId")
        if isinstance(name, str):
            headers["Mcp-Name"] = name
        body = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": body_params}
        async with self.http.post(self.url, data=json.dumps(body), headers=headers) as response:
            raw = await response.read()
            return Answer(response.status, json.loads(raw) if raw else None, dict(response.headers))

    async def until(self, task_id: str, statuses: tuple[str, ...], timeout: float = 20) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            task = (await self.call("tasks/get", {"taskId": task_id})).result
            if task["status"] in statuses:
                return task
            assert asyncio.get_running_loop().time() < deadline, f"task stayed {task['status']}"
            await asyncio.sleep(0.1)


ANY_END = ("input_required", "completed", "failed", "cancelled")


@pytest.fixture
async def v2(reference_v2_server: ServerProcess):
    async with aiohttp.ClientSession() as http:
        yield V2Caller(http, reference_v2_server.url)


async def test_v2_server_announces_itself_once_and_binds_loopback(reference_v2_server: ServerProcess) -> None:
    assert reference_v2_server.url.startswith("http://127.0.0.1:") and reference_v2_server.url.endswith("/mcp")
    assert reference_v2_server.is_running()
    assert reference_v2_server.output_tail().count("LISTENING ") == 1


async def test_v2_server_discover_offers_the_tasks_extension_and_lists_the_fixture_tools(v2: V2Caller) -> None:
    discovered = (await v2.call("server/discover")).result
    assert discovered["supportedVersions"] == ["2026-07-28"]
    assert discovered["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"] == {}
    assert "tasks" not in discovered["capabilities"]
    tools = (await v2.call("tools/list")).result["tools"]
    assert [tool["name"] for tool in tools] == TOOLS
    assert all("execution" not in tool for tool in tools)


async def test_v2_server_tool_error_completes_and_protocol_error_fails(v2: V2Caller) -> None:
    created = (await v2.call("tools/call", {"name": "failing_job"})).result
    assert (created["resultType"], created["status"], created["ttlMs"], created["pollIntervalMs"]) == (
        "task",
        "working",
        900000,
        5000,
    )
    done = await v2.until(created["taskId"], ("completed", "failed"))
    assert done["status"] == "completed"
    assert done["result"]["isError"] is True
    assert done["result"]["content"] == [{"type": "text", "text": "failing_job always fails"}]
    created = (await v2.call("tools/call", {"name": "protocol_error_job"})).result
    failed = await v2.until(created["taskId"], ("completed", "failed"))
    message = "protocol_error_job: simulated internal failure"
    assert (failed["status"], failed["statusMessage"], failed["error"]) == (
        "failed",
        message,
        {"code": -32603, "message": message},
    )


async def test_v2_server_asks_confirm_delete_inside_its_task(v2: V2Caller) -> None:
    created = (await v2.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "probe.txt"}})).result
    parked = await v2.until(created["taskId"], ANY_END)
    assert parked["status"] == "input_required"
    ((key, request),) = parked["inputRequests"].items()
    assert key.startswith(created["taskId"] + ":")
    assert request == {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Delete probe.txt?",
            "requestedSchema": {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]},
        },
    }
    ack = await v2.call(
        "tasks/update", {"taskId": created["taskId"], "inputResponses": {key: {"action": "accept", "content": {"confirm": True}}}}
    )
    assert ack.result["resultType"] == "complete" and set(ack.result) <= {"resultType", "_meta"}
    done = await v2.until(created["taskId"], ("completed", "failed", "cancelled"))
    assert done["result"]["content"] == [{"type": "text", "text": "deleted probe.txt"}]
    assert done["result"]["isError"] is False


async def test_v2_server_asks_multi_input_questions_together(v2: V2Caller) -> None:
    created = (await v2.call("tools/call", {"name": "multi_input"})).result
    parked = await v2.until(created["taskId"], ANY_END)
    messages = sorted(request["params"]["message"] for request in parked["inputRequests"].values())
    assert messages == ["value for a", "value for b"]
    answers = {
        key: {"action": "accept", "content": {"value": request["params"]["message"][-1].upper()}}
        for key, request in parked["inputRequests"].items()
    }
    await v2.call("tasks/update", {"taskId": created["taskId"], "inputResponses": answers})
    done = await v2.until(created["taskId"], ("completed", "failed", "cancelled"))
    assert done["result"]["content"] == [{"type": "text", "text": "got both: a=A, b=B"}]


async def test_v2_server_asks_test_tool_with_task_by_mrtr_before_the_task(v2: V2Caller) -> None:
    first = (await v2.call("tools/call", {"name": "test_tool_with_task"})).result
    assert first["resultType"] == "input_required"
    assert first["inputRequests"]["user_name"]["params"]["message"] == "What is your name?"
    assert isinstance(first["requestState"], str) and first["requestState"]
    answer = {"user_name": {"action": "accept", "content": {"name": "Alice"}}}
    created = (
        await v2.call(
            "tools/call", {"name": "test_tool_with_task", "inputResponses": answer, "requestState": first["requestState"]}
        )
    ).result
    assert (created["resultType"], created["status"]) == ("task", "working")
    done = await v2.until(created["taskId"], ("completed", "failed", "cancelled"))
    assert done["result"]["content"] == [{"type": "text", "text": "Hello, Alice! test_tool_with_task finished."}]


async def test_v2_server_summarize_asks_one_sampling_request_and_returns_the_model_text(v2: V2Caller) -> None:
    created = (await v2.call("tools/call", {"name": "summarize", "arguments": {"text": "long text"}})).result
    parked = await v2.until(created["taskId"], ANY_END)
    ((key, request),) = parked["inputRequests"].items()
    assert request == {
        "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "Summarize: long text"}}], "maxTokens": 100},
    }
    sampled = {"role": "assistant", "content": {"type": "text", "text": "short"}, "model": "m", "stopReason": "endTurn"}
    await v2.call("tasks/update", {"taskId": created["taskId"], "inputResponses": {key: sampled}})
    done = await v2.until(created["taskId"], ("completed", "failed", "cancelled"))
    assert done["result"]["content"] == [{"type": "text", "text": "short"}]


async def test_v2_server_cancel_acks_and_the_task_ends_cancelled(v2: V2Caller) -> None:
    created = (await v2.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "c"}})).result
    ack = await v2.call("tasks/cancel", {"taskId": created["taskId"]})
    assert ack.status == 200 and ack.result["resultType"] == "complete"
    done = await v2.until(created["taskId"], ("completed", "failed", "cancelled"))
    assert done["status"] == "cancelled"
    assert not {"result", "error", "inputRequests"} & done.keys()


async def test_v2_server_refuses_required_tools_and_task_methods_to_non_declaring_requests(v2: V2Caller) -> None:
    refused = await v2.call("tools/call", {"name": "failing_job"}, declare=False)
    assert (refused.status, refused.error["code"]) == (400, -32021)
    inline = (
        await v2.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "i"}}, declare=False)
    ).result
    assert inline["resultType"] == "complete" and inline["content"] == [{"type": "text", "text": "computed i"}]
    unknown = await v2.call("tasks/get", {"taskId": "no-such-task"})
    assert (unknown.status, unknown.error["code"]) == (400, -32602)
    for removed in ("tasks/result", "tasks/list"):
        answer = await v2.call(removed, {"taskId": "x"} if removed == "tasks/result" else None)
        assert (answer.status, answer.error["code"]) == (404, -32601)
