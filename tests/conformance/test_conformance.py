"""The official MCP conformance suite's tasks scenarios against the proxy in front of the reference v1 server.

The suite (npm ``@modelcontextprotocol/conformance``, pinned in ``proxy/demo/node_tools.py``) is
installed with its own Node 22 on first use and cached (``cache_root()/node/``); that needs npm
and network access once. One test per ``tasks-*`` scenario (``docs/wire.md`` §7 "Conformance suite"): every
check must pass. The suite itself always skips ``tasks-status-notifications``, so ``SKIPPED`` is
accepted there only; ``INFO`` checks are informational and always accepted.

Per-scenario counts are printed by each test (visible with ``-s``), written as one block to the
terminal when the module finishes, and saved to ``<pytest basetemp>/conformance-summary.json``.
The suite's own result files stay under ``<pytest basetemp>/conformance*/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from support import running_proxy

from proxy.app import RunningProxy
from proxy.demo.node_tools import SCENARIOS, Conformance, ScenarioResult, ensure_conformance, format_counts


def _conformance_mark() -> list[pytest.MarkDecorator]:
    """``pytest.mark.conformance`` once the marker is registered in pyproject.toml.

    Under ``--strict-markers`` an unregistered marker fails the whole module at import, so until
    the registration lands the mark is left off there rather than breaking collection; without
    strictness it is applied (``-m conformance`` selects these tests) and its warning is muted.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        try:
            return [pytest.mark.conformance]
        except pytest.fail.Exception:
            return []


pytestmark = [pytest.mark.peers, *_conformance_mark(), pytest.mark.asyncio(loop_scope="module")]

#: Statuses that pass in every scenario.
PASSING = frozenset({"SUCCESS", "INFO"})
#: Scenarios the suite skips (wholly or in part) by design, where SKIPPED is accepted too.
SUITE_SKIPS = frozenset({"tasks-status-notifications"})
#: Kill one suite run after this long. The suite gives each scenario 30 s itself (10 s a request);
#: the margin covers Node's start-up and writing results.
RUN_TIMEOUT_S = 60.0


CONFORMANCE_UPSTREAM = {"hold_after_ms": 60_000}
"""Held tasks stay on (the default), but no fixture call is held: the suite's sync-only tools must
answer `complete`, and under a loaded CI host a call to one took over the default 1000 ms and was
held as a task (docs/decisions.md §127)."""


@pytest.fixture(scope="module")
def conformance() -> Conformance:
    """The installed suite; the first use ever runs ``npm install`` (cached afterwards)."""
    return ensure_conformance()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxy(reference_v1_server, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningProxy]:
    """The proxy in front of the reference v1 server, shared by all scenarios of this module."""
    async with running_proxy(
        reference_v1_server.url, tmp_path_factory.mktemp("conformance-proxy-state"), main_keys=CONFORMANCE_UPSTREAM
    ) as running:
        yield running


@pytest.fixture(scope="module")
def summary(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Collects per-scenario results; at module end prints them and writes conformance-summary.json."""
    results: dict[str, Any] = {}
    yield results
    if not results:
        return
    path = tmp_path_factory.getbasetemp() / "conformance-summary.json"
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    # Teardown output is captured like test output; write past the capture, as capsys.disabled() does.
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        width = max(len(name) for name in results)
        reporter.write_line("")
        reporter.write_sep("-", "conformance suite: tasks scenarios through the proxy")
        for scenario, entry in results.items():
            reporter.write_line(f"{scenario:<{width}}  {format_counts(entry['counts'])}  ({entry['duration_s']:.1f} s)")
            for failing in entry["failing"]:
                reporter.write_line(f"{'':<{width}}    - {failing['status']} {failing['id']}: {failing['error_message']}")
        reporter.write_line(f"summary: {path}")


def _failure_report(result: ScenarioResult, bad: list[Any]) -> str:
    lines = [
        f"{result.scenario}: {len(bad)} of {len(result.checks)} checks did not pass "
        f"({format_counts(result.counts())}; suite exit status {result.exit_code}; {result.checks_file})"
    ]
    lines += [f"  - {check.status} {check.id}: {check.error_message or check.name}" for check in bad]
    return "\n".join(lines)


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_tasks_scenario_passes(
    scenario: str,
    conformance: Conformance,
    proxy: RunningProxy,
    summary: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    out_dir: Path = tmp_path_factory.mktemp(f"conformance-{scenario}")
    # The suite is a blocking subprocess; run it off the loop so the proxy keeps serving.
    result = await asyncio.to_thread(conformance.run, proxy.url, scenario, out_dir, RUN_TIMEOUT_S)

    allowed = PASSING | ({"SKIPPED"} if scenario in SUITE_SKIPS else set())
    bad = [check for check in result.checks if check.status not in allowed]
    summary[scenario] = {
        "counts": result.counts(),
        "exit_code": result.exit_code,
        "duration_s": round(result.duration_s, 2),
        "failing": [{"id": c.id, "status": c.status, "error_message": c.error_message} for c in bad],
        "checks_file": str(result.checks_file),
    }
    print(f"{scenario}: {format_counts(result.counts())} ({result.duration_s:.1f} s)")

    assert result.checks, f"{scenario}: the suite reported no checks; output tail:\n{result.output}"
    assert not bad, _failure_report(result, bad)


FASTMCP3_FIXTURE_LIMITS = {
    # FastMCP 3 ends a protocol error as `failed` + an isError tool result, which §4.4 reports as
    # `completed` + isError: it cannot express a JSON-RPC error outcome.
    "tasks-lifecycle": {"sep-2663-tasks-get-status-failed"},
    # FastMCP 3 keeps one question slot per task, so multi_input asks one question after the other.
    "tasks-mrtr-input": {"tasks-mrtr-partial-fulfillment"},
    # FastMCP 3 cannot ask before the task exists (no MRTR round before creation).
    "tasks-mrtr-composition": {"sep-2663-mrtr-synchronous-before-task-creation"},
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def proxy_fastmcp3(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningProxy]:
    from proxy.demo.processes import start_fastmcp3_server

    server = start_fastmcp3_server()
    try:
        async with running_proxy(
            server.url, tmp_path_factory.mktemp("proxy-fastmcp3"), main_keys=CONFORMANCE_UPSTREAM
        ) as running:
            yield running
    finally:
        server.stop()


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_tasks_scenario_in_front_of_fastmcp3_fails_only_where_fastmcp3_cannot_express_the_fixture(
    scenario: str, conformance: Conformance, proxy_fastmcp3: RunningProxy, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out_dir: Path = tmp_path_factory.mktemp(f"conformance-fastmcp3-{scenario}")
    result = await asyncio.to_thread(conformance.run, proxy_fastmcp3.url, scenario, out_dir, RUN_TIMEOUT_S)
    allowed = PASSING | ({"SKIPPED"} if scenario in SUITE_SKIPS else set())
    failing = {check.id for check in result.checks if check.status not in allowed}
    print(f"fastmcp3 {scenario}: {format_counts(result.counts())}")
    assert result.checks, result.output
    assert failing == FASTMCP3_FIXTURE_LIMITS.get(scenario, set()), _failure_report(
        result, [c for c in result.checks if c.status not in allowed]
    )
