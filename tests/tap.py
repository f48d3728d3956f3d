"""A recording tap: a real loopback HTTP server that forwards everything to a target server and
records the JSON-RPC methods it saw, so tests can assert what reached a backend."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from aiohttp import web

from proxy.sse import SseParser

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}


class RecordingTap:
    """`await RecordingTap.start(target_url)`; `.url` is the tap's endpoint (same path as the target);
    `.methods` lists the JSON-RPC methods (or "response") of every POST seen, in order."""

    def __init__(self, target: str):
        self.target = target
        self.cut_after_first_event: set[str] = set()
        """Methods whose SSE answer the tap cuts (closes the connection) after its first event:
        a real dropped stream, for fault tests."""
        self.held_back: set[str] = set()
        """Methods the tap answers itself with an SSE stream it opens and then holds without any
        event until the client goes away (nothing is forwarded): a gateway that buffers the
        backend's stream, for fault tests."""
        self.linger_after_answer: set[str] = set()
        """Methods whose SSE answer the tap forwards whole and then does not end: the stream stays
        open until the client goes away (a backend slow to close its stream after the answer, as
        a loaded host is), for tests of what a client that leaves after its answer is counted as."""
        self.json_answers: set[str] = set()
        """Methods whose SSE answer the tap buffers whole and gives as one JSON body: a gateway
        that buffers the backend's stream (a session-wire server may answer either way), so the
        proxy hears nothing of the call until it has ended."""
        self.methods: list[str] = []
        self.bodies: list[Any] = []
        self.deletes = 0
        """DELETE requests seen (a client ending its session)."""
        self.user_agents: list[str | None] = []
        """The `User-Agent` of every POST seen (None: none sent), beside `methods`: aiohttp's client
        sends one, the proxy's own keep-alive client (docs/decisions.md §115, §128) none."""
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self._http: aiohttp.ClientSession | None = None

    @classmethod
    async def start(cls, target: str) -> RecordingTap:
        tap = cls(target)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", tap._forward)
        tap._http = aiohttp.ClientSession(auto_decompress=False)
        tap._runner = web.AppRunner(app, access_log=None)
        await tap._runner.setup()
        site = web.TCPSite(tap._runner, "127.0.0.1", 0)
        await site.start()
        host, port = tap._runner.addresses[0][:2]
        path = aiohttp.client.URL(target).path
        tap.url = f"http://{host}:{port}{path}"
        return tap

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            return await self._relay(request)
        finally:
            self._handlers.discard(task)

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method == "DELETE":
            self.deletes += 1
        if request.method == "POST":
            self.user_agents.append(request.headers.get("User-Agent"))
            try:
                parsed = json.loads(body)
                self.bodies.append(parsed)
                self.methods.append(parsed.get("method", "response") if isinstance(parsed, dict) else "?")
            except ValueError:
                self.methods.append("?")
        if request.method == "POST" and self.methods and self.methods[-1] in self.held_back:
            held = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await held.prepare(request)
            while request.transport is not None and not request.transport.is_closing():
                await asyncio.sleep(0.05)  # until the client goes away (or `stop` cancels the handler)
            return held
        target = aiohttp.client.URL(self.target).with_path(request.path).with_query(request.query)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        assert self._http is not None
        async with self._http.request(request.method, target, data=body, headers=headers, allow_redirects=False) as upstream:
            method = self.methods[-1] if request.method == "POST" and self.methods else ""
            if method in self.json_answers and "text/event-stream" in upstream.headers.get("Content-Type", ""):
                messages = [json.loads(event.data) for event in SseParser().feed(await upstream.read()) if event.data]
                answer = next(m for m in messages if "result" in m or "error" in m)  # not its notifications
                return web.Response(
                    status=upstream.status,
                    body=json.dumps(answer).encode(),
                    content_type="application/json",
                    headers={k: v for k, v in upstream.headers.items() if k.lower() in ("mcp-session-id",)},
                )
            response = web.StreamResponse(status=upstream.status)
            for key, value in upstream.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    response.headers[key] = value
            if upstream.status in (307, 308) and "Location" in upstream.headers:
                location = aiohttp.client.URL(upstream.headers["Location"])
                response.headers["Location"] = (
                    str(location.with_scheme("http").with_host(request.url.host).with_port(request.url.port))
                    if location.is_absolute()
                    else str(location)
                )
            await response.prepare(request)
            cut = method in self.cut_after_first_event and "text/event-stream" in upstream.headers.get("Content-Type", "")
            seen = b""
            async for chunk in upstream.content.iter_any():
                try:
                    await response.write(chunk)
                except (ConnectionError, aiohttp.ClientConnectionResetError):
                    return response  # the downstream side went away
                seen += chunk
                if cut and (b"\r\n\r\n" in seen or b"\n\n" in seen):
                    self.cut_after_first_event.discard(method)
                    assert request.transport is not None
                    request.transport.close()
                    return response
            if method in self.linger_after_answer and "text/event-stream" in upstream.headers.get("Content-Type", ""):
                while request.transport is not None and not request.transport.is_closing():
                    await asyncio.sleep(0.05)  # until the client goes away (or `stop` cancels the handler)
                return response
            try:
                await response.write_eof()
            except (ConnectionError, aiohttp.ClientConnectionResetError):
                pass
            return response

    def since(self, mark: int) -> list[str]:
        """Methods recorded after position `mark` (take `len(tap.methods)` as a mark)."""
        return self.methods[mark:]

    async def stop(self) -> None:
        for task in list(self._handlers):  # long-lived streams (GET) would hold cleanup for a minute
            task.cancel()
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()


class ShapingTap(RecordingTap):
    """A recording tap that can change what the backend seems to answer, for fault tests:

    * `bad_gateway`: while set, every POST gets what a gateway in front of a down backend
      answers (HTTP 502, `text/plain` "Bad Gateway"), counted in `refused`; nothing is forwarded.
    * `legacy_codes`: `-32021` in answers becomes `-32003`, as a backend on the draft numbering
      sends it (same length, so the body keeps its size).
    * `as_sse`: a JSON answer to a POST is sent as an SSE stream (one `message` event, CRLF line
      ends, written in 7-byte pieces so that events and codes are split across chunks).
    """

    bad_gateway = False
    legacy_codes = False
    as_sse = False
    refused = 0

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST" or not (self.bad_gateway or self.legacy_codes or self.as_sse):
            return await super()._relay(request)
        body = await request.read()
        self.methods.append("?")
        if self.bad_gateway:
            self.refused += 1
            return web.Response(status=502, text="Bad Gateway", content_type="text/plain")
        target = aiohttp.client.URL(self.target).with_path(request.path).with_query(request.query)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        assert self._http is not None
        async with self._http.request("POST", target, data=body, headers=headers, allow_redirects=False) as upstream:
            answer = await upstream.read()
            kept = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP and k.lower() != "content-type"}
            content_type = upstream.headers.get("Content-Type", "")
        if self.legacy_codes:
            answer = answer.replace(b"-32021", b"-32003")
        if not (self.as_sse and content_type.startswith("application/json")):
            return web.Response(body=answer, status=upstream.status, headers={**kept, "Content-Type": content_type})
        response = web.StreamResponse(status=200, headers={**kept, "Content-Type": "text/event-stream"})
        await response.prepare(request)
        stream = b": primed\r\n\r\nevent: message\r\ndata: " + answer + b"\r\n\r\n"
        for start in range(0, len(stream), 7):
            await response.write(stream[start : start + 7])
            await asyncio.sleep(0)
        await response.write_eof()
        return response
