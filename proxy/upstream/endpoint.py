"""A backend's address over HTTP and the connection rules every upstream wire shares.

`Endpoint` is where one backend answers (its URL, the shared HTTP client, extra headers): POSTs
follow method-preserving redirects, reads are sent again on a fresh connection when a kept-alive
one broke, and a refused connection waits for the backend as long as the request may
(`reconnect_wait`, config `reconnect_wait_ms`). The session wire (`session_wire.py`), the modern
wire (`modern_wire.py`) and relays all send through it. Source: MCP core 2025-11-25 and
2026-07-28, Streamable HTTP; docs/decisions.md §24, §29.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

import aiohttp
from yarl import URL

from translators import jsonrpc
from translators.errors import McpError, backend_unavailable
from translators.oauth import AuthChallenge, bearer_challenge, is_bearer_challenge

from ..observe.hooks import TRACE
from .lean import LeanPool, LeanResponse
from .tls import closed_after_handshake, failure

log = logging.getLogger(__name__)

ACCEPT_BOTH = "application/json, text/event-stream"

RECONNECT_WAIT_S: ContextVar[float] = ContextVar("mcp_tasks_proxy_reconnect_wait_s", default=0.0)
"""How long a POST made in this context waits for a backend that refuses connections to accept
them again (seconds; 0: not at all). Set per request by the entry face for requests bound to their
backend (config `reconnect_wait_ms`), so that a restarted or replaced backend costs their clients a
delay rather than an error; new work does not wait, it goes to another backend."""
RECONNECT_PAUSE_S = 0.2
"""Pause between connection attempts while waiting."""
IDEMPOTENT_METHODS = frozenset({
    "ping", "server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list",
    "tasks/get", "tasks/list", "tasks/result",
})
"""Requests that read and change nothing: one the connection failed under (a kept-alive connection
the backend had closed, a reset) is sent again on a new connection (at most `RESEND_ATTEMPTS` more
times), since even if the backend received it, receiving it twice does no harm."""
RESEND_ATTEMPTS = 2
READ_AGAIN_PAUSE_S = 0.2
"""Pause before a read whose answer broke off (or was a gateway's 502/503/504) is asked again."""
_T = TypeVar("_T")


class reconnect_wait:  # noqa: N801 (used like a function: `with reconnect_wait(s):`)
    """Within the block, POSTs wait up to `seconds` for a backend refusing connections. (A class,
    not `contextlib.contextmanager`: it is entered on every request, and a generator costs more.)"""

    __slots__ = ("seconds", "token")

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __enter__(self) -> None:
        self.token = RECONNECT_WAIT_S.set(self.seconds)

    def __exit__(self, *exc: object) -> None:
        RECONNECT_WAIT_S.reset(self.token)


async def read_again(read: Callable[[], Awaitable[_T]]) -> _T:
    """`read()` (a request that only reads: `tasks/get`, `tasks/result`), called again while it
    fails with HTTP 502 (`backend_unavailable`: an answer that broke off, or something in front of
    the backend answering 502/503/504 without MCP), every `READ_AGAIN_PAUSE_S`, for as long as a
    request in this context may wait for its backend (`RECONNECT_WAIT_S`, the config
    `reconnect_wait_ms`), and at least twice in all (docs/decisions.md §24, §29).

    Raises the last failure once the wait is over; `BackendUnreachable` at once (the connector
    has already waited for a connection) and every other `McpError` at once.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RECONNECT_WAIT_S.get()
    tries = 0
    while True:
        try:
            return await read()
        except BackendUnreachable:
            raise
        except McpError as exc:
            tries += 1
            if exc.http_status != 502 or (tries > 1 and loop.time() >= deadline):
                raise
        await asyncio.sleep(READ_AGAIN_PAUSE_S)


async def raise_for_challenge(response: aiohttp.ClientResponse | LeanResponse, backend: str) -> None:
    """Raise `AuthChallenge` (the response read and released) when `response` is a backend's Bearer
    challenge: HTTP 401 or 403 with `WWW-Authenticate: Bearer …` (MCP "Authorization"; RFC 6750 §3).
    Any other response is left as it is."""
    values = response.headers.getall("WWW-Authenticate", [])
    if not is_bearer_challenge(response.status, values):
        return
    www_authenticate = bearer_challenge(values)  # the Bearer one, also beside other schemes' challenges
    try:
        await response.read()
    except (TimeoutError, aiohttp.ClientError, ConnectionError):
        pass
    finally:
        response.release()
    raise AuthChallenge(response.status, www_authenticate or "", backend)


class BackendUnreachable(McpError):
    """-32603 (HTTP 502): no connection to the backend could be made, so nothing was sent to it
    and the request may go to another backend."""


def _unobserved(method: str, seconds: float) -> None:
    """The hop report of a connector nobody observes (the CLI's probe, a shadow process's)."""


class Endpoint:
    """One backend's address on the session wire and the HTTP client used to reach it.

    `url` may change once: a 307/308 redirect (Starlette's `/mcp` → `/mcp/`) is followed with
    method and body kept, and remembered. Each request's time to its answer is reported to `on_hop`.
    """

    HEALTH_CHECKS = True
    TAKES_PARSED = False
    """Whether `post` uses the `parsed` message it is given (a stdio connector, which would
    otherwise parse the body again); over HTTP the bytes are sent and `parsed` is not read."""
    KNOWS_CALLERS = True
    """Whether the backend sees each caller's credentials and checks its own sessions' callers
    (over HTTP, decision 25); a stdio process sees none, so the proxy binds the sessions relayed
    to it to their principal (docs/decisions.md §138)."""
    PROBE_TIMEOUT_S: float | None = 15.0
    """How long a whole probe may take (s): a backend that accepts connections and never answers is
    down after it, instead of holding the start, a reload or the probe lock for
    `upstream_timeout_ms`. None: no bound of its own (a stdio process has its start wait)."""
    """Whether `check_connect` says anything of the backend (a stdio connector's loopback endpoint
    is always there; its processes are watched by their supervisor)."""

    def __init__(self, name: str, url: str, http: aiohttp.ClientSession, *, extra_headers: Mapping[str, str] | None = None,
                 request_timeout_ms: int = 300_000):
        self.name = name
        self.url = url
        self.configured_url = url
        self.http = http
        self.extra_headers = {name: value for name, value in (extra_headers or {}).items() if name.lower() != "authorization"}
        """Headers added to every upstream request; never an `Authorization`: a client's request
        carries its own credentials or none (docs/decisions.md §82; the probe's are `with_headers`)."""
        self.on_trouble: Callable[[], None] = lambda: None
        """Called when the backend contradicts what is known of it (refused connection, forgotten
        session); the backend's handle then probes it again."""
        self.on_unreachable: Callable[[BackendUnreachable], None] = lambda error: None
        """Called with the error a request would raise each time no connection to the backend could
        be made (the router then leaves it out; the backend's handle logs the change, once)."""
        self.on_challenge: Callable[[AuthChallenge], None] = lambda challenge: None
        """Called with each Bearer challenge a POST without `Authorization` is answered with (the
        backend's handle then knows it is protected and what an anonymous caller gets, docs/decisions.md §82)."""
        self.on_hop: Callable[[str, float], None] = _unobserved
        """Called with each upstream request's method and its time to the answer (s), once the answer
        or its error is in (the fleet counts it in `mcp_tasks_proxy_upstream_seconds`)."""
        self.probe_headers: dict[str, str] = {}
        """Headers the proxy's own probe adds to its `initialize` (none over HTTP; a stdio connector's
        secret, which tells its probe from every client: docs/decisions.md §70)."""
        self.own_session_headers: dict[str, str] = {}
        """Added to the `initialize` of the sessions the proxy's own session face opens (`SessionPool`;
        none over HTTP; a stdio connector's secret, so that they are not ended for being idle: §140)."""
        self.timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=request_timeout_ms / 1000)
        self.request_options: dict[str, Any] = {}
        self._tls_failure = ""
        """The keyword arguments every aiohttp request to the backend carries: `ssl` (its own context),
        `server_hostname`, `proxy` (`proxy/upstream/tls.py`); empty for a plain `http://` backend. Set
        by the fleet and updated in place at each reload, so that views (`with_headers`) share it."""
        self._lean: LeanPool | None = None
        self.request_timeout_s = request_timeout_ms / 1000
        self.refused_since: float | None = None
        """When the backend began to refuse connections (event-loop time, s): set by the first
        refusal a request or a health check meets, cleared by any connection made since."""
        self.watched = False
        """Whether health checks (`check_connect`, every `health_interval_ms`) keep `refused_since`
        true between requests; only then does it shorten a request's wait (`wait_deadline`)."""

    def caller_headers(self, principal: str) -> Mapping[str, str]:
        """Added to an `initialize` opened for `principal` (the proxy's, `Keyring.principal`): none
        over HTTP, where the server tells its callers apart by what they send; a stdio connector's
        signed name of the caller, whose processes it keys by it (docs/decisions.md §144)."""
        return {}

    def outcome_kept(self, session_id: str | None, task: str) -> None:
        """The proxy has stored `task`'s outcome for as long as the backend promised to keep the task
        (its ttl). Nothing over HTTP, where the server keeps its tasks as it will; a stdio
        connector's task then no longer holds its process under a bound (docs/decisions.md §147)."""

    @property
    def address(self) -> str:
        """Where the backend is, for log lines and profiles: its URL (a stdio connector: its command)."""
        return self.url

    @property
    def starting(self) -> bool:
        """Whether the backend is being started for the first time (never over HTTP; a stdio
        connector's first process before it answered `initialize`, e.g. while `npx` fetches it)."""
        return False

    def post(self, body: bytes, headers: Mapping[str, str], *, idempotent: bool = False,
             lean: bool = True, parsed: dict[str, Any] | jsonrpc.Message | None = None) -> Awaitable[aiohttp.ClientResponse | LeanResponse]:
        """POST `body` to the backend, following up to 3 method-preserving redirects.

        `lean` (default): sent on the proxy's own keep-alive HTTP/1.1 client (`lean.LeanPool`,
        docs/decisions.md §115, §128: relays and the session and modern wires of translations; the
        probe's `server/discover` passes False) when the URL is plain `http`; its `LeanResponse`
        reads like aiohttp's response.
        Raises `McpError` (-32603, HTTP 502) naming the backend when it cannot be reached.
        The caller must release the returned response. Inside a traced request (`TRACE`), the POST
        is a client span and carries the trace context (`proxy/observe/tracing.py`).
        (A plain function handing back the coroutine that does it: one coroutine less on every relayed call.)
        """
        trace = TRACE.get()
        if trace is not None:
            return trace.upstream(self, body, dict(headers), lambda b, h: self._post(b, h, idempotent=idempotent, lean=lean))
        return self._post(body, headers, idempotent=idempotent, lean=lean)

    def lean_pool(self) -> LeanPool:
        """The relay's own connection pool to this backend (made on first use)."""
        if self._lean is None:
            self._lean = LeanPool(connect_timeout_s=10.0, read_timeout_s=self.request_timeout_s)
        return self._lean

    async def _post(self, body: bytes, headers: Mapping[str, str], *, idempotent: bool = False,
                    lean: bool = True) -> aiohttp.ClientResponse | LeanResponse:
        all_headers = {**self.extra_headers, **headers, "Content-Type": "application/json"}
        deadline: float | None = None
        redirects = 0
        resends = RESEND_ATTEMPTS if idempotent else 0
        while redirects < 4:
            try:
                response: aiohttp.ClientResponse | LeanResponse
                if lean and self.url.startswith("http://"):
                    response = await self.lean_pool().request(self.url, body, all_headers)
                else:
                    response = await self.http.post(self.url, data=body, headers=all_headers, allow_redirects=False,
                                                    timeout=self.timeout, **self.request_options)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                https = self.url.startswith("https:")
                tls = failure(exc) if https else None
                broke = isinstance(exc, (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError)) \
                    and not isinstance(exc, aiohttp.ClientConnectorError)
                if tls is None and resends > 0 and broke:
                    resends -= 1  # a connection the backend had closed: a read goes again on a new one
                    continue
                if tls is None and https and broke:  # a server refusing the client certificate may just close
                    tls = await closed_after_handshake(self.url, self.request_options)
                if tls is not None:
                    raise self._tls_failed(exc, tls) from None
                if isinstance(exc, aiohttp.ClientConnectorError):
                    # Nothing was sent. A request bound to this backend waits for it (RECONNECT_WAIT_S),
                    # within the restart window (`wait_deadline`). Each refusal is a debug line; the
                    # handle logs the backend going down once.
                    now = asyncio.get_running_loop().time()
                    if self.refused_since is None:
                        self.refused_since = now
                    deadline = self.wait_deadline(now) if deadline is None else deadline
                    log.debug("backend %s (%s): %s: %s", self.name, self.address, exc.__class__.__name__, exc)
                    error = self.unreachable(exc)
                    self.on_unreachable(error)
                    if now < deadline:
                        await asyncio.sleep(min(RECONNECT_PAUSE_S, deadline - now))
                        continue
                    self.on_trouble()
                    raise error from None
                # The client hears the backend's name and the kind of failure, not its address.
                log.warning("backend %s (%s): %s: %s", self.name, self.address, exc.__class__.__name__, exc)
                self.on_trouble()
                raise backend_unavailable(self.name, f"cannot reach it ({exc.__class__.__name__})") from None
            self.refused_since = None
            if response.status in (307, 308) and "Location" in response.headers:
                location = response.headers["Location"]
                response.release()
                base = response.url if isinstance(response, aiohttp.ClientResponse) else URL(self.url)
                self.url = str(base.join(URL(location)))
                redirects += 1
                continue
            try:
                await raise_for_challenge(response, self.name)
            except AuthChallenge as challenge:
                if not any(name.lower() == "authorization" for name in all_headers):
                    self.on_challenge(challenge)  # what any caller without credentials gets
                raise
            return response
        raise backend_unavailable(self.name, "too many redirects")

    def _tls_failed(self, exc: BaseException, what: str) -> McpError:
        """The error for a TLS failure (`tls.failure`): logged naming the backend and what failed, and
        answered at once as HTTP 502 "Backend 'NAME' unavailable: TLS handshake failed: …" (no wait:
        a certificate does not mend within `reconnect_wait_ms`). One of the handshake itself
        (aiohttp's `ClientSSLError`) leaves the backend out of new work as a refused connection does."""
        # Each new failure once at WARNING (a backend down on it is probed again every health interval).
        log.log(logging.DEBUG if what == self._tls_failure else logging.WARNING, "backend %s (%s): TLS handshake failed: %s",
                self.name, self.address, what)
        self._tls_failure = what
        error = backend_unavailable(self.name, f"TLS handshake failed: {what}")
        if isinstance(exc, aiohttp.ClientSSLError):
            self.on_unreachable(BackendUnreachable(error.code, error.message, http_status=502))
        self.on_trouble()
        return error

    def use_options(self, options: Mapping[str, Any]) -> None:
        """Take these request options (TLS, outbound proxy: `proxy/upstream/tls.py`) from now on, in
        place, so that views of the connector (`with_headers`) take them too."""
        self.request_options.clear()
        self.request_options.update(options)

    def session_used(self, session_id: str) -> None:
        """A relayed session's request was answered by the proxy without reaching the backend (a
        held task's): nothing to do over HTTP; a stdio connector counts it as use (decision 140)."""

    def with_headers(self, headers: Mapping[str, str]) -> Endpoint:
        """A view of this endpoint that adds `headers` (an `Authorization` included) to every POST:
        the probe's connector with `probe_headers`, or one client's credentials for the probe that
        learns a protected backend's dialect (docs/decisions.md §82). It shares the HTTP client, the
        hop and trouble callbacks and the request options (TLS, proxy); its URL starts as the configured one."""
        view = copy.copy(self)
        view.extra_headers = {**self.extra_headers, **headers}
        view.url = self.configured_url
        return view

    def wait_deadline(self, now: float) -> float:
        """Until when (event-loop time, s) a request in this context that meets a refused connection
        at `now` tries again: `RECONNECT_WAIT_S` (config `reconnect_wait_ms`) from the first refusal of
        the outage while health checks watch the backend, so that a restart within that window is a
        delay and a backend found down for longer answers at once (docs/decisions.md §78); from
        `now` when nothing watches it (a refusal seen long ago may be stale)."""
        wait = RECONNECT_WAIT_S.get()
        if self.watched and self.refused_since is not None:
            return min(now, self.refused_since) + wait
        return now + wait

    async def check_connect(self, timeout_s: float) -> BackendUnreachable | None:
        """The health check (docs/decisions.md §78): one TCP connection to the host and port of
        `url`, closed at once without a byte sent. None when it was accepted (`refused_since` is
        cleared); else the error a request would meet (`refused_since` set if not yet), also when no
        connection was made within `timeout_s` seconds."""
        target = URL(self.request_options.get("proxy") or self.url)  # through an outbound proxy: the proxy
        port = target.port or (443 if target.scheme == "https" else 80)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):  # a bare protocol: no stream reader or writer to make and wait for
                transport, _ = await loop.create_connection(asyncio.Protocol, target.host, port)
        except (OSError, TimeoutError) as exc:
            if self.refused_since is None:
                self.refused_since = loop.time()
            # Named as a request meeting the same failure names it (aiohttp's error for it).
            kind = "ConnectionTimeoutError" if isinstance(exc, TimeoutError) else "ClientConnectorError"
            error = backend_unavailable(self.name, f"cannot reach it ({kind})")
            return BackendUnreachable(error.code, error.message, http_status=502)
        transport.close()  # a reset by the backend as it closes is the transport's to drop: the connection was made
        self.refused_since = None
        return None

    async def close(self) -> None:
        """Release what the connector holds beyond the shared HTTP client (over HTTP: the relay's
        own connections; a stdio connector stops its processes)."""
        if self._lean is not None:
            await self._lean.close()
            self._lean = None

    def unreachable(self, exc: BaseException) -> BackendUnreachable:
        """The error for a connection that could not be made (see `BackendUnreachable`)."""
        error = backend_unavailable(self.name, f"cannot reach it ({exc.__class__.__name__})")
        return BackendUnreachable(error.code, error.message, http_status=502)
