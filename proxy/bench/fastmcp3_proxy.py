"""FastMCP 3.4.11's built-in proxy server, as a user would run it, for the benchmark's comparison.

Run it with the ``fastmcp3`` peer environment's python (see ``proxy/demo/peers.py``)::

    python fastmcp3_proxy.py --upstream http://127.0.0.1:<port>/mcp [--host 127.0.0.1] [--port 0]

It builds the proxy with ``fastmcp.server.create_proxy(<upstream url>)`` (FastMCP's recommended
way: a Streamable HTTP client to the upstream, a fresh upstream session per request), serves it
with ``http_app(path="/mcp")`` on uvicorn, and prints ``LISTENING http://127.0.0.1:<port>/mcp``
once it accepts connections. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "demo" / "servers"))  # runs as a script in a peer env
from loopback_serve import loopback_socket  # noqa: E402


async def _serve(upstream: str, host: str, port: int) -> None:
    import uvicorn
    from fastmcp.server import create_proxy

    sock = loopback_socket(host, port, backlog=1024)
    proxy = create_proxy(upstream, name="fastmcp3-bench-proxy")
    app = proxy.http_app(path="/mcp", transport="http")
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2, access_log=False))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            await serving
            raise SystemExit("uvicorn stopped during startup")
        await asyncio.sleep(0.02)
    print(f"LISTENING http://{host}:{sock.getsockname()[1]}/mcp", flush=True)
    await serving


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="FastMCP 3 proxy server for the benchmark")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    warnings.simplefilter("ignore")
    asyncio.run(_serve(args.upstream, args.host, args.port))


if __name__ == "__main__":
    main()
