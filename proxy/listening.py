"""The proxy's listening sockets (docs/decisions.md §40, §52, §170, §179): `BoundedSite`, aiohttp's
site whose connections are `connections.BoundedRequestHandler`s and whose stop loses no connection
accepted already; the lean face's targets (`lean_targets`); and the sockets `serve --workers` shares
(`shared_sockets`), after making sure nothing listens on the address (`nothing_listens`, also
asked by `check --probe`)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Collection
from typing import Any

from aiohttp import web
from aiohttp.web_urldispatcher import UrlMappingMatchInfo

from .connections import BoundedRequestHandler, ConnectionLimits, drain_connections
from .lean_face import LeanTarget, prepare_now


class BoundedSite(web.BaseSite):
    """A TCP listening socket whose connections are `BoundedRequestHandler`s (like aiohttp's
    `TCPSite`, which always builds the plain `RequestHandler`). `handler_args` go to aiohttp's
    `RequestHandler` (e.g. `access_log=None`). With `ssl_context` it serves HTTPS (`tls_cert`,
    `tls_key`); a client has `header_timeout_ms` for its TLS handshake as for its headers."""

    __slots__ = ("_host", "_port", "_limits", "_handler_args", "_listening_fd", "_lean_paths")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, limits: ConnectionLimits, *, backlog: int = 128,
                 listening_fd: int | None = None, ssl_context: ssl.SSLContext | None = None, lean_paths: Collection[str] = (),
                 **handler_args: Any):
        super().__init__(runner, backlog=backlog, ssl_context=ssl_context)
        self._lean_paths = lean_paths
        self._host = host
        self._port = port
        self._listening_fd = listening_fd
        """A listening socket served instead of binding one: a worker's (`shared_sockets`), or one a
        restart handed over (`proxy/restart.py`)."""
        self._limits = limits
        self._handler_args = handler_args

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context is not None else 'http'}://{self._host}:{self._port}"

    @property
    def limits(self) -> ConnectionLimits:
        return self._limits

    def listening_fd(self) -> int:
        """The descriptor of the listening socket (once started)."""
        sockets = getattr(self._server, "sockets", None)  # asyncio's and uvloop's servers alike
        assert sockets, "started"
        return int(sockets[0].fileno())

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None, "runner.setup() first"
        if isinstance(self._runner, web.AppRunner):
            self._limits.lean = lean_targets(self._runner.app, self._lean_paths)

        def protocol() -> BoundedRequestHandler:
            return BoundedRequestHandler(server, loop=loop, limits=self._limits, **self._handler_args)

        tls: dict[str, Any] = {}
        if self._ssl_context is not None:
            tls = {"ssl": self._ssl_context, "ssl_handshake_timeout": self._limits.header_timeout_s}
        if self._listening_fd is not None:
            handed = socket.socket(fileno=self._listening_fd)
            handed.setblocking(False)
            self._server = await loop.create_server(protocol, sock=handed, backlog=self._backlog, **tls)
        else:
            self._server = await loop.create_server(protocol, self._host, self._port, backlog=self._backlog, **tls)

    async def stop(self) -> None:
        """Stop accepting, losing no connection accepted already (docs/decisions.md §179): asyncio
        accepts in one loop turn and makes the connection's transport in a task that runs a turn
        later; a server closed in between makes that task fail and drops the connection with its
        request unread (a reset for its client; CPython gh-109564). So the listening socket is read
        no more first, and the tasks of what it accepted end (each connection made, and counted for
        a restart's drain) before the close. (uvloop makes the transport as it accepts: no such
        task, and no reader to remove.)"""
        loop = asyncio.get_running_loop()
        for listening in getattr(self._server, "sockets", None) or ():
            loop.remove_reader(listening.fileno())  # also cancels a read of it queued for this turn
        accepting = [task for task in asyncio.all_tasks(loop) if getattr(task.get_coro(), "__qualname__", "").endswith("._accept_connection2")]
        if accepting:
            await asyncio.wait(accepting, timeout=self._limits.header_timeout_s)  # a TLS handshake is bounded so too
        await super().stop()

    async def hand_over(self, grace_s: float) -> None:
        """A restart's old process lets go (`proxy/restart.py`): stop accepting (the new process
        holds the socket), then drain the open connections for `grace_s`
        (`connections.drain_connections`)."""
        await self.stop()
        await drain_connections(self._limits, grace_s)


def lean_targets(app: web.Application, paths: Collection[str]) -> dict[str, LeanTarget]:
    """The lean face's targets (`proxy/lean_face.py`): each of `paths` with its POST route's handler
    and the match info aiohttp's router gives it, made once."""
    targets: dict[str, LeanTarget] = {}
    for resource in app.router.resources():
        path = resource.canonical
        if path not in paths:
            continue
        for route in resource:
            if route.method == "POST":
                match_info = UrlMappingMatchInfo({}, route)
                match_info.add_app(app)
                match_info.freeze()
                targets[path] = LeanTarget(path, route.handler, match_info, prepare_now(app.on_response_prepare))
    return targets


def nothing_listens(host: str, port: int, *, first_only: bool) -> tuple[Any, Any, int, Any]:
    """Bind each address `serve` listens on for `host`:`port` (asyncio binds every one, and
    `shared_sockets` the first: `first_only`) without `SO_REUSEPORT`, and close it at once, never
    listening: raises `OSError` when something listens there (a `gaierror` for a name that does
    not resolve). Returns the first address's (family, type, protocol, address)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    for family, kind, proto, _, address in infos[:1] if first_only else infos:
        with socket.socket(family, kind, proto) as alone:
            alone.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio binds: IPv6 only, the IPv4 address is its own
                alone.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            alone.bind(address)
    family, kind, proto, _, address = infos[0]
    return family, kind, proto, address


def shared_sockets(host: str, port: int, count: int, backlog: int = 128) -> list[socket.socket]:
    """`count` listening sockets on `host`:`port` (its first address), each with `SO_REUSEPORT`: the
    supervisor of `serve --workers N` holds them, each worker serves on one, and a restart hands them
    all to the new supervisor (docs/decisions.md §52, §170). The kernel spreads new connections over
    them; a socket's queue outlives its worker while the supervisor holds it. Raises `OSError`:
    also when something listens there already, another `serve --workers` included, which the
    kernel would otherwise let these sockets join (`SO_REUSEPORT` sockets of one user share a port).
    """
    family, kind, proto, address = nothing_listens(host, port, first_only=True)
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sockets.append(socket.socket(family, kind, proto))
            sockets[-1].setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sockets[-1].setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:  # as asyncio binds: IPv6 only, the IPv4 address is its own
                sockets[-1].setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sockets[-1].bind(address)
            sockets[-1].listen(backlog)
    except OSError:
        for made in sockets:
            made.close()
        raise
    return sockets
