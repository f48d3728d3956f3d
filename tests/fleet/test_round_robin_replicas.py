"""Two replicas sharing the sealing key and a Redis store behind nginx in plain round robin (no
hashing, no stickiness: docs/load-balancing.md "Without affinity"): the real clients' checks and the
conformance suite pass as with one proxy. nginx and redis-server are Debian packages, installed
when missing by the project's own helpers (`proxy/bench/targets.py`, `proxy/bench/redis_server.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from conformance.test_conformance import PASSING, SUITE_SKIPS
from pairings.v1_client_v2_backend.test_v1_client_v2_backend import CHECK_NAMES as MCP1_CHECKS
from pairings.v1_client_v2_backend.test_v1_client_v2_backend import CHECKS_SCRIPT as MCP1_SCRIPT
from pairings.v2_modern_client_v1_backend.test_fastmcp_peers import CHECK_NAMES as FASTMCP4_CHECKS
from pairings.v2_modern_client_v1_backend.test_fastmcp_peers import CHECKS_SCRIPT as FASTMCP4_SCRIPT
from peer_checks import run_script
from support import running_proxy

from proxy.bench.targets import start_nginx
from proxy.demo.node_tools import SCENARIOS, ensure_conformance
from proxy.demo.peers import ensure_peer_env

pytestmark = pytest.mark.peers


@contextlib.asynccontextmanager
async def round_robin(upstream_url: str, redis_url: str, tmp_path: Path) -> AsyncIterator[str]:
    """Two replicas on `redis_url` behind nginx (round robin); yields nginx's MCP URL. At the end,
    each replica must have answered requests of a run of two or more (its own `/metrics`: a
    replica's counters are its own): a round robin that sent everything to one would prove nothing."""
    async with (
        running_proxy(upstream_url, tmp_path / "a", store=redis_url) as a,
        running_proxy(upstream_url, tmp_path / "b", store=redis_url) as b,
    ):
        nginx = await asyncio.to_thread(start_nginx, a.url, more=[b.url])
        try:
            yield nginx.url
        finally:
            await asyncio.to_thread(nginx.stop)
        answered = [await _answered(replica.base_url) for replica in (a, b)]
        assert min(answered) > 0 or sum(answered) < 2, answered  # a run of one request (or none) reaches one


async def _answered(base_url: str) -> float:
    """The MCP requests a replica answered (`mcp_tasks_proxy_requests_total`, every sample)."""
    async with aiohttp.ClientSession() as http, http.get(base_url + "/metrics") as response:
        text = await response.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("mcp_tasks_proxy_requests_total{"))


def _lines(stdout: str) -> dict[str, bool]:
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {line["check"]: line["ok"] for line in lines if "check" in line}


async def test_fastmcp4_client_checks_to_the_reference_v1_server(reference_v1_server, redis_url, tmp_path):
    async with round_robin(reference_v1_server.url, redis_url, tmp_path) as url:
        code, out, err = await run_script(ensure_peer_env("fastmcp4"), FASTMCP4_SCRIPT, url, 420)
    assert _lines(out) == dict.fromkeys(FASTMCP4_CHECKS, True), err[-3000:]


async def test_mcp1_client_checks_to_the_reference_v2_server(reference_v2_server, redis_url, tmp_path):
    async with round_robin(reference_v2_server.url, redis_url, tmp_path) as url:
        code, out, err = await run_script(ensure_peer_env("mcp-v1"), MCP1_SCRIPT, url, 420)
    assert _lines(out) == dict.fromkeys(MCP1_CHECKS, True), err[-3000:]


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_conformance_scenario_to_the_reference_v1_server(scenario, reference_v1_server, redis_url, tmp_path):
    conformance = ensure_conformance()
    async with round_robin(reference_v1_server.url, redis_url, tmp_path) as url:
        result = await asyncio.to_thread(conformance.run, url, scenario, tmp_path / "out", 60.0)
    allowed = PASSING | ({"SKIPPED"} if scenario in SUITE_SKIPS else set())  # as with one proxy (tests/conformance)
    bad = [(c.status, c.id, c.error_message) for c in result.checks if c.status not in allowed]
    assert (bool(result.checks), bad) == (True, [])
