"""The shadow process (docs/behaviour.md §8, docs/decisions.md §125): once the proxy's child is
running, a held answer compared with a v2-modern candidate is asked and compared there, counted
by the proxy exactly as in its event loop (match, differ with its diff, candidate error), and the
child ends with the proxy."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
from aiohttp import web
from support import Caller, running_proxy

from proxy.app import STATE
from proxy.bench.upstream import FastUpstream, create_app

SHADOW_CLIENT = "mcp-tasks-proxy-shadow"


class OtherEcho:
    """The fast modern upstream, except that its `echo` answers the shadow "other"; it records the
    `(method, tool)` of every request the shadow sends it."""

    def __init__(self) -> None:
        self.server = FastUpstream(poll_interval_ms=20)
        self.seen: list[tuple[str, str | None]] = []

    async def post(self, request: web.Request) -> web.StreamResponse:
        message = json.loads(await request.read())
        params = message.get("params") or {}
        if (params.get("_meta") or {}).get("io.modelcontextprotocol/clientInfo", {}).get("name") == SHADOW_CLIENT:
            self.seen.append((message["method"], params.get("name")))
            if params.get("name") == "echo":
                result = {"content": [{"type": "text", "text": "other"}], "isError": False, "resultType": "complete"}
                return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})
        return await self.server.post_modern(request)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/mcp", self.post)
        return app


async def _counts(http: aiohttp.ClientSession, base_url: str, total: int) -> list[dict]:
    deadline = time.monotonic() + 20
    while True:
        async with http.get(base_url + "/status.json") as response:
            shadow = (await response.json())["shadow"][0]
        keys = ("match", "differ", "candidate_error", "primary_error", "timeout", "dropped", "too_large")
        if sum(row[k] for row in shadow["rows"] for k in keys) >= total:
            return shadow
        assert time.monotonic() < deadline, shadow
        await asyncio.sleep(0.05)


async def _running(shadowing) -> None:
    deadline = time.monotonic() + 30
    while not shadowing.process.running:
        assert time.monotonic() < deadline, shadowing.process.state
        await asyncio.sleep(0.05)


async def test_comparisons_run_in_the_shadow_process_and_are_counted_by_the_proxy(aiohttp_server, tmp_path):
    primary = await aiohttp_server(create_app("modern", poll_interval_ms=20))
    candidate = OtherEcho()
    served = await aiohttp_server(candidate.app())
    upstream = [
        {"name": "legacy", "url": str(primary.make_url("/mcp"))},
        {"name": "next", "url": str(served.make_url("/mcp")), "shadow_of": "legacy", "shadow_tools": ["echo"]},
    ]
    async with running_proxy("", tmp_path, upstream=upstream, store="memory") as proxy, aiohttp.ClientSession() as http:
        shadowing = proxy.runner.app[STATE].fleet.shadow
        caller = Caller(http, proxy.url)
        assert (await caller.call("tools/list")).status == 200  # starts the process; compared in the event loop
        await _running(shadowing)
        await _counts(http, proxy.base_url, 1)
        submitted = shadowing.process.submitted
        answers = [await caller.call("tools/list") for _ in range(3)]
        echoes = [await caller.call("tools/call", {"name": "echo", "arguments": {"text": "hello"}}) for _ in range(2)]
        shadow = await _counts(http, proxy.base_url, 6)
        process = shadowing.process.process
        async with http.get(proxy.base_url + "/metrics") as response:
            metrics = await response.text()
    assert [len(a.result["tools"]) for a in answers] == [4, 4, 4]
    assert [e.result["content"] for e in echoes] == [[{"type": "text", "text": "hello"}]] * 2  # the primary's, always
    assert shadowing.process.submitted - submitted == 5
    assert candidate.seen == [("tools/list", None)] * 4 + [("tools/call", "echo")] * 2
    assert [(r["method"], r["tool"], r["match"], r["differ"], r["dropped"]) for r in shadow["rows"]] == [
        ("tools/call", "echo", 0, 2, 0),
        ("tools/list", "", 4, 0, 0),
    ]
    assert shadow["queued"] == 0
    assert [(d["method"], d["tool"], d["diff"], d["paths"]) for d in shadow["last_differences"]] == [
        ("tools/call", "echo", 'result.content.0.text: "hello" → "other"', ["result.content.0.text"])
    ] * 2
    assert 'mcp_tasks_proxy_shadow_total{backend="next",method="tools/call",outcome="differ",tool="echo"} 2.0' in metrics
    assert process.returncode == 0  # ended with the proxy, its stdin closed


async def test_an_unreachable_candidate_is_a_candidate_error_in_the_shadow_process(aiohttp_server, tmp_path):
    primary = await aiohttp_server(create_app("modern", poll_interval_ms=20))
    candidate = OtherEcho()
    served = await aiohttp_server(candidate.app())
    upstream = [
        {"name": "legacy", "url": str(primary.make_url("/mcp"))},
        {"name": "next", "url": str(served.make_url("/mcp")), "shadow_of": "legacy"},
    ]
    async with (
        running_proxy("", tmp_path, upstream=upstream, store="memory", health_interval_ms=0) as proxy,
        aiohttp.ClientSession() as http,
    ):
        shadowing = proxy.runner.app[STATE].fleet.shadow
        caller = Caller(http, proxy.url)
        assert (await caller.call("tools/list")).status == 200
        await _running(shadowing)
        await _counts(http, proxy.base_url, 1)
        submitted = shadowing.process.submitted
        await served.close()
        assert (await caller.call("tools/list")).status == 200
        shadow = await _counts(http, proxy.base_url, 2)
    assert shadowing.process.submitted - submitted == 1
    assert [(r["method"], r["match"], r["candidate_error"]) for r in shadow["rows"]] == [("tools/list", 1, 1)]
