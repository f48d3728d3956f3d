"""Attacks on the connection bounds (proxy/connections.py, docs/decisions.md §40, §46), with real
sockets against a proxy in front of the benchmark's modern upstream (in process)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
from support import proxy_port, running_proxy


async def test_liveness_is_answered_while_idle_sockets_hold_every_connection(fast_modern_upstream_url, tmp_path):
    async with running_proxy(fast_modern_upstream_url, tmp_path, max_connections=3, idle_timeout_ms=60_000) as proxy:
        idle = [await asyncio.open_connection("127.0.0.1", proxy_port(proxy)) for _ in range(3)]
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(proxy.base_url + "/healthz") as alive:
                    answer = (alive.status, await alive.json(), alive.headers.get("Connection"))
                async with http.post(proxy.url, data=b"{}", headers={"Content-Type": "application/json"}) as busy:
                    refused = (busy.status, json.loads(await busy.read()), busy.headers.get("Retry-After"))
                async with http.get(proxy.base_url + "/readyz") as ready:
                    not_ready = ready.status
        finally:
            for _, writer in idle:
                writer.close()
    # The process is alive: an orchestrator must not restart it because idle sockets fill the cap.
    # The connection is still closed after the answer, freeing its place at once.
    assert answer == (200, {"status": "ok"}, "close")
    assert refused == (
        503,
        {"jsonrpc": "2.0", "error": {"code": -32603, "message": ("Service Unavailable: too many open connections; retry later")}},
        "1",
    )
    assert not_ready == 503  # readiness: no new work can get in while the cap is reached
