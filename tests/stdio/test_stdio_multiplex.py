"""Many clients over one stdio process (docs/behaviour.md §7 "Many clients, one process").

Ten v2-modern clients, each with its own principal, run a task with a question at the same time
through the reference v1 server on stdio: every question reaches the client whose task asked it,
no client can read another's task, and all ten tasks ran in one process.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from stdio_support import running_stdio_proxy
from support import Caller

from proxy.app import STATE

pytestmark = pytest.mark.peers
CLIENTS = 10


async def _wait_for_question(client: Caller, task_id: str) -> dict:
    async with asyncio.timeout(30):  # a deadline: a question that never comes fails here
        while True:
            task = (await client.call("tasks/get", {"taskId": task_id})).result
            if task["status"] == "input_required":
                return task
            assert task["status"] == "working", task
            await asyncio.sleep(0.1)


async def test_ten_principals_share_one_process_and_each_gets_only_its_own_questions_and_tasks(tmp_path):
    async with running_stdio_proxy("v1", tmp_path, store="memory") as proxy, aiohttp.ClientSession() as http:
        clients = [Caller(http, proxy.url, authorization=f"Bearer client-{i}") for i in range(CLIENTS)]

        async def run(i: int, client: Caller) -> tuple[str, dict, dict]:
            created = (
                await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": f"file-{i}.txt"}})
            ).result
            waiting = await _wait_for_question(client, created["taskId"])
            answer = {"input-1": {"action": "accept", "content": {"confirm": True}}}
            await client.call("tasks/update", {"taskId": created["taskId"], "inputResponses": answer})
            return created["taskId"], waiting["inputRequests"], await client.poll(created["taskId"])

        outcomes = await asyncio.gather(*(run(i, client) for i, client in enumerate(clients)))

        questions = [list(requests.values())[0]["params"]["message"] for _, requests, _ in outcomes]
        assert questions == [f"Delete file-{i}.txt?" for i in range(CLIENTS)]
        assert [len(requests) for _, requests, _ in outcomes] == [1] * CLIENTS
        texts = [final["result"]["content"][0]["text"] for _, _, final in outcomes]
        assert texts == [f"deleted file-{i}.txt" for i in range(CLIENTS)]

        foreign = [
            (await clients[(i + 1) % CLIENTS].call("tasks/get", {"taskId": task_id})).error["code"]
            for i, (task_id, _, _) in enumerate(outcomes)
        ]
        assert foreign == [-32602] * CLIENTS

        pool = proxy.runner.app[STATE].fleet.members[0].backend.connector.pool
        with_tasks = [session for session in pool.sessions.values() if session.tasks]
        assert len(with_tasks) == CLIENTS
        assert len({id(session.slot) for session in with_tasks}) == 1
        assert sorted(len(session.tasks) for session in with_tasks) == [1] * CLIENTS
        print(
            f"{CLIENTS} clients, {CLIENTS} questions each delivered to its own client, {sum(foreign) // -32602} foreign reads "
            f"refused, {len({id(s.slot) for s in with_tasks})} process for all tasks ({len(pool.slots)} processes in all)"
        )
