"""A backend that accepts connections and never answers (breaker finding): its probe is bounded
(`Endpoint.PROBE_TIMEOUT_S`), so the proxy starts, says why it is not ready, and serves the other
backends, instead of waiting `upstream_timeout_ms` (300 s) at start and at every reload."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from support import running_proxy

from proxy.upstream.endpoint import Endpoint


@pytest.fixture
async def silent_backend():
    """A TCP server on 127.0.0.1 that reads what it is sent and never answers; its URL."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read(1 << 20)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_silent_backend_is_down_after_the_probe_bound_and_the_proxy_starts(silent_backend, tmp_path, monkeypatch):
    monkeypatch.setattr(Endpoint, "PROBE_TIMEOUT_S", 1.0)
    async with (
        asyncio.timeout(60),
        running_proxy(silent_backend, tmp_path, upstream_timeout_ms=300_000) as proxy,
        aiohttp.ClientSession() as http,
    ):
        async with http.get(proxy.base_url + "/readyz") as response:
            assert (response.status, await response.json()) == (
                503,
                {
                    "status": "not ready",
                    "backend": "main",
                    "reason": "Backend 'main' unavailable: did not answer the probe within 1 s",
                },
            )
