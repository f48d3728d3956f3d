"""A comparison reads at most `shadow_max_body_bytes` of each answer (issue 37 defect 9;
docs/behaviour.md §8): a longer one is not read on (the candidate's stream is left open here, so a
reader that waited for its end would never count it) and the comparison is counted `too_large`, in
the proxy's event loop, in its shadow process and through a candidate's pairing alike; a primary's
answer over the bound is not compared either, and its candidate is never asked. Real servers: the
benchmark's fast upstream as primary, candidates that answer the shadow's `echo` with a large body."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
from aiohttp import web
from support import Caller, running_proxy

from proxy.app import STATE
from proxy.bench.upstream import FastUpstream, create_app

LIMIT = 64 * 1024
BIG = "x" * (LIMIT + 1)
KEYS = ("match", "differ", "candidate_error", "primary_error", "timeout", "dropped", "too_large")


class LargeEcho:
    """The fast upstream on `wire` ("modern" or "v1"), except that an `echo` it is asked (only the
    shadow asks a candidate) of the text "json", "chunked" or "sse" is answered with a text of
    `LIMIT` + 1 bytes: JSON with a Content-Length, JSON chunked without one, or an SSE event; the
    last two are left open after it until the test ends (`release`). It records each echo's text."""

    def __init__(self, wire: str) -> None:
        self.server = FastUpstream(poll_interval_ms=20)
        self.wire = wire
        self.seen: list[str] = []
        self.release = asyncio.Event()

    async def post(self, request: web.Request) -> web.StreamResponse:
        message = json.loads(await request.read())
        params = message.get("params") or {}
        if message.get("method") != "tools/call" or params.get("name") != "echo":
            return await (self.server.post_modern if self.wire == "modern" else self.server.post_v1)(request)
        text = str((params.get("arguments") or {}).get("text"))
        self.seen.append(text)
        result = {"content": [{"type": "text", "text": BIG if text in ("json", "chunked", "sse") else text}], "isError": False}
        if self.wire == "modern":
            result["resultType"] = "complete"
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        if text not in ("chunked", "sse"):
            return web.Response(body=body, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "application/json" if text == "chunked" else "text/event-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(body if text == "chunked" else b"event: message\ndata: " + body + b"\n\n")
        await self.release.wait()  # never ended while the proxy counts: it must not wait for the end
        return response

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/mcp", self.post)
        if self.wire == "v1":
            app.router.add_get("/mcp", self.server.get_v1, allow_head=False)
            app.router.add_delete("/mcp", self.server.delete_v1)
        return app


async def _rows(http: aiohttp.ClientSession, base_url: str, total: int) -> list[dict]:
    deadline = time.monotonic() + 20
    while True:
        async with http.get(base_url + "/status.json") as response:
            rows = (await response.json())["shadow"][0]["rows"]
        if sum(row[k] for row in rows for k in KEYS) >= total:
            return rows
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.05)


def _row(method: str, tool: str, **counts: int) -> dict:
    row = {"method": method, "tool": tool, **dict.fromkeys(KEYS, 0), **counts}
    compared = row["match"] + row["differ"]
    return {**row, "match_rate": round(row["match"] / compared, 4) if compared else None}


async def _metric(http: aiohttp.ClientSession, base_url: str, outcome: str) -> str:
    async with http.get(base_url + "/metrics") as response:
        text = await response.text()
    return next(
        line for line in text.splitlines() if line.startswith("mcp_tasks_proxy_shadow_total{") and f'outcome="{outcome}"' in line
    )


async def _echo(caller: Caller, text: str) -> None:
    answer = await caller.call("tools/call", {"name": "echo", "arguments": {"text": text}})
    assert (answer.status, answer.result["content"]) == (200, [{"type": "text", "text": text}])  # the primary's, whole


async def _process_running(shadowing) -> None:
    deadline = time.monotonic() + 30
    while not shadowing.process.running:
        assert time.monotonic() < deadline, shadowing.process.state
        await asyncio.sleep(0.05)


