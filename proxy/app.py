"""The aiohttp application: routes, lifecycle, and an in-process runner for the demo and tests.

Routes: `POST <path>` (and `<path>/`) → the entry face, which routes to a backend (`proxy.fleet`);
`GET`/`DELETE <path>` → the session's (405 without an `Mcp-Session-Id`: the modern wire has
neither; 404 for an unknown one); `GET /healthz` (alive), `GET /readyz` (new work can reach a
backend now), `GET /metrics` (Prometheus text format).
Every response carries `X-Request-Id` (the client's when safe, else a new one; also in log lines).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

import aiohttp
from aiohttp import web

from translators import jsonrpc
from translators.errors import INVALID_REQUEST, McpError
from translators.protocol import H_SESSION_ID
from translators.sealing import Keyring

from .backends import BackendHandle, UnsupportedBackend
from .config import ConfigError, Settings
from .connections import BoundedSite, ConnectionLimits
from .faces.modern import ModernFace
from .faces.session import SessionFace
from .fleet import Fleet, Stack
from .relay import relay
from .sqlite_store import SqliteTaskStore, StoreDamaged, StoreInUse
from .store import TaskStateStore
from .keys import load_master_key
from .logs import REQUEST_ID, REQUEST_ID_HEADER, request_id_from
from .metrics import Metrics

log = logging.getLogger(__name__)

STATE: web.AppKey["ProxyState"] = web.AppKey("state")
REQUEST_ID_KEY = web.RequestKey("request_id", str)
READY_PROBE_TIMEOUT_S = 5.0


@dataclass
class ProxyState:
    """What the handlers share: settings, keys, the backends (`fleet`) and the session face.
    `backend` and `face` are the first backend's (the entry face routes to the others)."""

    settings: Settings
    keyring: Keyring
    http: aiohttp.ClientSession | None = None
    fleet: Fleet | None = None
    backend: BackendHandle | None = None
    face: ModernFace | None = None
    session_face: SessionFace | None = None
    metrics: Metrics = field(default_factory=Metrics)
    prober: asyncio.Future[None] | None = None
    """The timed probe of every backend (`Fleet.keep_probing`), cancelled at cleanup."""
    store: TaskStateStore | None = None
    """The task state only this proxy knows (`proxy/store.py`): the SQLite store in `state_dir`
    (`store = "sqlite"`), one given to `create_app`, or None: each backend keeps its own in memory."""
    own_store: bool = False
    """Whether the application opened `store` (and so closes it)."""
    maintainer: asyncio.Future[None] | None = None
    """The store's sweep and checkpoint loop (`SqliteTaskStore.maintain`), cancelled at cleanup."""


async def _other_method(request: web.Request) -> web.StreamResponse:
    """GET and DELETE: the proxy's own sessions, relayed sessions (routed like their POSTs), else
    404 for a session id and 405 without one (the modern wire has neither)."""
    state = request.app[STATE]
    session_face = state.session_face
    session_id = request.headers.get(H_SESSION_ID)
    if session_id is not None and state.fleet is not None and not (session_face and session_face.owns(session_id)):
        routed = state.fleet.relayed_session(session_id)
        if routed is not None:
            stack, upstream_id = routed
            profile = stack.backend.profile
            if upstream_id is not None or (profile is not None and profile.dialect in ("v1", "v2-session")):
                task_ids = state.fleet.session_task_ids(stack.name, upstream_id)
                return await relay(request, stack.backend.connector, None, state.settings.forward_headers, session_id=upstream_id,
                                   seal_session=state.fleet.session_sealer(stack.name), rewrite=task_ids[1] if task_ids else None)
    if session_id is not None and session_face is not None:
        if request.method == "GET":
            return await session_face.handle_get(request)
        return await session_face.handle_delete(request)
    if session_id is not None:
        error = McpError(INVALID_REQUEST, "Session not found")
        return web.Response(body=jsonrpc.dumps(jsonrpc.error_response(None, error)), status=404, content_type="application/json")
    error = McpError(INVALID_REQUEST, f"Method Not Allowed: the 2026-07-28 wire has no {request.method}")
    return web.Response(body=jsonrpc.dumps(jsonrpc.error_response(None, error)), status=405,
                        content_type="application/json", headers={"Allow": "POST"})


async def _post(request: web.Request) -> web.StreamResponse:
    face = request.app[STATE].face
    assert face is not None, "the application has not started"
    return await face.handle_post(request)


