"""A crash loses no question (docs/decisions.md, "State that survives a restart").

`mcp-tasks-proxy serve` runs as a real process with its SQLite store in a temporary state
directory. While clients' tasks wait for answers it is killed with SIGKILL and started again with
the same key and state directory; every question is then shown again and its answer reaches the
backend:

* v2-modern clients in front of the reference v1 server (mcp 1.30): each pending question is shown
  again by `tasks/get` under the same key, and the `tasks/update` answer goes upstream on the same
  session and JSON-RPC request id the backend is still waiting on;
* a v1 client in front of the reference v2 server (FastMCP 4): its proxy session, its `tasks/list`
  and the question its blocked `tasks/result` was waiting on survive.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
from session_support import SessionCaller
from support import Caller, free_port, wait_for_input

from proxy.keys import new_key_text

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]
CONFIRM_SCHEMA = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
VALUE_SCHEMA = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}


class ProxyProcess:
    """`mcp-tasks-proxy serve` on a fixed port with a config file naming the state directory."""

    def __init__(self, tmp_path: Path, upstream: str):
        self.port = free_port()
        self.config = tmp_path / "proxy.toml"
        self.config.write_text(
            f'state_dir = "{tmp_path / "state"}"\nlisten = "127.0.0.1:{self.port}"\n'
            f'[[upstream]]\nname = "main"\nurl = "{upstream}"\n'
        )
        self.env = {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text()}
        self.log = tmp_path / "proxy.log"
        self.process: asyncio.subprocess.Process | None = None
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        with open(self.log, "ab") as log:  # noqa: ASYNC230 - the log file of a process the test starts
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "proxy",
                "serve",
                "--config",
                str(self.config),
                cwd=ROOT,
                env=self.env,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
        line = (await asyncio.wait_for(self.process.stdout.readline(), 30)).decode()
        assert line.startswith(f"mcp-tasks-proxy listening on {self.url}"), (line, self.log.read_text())

    async def kill(self) -> None:
        assert self.process is not None and self.process.returncode is None
        self.process.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(self.process.wait(), 15) == -signal.SIGKILL

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(self.process.wait(), 30)


def _ask(message: str, schema: dict) -> dict:
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


async def test_questions_of_v2_clients_on_a_v1_backend_survive_a_sigkill(reference_v1_server, tmp_path):
    proxy = ProxyProcess(tmp_path, reference_v1_server.url)
    await proxy.start()
    try:
        async with aiohttp.ClientSession() as http:
            client = Caller(http, proxy.url)
            files = ["a.txt", "b.txt", "c.txt"]
            confirm_ids = [
                (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": f}})).result["taskId"]
                for f in files
            ]
            multi_id = (await client.call("tools/call", {"name": "multi_input"})).result["taskId"]
            expected = {
                task_id: {"input-1": _ask(f"Delete {f}?", CONFIRM_SCHEMA)} for task_id, f in zip(confirm_ids, files, strict=False)
            }
            expected[multi_id] = {"input-1": _ask("value for a", VALUE_SCHEMA), "input-2": _ask("value for b", VALUE_SCHEMA)}
            before = {
                task_id: (await wait_for_input(client, task_id, len(asks), timeout_s=20))["inputRequests"]
                for task_id, asks in expected.items()
            }
            assert before == expected

            await proxy.kill()
            await proxy.start()

            after = {}
            for task_id in expected:
                result = (await client.call("tasks/get", {"taskId": task_id})).result
                after[task_id] = (result["status"], result.get("inputRequests"))
            assert after == {task_id: ("input_required", asks) for task_id, asks in expected.items()}
            survived = (len(after), sum(len(asks) for _, asks in after.values()))
            print(f"survived the SIGKILL: {survived[0]} of 4 tasks, {survived[1]} of 5 questions")
            assert survived == (4, 5)

            for task_id in confirm_ids:
                ack = await client.call(
                    "tasks/update",
                    {"taskId": task_id, "inputResponses": {"input-1": {"action": "accept", "content": {"confirm": True}}}},
                )
                assert (ack.status, ack.result) == (200, {"resultType": "complete"})
            await client.call(
                "tasks/update",
                {
                    "taskId": multi_id,
                    "inputResponses": {
                        "input-1": {"action": "accept", "content": {"value": "A"}},
                        "input-2": {"action": "accept", "content": {"value": "B"}},
                    },
                },
            )
            finals = {task_id: await client.poll(task_id) for task_id in expected}
            assert {task_id: (f["status"], f["result"]) for task_id, f in finals.items()} == {
                **{
                    task_id: (
                        "completed",
                        {"content": [{"type": "text", "text": f"deleted {f}"}], "isError": False, "resultType": "complete"},
                    )
                    for task_id, f in zip(confirm_ids, files, strict=False)
                },
                multi_id: (
                    "completed",
                    {"content": [{"type": "text", "text": "got both: a=A, b=B"}], "isError": False, "resultType": "complete"},
                ),
            }
    finally:
        await proxy.stop()


async def test_a_v1_clients_session_listing_and_pending_question_survive_a_sigkill(reference_v2_server, tmp_path):
    proxy = ProxyProcess(tmp_path, reference_v2_server.url)
    await proxy.start()
    try:
        async with aiohttp.ClientSession() as http:
            client = SessionCaller(http, proxy.url)
            await client.initialize()
            session_id = client.session_id
            quick = (
                await client.call(
                    "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.1, "label": "quick"}, "task": {}}
                )
            )["result"]["task"]["taskId"]
            created = (
                await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "v1.txt"}, "task": {}})
            )["result"]
            task_id = created["task"]["taskId"]
            asked = asyncio.Event()
            never = asyncio.get_running_loop().create_future()

            async def hold(message):
                asked.set()
                return await never  # the user has not answered yet when the proxy dies

            client.on_request = hold
            blocked = asyncio.ensure_future(client.call("tasks/result", {"taskId": task_id}))
            await asyncio.wait_for(asked.wait(), 20)

            await proxy.kill()
            blocked.cancel()
            await proxy.start()

            assert client.session_id == session_id
            listing = await client.call("tasks/list")
            assert (listing["_status"], [t["taskId"] for t in listing["result"]["tasks"]]) == (200, [quick, task_id])

            async def answer(message):
                return {"action": "accept", "content": {"confirm": True}}

            client.on_request = answer
            client.seen_requests.clear()
            result = await client.call("tasks/result", {"taskId": task_id})
            assert [(r["method"], r["params"]["message"]) for r in client.seen_requests] == [
                ("elicitation/create", "Delete v1.txt?")
            ]
            assert result["result"]["content"] == [{"type": "text", "text": "deleted v1.txt"}]
            listed = (await client.call("tasks/list"))["result"]["tasks"]
            assert [(t["taskId"], t["status"]) for t in listed] == [(quick, "completed"), (task_id, "completed")]
            print("survived the SIGKILL: 1 of 1 v1 sessions, 2 of 2 listed tasks, 1 of 1 questions")
    finally:
        await proxy.stop()
