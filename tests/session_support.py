"""A raw session-wire (2025-11-25) caller for tests of the proxy's session face."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from proxy.sse import SseParser

ACCEPT = "application/json, text/event-stream"


class SessionCaller:
    """initialize, then requests with the session id; answers parsed from JSON or SSE.
    `on_request(message) -> result dict | ("error", {...})` answers server→client requests."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        url: str,
        *,
        authorization: str | None = None,
        capabilities: dict[str, Any] | None = None,
        client_info: dict[str, Any] | None = None,
    ):
        self.http = http
        self.client_info = client_info if client_info is not None else {"name": "tests", "version": "1"}
        self.url = url
        self.authorization = authorization
        self.capabilities = capabilities if capabilities is not None else {"elicitation": {}}
        self.session_id: str | None = None
        self._id = 0
        self.seen_requests: list[dict[str, Any]] = []
        self.exchanges: list[tuple[str, dict[str, Any]]] = []
        """(method, JSON-RPC response message) of every request sent, in order."""
        self.on_request = None

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": ACCEPT, "MCP-Protocol-Version": "2025-11-25"}
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
        if self.authorization:
            h["Authorization"] = self.authorization
        return {**h, **(extra or {})}

    async def initialize(self) -> dict[str, Any]:
        answer = await self.call(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": self.capabilities, "clientInfo": self.client_info},
        )
        await self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers())
        return answer

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """The JSON-RPC response message (with `_status`)."""
        self._id += 1
        body = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": params or {}}
        async with self.http.post(self.url, json=body, headers=self.headers(headers)) as response:
            if method == "initialize" and "Mcp-Session-Id" in response.headers:
                self.session_id = response.headers["Mcp-Session-Id"]
            if response.headers.get("Content-Type", "").startswith("text/event-stream"):
                parser = SseParser()
                async for chunk in response.content.iter_any():
                    for event in parser.feed(chunk):
                        message = json.loads(event.data)
                        if "method" in message and "id" in message:
                            self.seen_requests.append(message)
                            answer = await self.on_request(message) if self.on_request else {}
                            reply = (
                                {"jsonrpc": "2.0", "id": message["id"], "error": answer[1]}
                                if isinstance(answer, tuple)
                                else {"jsonrpc": "2.0", "id": message["id"], "result": answer}
                            )
                            async with self.http.post(self.url, json=reply, headers=self.headers()) as posted:
                                assert posted.status == 202
                        elif message.get("id") == self._id:
                            self.exchanges.append((method, message))
                            return {**message, "_status": response.status}
                raise AssertionError("stream ended without an answer")
            text = await response.text()
            message = json.loads(text) if text else {}
            self.exchanges.append((method, message))
            return {**message, "_status": response.status}
