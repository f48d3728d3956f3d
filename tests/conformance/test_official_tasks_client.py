"""The official MCP Tasks client (npm `@modelcontextprotocol/ext-tasks` 0.2.2, `withTasks`) through the
proxy to the reference v1 server (mcp==1.30.0).

`tests/node/tasks_client.mjs` calls one tool with the official client, which creates, polls,
answers and settles the task itself and validates every answer with its own schemas (a completed
task's inlined result as a 2026-07-28 `CallToolResult`); the script gives it a plain HTTP session
port, so what is tested is the proxy's wire, not an SDK transport. The packages are pinned in
`proxy/demo/node_packages.py` and installed into the cache on first use.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from support import running_proxy

from proxy.demo.node_packages import OFFICIAL_SCHEMAS, ensure_npm_packages, node_binary

pytestmark = pytest.mark.peers

SCRIPT = Path(__file__).resolve().parents[1] / "node" / "tasks_client.mjs"
RUN_TIMEOUT_S = 60


@pytest.fixture
async def call(reference_v1_server, tmp_path):
    prefix = ensure_npm_packages("official-schemas", OFFICIAL_SCHEMAS)
    async with running_proxy(reference_v1_server.url, tmp_path) as proxy:

        async def run(tool: str, arguments: dict[str, Any], answer: dict[str, Any] | None = None) -> dict[str, Any]:
            argv = [node_binary(), str(SCRIPT), str(prefix), proxy.url, tool, json.dumps(arguments)]
            if answer is not None:
                argv.append(json.dumps(answer))
            process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
            out, _ = await asyncio.wait_for(process.communicate(), RUN_TIMEOUT_S)
            assert process.returncode == 0
            return json.loads(out)

        yield run


def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"resultType": "complete", "content": [{"type": "text", "text": text}], "isError": is_error}


async def test_a_completed_task_settles_with_its_result(call):
    answer = await call("slow_compute", {"seconds": 0.5, "label": "ts"})
    assert answer["ok"] is True, answer
    assert (answer["outcome"]["status"], answer["outcome"]["task"]["status"]) == ("completed", "completed")
    assert answer["result"] == text_result("computed ts")


async def test_a_tool_error_settles_completed_with_is_error(call):
    answer = await call("failing_job", {})
    assert answer["ok"] is True, answer
    assert answer["outcome"]["task"]["status"] == "completed"
    assert answer["result"] == text_result("failing_job always fails", is_error=True)


async def test_a_question_in_the_task_is_answered_and_the_task_completes(call):
    answer = await call("confirm_delete", {"filename": "ts.txt"}, {"action": "accept", "content": {"confirm": True}})
    assert answer["ok"] is True, answer
    assert answer["result"] == text_result("deleted ts.txt")


async def test_an_mrtr_round_before_the_task_is_answered_and_the_task_completes(call):
    answer = await call("test_tool_with_task", {}, {"action": "accept", "content": {"name": "Ada"}})
    assert answer["ok"] is True, answer
    assert answer["result"] == text_result("Hello, Ada! test_tool_with_task finished.")


async def test_a_plain_call_settles_at_once(call):
    answer = await call("greet", {"name": "TS"})
    assert answer == {
        "ok": True,
        "outcome": {"status": "completed", "result": text_result("Hello, TS!")},
        "result": text_result("Hello, TS!"),
    }


async def test_a_failed_task_is_the_clients_task_failed_error(call):
    answer = await call("protocol_error_job", {})
    assert answer == {"ok": False, "error": "TaskFailedError: protocol_error_job: simulated internal failure"}
