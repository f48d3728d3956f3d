"""The connector of a backend on the 2024-11-05 HTTP+SSE transport (docs/behaviour.md §7, decision 171).

Such a server keeps one MCP session per event stream: a GET of its URL opens the stream, whose first
event (`endpoint`) names where the client POSTs its messages (`/messages/?session_id=…`); each POST
is acknowledged (202) and everything the server sends, answers and its own requests alike, comes
back as `message` events on the stream. That is a stdio server's shape with HTTP for pipes: one
ordered channel per session. So the connector is the stdio connector (`StdioEndpoint`: its bridge,
virtual sessions, routing, liveness and bounds) whose slots each carry one upstream SSE session
(`SseChannel`) instead of a process: every face reaches it as it reaches any session-wire backend.

One upstream session per session (`scope` "session"): a relayed v1 client's session is its own
session on the server, as if it had connected directly, and ends with it; the proxy's own
sessions (its 2026-07-28 face, held tasks) and its probe each have theirs. A stream that ends is a
lost session, as a stdio process that exits: its requests in flight fail at once, its clients are
told (404 on their next request), and the backend is probed again; nothing waits for a timeout.
Messages are POSTed one at a time in order (the server reads them as one stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp

from translators import jsonrpc
from translators.errors import INTERNAL_ERROR, McpError

from ..config import Upstream
from ..sse import SseParser
from .stdio import StdioEndpoint
from .stdio.channel import ChannelLaunch
from .stdio.process import LongLine, decode_line

log = logging.getLogger(__name__)

ENDPOINT_WAIT_S = 10.0
"""How long a new stream may take to name its POST endpoint."""
DEFAULT_SESSIONS = 64
"""Upstream SSE sessions of one backend at most, unless `max_processes` says otherwise."""


class SseLaunch:
    """How each upstream session of one HTTP+SSE backend (`endpoint`) is opened: its `url`, the
    shared HTTP client, the backend's extra `headers` and `options` (its TLS and outbound proxy:
    `Endpoint.request_options`), the largest event taken (`max_line_bytes`) and the bound of one
    POST (`post_timeout_s`: the request timeout)."""

    restarts = False
    noun = "the server"
    gone = "its SSE stream ended"
    grace_s = 1.0

    def __init__(self, endpoint: SseEndpoint):
        config = endpoint.config
        self.name, self.url, self.http = config.name, config.url, endpoint.upstream_http
        self.headers, self.options = dict(endpoint.extra_headers), endpoint.upstream_options
        self.max_line_bytes = config.max_line_bytes
        self.post_timeout_s = endpoint.request_timeout_s

    def open(self, *, on_message: Callable[[dict[str, Any], bytes | None], None], on_exit: Callable[[int | None], None],
             on_long_line: Callable[[LongLine], None] | None = None) -> SseChannel:
        return SseChannel(self, on_message=on_message, on_exit=on_exit)

    def cannot_start(self, exc: OSError) -> str:
        return f"its SSE stream at {self.url} could not be opened: {exc}"

    def not_started(self, exc: OSError) -> str:
        return self.cannot_start(exc)


class SseChannel:
    """One upstream session: its event stream, read as it comes, and its POST endpoint, written in order."""

    def __init__(self, launch: SseLaunch, *, on_message: Callable[[dict[str, Any], bytes | None], None],
                 on_exit: Callable[[int | None], None]):
        self.launch = launch
        self.on_message, self.on_exit = on_message, on_exit
        self.endpoint: str | None = None
        self._named: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._response: aiohttp.ClientResponse | None = None
        self._outbox: asyncio.Queue[bytes] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._reason: str | None = None

    async def start(self) -> None:
        """GET the stream and wait for its `endpoint` event. Raises `OSError` saying what failed."""
        launch = self.launch
        headers = {**launch.headers, "Accept": "text/event-stream", "Cache-Control": "no-cache"}
        try:
            response = await launch.http.get(launch.url, headers=headers, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                                             **launch.options)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise OSError(f"{exc.__class__.__name__}: {exc}") from None
        kind = response.headers.get("Content-Type", "")
        if response.status != 200 or not kind.startswith("text/event-stream"):
            response.release()
            raise OSError(f"GET answered HTTP {response.status} ({kind or 'no Content-Type'}), not an event stream")
        self._response = response
        self._tasks.append(asyncio.ensure_future(self._read(response)))
        try:
            self.endpoint = await asyncio.wait_for(asyncio.shield(self._named), ENDPOINT_WAIT_S)
        except TimeoutError:
            await self.stop()
            raise OSError(f"its stream named no POST endpoint within {ENDPOINT_WAIT_S:g} s") from None
        except OSError:
            await self.stop()
            raise
        self._tasks.append(asyncio.ensure_future(self._write(self.endpoint)))

    def _endpoint(self, data: str, base: str) -> None:
        """The `endpoint` event: the POST URL, on the stream's own origin (anything else is refused)."""
        if self._named.done():
            return
        url = urljoin(base, data.strip())
        ours, theirs = urlsplit(base), urlsplit(url)
        if (ours.scheme, ours.netloc) != (theirs.scheme, theirs.netloc):
            self._named.set_exception(OSError(f"its endpoint event names another origin ({theirs.scheme}://{theirs.netloc})"))
            return
        self._named.set_result(url)

    async def _read(self, response: aiohttp.ClientResponse) -> None:
        parser = SseParser()
        bound = self.launch.max_line_bytes
        waiting = 0
        reason = "the server closed it"
        try:
            async for chunk in response.content.iter_any():
                events = parser.feed(chunk)
                waiting = 0 if events else waiting + len(chunk)
                if waiting > bound:
                    reason = f"an event over max_line_bytes ({bound}) was not kept"
                    break
                for event in events:
                    if event.event == "endpoint":
                        self._endpoint(event.data, str(response.url))
                    elif event.event == "message":
                        self._message(event.data)
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            reason = f"reading it failed ({exc.__class__.__name__})"
        self._lose(reason)

    def _message(self, data: str) -> None:
        try:
            message, text = decode_line(data.strip().encode())
        except (ValueError, StopIteration, RecursionError):
            log.warning("backend %s: an SSE event that is not JSON skipped: %.200r", self.launch.name, data)
            return
        if not isinstance(message, dict):
            log.warning("backend %s: an SSE event that is not a JSON-RPC message skipped: %.200r", self.launch.name, data)
            return
        try:
            self.on_message(message, text)
        except Exception:
            log.exception("backend %s: a message from its SSE stream could not be routed", self.launch.name)

    async def _write(self, endpoint: str) -> None:
        launch = self.launch
        headers = {**launch.headers, "Content-Type": "application/json"}
        timeout = aiohttp.ClientTimeout(total=launch.post_timeout_s, sock_connect=10)
        while True:
            line = await self._outbox.get()
            try:
                async with launch.http.post(endpoint, data=line, headers=headers, timeout=timeout, **launch.options) as response:
                    if response.status < 300:
                        continue
                    said = (await response.text(errors="replace"))[:200]
            except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
                self._lose(f"a POST to it failed ({exc.__class__.__name__})")
                return
            if response.status == 404:  # the server no longer knows the session
                self._lose(f"its POST endpoint answered HTTP 404 ({said!r}): the server ended the session")
                return
            self._refused(line, response.status, said)

    def _refused(self, line: bytes, status: int, said: str) -> None:
        """A POST the server refused (a 4xx or 5xx other than 404): a request gets that refusal as its answer."""
        log.warning("backend %s: its SSE endpoint refused a message: HTTP %d %.200r", self.launch.name, status, said)
        with contextlib.suppress(ValueError):
            message = json.loads(line)
            if isinstance(message, dict) and "method" in message and "id" in message:
                error = McpError(INTERNAL_ERROR, f"Backend {self.launch.name!r} refused the request: HTTP {status} {said}")
                self._message(jsonrpc.dumps(jsonrpc.error_response(message["id"], error)).decode())

    def send(self, message: dict[str, Any]) -> bool:
        return self.send_line(jsonrpc.dumps(message))

    def send_line(self, line: bytes) -> bool:
        if self._reason is not None:
            return False
        self._outbox.put_nowait(line)
        return True

    def ended(self) -> str:
        return f"its SSE session was lost: {self._reason or 'it was ended'}"

    def ended_before_initialize(self) -> str:
        return f"its SSE stream at {self.launch.url} ended before the server answered initialize: {self._reason}"

    def _lose(self, reason: str) -> None:
        """The session is gone (once): the stream is closed and the slot told."""
        if self._reason is not None:
            return
        self._reason = reason
        if not self._named.done():
            self._named.set_exception(OSError(f"its stream ended before naming a POST endpoint ({reason})"))
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        if self._response is not None:
            self._response.close()
        self.on_exit(None)

    async def stop(self) -> None:
        self._lose("the proxy ended it")
        tasks = [task for task in self._tasks if task is not asyncio.current_task()]
        await asyncio.gather(*tasks, return_exceptions=True)
        if not self._named.done():
            self._named.cancel()
        with contextlib.suppress(BaseException):
            self._named.exception()  # retrieved: a stream that named none is no unhandled error

    async def kill(self) -> None:
        await self.stop()


