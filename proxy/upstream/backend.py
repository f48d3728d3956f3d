"""A configured backend as the pairings see it: its endpoint, probed profile and session pool.

The profile is probed at start, refreshed every `probe_interval_ms`, and re-probed (throttled)
when a request finds it missing or stale, e.g. a tool name the cached `tools/list` lacks
(docs/behaviour.md §2 "Upstream"). The probes of one backend share one session-wire session, never
ended (docs/decisions.md §2). A backend is down from a refused connection or a failed probe until
a probe answers again; each change is logged once (docs/decisions.md, "Readiness"). A probe
answered with a Bearer challenge means "protected", not down: the probe's credentials are the
backend's `probe_headers` only, and without them the dialect is pinned or learnt from the first
client request that carries credentials (docs/decisions.md §82).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from translators.errors import McpError, backend_unavailable
from translators.oauth import AuthChallenge
from translators.protocol import TaskSupport

from ..config import Settings, Upstream
from .endpoint import RECONNECT_PAUSE_S, BackendUnreachable, Endpoint, reconnect_wait
from .http_sse import offers_sse
from .pool import SessionPool
from .probe import BackendProfile, ProbeSession, pinned_profile, probe
from .tool_headers import ToolHeaders
from .transports import connect, connect_sse

log = logging.getLogger(__name__)

REPROBE_MIN_INTERVAL_S = 1.0
"""On-demand re-probes of one backend are at least this far apart."""


class UnsupportedBackend(Exception):
    """The backend speaks a dialect this version of the proxy cannot serve."""


class Backend:
    """One backend: its connector (`Endpoint`), its profile (None until a probe succeeded) and
    its session pool."""

    def __init__(self, config: Upstream, http: aiohttp.ClientSession, settings: Settings, *, metrics: Any,
                 on_hop: Callable[[str, float], None]):
        self.config = config
        self.name = config.name
        self._http, self._settings, self._on_hop = http, settings, on_hop
        if config.command is not None and settings.replicas > 1:  # docs/load-balancing.md "stdio backends"
            log.warning("backend %s runs its processes in this replica: with replicas = %d, route each session "
                        "(Mcp-Session-Id) and task (Mcp-Name) to the replica that opened it", self.name, settings.replicas)
        self.profile: BackendProfile | None = None
        self.dialect = "unknown"
        """The probed dialect ("v1", "v2-modern", "v2-session"), "unknown" until a probe succeeded
        (`profile.dialect`, kept beside it: every relayed request reads it)."""
        self.metrics = metrics
        """Where the layers above count this backend's requests and dropped fields (`proxy.metrics.Metrics`;
        this layer only carries it); the connector reports each request's time to `on_hop`, which
        the fleet points at the metrics."""
        self._probe_lock = asyncio.Lock()
        self._last_probe = 0.0
        self._suspect = False
        self._starting = False
        """Logged as starting (never probed yet, its connector starting it) and not answered since."""
        self.unreachable_at: float | None = None
        """When a connection to the backend was last refused (monotonic s); None once a probe answered."""
        self.down: str | None = None
        """Why the backend is down (a refused connection or a failed probe: the error's message);
        None while it answers, and before its first probe."""
        self._protected_logged = False
        self._attach(connect(config, http, request_timeout_ms=settings.upstream_timeout_ms, session_idle_ms=settings.session_idle_ms))
        self.challenge: AuthChallenge | None = None
        """The last Bearer challenge the backend answered a probe or a client's request with: it is
        protected. None before any, and again once a probe without credentials passes."""
        self._probe_interval_s = settings.probe_interval_ms / 1000
        self.dialect_since_ms: int | None = None
        """When a probe first found the backend's current dialect (Unix ms; None before the first probe)."""
        self.tool_headers = ToolHeaders(lambda: self.profile)
        """Its tools' `x-mcp-header` annotations, for the `tools/call` translated to it (v2-modern)."""

    def _attach(self, connector: Endpoint) -> None:
        """Reach the backend through `connector`: its session pool, its probes' view (with the
        operator's `probe_headers`, used for nothing else) and the callbacks this handle watches it by."""
        self.connector = connector
        connector.on_hop = self._on_hop  # before any view of the connector is made (the probe's below)
        connector.on_trouble = self.suspect
        connector.on_unreachable = self._unreachable
        connector.on_challenge = self._saw_challenge
        connector.watched = self._settings.health_interval_ms > 0 and connector.HEALTH_CHECKS
        self.pool = SessionPool(connector)
        probe_headers = self.config.probe_headers
        self._probe_connector = connector.with_headers(probe_headers) if probe_headers else connector
        self._probe_session = ProbeSession(self._probe_connector)

    async def _found_sse(self) -> bool:
        """Whether this backend, never probed and of `transport = "auto"`, is an HTTP+SSE server
        that the Streamable HTTP probe could not speak to; then it is reached as one from now on
        (decision 171). Asked once a probe has failed."""
        config = self.config
        if self.profile is not None or config.transport != "auto" or config.command is not None:
            return False
        connector = self.connector
        if not await offers_sse(config.url, self._http, connector.request_options, headers=connector.extra_headers):
            return False
        log.info("backend %s: %s is an HTTP+SSE (2024-11-05) server's stream; reached as one", self.name, config.url)
        old = connector
        sse = connect_sse(config, self._http, request_timeout_ms=self._settings.upstream_timeout_ms,
                          session_idle_ms=self._settings.session_idle_ms)
        sse.use_options(old.request_options)  # its TLS and outbound proxy
        self._attach(sse)
        await old.close()
        return True

    def lists_tool(self, name: object) -> bool:
        """Whether the backend lists a tool `name`: in the `tools/list` its last probe read, or in one
        the proxy passed on since (a bound on the `tool` label of the tool results, `proxy/observe/tools.py`)."""
        if not isinstance(name, str):
            return False
        profile = self.profile
        return (profile is not None and (name in profile.tools or name in profile.listed)) or self.tool_headers.knows(name)

    def check_supported(self, profile: BackendProfile) -> None:
        """Raise `UnsupportedBackend` unless `profile` is a dialect the proxy serves: v1, v2-modern
        or v2-session (every dialect today; the check stays for dialects yet to come)."""
        if profile.dialect not in ("v1", "v2-modern", "v2-session"):
            raise UnsupportedBackend(
                f"backend {profile.summary()}; this version of mcp-tasks-proxy serves v1 (2025-11-25 session-wire) "
                "and v2-modern (2026-07-28) backends"
            )

    @property
    def ready(self) -> bool:
        """Whether new work can reach the backend now: a probe has answered (a Bearer challenge
        counts: the backend is up and protected), and neither a connection nor a probe has failed since."""
        return (self.profile is not None or self.challenge is not None) and self.down is None

    @property
    def protected(self) -> bool:
        """Whether the backend asks for authorization: it challenged a request without credentials,
        or the operator gave the probe an `Authorization` of its own (its profile was then learnt
        with credentials no client holds)."""
        return self.challenge is not None or any(name.lower() == "authorization" for name in self.config.probe_headers)

    def _unreachable(self, error: McpError) -> None:
        self.unreachable_at = time.monotonic()
        self._mark_down(error.message)

    def _mark_down(self, reason: str) -> None:
        """Record that the backend is down; only the change from up is logged (one line). A backend
        never probed whose connector is still starting it (a stdio server `npx` is fetching) is
        logged as starting, by its address, not as down (docs/decisions.md §70)."""
        if self.down is None:
            if self.profile is None and self.connector.starting:
                self._starting = True
                log.info("backend %s is starting: %s (not answering yet)", self.name, self.connector.address)
            else:
                log.warning("backend %s is down: %s", self.name, reason)
        self.down = reason

    async def refresh(self, *, force: bool = False, throttle: bool = True) -> BackendProfile:
        """Probe now unless a probe ran less than a second ago (`throttle`) or the profile is fresh
        and not `force`. Raises `McpError` (502) when unreachable and `UnsupportedBackend`."""
        async with self._probe_lock:
            now = time.monotonic()
            fresh = self.profile is not None and now - self._last_probe < self._probe_interval_s
            recent = throttle and now - self._last_probe < REPROBE_MIN_INTERVAL_S
            if self.profile is not None and (recent or (fresh and not force)):
                return self.profile
            self._last_probe = now
            self.connector.url = self.connector.configured_url  # a replaced backend may not redirect
            self._probe_connector.url = self.connector.configured_url
            try:
                with reconnect_wait(0.0):  # a probe never waits for the backend (it holds the probe lock)
                    async with asyncio.timeout(self.connector.PROBE_TIMEOUT_S):
                        profile = await probe(self._probe_connector, self.config.dialect, self._probe_session, self.profile)
                self.check_supported(profile)
            except AuthChallenge as exc:
                return self._challenged(exc)
            except TimeoutError:
                self._probe_session.session = None  # its initialize may never have been answered
                error = backend_unavailable(self.name, f"did not answer the probe within {self.connector.PROBE_TIMEOUT_S:g} s")
                self._mark_down(error.message)
                raise error from None
            except McpError as exc:
                if not isinstance(exc, BackendUnreachable) and await self._found_sse():
                    return await self._probe_now()
                self._mark_down(exc.message)
                raise
            except UnsupportedBackend as exc:
                self._mark_down(str(exc))
                raise
            return self._probed(profile)

    async def _probe_now(self) -> BackendProfile:
        """Probe through the connector just attached (the probe lock held), as `refresh` does."""
        try:
            async with asyncio.timeout(self.connector.PROBE_TIMEOUT_S):
                profile = await probe(self._probe_connector, self.config.dialect, self._probe_session, self.profile)
            self.check_supported(profile)
        except McpError as exc:
            self._mark_down(exc.message)
            raise
        return self._probed(profile)

    def _saw_challenge(self, challenge: AuthChallenge) -> None:
        self.challenge = challenge

    def _probed(self, profile: BackendProfile, *, anonymous: bool = False) -> BackendProfile:
        """A probe answered with `profile`: the backend is up, and this is what it is. `anonymous`:
        the probe carried no credentials, so the backend is not (or no longer) protected."""
        self.unreachable_at = None
        self._suspect = False
        if anonymous:
            self.challenge = None
        if self.down is not None and not self._starting:
            log.warning("backend %s is back: %s", self.name, profile.summary())
        elif self._starting or self.profile is None or self.profile.dialect != profile.dialect:
            log.info("backend probed: %s", profile.summary())
        self._starting = False
        if self.profile is None or self.profile.dialect != profile.dialect:
            self.dialect_since_ms = profile.probed_at_ms or int(time.time() * 1000)
        self.down = None
        self.profile = profile
        self.dialect = profile.dialect
        return profile

    def _challenged(self, challenge: AuthChallenge) -> BackendProfile:
        """The probe was answered with a Bearer challenge: the backend is up and protected. The last
        profile stands (a pinned dialect's provisional one when there is none); with no profile at
        all, raises `challenge` (docs/decisions.md §82)."""
        self.unreachable_at = None
        self._suspect = False
        if not self._protected_logged or self.down is not None:
            self._protected_logged = True
            log.info("backend %s is protected: its probe was answered HTTP %d with a Bearer challenge%s", self.name,
                     challenge.status, "" if self.config.probe_headers else " (no probe_headers)")
        self.challenge = challenge
        self.down = None
        if self.profile is None and self.config.dialect != "auto":
            self.profile = pinned_profile(self.connector, self.config.dialect)
            self.dialect = self.profile.dialect
            self.dialect_since_ms = int(time.time() * 1000)
        if self.profile is None:
            raise challenge
        return self.profile

    async def learn(self, credentials: dict[str, str]) -> BackendProfile:
        """Probe a protected backend whose dialect is not known yet with one client's `credentials`
        (its `Authorization`), on a probe session of its own that later probes do not hold
        (docs/decisions.md §82). Raises the client's `AuthChallenge` when they are not enough and
        nothing is known; with a pinned dialect its provisional profile is returned instead."""
        async with self._probe_lock:
            if self.profile is not None and not self.profile.provisional:
                return self.profile
            connector = self.connector.with_headers(credentials)
            try:
                with reconnect_wait(0.0):
                    profile = await probe(connector, self.config.dialect, ProbeSession(connector))
                self.check_supported(profile)
            except AuthChallenge:
                if self.profile is not None:
                    return self.profile
                raise
            self._last_probe = time.monotonic()
            return self._probed(profile)

    def fresh(self) -> BackendProfile | None:
        """The profile when `current()` would return it without probing (known, not older than the
        probe interval, not suspect); None when a probe is due. No await: the hot path asks this first."""
        profile = self.profile
        if profile is not None and not profile.provisional and not self._suspect \
                and time.monotonic() - self._last_probe < self._probe_interval_s:
            return profile
        return None

    async def current(self, credentials: dict[str, str] | None = None) -> BackendProfile:
        """The profile, probing first when there is none yet, it is older than the interval, or the
        backend answered in a way the profile cannot explain (`suspect`). A backend that refuses
        connections keeps its last profile; raises `McpError` (502) only when there is none.

        `credentials`: the client's `Authorization` header (as a one-entry dict), for a protected
        backend whose probe was challenged and whose profile is unknown or provisional: the
        dialect is then learnt with them (`learn`); without them such a backend's challenge is
        raised (`AuthChallenge`, the client is to authorize)."""
        if self.challenge is not None and (self.profile is None or self.profile.provisional):
            if credentials:
                return await self.learn(credentials)
            if self.profile is None:
                raise self.challenge
            return self.profile
        try:
            if self._suspect:
                profile = await self.refresh(force=True)
                self._suspect = False
                return profile
            if self.profile is not None and time.monotonic() - self._last_probe < self._probe_interval_s:
                return self.profile
            return await self.refresh()
        except BackendUnreachable as exc:
            if self.profile is not None:
                # Down for now: the last profile stands, and the request itself decides whether to
                # wait for the backend (`reconnect_wait_ms`) or to go elsewhere.
                return self.profile
            return await self._first_profile(exc)

    async def _first_profile(self, refused: BackendUnreachable) -> BackendProfile:
        """No profile yet and the backend refuses connections: probe again until a request in this
        context may wait no longer (`reconnect_wait_ms` for requests bound to the backend, else at
        once), then raise the refusal."""
        loop = asyncio.get_running_loop()
        deadline = self.connector.wait_deadline(loop.time())
        while loop.time() < deadline:
            await asyncio.sleep(min(RECONNECT_PAUSE_S, max(deadline - loop.time(), 0.0)))
            try:
                return await self.refresh(force=True, throttle=False)
            except BackendUnreachable as exc:
                refused = exc
        raise refused

    async def check_health(self, timeout_s: float) -> None:
        """The cheap health check (docs/decisions.md §78), run every `health_interval_ms`: one TCP
        connection (`Endpoint.check_connect`, up to `timeout_s` seconds). Refused: the backend is
        down (logged once) and left out of new work, as after a request's refused connection.
        Accepted while it was down from a refused connection: a full probe at once (it may be a
        replaced backend of another dialect), which marks it back. Raises nothing."""
        if not self.connector.watched:
            return
        refused = await self.connector.check_connect(timeout_s)
        if refused is not None:
            self._unreachable(refused)
            return
        if self.unreachable_at is not None:
            try:
                await self.refresh(force=True)
            except (McpError, UnsupportedBackend) as exc:
                log.debug("backend %s accepts connections but its probe failed: %s", self.name, exc)

    def suspect(self) -> None:
        """The backend contradicted its profile (it forgot a session, refused a connection, or a
        "v1" backend answered -32601 to a task method): probe again on next use, at most once a
        second (docs/behaviour.md §2: a rolling upgrade is noticed on the first contradicting answer)."""
        self._suspect = True

    async def tool_support(self, name: str) -> TaskSupport | None:
        """A tool's task support; a name the cached list lacks triggers one throttled re-probe.
        None when the backend has no such tool."""
        profile = await self.current()
        if name not in profile.tools:
            try:
                profile = await self.refresh(force=True)
            except McpError:
                pass
        return profile.tools.get(name)

    async def close(self) -> None:
        """Release the backend's state; upstream sessions (the probes' one too) are left open on
        purpose (docs/decisions.md §2)."""
        self.pool.forget_all()
        self._probe_session.session = None
        await self.connector.close()
