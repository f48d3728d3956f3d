"""A backend that goes down and comes back (docs/decisions.md, "Readiness"): `/readyz` follows it,
and the log says so once each way, however many times requests try to reach it meanwhile."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from support import Caller, free_port, running_proxy

from proxy.demo.processes import start_reference_v1_server

pytestmark = pytest.mark.peers

PROBE_INTERVAL_MS = 300
REFUSED = "Backend 'main' unavailable: cannot reach it (ClientConnectorError)"


async def _readyz(http: aiohttp.ClientSession, base_url: str) -> tuple[int, dict]:
    async with http.get(base_url + "/readyz") as response:
        return response.status, await response.json()


async def _readyz_within(http: aiohttp.ClientSession, base_url: str, status: int, seconds: float) -> tuple[int, dict]:
    """`/readyz` asked every 50 ms until it answers `status` or `seconds` have passed; the last answer."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        answer = await _readyz(http, base_url)
        if answer[0] == status or asyncio.get_running_loop().time() >= deadline:
            return answer
        await asyncio.sleep(0.05)


async def test_readyz_is_503_within_one_probe_interval_of_the_only_backend_stopping(tmp_path):
    port = free_port()
    server = await asyncio.to_thread(start_reference_v1_server, port)
    try:
        async with (
            running_proxy(f"http://127.0.0.1:{port}/mcp", tmp_path, probe_interval_ms=PROBE_INTERVAL_MS) as proxy,
            aiohttp.ClientSession() as http,
        ):
            assert await _readyz(http, proxy.base_url) == (200, {"status": "ready"})
            await asyncio.to_thread(server.stop)
            # The measured bound: the next timed probe fails within one interval (plus 1 s of slack).
            down = await _readyz_within(http, proxy.base_url, 503, PROBE_INTERVAL_MS / 1000 + 1)
            assert down == (503, {"status": "not ready", "backend": "main", "reason": REFUSED})
            server = await asyncio.to_thread(start_reference_v1_server, port)
            back = await _readyz_within(http, proxy.base_url, 200, PROBE_INTERVAL_MS / 1000 + 1)
            assert back == (200, {"status": "ready"})
    finally:
        server.stop()


async def test_a_backend_down_is_one_warning_and_back_is_one_more(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="proxy")
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    server = None
    try:
        async with running_proxy(url, tmp_path, reconnect_wait_ms=2000) as proxy, aiohttp.ClientSession() as http:
            caller = Caller(http, proxy.url)
            waited = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "down"}})
            assert (waited.status, waited.error["message"]) == (502, REFUSED)
            server = await asyncio.to_thread(start_reference_v1_server, port)
            answered = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "back"}})
            assert answered.result["content"] == [{"type": "text", "text": "Hello, back!"}]
    finally:
        if server is not None:
            server.stop()
    warnings = [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        ("proxy.upstream.backend", f"backend main is down: {REFUSED}"),
        ("proxy.upstream.backend", f"backend main is back: main at {url}/: v1 (2025-11-25; tool tasks)"),  # Starlette's 307
    ]
    retries = [r for r in caplog.records if r.name == "proxy.upstream.endpoint" and "ClientConnectorError" in r.getMessage()]
    assert len(retries) > 1 and {r.levelname for r in retries} == {"DEBUG"}  # each refused try: a debug line
