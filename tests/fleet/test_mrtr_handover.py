"""An MRTR retry reaching a replica other than the one holding its upstream exchange
(docs/decisions.md, "An MRTR retry reaching another replica"): two replicas on one Redis store;
the retry is handed to the holder over pub/sub, and a retry naming a holder that is gone is
-32602, not left hanging. The backend is the reference v1 server: `test_tool_with_task` asks one
question before its task exists (an MRTR round)."""

from __future__ import annotations

import contextlib

import aiohttp
import pytest
from support import Caller, running_proxy

pytestmark = pytest.mark.peers

NAME = {"r1": {"action": "accept", "content": {"name": "Alice"}}}


async def test_a_retry_on_the_other_replica_reaches_the_holder(reference_v1_server, redis_url, tmp_path):
    async with (
        running_proxy(reference_v1_server.url, tmp_path / "a", store=redis_url) as a,
        running_proxy(reference_v1_server.url, tmp_path / "b", store=redis_url) as b,
        aiohttp.ClientSession() as http,
    ):
        on_a, on_b = Caller(http, a.url), Caller(http, b.url)
        round1 = (await on_a.call("tools/call", {"name": "test_tool_with_task"})).result
        # An answer to no outstanding key: the holder's next round asks the same question again.
        again = (
            await on_b.call(
                "tools/call",
                {"name": "test_tool_with_task", "requestState": round1["requestState"], "inputResponses": {"r9": NAME["r1"]}},
            )
        ).result
        assert (again["resultType"], again["inputRequests"]) == ("input_required", round1["inputRequests"])
        second = await on_b.call(
            "tools/call", {"name": "test_tool_with_task", "requestState": again["requestState"], "inputResponses": NAME}
        )
        created = second.result
        assert (created["resultType"], second.headers["Mcp-Name"]) == ("task", created["taskId"])
        final = await on_a.poll(created["taskId"])
        assert final["result"]["content"] == [{"type": "text", "text": "Hello, Alice! test_tool_with_task finished."}]


async def test_a_retry_naming_a_holder_that_is_gone_is_an_unknown_request_state(reference_v1_server, redis_url, tmp_path):
    async with running_proxy(reference_v1_server.url, tmp_path / "b", store=redis_url) as b, aiohttp.ClientSession() as http:
        async with contextlib.AsyncExitStack() as holder:
            a = await holder.enter_async_context(running_proxy(reference_v1_server.url, tmp_path / "a", store=redis_url))
            round1 = (await Caller(http, a.url).call("tools/call", {"name": "test_tool_with_task"})).result
        refused = await Caller(http, b.url).call(
            "tools/call", {"name": "test_tool_with_task", "requestState": round1["requestState"], "inputResponses": NAME}
        )
        assert (refused.status, refused.error["code"], refused.error["message"]) == (
            400,
            -32602,
            "Unknown or expired requestState: the proxy process holding it is gone; send the original request again without it",
        )
