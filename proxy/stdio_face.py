"""The proxy as a stdio MCP server (`mcp-tasks-proxy stdio`), for clients that can only launch one.

The proxy runs as always, on an ephemeral loopback port in this process, and stdin/stdout are
bridged to it as one session-wire client (docs/decisions.md §60): each line read from
stdin is POSTed to the proxy's endpoint (with the `Mcp-Session-Id` its `initialize` was given),
and every JSON-RPC message of the answer, JSON or SSE, is written to stdout as one line; after
`initialize` the session's GET stream is held too, for what the proxy sends unasked. So the
client gets every rule of the session face its `initialize` selects (v1, or v2-session when it
declares the tasks extension), in front of any backend. Logs go to stderr; EOF on stdin ends
the session (DELETE) and stops the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from typing import Any

import aiohttp

from translators import jsonrpc
from translators.errors import McpError
from translators.protocol import H_PROTOCOL_VERSION, H_SESSION_ID

from .config import Settings
from .sse import iter_events

log = logging.getLogger(__name__)


class StdioFace:
    """Lines of stdin to the proxy at `url`, its answers to stdout."""

    def __init__(self, url: str, http: aiohttp.ClientSession, write: Any):
        self.url = url
        self.http = http
        self.write_line = write
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._listening: asyncio.Task[None] | None = None
        self._posts: set[asyncio.Task[None]] = set()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if self.session_id:
            headers[H_SESSION_ID] = self.session_id
        if self.protocol_version:
            headers[H_PROTOCOL_VERSION] = self.protocol_version
        return headers

    def emit(self, message: dict[str, Any]) -> None:
        self.write_line(json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n")

    async def line(self, raw: str) -> None:
        """One line from the client: `initialize` is answered before the next line is read (the
        session id is needed); any other message is sent concurrently."""
        if not raw.strip():
            return
        try:
            message = jsonrpc.parse(raw)
        except McpError as exc:
            self.emit(jsonrpc.error_response(None, exc))
            return
        if message.method == "initialize":
            await self._post(message)
            return
        task = asyncio.ensure_future(self._post(message))
        self._posts.add(task)
        task.add_done_callback(self._posts.discard)

    async def _post(self, message: jsonrpc.Message) -> None:
        try:
            async with self.http.post(self.url, data=jsonrpc.dumps(message.raw), headers=self._headers()) as response:
                if message.method == "initialize" and H_SESSION_ID in response.headers:
                    self.session_id = response.headers[H_SESSION_ID]
                await self._relay_answer(response)
        except aiohttp.ClientError as exc:
            if message.kind == "request":
                self.emit(jsonrpc.error_response(message.id, McpError(-32603, f"proxy unreachable: {exc.__class__.__name__}")))
            return
        if message.method == "initialize" and self.session_id and self._listening is None:
            self._listening = asyncio.ensure_future(self._listen())

    async def _relay_answer(self, response: aiohttp.ClientResponse) -> None:
        content_type = response.headers.get("Content-Type", "")
        if content_type.startswith("text/event-stream"):
            async for event in iter_events(response.content.iter_any()):
                self._emit_data(event.data)
        elif content_type.startswith("application/json"):
            body = await response.read()
            self._emit_data(body.decode("utf-8", "replace"))

    def _emit_data(self, data: str) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            return
        if isinstance(message, dict):
            if message.get("id") is not None and "result" in message and isinstance(message["result"], dict):
                version = message["result"].get("protocolVersion")
                if isinstance(version, str) and "serverInfo" in message["result"]:
                    self.protocol_version = version
            self.emit(message)

    async def _listen(self) -> None:
        """Hold the session's GET stream (ended by the proxy, or not offered)."""
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            headers = {k: v for k, v in self._headers().items() if k != "Content-Type"}
            headers["Accept"] = "text/event-stream"
            async with self.http.get(self.url, headers=headers, timeout=aiohttp.ClientTimeout(total=None)) as response:
                if response.status == 200:
                    await self._relay_answer(response)

    async def close(self) -> None:
        """Finish requests in flight, end the GET stream, and end the session (DELETE)."""
        if self._posts:
            await asyncio.gather(*list(self._posts), return_exceptions=True)
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening
        if self.session_id:
            with contextlib.suppress(aiohttp.ClientError):
                async with self.http.delete(self.url, headers=self._headers()):
                    pass


async def serve_stdio(settings: Settings) -> int:
    """Run the proxy on a loopback port and serve this process's stdin/stdout through it until
    EOF on stdin. Returns the exit status."""
    from .app import start

    running = await start(settings.model_copy(update={"listen": "127.0.0.1:0"}))
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout

    def write(text: str) -> None:
        out.write(text)
        out.flush()

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
            face = StdioFace(running.url, http, write)
            while True:
                raw = await reader.readline()
                if not raw:
                    break
                await face.line(raw.decode("utf-8", "replace"))
            await face.close()
    finally:
        await running.stop()
    return 0
