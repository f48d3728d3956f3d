"""Backends' cookies stay out of other clients' requests: the proxy's upstream HTTP client keeps
no cookie jar. Otherwise a `Set-Cookie` from a backend answering one client would be sent back on
every later request of every client (the proxy shares one HTTP client)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web
from support import Caller, running_proxy

DISCOVER = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}}


@contextlib.asynccontextmanager
async def _serving(method: str, path: str, handler: Any) -> AsyncIterator[int]:
    """`handler` serving `method path` on 127.0.0.1:<ephemeral>; yields the port."""
    app = web.Application()
    app.router.add_route(method, path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def test_a_backend_cookie_is_never_sent_back(tmp_path):
    cookies_seen: list[str | None] = []

    async def backend(request: web.Request) -> web.Response:
        message = json.loads(await request.read())
        cookies_seen.append(request.headers.get("Cookie"))
        if message["method"] == "server/discover":
            result = DISCOVER
        elif message["method"] == "tools/list":
            result = {"tools": [], "resultType": "complete"}
        else:
            return web.Response(status=404)
        response = web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})
        response.set_cookie("session-of-someone", "secret", path="/")
        return response

    async with _serving("POST", "/mcp", backend) as port:
        # A host name, not an address: cookie jars keep cookies of host names only.
        async with running_proxy(f"http://localhost:{port}/mcp", tmp_path) as proxy, aiohttp.ClientSession() as http:
            for who in ("alice", "bob"):
                answer = await Caller(http, proxy.url, authorization=f"Bearer {who}").call("tools/list")
                assert (answer.status, answer.result["tools"]) == (200, [])
    assert len(cookies_seen) >= 4  # probes, then both clients' requests
    assert set(cookies_seen) == {None}


async def test_the_shared_upstream_client_keeps_no_cookie_from_one_request_to_the_next(tmp_path):
    """Issue 46: plain HTTP backends now go through the relay's own client, so the test above would
    pass with a cookie jar in the shared aiohttp session too. That session still carries HTTP+SSE
    backends, protected-resource metadata and the upstream fallbacks: it is asked directly here."""
    from proxy.app import STATE

    seen: list[str | None] = []

    async def backend(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        response = web.Response(text="ok")
        response.set_cookie("session-of-someone", "secret", path="/")
        return response

    async with _serving("GET", "/any", backend) as port, running_proxy(f"http://localhost:{port}/mcp", tmp_path) as proxy:
        shared = proxy.runner.app[STATE].http
        for _ in range(2):
            async with shared.get(f"http://localhost:{port}/any") as response:
                assert (response.status, await response.text()) == (200, "ok")
    assert seen == [None, None]
