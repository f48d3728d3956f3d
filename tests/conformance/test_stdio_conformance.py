"""The conformance suite's tasks scenarios through the proxy to stdio servers the proxy runs.

The same scenarios as `test_conformance.py`, with the reference v1 server and the FastMCP 3
fixture server run on stdio (`--stdio`) behind the proxy instead of on HTTP: every check passes
in front of the reference v1 server, exactly as over HTTP, and FastMCP 3 fails only the checks
it fails over HTTP (what it cannot express).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from stdio_support import running_stdio_proxy

from proxy.app import RunningProxy
from proxy.demo.node_tools import SCENARIOS, Conformance, ensure_conformance, format_counts

pytestmark = [pytest.mark.peers, pytest.mark.asyncio(loop_scope="module")]

PASSING = frozenset({"SUCCESS", "INFO"})
SUITE_SKIPS = frozenset({"tasks-status-notifications"})
RUN_TIMEOUT_S = 60.0
FASTMCP3_FIXTURE_LIMITS = {
    "tasks-lifecycle": {"sep-2663-tasks-get-status-failed"},
    "tasks-mrtr-input": {"tasks-mrtr-partial-fulfillment"},
    "tasks-mrtr-composition": {"sep-2663-mrtr-synchronous-before-task-creation"},
}
"""The checks FastMCP 3 fails over HTTP too (`test_conformance.FASTMCP3_FIXTURE_LIMITS`)."""


CONFORMANCE_UPSTREAM = {"hold_after_ms": 60_000}
"""Held tasks stay on (the default), but no fixture call is held: the suite's sync-only tools must
answer `complete`, and under a loaded CI host a call to one took over the default 1000 ms and was
held as a task (docs/decisions.md §127)."""


@pytest.fixture(scope="module")
def conformance() -> Conformance:
    return ensure_conformance()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stdio_v1(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningProxy]:
    async with running_stdio_proxy(
        "v1", tmp_path_factory.mktemp("stdio-v1-conformance"), upstream=CONFORMANCE_UPSTREAM
    ) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stdio_fastmcp3(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningProxy]:
    async with running_stdio_proxy(
        "fastmcp3", tmp_path_factory.mktemp("stdio-fastmcp3-conformance"), upstream=CONFORMANCE_UPSTREAM
    ) as running:
        yield running


def _failing(result, scenario: str) -> set[str]:  # type: ignore[no-untyped-def]
    allowed = PASSING | ({"SKIPPED"} if scenario in SUITE_SKIPS else set())
    return {f"{check.id}: {check.status} {check.error_message}" for check in result.checks if check.status not in allowed}


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_every_check_passes_through_the_proxy_to_the_reference_v1_server_on_stdio(
    scenario: str, conformance: Conformance, stdio_v1: RunningProxy, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out_dir: Path = tmp_path_factory.mktemp(f"stdio-conformance-{scenario}")
    result = await asyncio.to_thread(conformance.run, stdio_v1.url, scenario, out_dir, RUN_TIMEOUT_S)
    print(f"stdio v1 {scenario}: {format_counts(result.counts())}")
    assert result.checks, result.output
    assert _failing(result, scenario) == set()


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_fastmcp3_on_stdio_fails_only_what_it_fails_over_http(
    scenario: str, conformance: Conformance, stdio_fastmcp3: RunningProxy, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out_dir: Path = tmp_path_factory.mktemp(f"stdio-conformance-fastmcp3-{scenario}")
    result = await asyncio.to_thread(conformance.run, stdio_fastmcp3.url, scenario, out_dir, RUN_TIMEOUT_S)
    print(f"stdio fastmcp3 {scenario}: {format_counts(result.counts())}")
    assert result.checks, result.output
    assert {item.split(":")[0] for item in _failing(result, scenario)} == FASTMCP3_FIXTURE_LIMITS.get(scenario, set())