class SseEndpoint(StdioEndpoint):
    """An `Endpoint` whose backend is an HTTP+SSE server at `config.url` (see the module docstring)."""

    def __init__(self, config: Upstream, http: aiohttp.ClientSession, *, request_timeout_ms: int = 300_000,
                 session_idle_ms: int = 3_600_000):
        self.upstream_http = http
        """The shared client the upstream sessions use (`http` becomes the bridge's own once started)."""
        self.upstream_options: dict[str, Any] = {}
        """The backend's TLS and outbound proxy, for its upstream sessions; `request_options` stays
        empty: it is what requests to the in-process bridge carry."""
        super().__init__(config, http, request_timeout_ms=request_timeout_ms, session_idle_ms=session_idle_ms)

    def use_options(self, options: Mapping[str, Any]) -> None:
        self.upstream_options.clear()
        self.upstream_options.update(options)

    @property
    def scope(self) -> str:
        return "session"

    @property
    def bounds(self) -> tuple[int, int]:
        """`max_processes` (default here: `DEFAULT_SESSIONS`) upstream sessions in all, and per principal."""
        given = self.config.model_fields_set
        most = self.config.max_processes if "max_processes" in given else DEFAULT_SESSIONS
        return most, min(self.config.max_processes_per_principal, most) if "max_processes_per_principal" in given else most

    def launch(self) -> ChannelLaunch:
        return SseLaunch(self)

    @property
    def start_failure(self) -> str | None:
        """Never: a server that does not answer at the proxy's start is down, as any HTTP backend."""
        return None

    def process_down(self, reason: str) -> None:
        """An upstream session was lost: its clients are told (their sessions are gone); whether the
        server is down, the probe it triggers finds out (a stream can end with the server up)."""
        self.on_trouble()


async def offers_sse(url: str, http: aiohttp.ClientSession, options: Mapping[str, Any], *, headers: Mapping[str, str]) -> bool:
    """Whether `url` is an HTTP+SSE server's stream: a GET answers an event stream whose first event
    is `endpoint` (read for `ENDPOINT_WAIT_S` at most; the stream is closed at once, which ends the
    session the server opened for it)."""
    try:
        async with asyncio.timeout(ENDPOINT_WAIT_S):
            async with http.get(url, headers={**headers, "Accept": "text/event-stream"}, **options) as response:
                if response.status != 200 or not response.headers.get("Content-Type", "").startswith("text/event-stream"):
                    return False
                parser = SseParser()
                async for chunk in response.content.iter_any():
                    for event in parser.feed(chunk):
                        return event.event == "endpoint"
    except (aiohttp.ClientError, TimeoutError, ValueError, ConnectionError):
        return False
    return False
