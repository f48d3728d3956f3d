"""Faults between the proxy and its v1 backend: a transient failure while an answer goes upstream,
a client that disconnects mid-call, a backend that is killed and comes back.

Root cause shared by the first two: the answer to a captured request is popped from the
outstanding set (proxy/capture.py `TaskInputs.answer`, proxy/exchanges.py `Exchange.deliver`)
and then POSTed with `UpstreamSession.respond` → `_post_no_answer`
(proxy/upstream/session_wire.py), which swallows an unreachable backend (logs a warning) and
any non-2xx status. The client is told the answer went through; the backend never gets it.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from adv_support import healthz_ok, wait_for_input
from support import Caller, running_proxy

pytestmark = pytest.mark.peers

CONFIRM = {"input-1": {"action": "accept", "content": {"confirm": True}}}


async def test_tasks_update_during_a_transient_upstream_failure_is_502_and_keeps_the_question(flaky, tmp_path):
    """Expected (§6 "a backend that cannot be reached → 502 with -32603"; "Nothing lost"): the
    update is answered 502 and `input-1` stays outstanding, so the client can send it again.
    Today: 200 `{resultType: complete}`, the key is gone, and the task reads `working` forever
    while the backend waits for an answer that never comes."""
    async with running_proxy(flaky.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url)
        created = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "blip.txt"}})).result
        await wait_for_input(client, created["taskId"])
        flaky.down = True
        try:
            answer = await client.call("tasks/update", {"taskId": created["taskId"], "inputResponses": CONFIRM})
        finally:
            flaky.down = False
        assert flaky.dropped == 1  # the answer really was lost on the way
        assert (answer.status, answer.body.get("error", {}).get("code")) == (502, -32603), answer.body
        assert "'main'" in answer.error["message"]
        again = (await client.call("tasks/get", {"taskId": created["taskId"]})).result
        assert (again["status"], list(again.get("inputRequests", {}))) == ("input_required", ["input-1"])
        retried = await client.call("tasks/update", {"taskId": created["taskId"], "inputResponses": CONFIRM})
        assert retried.result == {"resultType": "complete"}
        final = await client.poll(created["taskId"], timeout=10)
        assert final["result"]["content"] == [{"type": "text", "text": "deleted blip.txt"}]


async def test_an_mrtr_retry_during_a_transient_upstream_failure_answers_promptly(flaky, tmp_path):
    """Expected: the retry is answered at once with 502 / -32603. Today `Exchange.deliver` drops
    the answer, `next_round` then waits for an upstream that is itself waiting for that answer,
    and the client hangs until the backend gives up on its question (60 s for the reference
    server) or `upstream_timeout_ms` (300 s)."""
    async with running_proxy(flaky.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url)
        round1 = (await client.call("tools/call", {"name": "test_tool_with_task"})).result
        assert round1["resultType"] == "input_required"
        flaky.down = True
        try:
            async with asyncio.timeout(4):
                answer = await client.call(
                    "tools/call",
                    {
                        "name": "test_tool_with_task",
                        "requestState": round1["requestState"],
                        "inputResponses": {"r1": {"action": "accept", "content": {"name": "Blip"}}},
                    },
                )
        except TimeoutError:
            pytest.fail(
                "the MRTR retry got no answer within 4 s "
                "(its answer was dropped; the proxy waits on an upstream that waits on it)"
            )
        finally:
            flaky.down = False
        assert (answer.status, answer.body.get("error", {}).get("code")) == (502, -32603), answer.body


@pytest.mark.parametrize("answered_as", ["sse", "json"])
async def test_a_client_disconnect_mid_call_sends_notifications_cancelled_upstream(tapped, tmp_path, answered_as):
    """docs/behaviour.md §4.8 "Client gone": a modern client that closes its connection before the
    answer has its in-flight upstream request cancelled with `notifications/cancelled`, also when
    the upstream answer is read by an MRTR exchange's own task (`tools/call`, `prompts/get`,
    `resources/read` answered on an SSE stream), and when the backend answers JSON, which the
    client's own handler waits for (docs/decisions.md §185)."""
    if answered_as == "json":
        tapped.json_answers.add("tools/call")
    async with running_proxy(tapped.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        plain = Caller(http, proxy.url, declare=False)  # optional tool, no extension → a plain upstream call
        await plain.call("tools/list")
        mark = len(tapped.bodies)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await plain.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 2, "label": "gone"}})
        call_ids = [b["id"] for b in tapped.bodies[mark:] if b.get("method") == "tools/call"]
        assert len(call_ids) == 1
        cancelled = []
        for _ in range(30):
            cancelled = [
                b["params"].get("requestId") for b in tapped.bodies[mark:] if b.get("method") == "notifications/cancelled"
            ]
            if cancelled:
                break
            await asyncio.sleep(0.05)
        assert cancelled == call_ids
        assert await healthz_ok(http, proxy.base_url)


