"""The plain v1 server of ``plain_mcp1_server.py`` (official ``mcp==1.30.0`` SDK, one tool
``slow_echo``) served over HTTPS by uvicorn, requiring a client certificate of ``--client-ca``
(``CERT_REQUIRED``): a backend behind mutual TLS, for the TLS tests (tests/backends/test_tls_backends.py).

Run in the ``mcp-v1`` peer environment (``proxy/demo/peers.py``)::

    python tls_mcp1_server.py --certfile server.pem --keyfile server.key --client-ca ca.pem [--port 0]

It prints ``LISTENING https://127.0.0.1:<port>/mcp`` once it accepts connections, and serves until
SIGTERM or SIGINT. Like every server on asyncio, it sends no TLS alert to a client without a
certificate: it closes the connection once the handshake is over.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
import sys
import warnings

warnings.simplefilter("ignore", DeprecationWarning)

import plain_mcp1_server  # noqa: E402  (beside this file: the server and its app)
import uvicorn  # noqa: E402
from loopback_serve import loopback_socket  # noqa: E402  (put on the path by plain_mcp1_server)


async def serve(args: argparse.Namespace) -> None:
    sock = loopback_socket("127.0.0.1", args.port)
    config = uvicorn.Config(
        plain_mcp1_server.build_app(),
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=2,
        ssl_certfile=args.certfile,
        ssl_keyfile=args.keyfile,
        ssl_ca_certs=args.client_ca,
        ssl_cert_reqs=ssl.CERT_REQUIRED,
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            await serving
            raise SystemExit("uvicorn stopped during startup")
        await asyncio.sleep(0.02)
    print(f"LISTENING https://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    await serving


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--certfile", required=True)
    parser.add_argument("--keyfile", required=True)
    parser.add_argument("--client-ca", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
