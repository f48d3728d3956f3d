"""A v1 (session-wire, 2025-11-25) backend of a few lines whose GET stream misbehaves on demand:
for faults the reference servers cannot be made to produce (a GET stream answered 404/405/500 or
HTML, one that never answers, one cut at once, a session forgotten while its GET stream is held,
bytes of any shape on the stream).

`get_mode` decides how the next GET is answered: "sse" (a stream fed from `push`), "404", "405",
"500", "html", "hang" (never answers), "close" (200 SSE, then ends at once). `raw_get` (bytes),
when set, is written as the body of the next SSE GET stream before anything pushed. `forget()`
makes every known session unknown (404 from then on). Sessions get ids `s1`, `s2`, …; every
request is counted by method in `received` (answers to its requests kept in `responses`), and every GET in `gets` (session id)."""

from __future__ import annotations

import asyncio
import collections
import json
from typing import Any

from aiohttp import web

CAPABILITIES = {"tools": {"listChanged": True}, "resources": {"subscribe": True, "listChanged": True}, "prompts": {}}


class FakeV1:
    def __init__(self) -> None:
        self.url = ""
        self.get_mode = "sse"
        self.raw_get: bytes | None = None
        self.sessions: set[str] = set()
        self.received: collections.Counter[str] = collections.Counter()
        self.gets: list[str] = []
        self.responses: list[dict[str, Any]] = []
        self.open_gets: dict[str, int] = collections.Counter()
        self.queues: dict[str, list[asyncio.Queue[bytes | None]]] = collections.defaultdict(list)
        self.on_initialized: list[dict[str, Any]] = []
        """Notifications pushed on the session's GET streams when `notifications/initialized` arrives."""
        self._count = 0
        self._runner: web.AppRunner | None = None

    @classmethod
    async def start(cls) -> FakeV1:
        backend = cls()
        app = web.Application()
        app.router.add_post("/mcp", backend._post)
        app.router.add_get("/mcp", backend._get)
        backend._runner = web.AppRunner(app, handler_cancellation=True)
        await backend._runner.setup()
        site = web.TCPSite(backend._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        backend.url = f"http://127.0.0.1:{port}/mcp"
        return backend

    async def stop(self) -> None:
        for queues in self.queues.values():
            for queue in queues:
                queue.put_nowait(None)
        if self._runner is not None:
            await self._runner.cleanup()

    def forget(self) -> None:
        self.sessions.clear()
        for queues in self.queues.values():
            for queue in queues:
                queue.put_nowait(None)

    def push(self, session_id: str, message: dict[str, Any] | bytes) -> None:
        """Send on every GET stream open for the session (a dict as one SSE event, bytes as they are)."""
        data = message if isinstance(message, bytes) else b"data: " + json.dumps(message).encode() + b"\n\n"
        for queue in self.queues[session_id]:
            queue.put_nowait(data)

    async def _post(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        method = body.get("method", "response")
        self.received[method] += 1
        if method == "response":
            self.responses.append(body)
        sid = request.headers.get("Mcp-Session-Id")
        if method == "initialize":
            self._count += 1
            sid = f"s{self._count}"
            self.sessions.add(sid)
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": CAPABILITIES,
                "serverInfo": {"name": "fake-v1", "version": "1"},
            }
            return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": result}, headers={"Mcp-Session-Id": sid})
        if sid is None:
            return web.json_response(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "Missing session ID"}}, status=400
            )
        if sid not in self.sessions:
            return web.json_response(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "Session not found"}}, status=404
            )
        if "id" not in body or method == "response":
            if method == "notifications/initialized":
                for message in self.on_initialized:
                    self.push(sid, message)
            return web.Response(status=202)
        results: dict[str, Any] = {
            "tools/list": {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]},
            "resources/subscribe": {},
            "ping": {},
        }
        if method not in results:
            return web.json_response(
                {"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32601, "message": "Method not found"}}
            )
        return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": results[method]})

    async def _get(self, request: web.Request) -> web.StreamResponse:
        sid = request.headers.get("Mcp-Session-Id", "")
        self.gets.append(sid)
        mode = self.get_mode
        if sid not in self.sessions or mode == "404":
            return web.json_response(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": "Session not found"}}, status=404
            )
        if mode == "405":
            return web.Response(status=405)
        if mode == "500":
            return web.Response(status=500, text="boom")
        if mode == "html":
            return web.Response(status=200, text="<html>hello</html>", content_type="text/html")
        if mode == "hang":
            await asyncio.Event().wait()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if mode == "close":
            return response
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.queues[sid].append(queue)
        self.open_gets[sid] += 1
        try:
            if self.raw_get is not None:
                raw, self.raw_get = self.raw_get, None
                await response.write(raw)
            while (data := await queue.get()) is not None:
                await response.write(data)
        finally:
            self.queues[sid].remove(queue)
            self.open_gets[sid] -= 1
        return response