async def test_a_killed_and_restarted_backend_is_502_then_served_again(restartable, tmp_path):
    """What held up: while the backend is down every forwarded request is 502 / -32603 naming the
    backend (with `reconnect_wait_ms = 0` at once; /healthz stays up); after it restarts, pooled
    sessions are re-created and tasks lost with the old sessions are unknown (-32602), never invented."""
    async with running_proxy(restartable.url, tmp_path, reconnect_wait_ms=0) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url)
        created = (
            await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 30, "label": "lost"}})
        ).result
        restartable.kill()
        for method, params in (
            ("tools/list", {}),
            ("tools/call", {"name": "greet", "arguments": {"name": "x"}}),
            ("tasks/get", {"taskId": created["taskId"]}),
            ("tasks/cancel", {"taskId": created["taskId"]}),
        ):
            async with asyncio.timeout(10):
                down = await client.call(method, params)
            assert (down.status, down.error["code"]) == (502, -32603), (method, down.body)
            assert down.error["message"].startswith("Backend 'main' unavailable")
        assert await healthz_ok(http, proxy.base_url)
        restartable.restart()
        up = await client.call("tools/call", {"name": "greet", "arguments": {"name": "again"}})
        assert (up.status, up.result["content"]) == (200, [{"type": "text", "text": "Hello, again!"}])
        lost = await client.call("tasks/get", {"taskId": created["taskId"]})
        assert (lost.status, lost.error["code"]) == (400, -32602)
        assert await healthz_ok(http, proxy.base_url)


async def test_a_request_made_while_the_backend_restarts_waits_for_it(restartable, tmp_path):
    """`reconnect_wait_ms`: a request that finds its backend refusing connections tries again until
    the backend is back (here after about a second), and is answered normally."""
    async with running_proxy(restartable.url, tmp_path, reconnect_wait_ms=20_000) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url)
        assert (await client.call("tools/list")).status == 200
        restartable.kill()
        pending = asyncio.ensure_future(client.call("tools/call", {"name": "greet", "arguments": {"name": "patient"}}))
        await asyncio.sleep(1.0)
        assert not pending.done()  # waiting, not failed
        await asyncio.to_thread(restartable.restart)
        answer = await asyncio.wait_for(pending, 20)
        assert (answer.status, answer.result["content"]) == (200, [{"type": "text", "text": "Hello, patient!"}])


async def test_tasks_update_for_a_task_lost_in_a_backend_restart_is_32602(restartable, tmp_path):
    """docs/behaviour.md §4.5 and §4.1: a task whose upstream session the backend forgot (it
    restarted) is unknown, -32602, for `tasks/update` as for `tasks/get`; an acknowledgement would
    hide that the answer reached nobody (docs/decisions.md §5 covers ended tasks, not lost ones)."""
    async with running_proxy(restartable.url, tmp_path, reconnect_wait_ms=0) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url)
        created = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "r.txt"}})).result
        await wait_for_input(client, created["taskId"])
        restartable.kill()
        down = await client.call("tools/list")
        assert down.status == 502
        restartable.restart()
        answer = await client.call("tasks/update", {"taskId": created["taskId"], "inputResponses": CONFIRM})
        assert (answer.status, answer.body.get("error", {}).get("code")) == (400, -32602), answer.body


async def test_a_client_that_closes_a_streamed_answer_cancels_the_upstream_call(tapped, tmp_path):
    """docs/behaviour.md §4.10: once the answer streams (a progress notification came), a client
    closing the stream has the upstream request cancelled with `notifications/cancelled`."""
    async with running_proxy(tapped.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        await caller.call("tools/list")
        mark = len(tapped.bodies)
        body = caller.body("tools/call", {"name": "report_progress", "arguments": {"count": 100_000}})
        body["params"]["_meta"]["progressToken"] = "long"
        headers = {**caller.headers("tools/call"), "Content-Type": "application/json"}
        async with http.post(proxy.url, json=body, headers=headers) as response:
            assert response.headers["Content-Type"] == "text/event-stream"
            first = await response.content.readuntil(b"\n\n")
            assert b'"progress":1.0,' in first
            response.close()  # the client goes away mid-stream
        call_ids = [b["id"] for b in tapped.bodies[mark:] if b.get("method") == "tools/call"]
        assert len(call_ids) == 1
        cancelled = []
        for _ in range(60):
            cancelled = [
                b["params"].get("requestId") for b in tapped.bodies[mark:] if b.get("method") == "notifications/cancelled"
            ]
            if cancelled:
                break
            await asyncio.sleep(0.05)
        assert cancelled == call_ids
        assert await healthz_ok(http, proxy.base_url)