def _upstream(primary: str, candidate: str) -> list[dict[str, object]]:
    return [
        {"name": "legacy", "url": primary},
        {
            "name": "next",
            "url": candidate,
            "shadow_of": "legacy",
            "shadow_tools": ["echo"],
            "shadow_max_body_bytes": LIMIT,
            "shadow_timeout_ms": 60_000,
        },
    ]


async def test_a_candidate_s_answer_over_the_bound_is_too_large_in_the_event_loop_and_the_shadow_process(
    aiohttp_server, tmp_path
):
    primary = await aiohttp_server(create_app("modern", poll_interval_ms=20))
    candidate = LargeEcho("modern")
    served = await aiohttp_server(candidate.app())
    upstream = _upstream(str(primary.make_url("/mcp")), str(served.make_url("/mcp")))
    try:
        async with running_proxy("", tmp_path, upstream=upstream, store="memory") as proxy, aiohttp.ClientSession() as http:
            shadowing = proxy.runner.app[STATE].fleet.shadow
            caller = Caller(http, proxy.url)
            await _echo(caller, "json")  # starts the shadow process; compared in the event loop
            assert await _rows(http, proxy.base_url, 1) == [_row("tools/call", "echo", too_large=1)]
            await _process_running(shadowing)
            submitted = shadowing.process.submitted
            for text in ("json", "chunked", "sse", "small"):
                await _echo(caller, text)
            rows = await _rows(http, proxy.base_url, 5)
            assert shadowing.process.submitted - submitted == 4  # compared in the shadow process
            metric = await _metric(http, proxy.base_url, "too_large")
    finally:
        candidate.release.set()
    assert rows == [_row("tools/call", "echo", match=1, too_large=4)]
    assert candidate.seen == ["json", "json", "chunked", "sse", "small"]
    assert metric == 'mcp_tasks_proxy_shadow_total{backend="next",method="tools/call",outcome="too_large",tool="echo"} 4.0'


async def test_a_candidate_reached_through_its_pairing_is_bounded_too(aiohttp_server, tmp_path):
    primary = await aiohttp_server(create_app("modern", poll_interval_ms=20))
    candidate = LargeEcho("v1")
    served = await aiohttp_server(candidate.app())
    upstream = _upstream(str(primary.make_url("/mcp")), str(served.make_url("/mcp")))
    try:
        async with running_proxy("", tmp_path, upstream=upstream, store="memory") as proxy, aiohttp.ClientSession() as http:
            caller = Caller(http, proxy.url)
            for text in ("json", "chunked", "sse", "small"):
                await _echo(caller, text)
            rows = await _rows(http, proxy.base_url, 4)
            assert proxy.runner.app[STATE].fleet.shadow.process.submitted == 0  # all in the event loop
    finally:
        candidate.release.set()
    assert rows == [_row("tools/call", "echo", match=1, too_large=3)]
    assert candidate.seen == ["json", "chunked", "sse", "small"]


async def test_a_primary_s_answer_over_the_bound_is_too_large_and_its_candidate_never_asked(aiohttp_server, tmp_path):
    primary = await aiohttp_server(create_app("modern", poll_interval_ms=20))
    candidate = LargeEcho("modern")
    served = await aiohttp_server(candidate.app())
    upstream = _upstream(str(primary.make_url("/mcp")), str(served.make_url("/mcp")))
    async with running_proxy("", tmp_path, upstream=upstream, store="memory") as proxy, aiohttp.ClientSession() as http:
        shadowing = proxy.runner.app[STATE].fleet.shadow
        caller = Caller(http, proxy.url)
        await _echo(caller, BIG)  # in the event loop (the shadow process is starting)
        assert await _rows(http, proxy.base_url, 1) == [_row("tools/call", "echo", too_large=1)]
        await _process_running(shadowing)
        submitted = shadowing.process.submitted
        await _echo(caller, BIG)  # would be the shadow process's
        await _echo(caller, "small")
        rows = await _rows(http, proxy.base_url, 3)
        assert shadowing.process.submitted - submitted == 1  # the small one only
    assert rows == [_row("tools/call", "echo", match=1, too_large=2)]
    assert candidate.seen == ["small"]
