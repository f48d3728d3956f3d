"""A session-wire backend that forgets the proxy's pooled session, or refuses `initialize` with a
404 carrying a session id, in front of a modern client whose calls are translated
(docs/decisions.md §185: the call is sent from the client's own handler, `UpstreamSession.open`).

The backend is scripted in this process: what a real server does when it forgets a session
(404, as the session wire says) is produced on demand, which a real server does not offer."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web
from support import Caller, running_proxy

SESSION_NOT_FOUND = {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "Session not found"}}


class ForgetfulBackend:
    """A v1 backend (JSON answers) whose next `forget` calls of `tools/call` find their session
    forgotten, and whose `initialize`s after the first are refused 404 with a session id when
    `refuse_initialize` is set. `seen`: (method, session id) of every POST."""

    def __init__(self) -> None:
        self.sessions: set[str] = set()
        self.issued = 0
        self.forget = 0
        self.refuse_initialize = False
        self.seen: list[tuple[str, str | None]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> ForgetfulBackend:
        app = web.Application()
        app.router.add_post("/mcp", self._post)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/mcp"
        return self

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _post(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        method, session = body.get("method", "response"), request.headers.get("Mcp-Session-Id")
        self.seen.append((method, session))
        if method == "initialize":
            self.issued += 1
            issued = f"s{self.issued}"
            if self.refuse_initialize and self.sessions:
                error = {"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32001, "message": "no more sessions"}}
                return web.json_response(error, status=404, headers={"Mcp-Session-Id": issued})
            self.sessions.add(issued)
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "forgetful", "version": "1"},
            }
            return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": result}, headers={"Mcp-Session-Id": issued})
        if session not in self.sessions:
            return web.json_response(SESSION_NOT_FOUND, status=404)
        if "id" not in body:
            return web.Response(status=202)
        if method == "tools/call" and self.forget:
            self.forget -= 1
            self.sessions.discard(session)
            return web.json_response(SESSION_NOT_FOUND, status=404)
        if method == "tools/list":
            return web.json_response(
                {"jsonrpc": "2.0", "id": body["id"], "result": {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}}
            )
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": {"content": [{"type": "text", "text": "ok"}]}})


@pytest.fixture
async def forgetful():
    backend = await ForgetfulBackend().start()
    yield backend
    await backend.stop()


async def test_a_call_whose_pooled_session_was_forgotten_is_sent_once_more_on_a_new_one(forgetful, tmp_path):
    async with running_proxy(forgetful.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url, declare=False)
        await client.call("tools/list")
        forgetful.forget = 1
        mark = len(forgetful.seen)
        answer = await client.call("tools/call", {"name": "t", "arguments": {}})
    assert (answer.status, answer.result["content"]) == (200, [{"type": "text", "text": "ok"}])
    sent = [entry for entry in forgetful.seen[mark:] if entry[0] != "notifications/initialized"]
    assert sent == [("tools/call", "s2"), ("initialize", None), ("tools/call", "s3")]  # s1: the probe's session


async def test_a_call_whose_new_session_is_forgotten_too_says_the_backend_lost_it(forgetful, tmp_path):
    """It was "Internal error in mcp-tasks-proxy" (`SessionLost` reached the entry)."""
    async with running_proxy(forgetful.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url, declare=False)
        await client.call("tools/list")
        forgetful.forget = 2
        answer = await client.call("tools/call", {"name": "t", "arguments": {}})
    assert (answer.status, answer.error) == (200, {"code": -32603, "message": "Backend 'main' lost the upstream session"})


async def test_an_initialize_refused_404_with_a_session_id_is_the_backends_error(forgetful, tmp_path):
    """A 404 to `initialize` is the backend's answer, not a session it forgot: the session id it
    carries is not taken (found by a review of decision 185, where it was taken first)."""
    async with running_proxy(forgetful.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url, declare=False)
        await client.call("tools/list")
        forgetful.refuse_initialize = True
        forgetful.forget = 1
        answer = await client.call("tools/call", {"name": "t", "arguments": {}})
    assert (answer.status, answer.error) == (200, {"code": -32001, "message": "no more sessions"})
