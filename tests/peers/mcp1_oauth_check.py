"""The official ``mcp==1.30.0`` client with an OAuth provider (``OAuthClientProvider``) configured,
pointed at a protected MCP endpoint: it must be challenged, find the protected-resource metadata
the challenge names, and go on to ask the authorization server that metadata lists.

Run it with the ``mcp-v1`` peer environment's python (``proxy/demo/peers.py``)::

    python mcp1_oauth_check.py --url http://127.0.0.1:<port>/mcp

Nothing has to answer at the authorization server: the flow stops there (the test that runs this
records what reached it). Output: one JSON line ``{"check": "oauth_discovery", "ok": bool,
"detail": ...}``, ``ok`` when the client's OAuth flow ended with an error (as it must, with no
authorization server) within ``--timeout`` seconds (default 20) without ever reaching the point
of sending the user to an authorization URL; ``detail`` is the error's class and message, or
what went wrong. Exit status 0 iff ok.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken


class MemoryStorage:
    """A `TokenStorage` in memory: nothing stored at start."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def check(url: str) -> dict[str, object]:
    redirected: list[str] = []

    async def redirect_handler(authorization_url: str) -> None:
        redirected.append(authorization_url)
        raise RuntimeError("no user agent in this check")

    async def callback_handler() -> tuple[str, str | None]:
        raise RuntimeError("no callback in this check")

    metadata = OAuthClientMetadata(redirect_uris=["http://127.0.0.1:9/callback"], client_name="mcp1-oauth-check")
    provider = OAuthClientProvider(url, metadata, MemoryStorage(), redirect_handler, callback_handler)
    try:
        async with streamablehttp_client(url, auth=provider) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
    except BaseException as exc:  # the flow must fail at the authorization server
        leaf = exc
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        return {"ok": not redirected, "detail": f"{leaf.__class__.__name__}: {leaf}"}
    return {"ok": False, "detail": "initialize succeeded without a token"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args()
    try:
        outcome = asyncio.run(asyncio.wait_for(check(args.url), args.timeout))
    except TimeoutError:
        outcome = {"ok": False, "detail": f"no outcome within {args.timeout} s"}
    print(json.dumps({"check": "oauth_discovery", **outcome}), flush=True)
    sys.exit(0 if outcome["ok"] else 1)


if __name__ == "__main__":
    main()
