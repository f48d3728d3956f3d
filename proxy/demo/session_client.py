"""A small v1 MCP client (the 2025-11-25 session wire) on plain aiohttp, for ``demo --reverse``.

It speaks Streamable HTTP with a session, as a v1 client of the proxy's session face does, and
hides nothing: every call returns an :class:`Exchange` with the exact request body and headers
sent, the HTTP status, the response headers of interest, the JSON-RPC response and every
server→client request the client answered while the answer streamed. No MCP SDK is used, and on
purpose none of the proxy's own modules either (its SSE parser included), so a mistake in the
proxy cannot hide behind a shared definition.

The wire (core 2025-11-25 §Transports)::

    POST <url>                                   initialize (no session id yet)
    ← 200 application/json, Mcp-Session-Id: <id>
    POST <url>  notifications/initialized        ← 202
    POST <url>  Mcp-Session-Id: <id>  {"jsonrpc": "2.0", "id": n, "method": ..., "params": ...}
    ← 200 application/json {response}
      or 200 text/event-stream: requests to the client (e.g. elicitation/create), each answered by
         POST <url> {"jsonrpc": "2.0", "id": <its id>, "result": ...}  ← 202
         then the response event, and the stream ends
    GET <url>  Accept: text/event-stream         the session's stream (notifications/tasks/status)
    DELETE <url>                                 ends the session

Every request carries ``MCP-Protocol-Version: 2025-11-25`` and, once known, ``Mcp-Session-Id``.

Usage::

    async def on_request(message):            # a server→client request: return its result
        return {"action": "accept", "content": {"confirm": True}}

    client = SessionClient("http://127.0.0.1:8080/mcp", on_request=on_request)
    await client.initialize()
    created = await client.request("tools/call", {"name": "confirm_delete",
                                                  "arguments": {"filename": "a.txt"}, "task": {}})
    done = await client.request("tasks/result", {"taskId": created.result["task"]["taskId"]})
    print(done.answered[0].request["params"]["message"], done.result["content"])
    await client.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .wire_client import H_PROTOCOL_VERSION, TERMINAL_STATUSES, BaseExchange, HttpClient, json_or_none

__all__ = [
    "Answered",
    "ClientRequestError",
    "Exchange",
    "PROTOCOL_VERSION",
    "RELATED_TASK",
    "SessionClient",
    "TERMINAL_STATUSES",
]

PROTOCOL_VERSION = "2025-11-25"
RELATED_TASK = "io.modelcontextprotocol/related-task"
CLIENT_INFO: dict[str, str] = {"name": "mcp-tasks-proxy-demo-v1-client", "version": "0.1.0"}

H_SESSION_ID = "Mcp-Session-Id"
SSE = "text/event-stream"
#: Response headers an :class:`Exchange` keeps.
HEADERS_OF_INTEREST: tuple[str, ...] = (H_SESSION_ID, "Content-Type")

METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603


class ClientRequestError(Exception):
    """Raise it from a request handler to answer the server with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def error(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            body["data"] = self.data
        return body


#: Answers one server→client request (the whole JSON-RPC message) with its ``result`` object;
#: raises :class:`ClientRequestError` to answer with an error.
RequestHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class Answered:
    """A server→client request that arrived on a response stream and the client's answer to it.

    Attributes:
        request: the JSON-RPC request as received (``{"jsonrpc", "id", "method", "params"}``).
        reply: the JSON-RPC response the client POSTed back (``result`` or ``error``).
        status: the HTTP status of that POST (202 when the proxy took it).
    """

    request: dict[str, Any]
    reply: dict[str, Any]
    status: int


@dataclass
class Exchange(BaseExchange):
    """One request and its answer, exactly as they crossed the wire.

    Attributes:
        method: the JSON-RPC method (or notification).
        request: the JSON body sent.
        request_headers: the MCP headers sent (``MCP-Protocol-Version``, ``Mcp-Session-Id``;
            ``Authorization`` is never recorded).
        status: the HTTP status.
        headers: the response headers of interest (``Mcp-Session-Id``, ``Content-Type``), each
            only when present.
        response: the JSON-RPC response (from the JSON body, or the response event of an SSE
            answer); ``None`` for a notification or a body that is not a JSON-RPC response.
        body: the raw response body text (for an SSE answer, the events as received).
        elapsed_s: wall time from sending to the end of the answer.
        answered: the server→client requests that arrived on the SSE answer, in order, each with
            the client's reply.
        notifications: notifications that arrived on the SSE answer.

    ``result``, ``error`` and ``error_code`` read the JSON-RPC response (``None`` when it has none).
    """

    answered: list[Answered] = field(default_factory=list)
    notifications: list[dict[str, Any]] = field(default_factory=list)

    @property
    def streamed(self) -> bool:
        """The answer was a server-sent event stream."""
        return self.headers.get("Content-Type", "").split(";")[0].strip().lower() == SSE

    @property
    def task_status(self) -> str | None:
        """The task status of a task answer: ``result.status`` (``tasks/get``, ``tasks/cancel``) or
        ``result.task.status`` (a ``CreateTaskResult``); ``None`` otherwise."""
        result = self.result or {}
        if isinstance(result.get("status"), str):
            return result["status"]
        task = result.get("task")
        return task.get("status") if isinstance(task, dict) else None


class SessionClient(HttpClient):
    """A v1 client of one MCP endpoint, holding one session.

    Args:
        url: the endpoint, e.g. ``http://127.0.0.1:8080/mcp``.
        capabilities: the client capabilities sent in ``initialize`` (default none).
        on_request: answers server→client requests arriving on a response stream; without it
            they are answered ``-32601``.
        authorization: an ``Authorization`` header value sent on every request.
        client_info: ``{"name", "version"}`` sent in ``initialize``.
        timeout_s: upper bound for one request, including its streamed answer.

    Attributes:
        session_id: the ``Mcp-Session-Id`` the server gave in answer to ``initialize``.
        stream_messages: messages received so far on the session's GET stream (see :meth:`listen`).
    """

    def __init__(
        self,
        url: str,
        *,
        capabilities: Mapping[str, Any] | None = None,
        on_request: RequestHandler | None = None,
        authorization: str | None = None,
        client_info: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        super().__init__(url, capabilities, authorization, client_info or CLIENT_INFO, timeout_s)
        self.on_request = on_request
        self.session_id: str | None = None
        self.stream_messages: list[dict[str, Any]] = []
        self._listener: asyncio.Task[None] | None = None
        self._stream_changed = asyncio.Event()

    def mcp_headers(self) -> dict[str, str]:
        """The MCP headers of every request: protocol version, and the session id once known."""
        headers = {H_PROTOCOL_VERSION: PROTOCOL_VERSION}
        if self.session_id is not None:
            headers[H_SESSION_ID] = self.session_id
        return headers

    # -- the session ----------------------------------------------------------------------------

    async def initialize(self) -> tuple[Exchange, Exchange]:
        """``initialize`` (keeping the ``Mcp-Session-Id`` of the answer), then
        ``notifications/initialized``. Returns both exchanges."""
        answer = await self.request("initialize", {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": self.capabilities,
            "clientInfo": dict(self.client_info),
        })
        session_id = answer.headers.get(H_SESSION_ID)
        if session_id:
            self.session_id = session_id
        initialized = await self.notify("notifications/initialized")
        return answer, initialized

    async def close(self) -> int | None:
        """Stop listening, end the session with DELETE and close the HTTP client (idempotent).
        Returns the DELETE's HTTP status, or ``None`` when there was no session (or no server)."""
        await self._stop_listening()
        status: int | None = None
        if self.session_id is not None and self._http is not None and not self._http.closed:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with self._http.delete(self.url, headers=self._wire_headers(self.mcp_headers())) as resp:
                    status = resp.status
        self.session_id = None
        if self._http is not None:
            await self._http.close()
            self._http = None
        return status

    async def delete(self) -> Exchange:
        """DELETE the session (the server forgets it) and return the exchange; the client keeps
        the id, so later requests show what the server says about an ended session."""
        await self._stop_listening()
        sent = self.mcp_headers()
        started = time.monotonic()
        async with self._session().delete(self.url, headers=self._wire_headers(sent)) as resp:
            text = await resp.text(encoding="utf-8", errors="replace")
            status, kept = resp.status, _kept(resp.headers)
        return Exchange("DELETE", {}, sent, status, kept, json_or_none(text), text, time.monotonic() - started)

    # -- requests ---------------------------------------------------------------------------------

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> Exchange:
        """POST a notification; the exchange has no response (the server answers 202)."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params:
            message["params"] = dict(params)
        sent = self.mcp_headers()
        started = time.monotonic()
        async with self._session().post(self.url, data=json.dumps(message), headers=self._wire_headers(sent)) as resp:
            text = await resp.text(encoding="utf-8", errors="replace")
            status, kept = resp.status, _kept(resp.headers)
        return Exchange(method, message, sent, status, kept, json_or_none(text), text, time.monotonic() - started)

    async def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, headers: Mapping[str, str] | None = None
    ) -> Exchange:
        """POST one JSON-RPC request and return the :class:`Exchange`.

        An SSE answer is read to its response event; each server→client request on it is
        answered (through ``on_request``) with a POSTed JSON-RPC response before reading on.
        Never raises for an HTTP or JSON-RPC error: those are in the exchange. Raises
        ``aiohttp.ClientError`` / ``asyncio.TimeoutError`` when the endpoint cannot be reached.
        """
        request_id = next(self._ids)
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": json.loads(json.dumps(dict(params or {})))}
        sent = {**self.mcp_headers(), **dict(headers or {})}
        started = time.monotonic()
        answered: list[Answered] = []
        notifications: list[dict[str, Any]] = []
        async with self._session().post(self.url, data=json.dumps(message), headers=self._wire_headers(sent)) as resp:
            status, kept = resp.status, _kept(resp.headers)
            if resp.headers.get("Content-Type", "").split(";")[0].strip().lower() == SSE:
                response: dict[str, Any] | None = None
                raw: list[str] = []
                async for event in _events(resp.content, raw):
                    if _is_request(event):
                        answered.append(await self._answer(event))
                    elif "method" in event:
                        notifications.append(event)
                    elif event.get("id") == request_id and ("result" in event or "error" in event):
                        response = event
                        break
                text = "".join(raw)
            else:
                text = await resp.text(encoding="utf-8", errors="replace")
                response = json_or_none(text)
        return Exchange(method, message, sent, status, kept, response, text, time.monotonic() - started, answered, notifications)

    async def _answer(self, message: dict[str, Any]) -> Answered:
        """Answer one server→client request through ``on_request`` and POST the response."""
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message.get("id")}
        if self.on_request is None:
            reply["error"] = {"code": METHOD_NOT_FOUND, "message": f"Method not found: {message.get('method')}"}
        else:
            try:
                reply["result"] = await self.on_request(message)
            except ClientRequestError as exc:
                reply["error"] = exc.error()
            except Exception as exc:  # the handler broke: the server still gets an answer
                reply["error"] = {"code": INTERNAL_ERROR, "message": f"{type(exc).__name__}: {exc}"}
        sent = self.mcp_headers()
        async with self._session().post(self.url, data=json.dumps(reply), headers=self._wire_headers(sent)) as resp:
            await resp.read()
            return Answered(message, reply, resp.status)

    # -- the GET stream -----------------------------------------------------------------------------

    async def listen(self) -> tuple[int, str]:
        """Open the session's GET stream; its messages are collected in :attr:`stream_messages`
        in the background until :meth:`close`. Returns the HTTP status and Content-Type."""
        await self._stop_listening()
        headers = self._wire_headers(self.mcp_headers(), accept=SSE)
        del headers["Content-Type"]
        resp = await self._session().get(self.url, headers=headers, timeout=aiohttp.ClientTimeout(total=None))
        content_type = resp.headers.get("Content-Type", "")
        if resp.status != 200:
            resp.release()
            return resp.status, content_type
        self._listener = asyncio.create_task(self._read_stream(resp))
        return resp.status, content_type

    async def _read_stream(self, resp: aiohttp.ClientResponse) -> None:
        try:
            async for message in _events(resp.content, []):
                self.stream_messages.append(message)
                self._stream_changed.set()
        except (TimeoutError, aiohttp.ClientError):
            pass
        finally:
            resp.close()

    async def stream_message(self, wanted: Callable[[dict[str, Any]], bool], timeout_s: float) -> dict[str, Any] | None:
        """The first message on the GET stream for which ``wanted`` is true, waiting up to
        ``timeout_s`` for it to arrive; ``None`` when it did not."""
        deadline = time.monotonic() + timeout_s
        while True:
            for message in self.stream_messages:
                if wanted(message):
                    return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._stream_changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stream_changed.wait(), remaining)

    async def _stop_listening(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None


# ------------------------------------------------------------------------------------------------
# Parsing
# ------------------------------------------------------------------------------------------------


def _kept(headers: Mapping[str, str]) -> dict[str, str]:
    return {h: headers[h] for h in HEADERS_OF_INTEREST if h in headers}


def _is_request(message: Mapping[str, Any]) -> bool:
    return "method" in message and "id" in message


async def _events(content: aiohttp.StreamReader, raw: list[str]) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body, as they arrive (``raw`` collects the text read).

    Lines end with LF, CRLF or CR-LF as aiohttp splits them; ``data`` lines are joined with
    newlines, a blank line dispatches; comments, ``id``, ``event`` and ``retry`` are ignored, as
    are events whose data is empty (priming events) or not a JSON object."""
    data: list[str] = []
    async for chunk in content:
        line = chunk.decode("utf-8", errors="replace")
        raw.append(line)
        line = line.rstrip("\n").rstrip("\r")
        if line == "":
            payload = "\n".join(data).strip()
            data.clear()
            message = json_or_none(payload) if payload else None
            if message is not None:
                yield message
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value[1:] if value.startswith(" ") else value)
