"""The aiohttp application: routes, lifecycle, and an in-process runner for the demo and tests.

Routes: `POST`, `GET` and `DELETE <path>` (and `<path>/`) → the entry (`proxy/entry.py`), which
routes to a backend (`proxy/routing.py`) and its pairing (`proxy/pairings/`); `GET`/`DELETE` → the session's
(405 without an `Mcp-Session-Id`: the modern wire has neither; 404 for an unknown one); `GET /healthz` (alive), `GET /readyz` (new work can reach a
backend now), `GET /metrics` (Prometheus text format), `GET /status` and
`GET /status.json` (the operator's status page, `proxy/observe/status.py`),
`GET /.well-known/oauth-protected-resource[<path>]` (a protected backend's metadata under the
proxy's public URL, `proxy/upstream/resource_metadata.py`).
Every response carries `X-Request-Id` (the client's when safe, else a new one; also in log lines).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from translators.sealing import Keyring

from .config import ConfigError, Settings
from .connections import ConnectionLimits
from .entry import Entry
from .eventloop import cancel_and_wait
from .faces.session import SessionFace, SessionPairing
from .fleet import Fleet
from .keys import load_master_key
from .listening import BoundedSite
from .logs import REQUEST_ID, REQUEST_ID_HEADER, request_id_from
from .metrics import Metrics
from .observe.status import status_json, status_page
from .pairings import Relay, V2OverV1
from .pairings.held import drain
from .request_ids import REQUEST_ID_KEY, echo_request_id, with_request_id
from .rollout import control, driver
from .state.fleet_notes import notes_for
from .state.health import store_not_ready
from .state.opening import open_store, reach
from .state.sqlite_store import SqliteTaskStore
from .state.store import TaskStateStore
from .upstream.backend import UnsupportedBackend
from .upstream.resource_metadata import MetadataUnavailable, ResourceMetadata, metadata_routes
from .upstream.tls import checked_at_start, face_reload

log = logging.getLogger(__name__)

STATE: web.AppKey[ProxyState] = web.AppKey("state")
READY_PROBE_TIMEOUT_S = 5.0


@dataclass
class ProxyState:
    """What the handlers share: settings, keys, the backends (`fleet`), the proxy's own sessions
    (`session_face`) and the entry every request goes through (`entry`)."""

    settings: Settings
    keyring: Keyring
    http: aiohttp.ClientSession | None = None
    fleet: Fleet | None = None
    session_face: SessionFace | None = None
    entry: Entry | None = None
    metrics: Metrics = field(default_factory=Metrics)
    prober: asyncio.Future[None] | None = None  # the timed probe of every backend (`Fleet.keep_probing`), cancelled at cleanup
    taking_over: bool = False  # a one-process restart's new process (`start`): first probes run while it serves
    lag_watch: asyncio.Future[None] | None = None  # the entry's `LoopLag.watch` (proxy/overload.py)
    checker: asyncio.Future[None] | None = None
    """The health checks of every backend (`Fleet.keep_checking`; none with `health_interval_ms = 0`)."""
    store: TaskStateStore | None = None
    """The task state only this proxy knows (`proxy/state/store.py`): the SQLite store in `state_dir`
    (`store = "sqlite"`), one given to `create_app`, or None: each backend keeps its own in memory."""
    own_store: bool = False  # whether the application opened `store` (and so closes it)
    tracer_provider: Any = None
    """An OpenTelemetry `TracerProvider` given to `create_app` (tests: an in-memory exporter's)."""
    tracing: Any = None
    """`proxy.observe.tracing.Tracing` while traces are on (`traces = "otlp"` or a given provider)."""
    maintainer: asyncio.Future[None] | None = None
    """The store's sweep and checkpoint loop (`SqliteTaskStore.maintain`), cancelled at cleanup."""
    listener: asyncio.Future[None] | None = None
    """A shared store's listener for clients' answers that reached this process for another."""
    handover: asyncio.Future[None] | None = None
    """A shared store's listener for MRTR retries handed between processes."""
    resource_metadata: ResourceMetadata | None = None
    """The backends' protected-resource metadata, served under the public URL (docs/decisions.md §81)."""
    reloading: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One reload at a time (`RunningProxy.reload`)."""
    lasting: Any = None
    """`proxy.observe.lasting.Lasting`: the status figures flushed to the store and read back
    (None with `store = "memory"`: the page shows this process's own)."""
    flusher: asyncio.Future[None] | None = None
    """`Lasting.run`, cancelled at cleanup (then one last flush)."""
    rollout: Any = None
    """`proxy.rollout.driver.RolloutDriver`: the `[rollout]` run, resumed or forgotten (docs/configuration.md "Rollout")."""
    stopping_at: float | None = None
    """The loop time the proxy began to stop (what `shutdown_timeout_ms` is counted from)."""


async def _get_or_delete(request: web.Request) -> web.StreamResponse:
    entry = request.app[STATE].entry
    assert entry is not None, "the application has not started"
    return await entry.get_or_delete(request)


async def _post(request: web.Request) -> web.StreamResponse:
    """Every POST, with its request id set inline (what `with_request_id` does for the other
    routes): the relay's path, one coroutine less per request."""
    entry = request.app[STATE].entry
    assert entry is not None, "the application has not started"
    request_id = request[REQUEST_ID_KEY] = request_id_from(request.headers.get(REQUEST_ID_HEADER))
    token = REQUEST_ID.set(request_id)
    try:
        return await entry.post(request)
    finally:
        REQUEST_ID.reset(token)


async def _rollout(request: web.Request) -> web.Response:
    return await control.handle(request, request.app[STATE].rollout, request.app[STATE].settings.status_token)


async def _healthz(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    """200 while new work can reach at least one backend (`Fleet.readiness`); else 503 naming the
    first backend not ready and why (probing each first, at most `READY_PROBE_TIMEOUT_S` each)."""
    fleet = request.app[STATE].fleet
    if fleet is None:
        return web.json_response({"status": "not ready", "backend": None, "reason": "starting"}, status=503)
    store_down = store_not_ready(request.app[STATE].store)
    if store_down is not None:
        return web.json_response(store_down, status=503)
    not_ready = await fleet.readiness(READY_PROBE_TIMEOUT_S)
    if not_ready is not None:
        return web.json_response({"status": "not ready", "backend": not_ready[0], "reason": not_ready[1]}, status=503)
    return web.json_response({"status": "ready"})


async def _protected_resource(request: web.Request) -> web.Response:
    """RFC 9728 metadata of the resource the proxy serves: the backend's document with `resource`
    set to the public URL and the backend's `Cache-Control`; 404 when no backend is protected,
    502 when none could be asked (docs/decisions.md §81)."""
    from .faces.challenge import public_url

    state = request.app[STATE]
    if state.resource_metadata is None:
        return web.json_response({"error": "starting"}, status=503)
    try:
        document = await state.resource_metadata.for_resource()
    except MetadataUnavailable as exc:
        log.warning("protected-resource metadata unavailable: %s", exc)  # the backend's address stays in the log
        return web.json_response({"error": "temporarily_unavailable",
                                  "error_description": "the backend's protected-resource metadata could not be fetched"}, status=502)
    if document is None:
        return web.json_response({"error": "not_found", "error_description": "no backend is protected"}, status=404)
    headers = {"Cache-Control": document.cache_control} if document.cache_control else None
    return web.json_response(state.resource_metadata.served(document, public_url(state.settings, request)), headers=headers)


async def _metrics(request: web.Request) -> web.Response:
    """The Prometheus text: this process's registry; with `--workers` > 1 the samples of every
    worker of this proxy added up from the store (`proxy/observe/metric_totals.py`, docs/decisions.md §96)."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    state = request.app[STATE]
    if state.lasting is not None and state.lasting.metrics is not None:
        from .observe.metric_totals import exposition

        try:
            body = await exposition(state.metrics.registry, state.lasting)
        except Exception as exc:  # the store does not answer: this worker's own, rather than nothing
            log.warning("/metrics: the workers' totals could not be read from the store (%s): this worker's own", exc)
            body = generate_latest(state.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
    return web.Response(body=generate_latest(state.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _status_json(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return await status_json(request, state.fleet, state.metrics.recorder, state.settings.status_token, state.lasting)


async def _status_page(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return await status_page(request, state.fleet, state.metrics.recorder, state.settings.status_token, state.lasting)




async def _startup(app: web.Application) -> None:
    state = app[STATE]
    settings = state.settings
    # No cookie jar: a backend's cookies must never travel from one client's request to another's.
    state.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=False), auto_decompress=True,
                                       cookie_jar=aiohttp.DummyCookieJar())
    state.fleet = Fleet.build(settings, state.http, state.keyring, state.metrics, state.store)
    state.session_face = SessionFace(settings, state.keyring, state.store, rules_for=_rules_for(state.fleet))
    state.fleet.proxy_sessions = state.session_face.sessions.count_for
    if settings.traces != "off" or state.tracer_provider is not None:
        from .observe.tracing import build  # opentelemetry is imported only when traces are on

        state.tracing = build(settings, state.tracer_provider)
    state.entry = Entry(settings, state.keyring, state.fleet, state.session_face, state.tracing)
    state.lag_watch = asyncio.ensure_future(state.entry.overload.watch())
    state.metrics.watch_loop(state.entry.overload)  # its lag and whether it sheds, on /metrics
    from .shadow.mirror import Shadowing  # answers compared with shadow backends' (docs/behaviour.md §8)

    state.fleet.shadow = state.entry.shadow = Shadowing(settings, state.fleet, state.metrics)  # type: ignore[attr-defined]
    if isinstance(state.store, SqliteTaskStore) or (state.store is not None and state.store.shared):
        await reach(state.store)
        state.maintainer = asyncio.ensure_future(state.store.maintain())  # type: ignore[union-attr]
    state.fleet.notes = notes_for(state.store)  # which backend's own task ids from before plain ids reach (decision 192)
    await state.fleet.remember_plain_issuer()
    # Set up before the backends are probed: the figures' tables and modules are ready by then.
    state.lasting = _lasting(state)
    if state.lasting is not None:
        state.metrics.lasting = state.lasting
    if state.store is not None and state.store.shared:
        from .faces.session import ANSWERS

        state.listener = asyncio.ensure_future(state.store.listen(ANSWERS, state.session_face.deliver_answer))  # type: ignore[attr-defined]
        state.handover = _handover(state.store, state.fleet)
    state.resource_metadata = ResourceMetadata(settings, state.http, state.fleet.request_options)
    if state.taking_over:  # a restart's new process: accept at once, the old one has stopped (proxy/restart.py)
        state.prober = asyncio.ensure_future(_probe_then_keep_probing(state))
    else:
        try:
            await state.fleet.refresh_all()
            await state.resource_metadata.check_agreement()
        except (UnsupportedBackend, ConfigError):
            await state.http.close()
            state.http = None
            raise
        state.prober = asyncio.ensure_future(state.fleet.keep_probing(settings.probe_interval_ms / 1000))
    state.rollout = driver.rollout_driver(settings, state.fleet, state.store, state.metrics, state.lasting)
    await state.rollout.start()
    if state.lasting is not None:  # started once the start cannot fail any more (no task left pending)
        state.flusher = asyncio.ensure_future(state.lasting.run())
    if settings.health_interval_ms > 0:
        state.checker = asyncio.ensure_future(state.fleet.keep_checking(settings.health_interval_ms / 1000))


async def _probe_then_keep_probing(state: ProxyState) -> None:
    """A restart's new process probes while it serves (a silent backend must not hold the queued
    connections); what would have refused a start is logged."""
    assert state.fleet is not None and state.resource_metadata is not None
    try:
        await state.fleet.refresh_all()
        await state.resource_metadata.check_agreement()
    except (UnsupportedBackend, ConfigError) as exc:
        log.error("after the restart: %s", exc)
    await state.fleet.keep_probing(state.settings.probe_interval_ms / 1000)


def _lasting(state: ProxyState) -> Any:
    """The status figures' persistence for the store in use (`proxy/observe/lasting.py`): in the
    SQLite file, in Redis, or None (memory, or a store given to `create_app` that is neither)."""
    from .observe.lasting import Lasting, replica_name

    store, settings = state.store, state.settings
    # With port 0 the name waits for the port bound (`start`); nothing is flushed before it.
    name = replica_name(settings.replica_name, settings.port) if settings.replica_name or settings.port else None
    metrics = state.metrics if settings.workers > 1 else None
    if isinstance(store, SqliteTaskStore):
        from .state.figures_sqlite import SqliteFigures

        figures: Any = SqliteFigures(lambda: store.db)
        return Lasting(state.metrics.recorder, figures, replica=name, store_name=f"sqlite: {store.path}", metrics=metrics)
    redis = getattr(store, "redis", None)
    if store is not None and store.shared and redis is not None:
        from .state.figures_redis import RedisFigures

        figures = RedisFigures(redis, session_keep_s=settings.session_idle_ms / 1000)
        return Lasting(state.metrics.recorder, figures, replica=name, store_name=store.health.name,  # type: ignore[attr-defined]
                       process=store.process, metrics=metrics)  # type: ignore[attr-defined]
    return None


def _handover(store: TaskStateStore, fleet: Fleet) -> asyncio.Future[None]:
    """MRTR retries reaching this process for an exchange another holds, and back
    (`proxy/pairings/handover.py`): one listener for every backend's exchanges."""
    from .pairings.handover import Handover
    from .pairings.mrtr import ExchangeBook

    def book_for(name: str) -> ExchangeBook | None:
        member = fleet.get(name)
        return member.exchanges if member is not None else None

    handover = Handover(store, book_for)
    handover.held_for = lambda name: member.held if (member := fleet.get(name)) is not None else None
    for member in fleet.members:
        member.exchanges.handover = handover
        member.held.handover = handover
    return asyncio.ensure_future(handover.listen())


def _rules_for(fleet: Fleet) -> Callable[[str, str], SessionPairing | None]:
    """(backend name, session dialect) → the pairing a restored proxy session uses, None for a
    backend no longer configured (`SessionFace.rules_for`). A v1 session's pairing is the one in
    front of a v2-modern backend, a v2-session one's the carriage (both serve either v2 backend)."""

    def rules_for(backend: str, face: str) -> SessionPairing | None:
        member = fleet.get(backend)
        if member is None:
            return None
        pairing = member.pairing(face, "v2-modern")
        assert not isinstance(pairing, (Relay, V2OverV1))
        return pairing

    return rules_for


async def _shutdown(app: web.Application) -> None:
    """The proxy is stopping (no longer listening): end the session face's long-lived GET streams
    so that only real requests in flight are waited for (up to `shutdown_timeout_ms`)."""
    state = app[STATE]
    state.stopping_at = asyncio.get_running_loop().time()
    if state.session_face is not None:
        state.session_face.close_streams()


async def _drain_held(state: ProxyState) -> None:
    """Held calls still running once the requests in flight are done get what is left of
    `shutdown_timeout_ms` to end, before what they need (the store's heartbeat, the backends'
    clients) is closed (`proxy.pairings.held.drain`)."""
    if state.fleet is not None:
        budget_s = state.settings.shutdown_timeout_ms / 1000
        if state.stopping_at is not None:
            budget_s -= asyncio.get_running_loop().time() - state.stopping_at
        await drain([member.held for member in state.fleet.members], budget_s)


async def _cleanup(app: web.Application) -> None:
    state = app[STATE]
    await _drain_held(state)
    for loop_task in (state.prober, state.checker, state.flusher, state.maintainer, state.listener, state.handover, state.lag_watch):
        if loop_task is not None:
            await cancel_and_wait(loop_task)
    for part in (getattr(state.fleet, "shadow", None), state.rollout):
        if part is not None:
            await part.close()
    if state.fleet is not None:
        await state.fleet.close()
    if state.http is not None:
        await state.http.close()
    if state.lasting is not None:
        await state.lasting.close()  # the last counts, before the store closes
    if state.own_store and state.store is not None:
        await state.store.close()
    if state.tracing is not None and state.tracer_provider is None:
        state.tracing.shutdown()  # flushes the spans still batched


def create_app(settings: Settings, *, environ: Mapping[str, str] = os.environ, keyring: Keyring | None = None,
               store: TaskStateStore | None = None, tracer_provider: Any = None) -> web.Application:
    """The proxy as an aiohttp `Application`. Startup probes every backend and raises
    `UnsupportedBackend` for one that speaks no dialect the proxy serves. `store`: the task state
    to use (`proxy/state/store.py`); by default the one `settings.store` names (SQLite in `state_dir`).
    `tracer_provider`: an OpenTelemetry `TracerProvider` to trace with (needs the `otel` extra).

    Raises `ConfigError` when no upstream is configured or the key cannot be loaded.
    """
    if not settings.upstream:
        raise ConfigError("upstream: at least one backend is required (give --upstream URL, or [[upstream]] tables in the config file)")
    if keyring is None:
        key, source = load_master_key(settings, environ)
        log.info("sealing key from %s", source)
        keyring = Keyring(key)
    # aiohttp's own limit stays above ours so the face can answer 413 with a JSON-RPC body.
    app = web.Application(client_max_size=settings.max_body_bytes + 1024)
    own_store = store is None
    if store is None:
        store = open_store(settings)
    app[STATE] = ProxyState(settings, keyring, store=store, own_store=own_store, tracer_provider=tracer_provider)
    for route in settings.endpoint_paths:
        app.router.add_post(route, _post)
        app.router.add_get(route, with_request_id(_get_or_delete), allow_head=False)
        app.router.add_delete(route, with_request_id(_get_or_delete))
    app.router.add_get("/healthz", with_request_id(_healthz))
    app.router.add_get("/readyz", with_request_id(_readyz))
    app.router.add_get("/metrics", with_request_id(_metrics))
    app.router.add_get("/status", with_request_id(_status_page))
    app.router.add_get("/status.json", with_request_id(_status_json))
    app.router.add_routes([web.route(method, "/rollout", with_request_id(_rollout)) for method in ("GET", "POST")])  # others: 405
    for route in metadata_routes(settings):
        app.router.add_get(route, with_request_id(_protected_resource))
    app.on_response_prepare.append(echo_request_id)
    app.on_startup.append(_startup)
    app.on_shutdown.append(_shutdown)
    app.on_cleanup.append(_cleanup)
    return app


@dataclass
class RunningProxy:
    """A proxy serving on a real socket; `url` is its MCP endpoint. Stop with `await stop()`."""

    runner: web.AppRunner
    url: str
    base_url: str
    tls: Any = None
    """The listening socket's `ssl.SSLContext` with `tls_cert` (HTTPS; a reload loads the files again into it), else None."""

    async def stop(self) -> None:
        await self.runner.cleanup()

    async def hand_over(self, grace_s: float) -> None:
        """Stop as a restart's old process does (`proxy/restart.py`): stop accepting (the new
        process holds the socket), drain the open connections for `grace_s` (each closes after its
        next answer, an idle one after `grace_s`), then the graceful stop (`stop`)."""
        site = next(iter(self.runner.sites))
        assert isinstance(site, BoundedSite)
        await site.hand_over(grace_s)
        await self.stop()

    def listening_fd(self) -> int:
        """The listening socket's descriptor (a restart hands it to the new process: `proxy/restart.py`)."""
        site = next(iter(self.runner.sites))
        assert isinstance(site, BoundedSite)
        return site.listening_fd()

    def reloaded(self, verdict: dict[str, Any]) -> None:
        """A reload's verdict (`proxy/reload.py`), for the status page's last reloads."""
        self.runner.app[STATE].fleet.reloads.append(verdict)  # type: ignore[union-attr]  # started: it has a fleet

    async def reload(self, new: Settings) -> list[str]:
        """Apply `new`'s backends (weights, drains, added and removed backends) without dropping a
        connection, session or task (`proxy/fleet_config.py`); returns what changed. Raises
        `ConfigError` naming the key when it cannot be applied; the running configuration stays."""
        from .fleet_config import reconfigure

        state = self.runner.app[STATE]
        assert state.fleet is not None and state.http is not None, "the application has not started"
        async with state.reloading:
            face = face_reload(self.tls, state.settings, new)  # checked first: ConfigError before anything is applied
            changes = await reconfigure(state.fleet, state.settings, new, state.http, state.keyring, state.metrics, state.store) + face()
            await state.rollout.reconfigured()  # the rollout's weights again at once, or the one the reload set begun
            return changes


async def start(settings: Settings, *, environ: Mapping[str, str] = os.environ, keyring: Keyring | None = None,
                store: TaskStateStore | None = None, tracer_provider: Any = None, listening_fd: int | None = None,
                taking_over: bool = False) -> RunningProxy:
    """Start the proxy in this event loop on `settings.listen` (port 0 = ephemeral), or on the
    listening socket `listening_fd` (a worker's, or one a restart handed over: `proxy/restart.py`);
    `taking_over`: a one-process restart's new process, which accepts before its first probes.

    Raises `UnsupportedBackend` for a backend of no dialect the proxy serves, `ConfigError` for bad settings.
    """
    tls = checked_at_start(settings)  # HTTPS with tls_cert; every TLS file loads (ConfigError naming it)
    app = create_app(settings, environ=environ, keyring=keyring, store=store, tracer_provider=tracer_provider)
    app[STATE].taking_over = taking_over
    # On stop: no new connections, requests in flight get up to shutdown_timeout_ms to finish.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=settings.shutdown_timeout_ms / 1000)
    await runner.setup()
    # Header deadline, idle timeout and connection cap (proxy/connections.py, docs/decisions.md §40).
    limits = ConnectionLimits(settings.header_timeout_ms / 1000, settings.idle_timeout_ms / 1000, settings.max_connections)
    site = BoundedSite(runner, settings.host, settings.port, limits, access_log=None, listening_fd=listening_fd, ssl_context=tls,
                       backlog=settings.listen_backlog, lean_paths=settings.endpoint_paths)  # plain POSTs: proxy/lean_face.py
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    host, port = runner.addresses[0][:2]
    lasting = app[STATE].lasting
    if lasting is not None and settings.replica_name is None and settings.port == 0:
        from .observe.lasting import replica_name

        lasting.replica = replica_name(None, port)
    base = f"{'https' if tls is not None else 'http'}://{host}:{port}"
    return RunningProxy(runner, base + settings.path, base, tls)


__all__ = ["create_app", "start", "RunningProxy", "UnsupportedBackend", "ConfigError"]
