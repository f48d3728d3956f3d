"""The health check (docs/decisions.md §78; issue 20 item 15): the only backend, killed with
SIGKILL, is seen down by `/readyz` within about one `health_interval_ms` although no request
reached it (the timed probe is 60 s away), and back once it accepts connections again; a request
bound to it waits only within the restart window (`reconnect_wait_ms` from its first refusal), so an
in-place restart stays invisible, and once the backend has been down longer it answers 502 at once.

How long a request waited is counted in tries, not measured: each refused connection a request
bound to its backend meets is one debug line of `proxy.upstream.endpoint`, one try every 200 ms
while it waits (docs/decisions.md §33), so a request answered at once made exactly one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import aiohttp
import pytest
from support import Caller, free_port, running_proxy

from proxy.demo.processes import ServerProcess, start_reference_v1_server
from proxy.logs import REQUEST_ID
from proxy.upstream.endpoint import RECONNECT_WAIT_S

pytestmark = pytest.mark.peers

REFUSED = "Backend 'main' unavailable: cannot reach it (ClientConnectorError)"
GREET = {"name": "greet", "arguments": {"name": "health"}}


class Tries(logging.Filter):
    """Counts, per request id, the refused connections met by requests that may wait for their
    backend (`RECONNECT_WAIT_S` above 0: not the probes, which never wait)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_request: dict[str | None, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.name == "proxy.upstream.endpoint"
            and "ClientConnectorError" in record.getMessage()
            and RECONNECT_WAIT_S.get() > 0
        ):
            request_id = REQUEST_ID.get()
            self.by_request[request_id] = self.by_request.get(request_id, 0) + 1
        return True


@pytest.fixture
def tries(caplog):
    caplog.set_level(logging.DEBUG, logger="proxy.upstream.endpoint")
    counter = Tries()
    caplog.handler.addFilter(counter)
    yield counter
    caplog.handler.removeFilter(counter)


def _kill(server: ServerProcess) -> None:
    """SIGKILL to the server's own PID, then reap it."""
    os.kill(server.pid, signal.SIGKILL)
    assert server.stop() == -signal.SIGKILL


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


async def test_readyz_follows_the_only_backend_killed_with_sigkill_without_any_request(tmp_path):
    """Before: 200 until a client request failed or the timed probe (60 s) ran."""
    port = free_port()
    server = await asyncio.to_thread(start_reference_v1_server, port)
    try:
        async with (
            running_proxy(f"http://127.0.0.1:{port}/mcp", tmp_path) as proxy,  # health_interval_ms 1000, probes every 60 s
            aiohttp.ClientSession() as http,
        ):
            assert await _readyz(http, proxy.base_url) == (200, {"status": "ready"})
            await asyncio.to_thread(_kill, server)
            # The bound waited for: the next health check (1 s) fails; 2 s of slack for a loaded machine.
            down = await _readyz_within(http, proxy.base_url, 503, 3)
            assert down == (503, {"status": "not ready", "backend": "main", "reason": REFUSED})
            server = await asyncio.to_thread(start_reference_v1_server, port)
            back = await _readyz_within(http, proxy.base_url, 200, 3)
            assert back == (200, {"status": "ready"})
    finally:
        server.stop()


async def test_a_request_to_a_backend_down_longer_than_reconnect_wait_answers_at_once(tmp_path, tries):
    """Before: every request to the dead only backend tried for `reconnect_wait_ms` (here 1.5 s:
    8 tries) before its 502."""
    port = free_port()
    server = await asyncio.to_thread(start_reference_v1_server, port)
    try:
        async with (
            running_proxy(f"http://127.0.0.1:{port}/mcp", tmp_path, reconnect_wait_ms=1500) as proxy,
            aiohttp.ClientSession() as http,
        ):
            caller = Caller(http, proxy.url)
            assert (await caller.call("tools/call", GREET)).result["content"] == [{"type": "text", "text": "Hello, health!"}]
            await asyncio.to_thread(_kill, server)
            assert (await _readyz_within(http, proxy.base_url, 503, 3))[0] == 503
            # Within the restart window: the request waits for the backend until the window ends.
            waited = await caller.call("tools/call", GREET, headers={"X-Request-Id": "in-window"})
            assert (waited.status, waited.error["message"]) == (502, REFUSED)
            assert tries.by_request["in-window"] > 1
            # Down longer than the window, as the health checks have seen: one try, and the 502.
            for n in range(3):
                at_once = await caller.call("tools/call", GREET, headers={"X-Request-Id": f"after-{n}"})
                assert (at_once.status, at_once.error["message"]) == (502, REFUSED)
            assert [tries.by_request[f"after-{n}"] for n in range(3)] == [1, 1, 1]
    finally:
        server.stop()


async def test_a_restart_within_reconnect_wait_is_a_delay_even_once_the_health_check_saw_it_down(tmp_path, tries):
    """The rolling upgrade's promise (README "Several backends") holds beside the health check: a
    request sent after the backend was killed and seen down is answered once it is back."""
    port = free_port()
    server = await asyncio.to_thread(start_reference_v1_server, port)
    try:
        async with (
            running_proxy(f"http://127.0.0.1:{port}/mcp", tmp_path, reconnect_wait_ms=60_000) as proxy,
            aiohttp.ClientSession() as http,
        ):
            caller = Caller(http, proxy.url)
            assert (await caller.call("tools/call", GREET)).result["content"] == [{"type": "text", "text": "Hello, health!"}]
            await asyncio.to_thread(_kill, server)
            assert (await _readyz_within(http, proxy.base_url, 503, 3))[0] == 503
            waiting = asyncio.ensure_future(caller.call("tools/call", GREET, headers={"X-Request-Id": "waiting"}))
            deadline = asyncio.get_running_loop().time() + 10
            while tries.by_request.get("waiting", 0) < 2:  # it met the refusal and is waiting
                assert asyncio.get_running_loop().time() < deadline, "the request never tried the backend"
                await asyncio.sleep(0.05)
            server = await asyncio.to_thread(start_reference_v1_server, port)
            answered = await asyncio.wait_for(waiting, 60)
            assert (answered.status, answered.result["content"]) == (200, [{"type": "text", "text": "Hello, health!"}])
            assert await _readyz_within(http, proxy.base_url, 200, 3) == (200, {"status": "ready"})
    finally:
        server.stop()
