"""Held tasks with real 2026-07-28 clients (docs/behaviour.md §9): FastMCP 4 + fastmcp-tasks
(`tests/peers/fastmcp4_client_checks.py`) and the official ext-tasks client
(`tests/node/tasks_client.mjs`), through the proxy to the task-less mcp 1.30 server over HTTP and on
stdio. The server offers no task for any tool; every slow call must reach the client as a task the
proxy holds, polled to its end."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from held_support import events_of, held_proxy

from proxy.demo.node_packages import OFFICIAL_SCHEMAS, ensure_npm_packages, node_binary
from proxy.demo.peers import ensure_peer_env

pytestmark = pytest.mark.peers
PEERS = Path(__file__).resolve().parents[2] / "peers"
TASKS_CLIENT = Path(__file__).resolve().parents[2] / "node" / "tasks_client.mjs"
FASTMCP4_CHECKS = ["greet", "slow_compute", "task_lifecycle", "tool_error", "protocol_error", "elicitation", "cancel"]


async def test_fastmcp4_client(untasked, tmp_path):
    table, events = untasked
    async with held_proxy(table, tmp_path / "state") as proxy:
        argv = [str(ensure_peer_env("fastmcp4")), str(PEERS / "fastmcp4_client_checks.py"), "--url", proxy.url]
        for name in FASTMCP4_CHECKS:
            argv += ["--check", name]
        process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 300)
        status = json.loads(await _status(proxy.base_url))
    lines = {line["check"]: line for line in map(json.loads, out.decode().splitlines()) if "check" in line}
    assert {name: line["ok"] for name, line in lines.items()} == dict.fromkeys(FASTMCP4_CHECKS, True), (
        lines,
        err.decode()[-2000:],
    )
    assert {"event": "cancelled", "tool": "slow_compute", "label": "cancel"} in events_of(events)  # the server saw the cancel
    [main] = status["backends"]
    held = main["held_tasks"]
    # slow_compute, task_lifecycle, tool_error (twice), protocol_error, elicitation, cancel were held; greet was not.
    assert (held["now"], held["promoted"], held["ended"]) == (0, 7, {"completed": 5, "failed": 1, "cancelled": 1}), held


async def _status(base_url: str) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.get(base_url + "/status.json") as response:
        return await response.text()


@pytest.fixture
async def ext_tasks(untasked, tmp_path):
    prefix = ensure_npm_packages("official-schemas", OFFICIAL_SCHEMAS)
    table, _ = untasked
    async with held_proxy(table, tmp_path / "state") as proxy:

        async def run(tool: str, arguments: dict[str, Any], answer: dict[str, Any] | None = None) -> dict[str, Any]:
            argv = [node_binary(), str(TASKS_CLIENT), str(prefix), proxy.url, tool, json.dumps(arguments)]
            if answer is not None:
                argv.append(json.dumps(answer))
            process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
            out, _ = await asyncio.wait_for(process.communicate(), 90)
            assert process.returncode == 0
            return json.loads(out)

        yield run


def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"resultType": "complete", "content": [{"type": "text", "text": text}], "isError": is_error}


async def test_ext_tasks_client_a_ten_second_call_is_a_task_polled_to_its_result(ext_tasks):
    answer = await ext_tasks("slow_compute", {"seconds": 10, "label": "ten"})
    assert answer["ok"] is True, answer
    assert (answer["outcome"]["status"], answer["outcome"]["task"]["status"]) == ("completed", "completed")
    assert answer["result"] == text_result("computed ten")


async def test_ext_tasks_client_tool_error_backend_error_and_question(ext_tasks):
    failing = await ext_tasks("failing_job", {"seconds": 1})
    assert (failing["ok"], failing["outcome"]["task"]["status"]) == (True, "completed"), failing
    assert failing["result"] == text_result("failing_job always fails", is_error=True)
    broken = await ext_tasks("protocol_error_job", {"seconds": 1})
    assert broken == {"ok": False, "error": "TaskFailedError: protocol_error_job: simulated internal failure"}
    asked = await ext_tasks("confirm_delete", {"filename": "ts.txt"}, {"action": "accept", "content": {"confirm": True}})
    assert asked["ok"] is True, asked
    assert asked["result"] == text_result("deleted ts.txt")


async def test_ext_tasks_client_a_fast_call_settles_at_once(ext_tasks):
    answer = await ext_tasks("greet", {"name": "TS"})
    assert answer == {
        "ok": True,
        "outcome": {"status": "completed", "result": text_result("Hello, TS!")},
        "result": text_result("Hello, TS!"),
    }


async def test_fastmcp4_client_a_ten_second_call_is_a_task_polled_to_its_result(untasked, tmp_path):
    table, _ = untasked
    async with held_proxy(table, tmp_path / "state") as proxy:
        argv = [str(ensure_peer_env("fastmcp4")), str(PEERS / "fastmcp4_held_call.py"), "--url", proxy.url, "--seconds", "10"]
        process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()[-2000:]
    answer = json.loads(out.decode().splitlines()[-1])
    assert answer["created_s"] < 5, answer  # a task within hold_after_ms (400 ms; a stdio process may start first)
    assert {k: v for k, v in answer.items() if k != "created_s"} == {
        "created": {"resultType": "task", "status": "working"},
        "first": "working",
        "final": "completed",
        "texts": ["computed held"],
        "is_error": False,
    }, answer
