"""The aiohttp application: routes, lifecycle, and an in-process runner for the demo and tests.

Routes: `POST <path>` (and `<path>/`) → the modern face; `GET`/`DELETE <path>` → 405 (the modern
wire has neither; with an `Mcp-Session-Id` → 404, no such session); `GET /healthz`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Mapping

import aiohttp
from aiohttp import web

from translators import jsonrpc
from translators.errors import INVALID_REQUEST, McpError
from translators.protocol import H_SESSION_ID
from translators.sealing import Keyring

from .backends import BackendHandle, UnsupportedBackend
from .config import ConfigError, Settings
from .faces.modern import ModernFace
from .faces.session import SessionFace
from .relay import relay
from .v1_over_v2 import V1OverV2
from .keys import load_master_key

log = logging.getLogger(__name__)

STATE: web.AppKey["ProxyState"] = web.AppKey("state")


@dataclass
class ProxyState:
    """What the handlers share: settings, keys, the backend and the face."""

    settings: Settings
    keyring: Keyring
    http: aiohttp.ClientSession | None = None
    backend: BackendHandle | None = None
    face: ModernFace | None = None
    session_face: SessionFace | None = None


async def _other_method(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    session_face = state.session_face
    if H_SESSION_ID in request.headers and state.backend is not None and state.backend.profile is not None \
            and state.backend.profile.dialect == "v1":
        return await relay(request, state.backend.connector, None, state.settings.forward_headers)
    if H_SESSION_ID in request.headers and session_face is not None:
        if request.method == "GET":
            return await session_face.handle_get(request)
        return await session_face.handle_delete(request)
    if H_SESSION_ID in request.headers:
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


async def _startup(app: web.Application) -> None:
    state = app[STATE]
    settings = state.settings
    state.http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=False), auto_decompress=True)
    state.backend = BackendHandle(settings.upstream[0], state.http, settings)
    state.face = ModernFace(settings, state.keyring, state.backend)
    state.session_face = SessionFace(settings, state.keyring, V1OverV2(settings, state.keyring, state.backend))
    state.face.session_face = state.session_face
    try:
        await state.backend.refresh(force=True)
    except McpError as exc:
        log.warning("backend %s not reachable at start (%s); requests will probe it again", state.backend.name, exc.message)
    except UnsupportedBackend:
        await state.http.close()
        state.http = None
        raise


async def _cleanup(app: web.Application) -> None:
    state = app[STATE]
    if state.backend is not None:
        await state.backend.close()
    if state.http is not None:
        await state.http.close()


def create_app(settings: Settings, *, environ: Mapping[str, str] = os.environ, keyring: Keyring | None = None) -> web.Application:
    """The proxy as an aiohttp `Application`. Startup probes the backend and raises
    `UnsupportedBackend` when it is not a v1 backend.

    Raises `ConfigError` when no upstream is configured or the key cannot be loaded.
    """
    if len(settings.upstream) != 1:
        raise ConfigError("upstream: exactly one backend is supported in this version (give --upstream URL)")
    if keyring is None:
        key, source = load_master_key(settings, environ)
        log.info("sealing key from %s", source)
        keyring = Keyring(key)
    # aiohttp's own limit stays above ours so the face can answer 413 with a JSON-RPC body.
    app = web.Application(client_max_size=settings.max_body_bytes + 1024)
    app[STATE] = ProxyState(settings, keyring)
    path = settings.path.rstrip("/") or "/"
    for route in {path, path + "/"} if path != "/" else {"/"}:
        app.router.add_post(route, _post)
        app.router.add_get(route, _other_method, allow_head=False)
        app.router.add_delete(route, _other_method)
    app.router.add_get("/healthz", _healthz)
    app.on_startup.append(_startup)
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


async def start(settings: Settings, *, environ: Mapping[str, str] = os.environ, keyring: Keyring | None = None) -> RunningProxy:
    """Start the proxy in this event loop on `settings.listen` (port 0 = ephemeral).

    Raises `UnsupportedBackend` when the backend is not v1, `ConfigError` for bad settings.
    """
    app = create_app(settings, environ=environ, keyring=keyring)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    host, port = runner.addresses[0][:2]
    base = f"http://{host}:{port}"
    return RunningProxy(runner, base + settings.path, base)


__all__ = ["create_app", "start", "RunningProxy", "UnsupportedBackend", "ConfigError"]