async def _healthz(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    """200 while new work can reach at least one backend (`Fleet.readiness`); else 503 naming the
    first backend not ready and why (probing each first, at most `READY_PROBE_TIMEOUT_S` each)."""
    fleet = request.app[STATE].fleet
    if fleet is None:
        return web.json_response({"status": "not ready", "backend": None, "reason": "starting"}, status=503)
    not_ready = await fleet.readiness(READY_PROBE_TIMEOUT_S)
    if not_ready is not None:
        return web.json_response({"status": "not ready", "backend": not_ready[0], "reason": not_ready[1]}, status=503)
    return web.json_response({"status": "ready"})


async def _metrics(request: web.Request) -> web.Response:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return web.Response(body=generate_latest(request.app[STATE].metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


@web.middleware
async def _request_id(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Give the request its id (see `proxy.logs.request_id_from`) for log lines and the response."""
    request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
    request[REQUEST_ID_KEY] = request_id
    token = REQUEST_ID.set(request_id)
    try:
        return await handler(request)
    finally:
        REQUEST_ID.reset(token)


async def _echo_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """`X-Request-Id` on every response, streamed ones included (set as headers are sent)."""
    request_id = request.get(REQUEST_ID_KEY)
    if request_id is not None:
        response.headers[REQUEST_ID_HEADER] = request_id


async def _startup(app: web.Application) -> None:
    state = app[STATE]
    settings = state.settings
    # No cookie jar: a backend's cookies must never travel from one client's request to another's.
    state.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=False), auto_decompress=True,
                                       cookie_jar=aiohttp.DummyCookieJar())
    state.fleet = Fleet((Stack(upstream, state.http, settings, state.keyring, state.metrics, state.store) for upstream in settings.upstream),
                        state.keyring)
    state.session_face = SessionFace(settings, state.keyring, state.store)
    state.session_face.rules_for = _rules_for(state.fleet)
    if isinstance(state.store, SqliteTaskStore):
        state.maintainer = asyncio.ensure_future(state.store.maintain())
    for stack in state.fleet.stacks:
        stack.face.fleet = state.fleet
        stack.face.session_face = state.session_face
    state.backend = state.fleet.first.backend
    state.face = state.fleet.first.face
    try:
        await state.fleet.refresh_all()
    except UnsupportedBackend:
        await state.http.close()
        state.http = None
        raise
    state.prober = asyncio.ensure_future(state.fleet.keep_probing(settings.probe_interval_ms / 1000))


def _rules_for(fleet: Fleet) -> Callable[[str, str], Any]:
    """(backend name, face) → the rules a restored proxy session uses, None for a backend no
    longer configured (`SessionFace.rules_for`)."""

    def rules_for(backend: str, face: str) -> Any:
        for stack in fleet.stacks:
            if stack.name == backend:
                return stack.v2_rules if face == "v2-session" else stack.v1_rules
        return None

    return rules_for


def _open_store(settings: Settings) -> TaskStateStore | None:
    """The store `settings.store` names: the SQLite file `<state_dir>/tasks.sqlite3`, or None
    (in memory). Raises `ConfigError` when the file cannot be opened."""
    if settings.store == "memory":
        return None
    path = Path(settings.state_dir).expanduser() / "tasks.sqlite3"
    try:
        return SqliteTaskStore(path, max_tasks=settings.max_tasks * len(settings.upstream), max_sessions=settings.max_sessions)
    except (StoreDamaged, StoreInUse) as exc:
        raise ConfigError(f"store: {exc}") from None
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"store: cannot open {path}: {exc}") from None


async def _shutdown(app: web.Application) -> None:
    """The proxy is stopping (no longer listening): end the session face's long-lived GET streams
    so that only real requests in flight are waited for (up to `shutdown_timeout_ms`)."""
    session_face = app[STATE].session_face
    if session_face is not None:
        session_face.close_streams()


async def _cleanup(app: web.Application) -> None:
    state = app[STATE]
    for loop_task in (state.prober, state.maintainer):
        if loop_task is not None:
            loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop_task
    if state.fleet is not None:
        await state.fleet.close()
    if state.http is not None:
        await state.http.close()
    if state.own_store and state.store is not None:
        state.store.close()


def create_app(settings: Settings, *, environ: Mapping[str, str] = os.environ, keyring: Keyring | None = None,
               store: TaskStateStore | None = None) -> web.Application:
    """The proxy as an aiohttp `Application`. Startup probes every backend and raises
    `UnsupportedBackend` for one that speaks no dialect the proxy serves. `store`: the task state
    to use (`proxy/store.py`); by default the one `settings.store` names (SQLite in `state_dir`).

    Raises `ConfigError` when no upstream is configured or the key cannot be loaded.
    """
    if not settings.upstream:
        raise ConfigError("upstream: at least one backend is required (give --upstream URL, or [[upstream]] tables in the config file)")
    if keyring is None:
        key, source = load_master_key(settings, environ)
        log.info("sealing key from %s", source)
        keyring = Keyring(key)
    # aiohttp's own limit stays above ours so the face can answer 413 with a JSON-RPC body.
    app = web.Application(client_max_size=settings.max_body_bytes + 1024, middlewares=[_request_id])
    own_store = store is None
    if store is None:
        store = _open_store(settings)
    app[STATE] = ProxyState(settings, keyring, store=store, own_store=own_store)
    path = settings.path.rstrip("/") or "/"
    for route in {path, path + "/"} if path != "/" else {"/"}:
        app.router.add_post(route, _post)
        app.router.add_get(route, _other_method, allow_head=False)
        app.router.add_delete(route, _other_method)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    app.on_response_prepare.append(_echo_request_id)
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

    async def stop(self) -> None:
        await self.runner.cleanup()


async def start(settings: Settings, *, environ: Mapping[str, str] = os.environ, keyring: Keyring | None = None,
                store: TaskStateStore | None = None) -> RunningProxy:
    """Start the proxy in this event loop on `settings.listen` (port 0 = ephemeral).

    Raises `UnsupportedBackend` for a backend of no dialect the proxy serves, `ConfigError` for bad settings.
    """
    app = create_app(settings, environ=environ, keyring=keyring, store=store)
    # On stop: no new connections, requests in flight get up to shutdown_timeout_ms to finish.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=settings.shutdown_timeout_ms / 1000)
    await runner.setup()
    # Header deadline, idle timeout and connection cap (proxy/connections.py, docs/decisions.md §40).
    limits = ConnectionLimits(settings.header_timeout_ms / 1000, settings.idle_timeout_ms / 1000, settings.max_connections)
    site = BoundedSite(runner, settings.host, settings.port, limits, access_log=None)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    return RunningProxy(runner, base + settings.path, base)


__all__ = ["create_app", "start", "RunningProxy", "UnsupportedBackend", "ConfigError"]
