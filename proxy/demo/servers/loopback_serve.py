"""The entry point the reference and fixture MCP servers share: bind loopback, serve, announce.

Imported by plain name by ``v1_server.py``, ``v1_fastmcp3_server.py`` and ``v2_server.py``, which
run as scripts in their own peer environments (``proxy/demo/peers.py``); it needs only the stdlib
and ``uvicorn``, which every one of those environments has.

:func:`main` parses ``--host``/``--port``, binds the socket itself (port 0 picks a free port;
loopback addresses only), serves the app on uvicorn and prints exactly one line
``LISTENING http://<host>:<port>/mcp`` once it accepts connections, then serves until SIGTERM or
SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import socket
import sys
import warnings
from collections.abc import Callable
from typing import Any

#: Builds the ASGI app to serve (called once the socket is bound).
AppFactory = Callable[[], Any]
#: The URL the server is reached at (``http://<host>:<port>/mcp``), set once the socket is bound,
#: before ``build_app()`` is called (a protected server names it as its resource).
bound_url = ""


def loopback_socket(host: str, port: int, backlog: int = 128) -> socket.socket:
    """A listening, non-blocking socket bound to ``host`` (a loopback IP address) and ``port``.
    Stdlib only, so the benchmark's own servers share it too.

    Raises ``SystemExit`` with one line (``cannot listen on HOST:PORT: <reason>``) when the address
    cannot be bound, e.g. a port already in use, and for a host that is not a loopback address.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise SystemExit(f"--host must be a loopback IP address, not {host!r}") from None
    if not address.is_loopback:
        raise SystemExit(f"--host must be a loopback address, not {host!r}")
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:  # e.g. a busy port: one line for the operator, not a traceback
        sock.close()
        raise SystemExit(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


async def serve(build_app: AppFactory, host: str, port: int) -> None:
    """Serve ``build_app()`` on ``host:port``; print the ``LISTENING`` line once it is up."""
    sock = loopback_socket(host, port)
    bound_port = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    import uvicorn  # here, so that `loopback_socket` needs nothing beyond the stdlib

    global bound_url
    bound_url = f"http://{url_host}:{bound_port}/mcp"
    config = uvicorn.Config(build_app(), log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    uv_server = uvicorn.Server(config)
    serving = asyncio.create_task(uv_server.serve(sockets=[sock]))
    while not uv_server.started:
        if serving.done():
            await serving  # startup failed: surface the error
            raise SystemExit("uvicorn stopped during startup")
        await asyncio.sleep(0.02)
    print(f"LISTENING http://{url_host}:{bound_port}/mcp", flush=True)
    await serving


def main(doc: str | None, build_app: AppFactory, argv: list[str] | None = None) -> None:
    """Parse ``--host``/``--port`` (``doc``'s first line describes the server) and serve
    ``build_app()`` until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one (default)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    warnings.simplefilter("ignore", DeprecationWarning)
    asyncio.run(serve(build_app, args.host, args.port))
