"""The proxy as a stdio MCP server (`mcp-tasks-proxy stdio`), for clients that can only launch one.

The proxy runs as always, on an ephemeral loopback port in this process, and stdin/stdout are
bridged to it as one session-wire client (docs/decisions.md §60): each line read from
stdin is POSTed to the proxy's endpoint (with the `Mcp-Session-Id` its `initialize` was given),
and every JSON-RPC message of the answer, JSON or SSE, is written to stdout as one line; after
`initialize` the session's GET stream is held too, for what the proxy sends unasked. So the
client gets every rule of the session face its `initialize` selects (v1, or v2-session when it
declares the tasks extension), in front of any backend. Logs go to stderr; EOF on stdin ends
the session (DELETE) and stops the proxy.

Every request gets one answer with its id (docs/decisions.md §74): an error relayed without it
(the proxy's 413) or with another (`"server-error"`) is given it, an answer that ends without a
response is answered -32603, and a stdin line over `MAX_LINE_BYTES` is refused and skipped. An
upstream session the backend forgot (HTTP 404: it restarted, its stdio process was started
again) is replaced by a new one, opened with the host's own `initialize`, and the host is told
(docs/decisions.md §75).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp

from translators import face_lines, jsonrpc
from translators.errors import McpError
from translators.protocol import H_PROTOCOL_VERSION, H_SESSION_ID

from ..config import Settings
from ..eventloop import cancel_and_wait
from ..sse import iter_events
from .stdio_lines import MAX_LINE_BYTES, TooLong, lines

log = logging.getLogger(__name__)

LOST = 404
"""The HTTP status of a request on a session the server does not know (Streamable HTTP)."""
GET_RETRY_S = (0.5, 30.0)
"""The GET stream is asked for again after it ended: first wait, doubling up to the last (s)."""


def _is_response(message: dict[str, Any]) -> bool:
    return "method" not in message and ("result" in message or "error" in message)


class StdioFace:
    """Lines of stdin to the proxy at `url`, its answers to stdout (`write` takes one line)."""

    def __init__(self, url: str, http: aiohttp.ClientSession, write: Any, *, limit: int = MAX_LINE_BYTES):
        self.url = url
        self.http = http
        self.write_line = write
        self.limit = limit
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._listening: asyncio.Task[None] | None = None
        self._posts: set[asyncio.Task[None]] = set()
        self._host_initialize: dict[str, Any] | None = None  # replayed to open a new upstream session
        self._capabilities: dict[str, Any] | None = None  # the server's, from the initialize result
        self._log_level: dict[str, Any] | None = None  # the host's last logging/setLevel params
        self._subscribed: dict[str, None] = {}  # URIs the host subscribed to, in order
        self._generation = 0  # counts the upstream sessions; a 404 on an older one renews nothing
        self._renewals = 0
        self._renewing = asyncio.Lock()

    def _headers(self, *, session: bool = True) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if session and self.session_id:
            headers[H_SESSION_ID] = self.session_id
        if session and self.protocol_version:
            headers[H_PROTOCOL_VERSION] = self.protocol_version
        return headers

    def emit(self, message: dict[str, Any]) -> None:
        self.write_line(json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n")

    async def line(self, raw: bytes | str | TooLong) -> None:
        """One line from the client: `initialize` is answered before the next line is read (the
        session id is needed); any other message is sent concurrently. A `TooLong` line is
        refused (-32600 naming the limit, with the id read from its start when found)."""
        if isinstance(raw, TooLong):
            log.warning("stdin line of %d bytes refused: longer than %d bytes", raw.size, self.limit)
            self.emit(face_lines.line_too_long(self.limit, face_lines.id_at_start(raw.prefix)))
            return
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if not text.strip():
            return
        try:
            message = jsonrpc.parse(text)
        except McpError as exc:
            request_id = exc.request_id
            if request_id is None:
                request_id = face_lines.id_at_start(text[: face_lines.ID_PREFIX_BYTES].encode("utf-8", "replace"))
            self.emit(jsonrpc.error_response(request_id, exc))
            return
        if message.method == "initialize" and message.kind == "request":
            await self._initialize(message)
            return
        if self.session_id is None:  # nothing to send it on: answered here, in stdio's words (decision 142)
            self._before_initialize(message)
            return
        self._remember(message)
        # The session's headers now: an initialize on the next line must not take them from under it.
        task = asyncio.ensure_future(self._send(message, self._headers(), self._generation))
        self._posts.add(task)
        task.add_done_callback(self._posts.discard)

    def _before_initialize(self, message: jsonrpc.Message) -> None:
        """A message while no session is open (before `initialize`, or after one that failed): a
        `ping` is answered (core 2025-11-25 allows it first), another request refused (-32600),
        in order with the lines around it; a notification or response is dropped (logged)."""
        if message.kind == "request" and message.id is not None:
            ping = message.method == "ping"
            self.emit(jsonrpc.result_response(message.id, {}) if ping else face_lines.not_initialized(message.id))
        else:
            log.warning("stdio face: a %s before initialize was dropped (%s)", message.kind, message.method or "response")

    def _remember(self, message: jsonrpc.Message) -> None:
        """What a new upstream session is told again: the log level, the subscriptions."""
        if message.kind != "request":
            return
        if message.method == "logging/setLevel":
            self._log_level = message.params
        uri = message.params.get("uri")
        if message.method == "resources/subscribe" and isinstance(uri, str):
            self._subscribed[uri] = None
        elif message.method == "resources/unsubscribe" and isinstance(uri, str):
            self._subscribed.pop(uri, None)

    async def _initialize(self, message: jsonrpc.Message) -> None:
        """The host's `initialize` opens a new upstream session (sent without the old session's
        id, which the backend may have forgotten); the old one is ended (DELETE)."""
        old, old_headers = self.session_id, self._headers()
        self._host_initialize = message.raw
        self._generation += 1
        self.session_id = self.protocol_version = None
        await self._post(message, self._headers(session=False))
        if old and old != self.session_id:
            task = asyncio.ensure_future(self._delete(old_headers))
            self._posts.add(task)
            task.add_done_callback(self._posts.discard)
        if self.session_id:
            self._listen_again()

    async def _send(self, message: jsonrpc.Message, headers: dict[str, str], generation: int) -> None:
        """`message` on the upstream session it was read under (`headers`, `generation`); when the
        backend answers that it does not know the session (404), a new one is opened and a request
        is sent once more on it (a 404 means it did not run); a notification or response for the
        lost session is dropped."""
        if await self._post(message, headers) != LOST:
            return
        failure = await self._renew(generation, "the backend does not know the session (HTTP 404)")
        if message.kind != "request" or message.id is None:
            log.warning("stdio face: a %s for the lost upstream session was dropped (%s)", message.kind, message.method or "response")
            return
        if failure is not None:
            self.emit(face_lines.session_lost(message.id, failure))
        elif await self._post(message, self._headers()) == LOST:
            self.emit(face_lines.session_lost(message.id, "the new session was not known either (HTTP 404)"))

    async def _post(self, message: jsonrpc.Message, headers: dict[str, str]) -> int | None:
        """POST `message`, write what its answer carries to stdout (a response given the
        request's id), and answer -32603 a request whose answer ends without its response.
        Returns the HTTP status (None: the proxy could not be reached), and for a 404 on a
        session writes nothing: the caller renews the session."""
        status: int | None = None
        answered = False
        reason = ""
        try:
            async with self.http.post(self.url, data=jsonrpc.dumps(message.raw), headers=headers) as response:
                status = response.status
                if status == LOST and H_SESSION_ID in headers:
                    await response.read()
                    return status
                if message.method == "initialize" and H_SESSION_ID in response.headers:
                    self.session_id = response.headers[H_SESSION_ID]
                async for out in self._messages(response):
                    if message.kind == "request" and message.id is not None and _is_response(out):
                        if answered:
                            continue
                        answered = True
                        out = face_lines.answering(out, message.id)
                        if message.method == "initialize":
                            self._initialized(out)
                    self.emit(out)
                reason = f"its answer (HTTP {status}) ended without a response"
        except (TimeoutError, aiohttp.ClientError) as exc:
            reason = f"proxy unreachable: {exc.__class__.__name__}" if status is None else f"the answer broke off: {exc.__class__.__name__}"
        if message.kind == "request" and message.id is not None and not answered:
            self.emit(face_lines.no_answer(message.id, reason))
        return status

    def _initialized(self, answer: dict[str, Any]) -> None:
        result = answer.get("result")
        if isinstance(result, dict) and "serverInfo" in result:
            version = result.get("protocolVersion")
            if isinstance(version, str):
                self.protocol_version = version
            capabilities = result.get("capabilities")
            self._capabilities = capabilities if isinstance(capabilities, dict) else None

    async def _messages(self, response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
        """The JSON-RPC messages (objects) of an answer, JSON or SSE; anything else is skipped."""
        content_type = response.headers.get("Content-Type", "")
        if content_type.startswith("text/event-stream"):
            async for event in iter_events(response.content.iter_any()):
                if (message := self._decode(event.data)) is not None:
                    yield message
        elif content_type.startswith("application/json"):
            if (message := self._decode((await response.read()).decode("utf-8", "replace"))) is not None:
                yield message

    @staticmethod
    def _decode(data: str) -> dict[str, Any] | None:
        try:
            message = json.loads(data)
        except ValueError:
            return None
        return message if isinstance(message, dict) else None

    async def _renew(self, generation: int, reason: str) -> str | None:
        """Open a new upstream session in place of the one of `generation`, lost for `reason`,
        with the host's `initialize` (then `notifications/initialized`, its log level and its
        subscriptions), and tell the host (docs/decisions.md §75). Returns None when a new session
        is open (by this call or another since), else why none could be opened."""
        async with self._renewing:
            if self._generation != generation:
                return None if self.session_id else "no upstream session is open"
            if self._host_initialize is None:
                return "the host has not sent initialize"
            self._renewals += 1
            request = face_lines.reinitialize(self._host_initialize, self._renewals)
            session_id, answer, failure = await self._ask(request, self._headers(session=False))
            if failure is not None or session_id is None:
                log.warning("stdio face: upstream session lost (%s); a new one could not be opened: %s", reason, failure)
                return failure or "the backend's initialize answer had no Mcp-Session-Id"
            old, self.session_id = self.session_id, session_id
            self._generation += 1
            self._initialized(answer or {})
            await self._ask(jsonrpc.notification("notifications/initialized"), self._headers())
            for replayed in face_lines.replayed_requests(self._renewals, self._log_level, list(self._subscribed)):
                await self._ask(replayed, self._headers())
            log.warning("stdio face: upstream session %s lost (%s); opened %s", old, reason, session_id)
            for notice in face_lines.session_renewed_notices(reason, self._capabilities):
                self.emit(notice)
            self._listen_again()
            return None

    async def _ask(self, message: dict[str, Any], headers: dict[str, str]) -> tuple[str | None, dict[str, Any] | None, str | None]:
        """POST one message of the face's own; nothing of the answer reaches the host. Returns
        the answer's `Mcp-Session-Id`, the response to `message` (None for a notification), and
        why it failed (None when it did not: HTTP 2xx, a result)."""
        try:
            async with self.http.post(self.url, data=jsonrpc.dumps(message), headers=headers) as response:
                answer = None
                async for out in self._messages(response):
                    if _is_response(out) and out.get("id") == message.get("id"):
                        answer = out
                session_id = response.headers.get(H_SESSION_ID)
                if response.status >= 300:
                    error = (answer or {}).get("error")
                    detail = error.get("message") if isinstance(error, dict) else None
                    return session_id, answer, f"HTTP {response.status}" + (f": {detail}" if detail else "")
                if "id" in message and (answer is None or "result" not in answer):
                    return session_id, answer, "no result"
                return session_id, answer, None
        except (TimeoutError, aiohttp.ClientError) as exc:
            return None, None, f"proxy unreachable: {exc.__class__.__name__}"

    def _listen_again(self) -> None:
        """(Re)start the GET stream of the current session (ending the one of an older)."""
        if self._listening is not None and self._listening is not asyncio.current_task():
            self._listening.cancel()
        self._listening = asyncio.ensure_future(self._listen(self._generation))

    async def _listen(self, generation: int) -> None:
        """Hold the session's GET stream while the session is the current one: asked for again
        `GET_RETRY_S` after it ended or failed; not offered (a 4xx) ends it. A 404 confirmed by a
        404 to a `ping` means the backend forgot the session: it is renewed."""
        wait = GET_RETRY_S[0]
        while self._generation == generation and self.session_id:
            status: int | None = None
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                headers = {k: v for k, v in self._headers().items() if k != "Content-Type"}
                headers["Accept"] = "text/event-stream"
                async with self.http.get(self.url, headers=headers, timeout=aiohttp.ClientTimeout(total=None)) as response:
                    status = response.status
                    if status == 200:
                        wait = GET_RETRY_S[0]
                        async for out in self._messages(response):
                            self.emit(out)
            if self._generation != generation:
                return
            if status == LOST and H_SESSION_ID in self._headers():
                _, _, failure = await self._ask(face_lines.ping(self._generation), self._headers())
                if failure is not None and failure.startswith(f"HTTP {LOST}"):
                    await self._renew(generation, "the backend does not know the session (HTTP 404)")
                    return
            if status is not None and 400 <= status < 500 and status not in (408, 429):
                return
            await asyncio.sleep(wait)
            wait = min(wait * 2, GET_RETRY_S[1])

    async def close(self) -> None:
        """Finish requests in flight, end the GET stream, and end the session (DELETE)."""
        if self._posts:
            await asyncio.gather(*list(self._posts), return_exceptions=True)
        self._generation += 1
        if self._listening is not None:
            await cancel_and_wait(self._listening)
        if self.session_id:
            await self._delete(self._headers())

    async def _delete(self, headers: dict[str, str]) -> None:
        """End the session `headers` name (DELETE); a failure is no matter (it was lost)."""
        with contextlib.suppress(aiohttp.ClientError):
            async with self.http.delete(self.url, headers=headers):
                pass


async def serve_stdio(settings: Settings, start: Callable[[Settings], Awaitable[Any]]) -> int:
    """Run the proxy (`start`: `proxy.app.start`, which the CLI hands in) on a loopback port and
    serve this process's stdin/stdout through it until EOF on stdin. Returns the exit status."""
    running = await start(settings.model_copy(update={"listen": "127.0.0.1:0"}))
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout

    def write(text: str) -> None:
        out.write(text)
        out.flush()

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
            face = StdioFace(running.url, http, write)
            async for raw in lines(reader):
                await face.line(raw)
            await face.close()
    finally:
        await running.stop()
    return 0
