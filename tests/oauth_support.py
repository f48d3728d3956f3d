"""Helpers for the tests in front of protected servers (`tests/backends/test_protected_*.py`): the
challenge the proxy must relay, raw session-wire POSTs with or without a token, and a recording
HTTP server (an authorization server where nothing is implemented, or a backend's metadata)."""

from __future__ import annotations

import contextlib
import json
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from proxy.sse import SseParser

ACCEPT = "application/json, text/event-stream"
V1_INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "tests", "version": "1"}}
V2_SESSION_INIT = {**V1_INIT, "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}


def metadata_url_of(proxy_url: str) -> str:
    parts = urlsplit(proxy_url)
    return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{parts.path}"


def challenge(proxy_url: str, error: str, description: str) -> str:
    return f'Bearer error="{error}", error_description="{description}", resource_metadata="{metadata_url_of(proxy_url)}"'


async def session_post(
    http: aiohttp.ClientSession,
    url: str,
    method: str,
    params: dict[str, Any],
    *,
    authorization: str | None = None,
    session_id: str | None = None,
    request_id: int = 1,
) -> tuple[int, dict[str, str], Any]:
    """One session-wire POST: (status, headers, the JSON-RPC answer from JSON or SSE)."""
    headers = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": "2025-11-25"}
    if authorization:
        headers["Authorization"] = authorization
    if session_id:
        headers["Mcp-Session-Id"] = session_id
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    async with http.post(url, json=body, headers=headers) as response:
        answer: Any = None
        if response.headers.get("Content-Type", "").startswith("text/event-stream"):
            parser = SseParser()
            async for chunk in response.content.iter_any():
                for event in parser.feed(chunk):
                    message = json.loads(event.data)
                    if message.get("id") == request_id:
                        answer = message
        else:
            text = await response.text()
            answer = json.loads(text) if text else None
        return response.status, dict(response.headers), answer


async def open_session(http: aiohttp.ClientSession, url: str, authorization: str | None, params: dict[str, Any] = V1_INIT) -> str:
    status, headers, answer = await session_post(http, url, "initialize", params, authorization=authorization)
    assert status == 200 and "result" in answer, (status, answer)
    session_id = headers["Mcp-Session-Id"]
    note = {
        "Content-Type": "application/json",
        "Accept": ACCEPT,
        "Mcp-Session-Id": session_id,
        "MCP-Protocol-Version": "2025-11-25",
    }
    if authorization:
        note["Authorization"] = authorization
    async with http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=note) as response:
        assert response.status == 202
    return session_id


def text_of(result: dict[str, Any]) -> str:
    return result["content"][0]["text"]


async def readyz(http: aiohttp.ClientSession, base_url: str) -> tuple[int, Any]:
    async with http.get(base_url + "/readyz") as response:
        return response.status, await response.json()


async def backend_status(http: aiohttp.ClientSession, base_url: str) -> dict[str, Any]:
    async with http.get(base_url + "/status.json") as response:
        return (await response.json())["backends"][0]


@contextlib.asynccontextmanager
async def recording_server(port: int, documents: dict[str, Any] | None = None):
    """A plain HTTP server on 127.0.0.1:`port` that records every (method, path) and answers the
    JSON `documents[path]`, else 404 (an authorization server where nothing is implemented)."""
    seen: list[tuple[str, str]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append((request.method, request.path))
        if documents and request.path in documents:
            return web.json_response(documents[request.path])
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield seen
    finally:
        await runner.cleanup()
