"""A recording tap: a real loopback HTTP server that forwards everything to a target server and
records the JSON-RPC methods it saw, so tests can assert what reached a backend."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from aiohttp import web

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}


class RecordingTap:
    """`await RecordingTap.start(target_url)`; `.url` is the tap's endpoint (same path as the target);
    `.methods` lists the JSON-RPC methods (or "response") of every POST seen, in order."""

    def __init__(self, target: str):
        self.target = target
        self.methods: list[str] = []
        self.bodies: list[Any] = []
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None

    @classmethod
    async def start(cls, target: str) -> "RecordingTap":
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
        body = await request.read()
        if request.method == "POST":
            try:
                parsed = json.loads(body)
                self.bodies.append(parsed)
                self.methods.append(parsed.get("method", "response") if isinstance(parsed, dict) else "?")
            except ValueError:
                self.methods.append("?")
        target = aiohttp.client.URL(self.target).with_path(request.path).with_query(request.query)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        assert self._http is not None
        async with self._http.request(request.method, target, data=body, headers=headers, allow_redirects=False) as upstream:
            response = web.StreamResponse(status=upstream.status)
            for key, value in upstream.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    response.headers[key] = value
            if upstream.status in (307, 308) and "Location" in upstream.headers:
                location = aiohttp.client.URL(upstream.headers["Location"])
                response.headers["Location"] = str(location.with_scheme("http").with_host(request.url.host).with_port(request.url.port)) if location.is_absolute() else str(location)
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    def since(self, mark: int) -> list[str]:
        """Methods recorded after position `mark` (take `len(tap.methods)` as a mark)."""
        return self.methods[mark:]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._http is not None:
            await self._http.close()
