"""A v2-modern backend relayed alone over HTTP (docs/decisions.md §192): its task ids reach the
client as it gave them, and every answer about the task is the backend's own, as a direct client
reads it; a task id sealed while the fleet had several backends is still opened and answered sealed."""

from __future__ import annotations

import json

import aiohttp
import pytest
from support import TEST_KEY, Caller, running_proxy

from translators.errors import NO_LONGER_CONFIGURED, UNKNOWN_TASK
from translators.sealing import ANONYMOUS, Keyring, TaskRef

pytestmark = pytest.mark.peers


async def test_a_relayed_task_s_answers_are_the_backend_s_own(reference_v2_server, tmp_path):
    async with running_proxy(reference_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        proxied, direct = Caller(http, proxy.url), Caller(http, reference_v2_server.url)
        created = await proxied.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "own"}})
        task_id = created.result["taskId"]
        assert (created.status, len(task_id), Keyring(TEST_KEY).opened_task_id(task_id, ANONYMOUS)) == (200, 43, None)
        final = await proxied.poll(task_id)
        assert final["status"] == "completed"
        body = json.dumps(proxied.body("tasks/get", {"taskId": task_id}))  # the same request, id included, to both
        headers = {**proxied.headers("tasks/get"), "Content-Type": "application/json", "Mcp-Name": task_id}
        straight = await direct.raw(body, headers)
        through = await proxied.raw(body, headers)
        stamp = through.body["result"]["lastUpdatedAt"]  # FastMCP 4 stamps a finished task's lastUpdatedAt as it is read
        assert stamp >= straight.body["result"]["lastUpdatedAt"]
        assert (through.status, through.body, through.headers.get("Mcp-Name")) == (
            straight.status,
            {**straight.body, "result": {**straight.body["result"], "lastUpdatedAt": stamp}},
            straight.headers.get("Mcp-Name"),
        )
        assert through.body["result"]["result"]["content"] == [{"type": "text", "text": "computed own"}]


async def test_an_id_sealed_while_there_were_several_backends_is_opened_and_answered_sealed(reference_v2_server, tmp_path):
    async with running_proxy(reference_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        proxied = Caller(http, proxy.url)
        created = await proxied.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "sealed"}})
        own = created.result["taskId"]
        sealed = Keyring(TEST_KEY).seal_task_id(TaskRef("main", "", own), ANONYMOUS)  # as a fleet of several sealed it
        final = await proxied.poll(sealed)
        assert (final["taskId"], final["result"]["content"]) == (sealed, [{"type": "text", "text": "computed sealed"}])
        other = Keyring(TEST_KEY).seal_task_id(TaskRef("gone", "", own), ANONYMOUS)  # a backend no longer configured
        refused = await proxied.call("tasks/get", {"taskId": other})
        assert refused.error == {
            "code": -32602,
            "message": f"{UNKNOWN_TASK}: the backend that held it, 'gone', {NO_LONGER_CONFIGURED}",
        }


async def test_a_plain_id_in_a_request_s_meta_leaves_the_answer_the_backend_s_own(reference_v2_server, tmp_path):
    """A related-task `_meta` naming the backend's own id opens nothing: the request goes as the
    client wrote it and the new task's id comes back as the backend gave it."""
    async with running_proxy(reference_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        proxied = Caller(http, proxy.url)
        first = (await proxied.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "one"}})).result
        body = proxied.body("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "two"}})
        body["params"]["_meta"]["io.modelcontextprotocol/related-task"] = {"taskId": first["taskId"]}
        headers = {**proxied.headers("tools/call"), "Content-Type": "application/json", "Mcp-Name": "slow_compute"}
        second = (await proxied.raw(json.dumps(body), headers)).body["result"]
        assert (second["resultType"], len(second["taskId"]), Keyring(TEST_KEY).opened_task_id(second["taskId"], ANONYMOUS)) == (
            "task",
            43,
            None,
        )
        assert (await proxied.poll(second["taskId"]))["result"]["content"] == [{"type": "text", "text": "computed two"}]
