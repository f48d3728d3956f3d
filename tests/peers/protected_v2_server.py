"""The reference v2 server (``proxy/demo/servers/v2_server.py``: FastMCP 4.1.4 with the tasks
extension) protected with the MCP authorization profile: FastMCP's ``RemoteAuthProvider`` over a
``StaticTokenVerifier`` (a resource server only; its authorization server is ``--issuer``, where
nothing has to run), and one more tool, ``whoami()``, that answers the token's ``client_id``.

Run in the ``fastmcp4`` peer environment (``proxy/demo/peers.py``)::

    python protected_v2_server.py --issuer http://127.0.0.1:9/ --host 127.0.0.1 --port 0

It prints ``LISTENING http://127.0.0.1:<port>/mcp`` once it accepts connections. Tokens (scope
``mcp:tools`` required): ``alice-token`` (alice), ``bob-token`` (bob), ``service-token``
(service); ``expired-token`` has expired; anything else is refused 401. Every tool of the
reference v2 server is there as it is.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "proxy" / "demo" / "servers"))
import loopback_serve  # noqa: E402  (the serve-and-announce entry point the reference servers share)
import v2_server  # noqa: E402  (the reference v2 server's app and tools)
from fastmcp.server.auth import RemoteAuthProvider  # noqa: E402
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier  # noqa: E402
from fastmcp.server.dependencies import get_access_token  # noqa: E402

SCOPE = "mcp:tools"
TOKENS = {
    "alice-token": {"client_id": "alice", "scopes": [SCOPE]},
    "bob-token": {"client_id": "bob", "scopes": [SCOPE]},
    "service-token": {"client_id": "service", "scopes": [SCOPE]},
    "expired-token": {"client_id": "expired", "scopes": [SCOPE], "expires_at": 1},
}


def _issuer() -> str:
    if "--issuer" in sys.argv:
        at = sys.argv.index("--issuer")
        issuer = sys.argv[at + 1]
        del sys.argv[at : at + 2]
        return issuer
    return "http://127.0.0.1:9/"


ISSUER = _issuer()


@v2_server.mcp.tool()
def whoami() -> str:
    """The identity of the token this request carries."""
    token = get_access_token()
    return token.client_id if token is not None else "anonymous"


def build_app():
    base = loopback_serve.bound_url.removesuffix("/mcp")
    verifier = StaticTokenVerifier(TOKENS, required_scopes=[SCOPE])
    v2_server.mcp.auth = RemoteAuthProvider(verifier, authorization_servers=[ISSUER], base_url=base)
    return v2_server.mcp.http_app(path="/mcp", transport="http")


if __name__ == "__main__":
    loopback_serve.main(__doc__, build_app)
