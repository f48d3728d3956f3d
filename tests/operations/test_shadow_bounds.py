"""The shadow mirror's bounds with the benchmark's fast modern upstream as primary and candidate
(in this event loop; docs/behaviour.md §8): what does not fit the queue is dropped and counted, a
candidate slower than `shadow_timeout_ms` is a timeout, an unreachable one a candidate error, a
tool without `readOnlyHint` is never asked of the candidate, and the client never waits for any of it."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
from aiohttp import web
from support import Caller, running_proxy, shadow_row

from proxy.bench.upstream import FastUpstream

SHADOW_CLIENT = "mcp-tasks-proxy-shadow"


class GatedCandidate:
    """The fast upstream, recording `(method, tool)` of every request the shadow sends it and
    holding them until `gate` is set."""

    def __init__(self) -> None:
        self.server = FastUpstream(poll_interval_ms=20)
        self.gate = asyncio.Event()
        self.seen: list[tuple[str, str | None]] = []

    async def post(self, request: web.Request) -> web.StreamResponse:
        message = json.loads(await request.read())
        params = message.get("params") or {}
        if (params.get("_meta") or {}).get("io.modelcontextprotocol/clientInfo", {}).get("name") == SHADOW_CLIENT:
            self.seen.append((message["method"], params.get("name")))
            await self.gate.wait()
        return await self.server.post_modern(request)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/mcp", self.post)
        return app


async def _primary_and(aiohttp_server, candidate: GatedCandidate) -> tuple[str, object]:
    from proxy.bench.upstream import create_app

    primary = await aiohttp_server(create_app("modern", poll_interval_ms=20))
    served = await aiohttp_server(candidate.app())
    return str(primary.make_url("/mcp")), served


def _upstream(primary: str, candidate: str, **shadow: object) -> list[dict[str, object]]:
    return [{"name": "legacy", "url": primary}, {"name": "next", "url": candidate, "shadow_of": "legacy", **shadow}]


async def _rows_when(http: aiohttp.ClientSession, base_url: str, total: int) -> list[dict]:
    deadline = time.monotonic() + 20
    while True:
        async with http.get(base_url + "/status.json") as response:
            rows = (await response.json())["shadow"][0]["rows"]
        keys = ("match", "differ", "candidate_error", "primary_error", "timeout", "dropped", "too_large")
        if sum(row[k] for row in rows for k in keys) >= total:
            return rows
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.05)


async def test_what_does_not_fit_the_queue_is_dropped_and_the_client_never_waits(aiohttp_server, tmp_path):
    candidate = GatedCandidate()
    primary, served = await _primary_and(aiohttp_server, candidate)
    upstream = _upstream(primary, str(served.make_url("/mcp")), shadow_queue=1, shadow_concurrency=1)
    async with running_proxy("", tmp_path, upstream=upstream, store="memory") as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        answers = [await caller.call("tools/list") for _ in range(4)]  # the candidate holds the first one meanwhile
        assert [len(a.result["tools"]) for a in answers] == [4, 4, 4, 4]
        assert candidate.seen == [("tools/list", None)]  # one asked, one queued, two dropped
        assert await _rows_when(http, proxy.base_url, 2) == [shadow_row("tools/list", dropped=2)]
        candidate.gate.set()
        rows = await _rows_when(http, proxy.base_url, 4)
        async with http.get(proxy.base_url + "/metrics") as response:
            metrics = await response.text()
    assert rows == [shadow_row("tools/list", match=2, dropped=2)]
    assert candidate.seen == [("tools/list", None)] * 2
    assert 'mcp_tasks_proxy_shadow_total{backend="next",method="tools/list",outcome="dropped",tool=""} 2.0' in metrics
    assert 'mcp_tasks_proxy_shadow_total{backend="next",method="tools/list",outcome="match",tool=""} 2.0' in metrics


async def test_a_candidate_slower_than_shadow_timeout_ms_is_a_timeout(aiohttp_server, tmp_path):
    candidate = GatedCandidate()
    primary, served = await _primary_and(aiohttp_server, candidate)
    upstream = _upstream(primary, str(served.make_url("/mcp")), shadow_timeout_ms=200)
    async with running_proxy("", tmp_path, upstream=upstream, store="memory") as proxy, aiohttp.ClientSession() as http:
        assert (await Caller(http, proxy.url).call("tools/list")).status == 200
        rows = await _rows_when(http, proxy.base_url, 1)
        candidate.gate.set()
    assert rows == [shadow_row("tools/list", timeout=1)]


async def test_an_unreachable_candidate_is_a_candidate_error(aiohttp_server, tmp_path):
    candidate = GatedCandidate()
    candidate.gate.set()
    primary, served = await _primary_and(aiohttp_server, candidate)
    upstream = _upstream(primary, str(served.make_url("/mcp")))
    async with (
        running_proxy("", tmp_path, upstream=upstream, store="memory", health_interval_ms=0) as proxy,
        aiohttp.ClientSession() as http,
    ):
        await served.close()
        assert (await Caller(http, proxy.url).call("tools/list")).status == 200
        rows = await _rows_when(http, proxy.base_url, 1)
        async with http.get(proxy.base_url + "/status.json") as response:
            backends = {b["name"]: b["new_work_share"] for b in (await response.json())["backends"]}
    assert rows == [shadow_row("tools/list", candidate_error=1)]
    assert backends == {"legacy": 1.0, "next": 0.0}  # a shadow takes no client traffic


async def test_a_tool_without_read_only_hint_is_never_asked_of_the_candidate(aiohttp_server, tmp_path):
    """The fast upstream's `echo` has no annotations: not mirrored (the queue is FIFO with one
    worker, so the `tools/list` after it is compared after its turn was skipped); with
    `shadow_tools = ["echo"]` it is."""
    candidate = GatedCandidate()
    candidate.gate.set()
    primary, served = await _primary_and(aiohttp_server, candidate)
    for listed, expected in (
        ([], [shadow_row("tools/list", match=1)]),
        (["echo"], [shadow_row("tools/call", "echo", match=1), shadow_row("tools/list", match=1)]),
    ):
        candidate.seen.clear()
        shadow = {"shadow_concurrency": 1, **({"shadow_tools": listed} if listed else {})}
        upstream = _upstream(primary, str(served.make_url("/mcp")), **shadow)
        async with running_proxy("", tmp_path, upstream=upstream, store="memory") as proxy, aiohttp.ClientSession() as http:
            caller = Caller(http, proxy.url)
            echoed = await caller.call("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
            assert echoed.result["content"] == [{"type": "text", "text": "hi"}]
            await caller.call("tools/list")
            rows = await _rows_when(http, proxy.base_url, len(expected))
        assert rows == expected
        asked = [("tools/list", None)] if not listed else [("tools/call", "echo"), ("tools/list", None)]
        assert candidate.seen == asked


async def test_a_shadow_is_added_and_removed_by_reload(aiohttp_server, tmp_path):
    from proxy.config import load

    candidate = GatedCandidate()
    candidate.gate.set()
    primary, served = await _primary_and(aiohttp_server, candidate)
    base = {"listen": "127.0.0.1:0", "state_dir": str(tmp_path), "store": "memory"}
    async with (
        running_proxy("", tmp_path, upstream=[{"name": "legacy", "url": primary}], store="memory") as proxy,
        aiohttp.ClientSession() as http,
    ):
        caller = Caller(http, proxy.url)
        added = await proxy.reload(load(None, {**base, "upstream": _upstream(primary, str(served.make_url("/mcp")))}))
        assert added == [f"backend next added ({served.make_url('/mcp')}, weight 0)"]
        await caller.call("tools/list")
        assert await _rows_when(http, proxy.base_url, 1) == [shadow_row("tools/list", match=1)]
        removed = await proxy.reload(load(None, {**base, "upstream": [{"name": "legacy", "url": primary}]}))
        assert removed == ["backend next removed"]
        await caller.call("tools/list")
        async with http.get(proxy.base_url + "/status.json") as response:
            assert (await response.json())["shadow"] == []
    assert candidate.seen == [("tools/list", None)]


class AskingCandidate(GatedCandidate):
    """Answers the shadow's `tools/call` with a question (an `input_required` result), as a
    candidate that wants a user's confirmation would."""

    async def post(self, request: web.Request) -> web.StreamResponse:
        message = json.loads(await request.read())
        if message.get("method") == "tools/call":
            self.seen.append(("tools/call", message["params"].get("name")))
            asked = {
                "resultType": "input_required",
                "inputRequests": {
                    "ok": {
                        "method": "elicitation/create",
                        "params": {"mode": "form", "message": "Really?", "requestedSchema": {"type": "object", "properties": {}}},
                    }
                },
            }
            return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": asked})
        return await self.server.post_modern(request)


async def test_a_candidate_s_question_reaches_no_one(aiohttp_server, tmp_path):
    candidate = AskingCandidate()
    primary, served = await _primary_and(aiohttp_server, candidate)
    upstream = _upstream(primary, str(served.make_url("/mcp")), shadow_tools=["echo"])
    async with running_proxy("", tmp_path, upstream=upstream, store="memory") as proxy, aiohttp.ClientSession() as http:
        answer = await Caller(http, proxy.url).call("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        shadow = await _rows_when(http, proxy.base_url, 1)
        async with http.get(proxy.base_url + "/status.json") as response:
            last = (await response.json())["shadow"][0]["last_differences"]
    assert answer.result == {"content": [{"type": "text", "text": "hi"}], "isError": False, "resultType": "complete"}
    assert shadow == [shadow_row("tools/call", "echo", differ=1)]
    assert [d["diff"] for d in last] == [
        'result: {"content":[{"text":"hi","type":"text"}],"isError":false} → (absent)\nasks: (absent) → ["elicitation/create"]'
    ]
    assert candidate.seen == [("tools/call", "echo")]  # asked once; nothing answered its question
