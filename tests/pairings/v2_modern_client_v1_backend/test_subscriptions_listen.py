"""`subscriptions/listen` on the modern face over a v1 backend (docs/behaviour.md §4.9): a raw
2026-07-28 client through the proxy to the reference v1 server (mcp==1.30.0). The reference v1
server declares no `listChanged` and no `subscribe`, and runs tool tasks."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from schemas import EXT_TASKS, MCP_2026_07_28, validate
from support import Caller, running_proxy

from proxy.sse import SseParser

pytestmark = pytest.mark.peers

SUB = "io.modelcontextprotocol/subscriptionId"
MODERN_SCHEMA = MCP_2026_07_28
TASKS_SCHEMA = EXT_TASKS


@pytest.fixture
async def caller(reference_v1_server, tmp_path: Path):
    async with running_proxy(reference_v1_server.url, tmp_path) as running, aiohttp.ClientSession() as http:
        yield Caller(http, running.url)


async def _listen(
    caller: Caller, notifications: dict[str, Any], *, want: int, declare: bool = True
) -> tuple[aiohttp.ClientResponse, list[Any]]:
    """Open a listen stream and read its first `want` messages (or its JSON answer)."""
    body = caller.body("subscriptions/listen", {"notifications": notifications}, declare=declare)
    headers = {**caller.headers("subscriptions/listen"), "Content-Type": "application/json"}
    messages: list[Any] = []
    async with caller.http.post(caller.url, data=json.dumps(body), headers=headers) as response:
        if not response.headers["Content-Type"].startswith("text/event-stream"):
            return response, [json.loads(await response.read())]
        parser = SseParser()
        async for chunk in response.content.iter_any():
            messages += [json.loads(event.data) for event in parser.feed(chunk)]
            if len(messages) >= want:
                break
    return response, messages


async def test_listen_acknowledges_only_what_the_backend_offers_and_follows_a_task(caller):
    created = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 1, "label": "sub"}})
    task_id = created.result["taskId"]
    listen_id = caller._id + 1
    response, messages = await asyncio.wait_for(
        _listen(caller, {"toolsListChanged": True, "promptsListChanged": True, "taskIds": [task_id, task_id]}, want=3), 30
    )
    assert response.status == 200
    assert response.headers["X-Accel-Buffering"] == "no"
    ack, working, completed = messages
    assert ack == {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {SUB: listen_id}, "notifications": {"taskIds": [task_id]}},
    }
    validate(ack, MODERN_SCHEMA, "SubscriptionsAcknowledgedNotification")
    assert [m["method"] for m in (working, completed)] == ["notifications/tasks", "notifications/tasks"]
    assert [m["params"]["_meta"] for m in (working, completed)] == [{SUB: listen_id}, {SUB: listen_id}]
    assert [m["params"]["status"] for m in (working, completed)] == ["working", "completed"]
    assert completed["params"]["taskId"] == task_id
    assert completed["params"]["result"]["content"] == [{"type": "text", "text": "computed sub"}]
    for message in (working, completed):
        validate(message, TASKS_SCHEMA, "TaskStatusNotification")


async def test_taskids_without_the_tasks_extension_is_refused_with_32021(caller):
    _, [answer] = await _listen(caller, {"taskIds": ["x"]}, want=1, declare=False)
    assert answer["error"]["code"] == -32021


async def test_a_task_id_not_of_this_caller_is_left_out_of_the_acknowledgement(caller):
    _, messages = await asyncio.wait_for(_listen(caller, {"taskIds": ["forged"], "toolsListChanged": True}, want=1), 30)
    assert messages[0]["params"]["notifications"] == {"taskIds": []}


async def test_discover_advertises_no_list_changed_the_backend_does_not_declare(caller):
    capabilities = (await caller.call("server/discover")).result["capabilities"]
    assert "listChanged" not in capabilities["tools"]
