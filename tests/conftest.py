"""Pytest configuration shared by the whole test suite.

Sections:

* Session hooks: run-wide behaviour of pytest itself.
* Shared fixtures: servers and helpers used by several test modules. Add new shared fixtures
  to that section.
"""

from __future__ import annotations

import asyncio
import io
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from proxy.demo.processes import ServerProcess, start_reference_v1_server, start_reference_v2_server

# ============================================================================================
# Session hooks
# ============================================================================================

#: pytest's exit status when no test was collected (``pytest.ExitCode.NO_TESTS_COLLECTED``).
_NO_TESTS_COLLECTED = 5


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Turn "no tests collected" (exit status 5) into a failure (1): an empty run proves nothing."""
    if exitstatus == _NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


#: The markers that keep a test out of the fast tier (`pytest -m fast`, docs/development.md).
_NOT_FAST = ("peers", "conformance", "slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `fast` every test that is none of `_NOT_FAST`: unit, translator and in-process tests
    (real sockets and small child processes of the proxy's own interpreter, no peer environment,
    no valgrind), the contributors' inner loop."""
    for item in items:
        if not any(item.get_closest_marker(name) for name in _NOT_FAST):
            item.add_marker(pytest.mark.fast)


#: How long before pytest-timeout's bound a test still running has its asyncio tasks printed.
_TASKS_SHOWN_BEFORE_TIMEOUT_S = 20.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test still running shortly before pytest-timeout fails it has the stacks of its asyncio
    tasks printed into its report (pytest-timeout shows only threads: a hung test's event loop
    waits in `select`, and what it waits for is in a task's stack)."""
    marker = item.get_closest_marker("timeout")
    bound = float(marker.args[0]) if marker is not None and marker.args else float(item.config.getini("timeout") or 0)
    finished = threading.Event()
    if bound > 0:
        threading.Thread(
            target=_print_tasks_unless, args=(finished, max(bound - _TASKS_SHOWN_BEFORE_TIMEOUT_S, 1.0)), daemon=True
        ).start()
    try:
        yield
    finally:
        finished.set()


def _print_tasks_unless(finished: threading.Event, after_s: float) -> None:
    if finished.wait(after_s):
        return
    out = io.StringIO()
    out.write(f"+++ asyncio tasks still pending after {after_s:g} s +++\n")
    for task in list(getattr(asyncio.tasks, "_all_tasks", ())):  # from this thread: no running loop to ask
        if not task.done():
            out.write(f"--- {task.get_name()}: {task.get_coro()!r}\n")
            task.print_stack(limit=40, file=out)
    sys.stdout.write(out.getvalue())  # pytest captures it into the test's report
    sys.stdout.flush()


# ============================================================================================
# Isolation from the machine
# ============================================================================================


@pytest.fixture(autouse=True)
def own_default_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every test gets a default `state_dir` of its own (`MCP_TASKS_PROXY_STATE_DIR`, which the
    proxies it starts in-process and as child processes inherit), so that a test that leaves
    `state_dir` unset never shares `~/.local/state/mcp-tasks-proxy` with a proxy running on the
    machine, or with another test (docs/decisions.md §79). The directory is yielded."""
    from proxy.config import STATE_DIR_ENV

    directory = tmp_path_factory.mktemp("default-state")
    monkeypatch.setenv(STATE_DIR_ENV, str(directory))
    yield directory


# ============================================================================================
# Shared fixtures
# ============================================================================================


def _running(start: Callable[[], ServerProcess]) -> Iterator[ServerProcess]:
    """A server started by `start`, stopped by its own handle when the fixture ends."""
    server = start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Any]:
    """A redis-server on a loopback port (Debian's package, installed when missing), one per run,
    stopped by its PID (`proxy/bench/redis_server.py`)."""
    from proxy.bench.redis_server import start_redis

    server = start_redis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: Any) -> str:
    """The Redis server's URL, its database emptied for this test."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    client.close()
    return str(redis_server.url)


@pytest.fixture
def own_redis() -> Iterator[Any]:
    """A redis-server of this test's own, nothing persisted, which the test may pause (SIGSTOP),
    resume, restart and stop (`proxy/bench/redis_server.py`); stopped by its PID at the end."""
    from proxy.bench.redis_server import start_redis

    server = start_redis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def reference_v1_server() -> Iterator[ServerProcess]:
    """The reference v1 server (``proxy/demo/servers/v1_server.py`` on ``mcp==1.30.0``), one per run.

    Yields the running :class:`ServerProcess`; its ``url`` is ``http://127.0.0.1:<port>/mcp``.
    The first use builds the ``mcp-v1`` peer environment (network access to PyPI needed once).
    The server is stopped by its own handle when the run ends.
    """
    yield from _running(start_reference_v1_server)


@pytest.fixture(scope="session")
def reference_v2_server() -> Iterator[ServerProcess]:
    """The reference v2 server (``proxy/demo/servers/v2_server.py`` on ``fastmcp==4.1.4`` +
    ``fastmcp-tasks==4.1.4``), one per run, stopped by its own handle at the end."""
    yield from _running(start_reference_v2_server)


@pytest.fixture(scope="session")
def second_v1_server() -> Iterator[ServerProcess]:
    """A second reference v1 server, for tests with several backends (one per run)."""
    yield from _running(start_reference_v1_server)


@pytest.fixture(scope="session")
def listing_v1_server() -> Iterator[ServerProcess]:
    """The reference v1 server opted in to list changes (``REFERENCE_V1_LIST_CHANGED=1``: it
    declares ``tools.listChanged`` and has ``add_tool``), one per run, stopped by its own handle."""
    yield from _running(lambda: start_reference_v1_server(env={"REFERENCE_V1_LIST_CHANGED": "1"}))


@pytest.fixture(scope="session")
def resources_v1_server() -> Iterator[ServerProcess]:
    """The reference v1 server opted in to list changes and resource subscriptions
    (``REFERENCE_V1_LIST_CHANGED=1``, ``REFERENCE_V1_RESOURCES=1``: ``tools.listChanged``,
    ``resources.subscribe``, ``add_tool``, ``touch_resource`` and ``reference://notes``), one per
    run, stopped by its own handle."""
    env = {"REFERENCE_V1_LIST_CHANGED": "1", "REFERENCE_V1_RESOURCES": "1"}
    yield from _running(lambda: start_reference_v1_server(env=env))


@pytest.fixture(scope="session")
def listing_v2_server() -> Iterator[ServerProcess]:
    """The reference v2 server opted in to list changes (``REFERENCE_V2_LIST_CHANGED=1``: it serves
    ``subscriptions/listen`` and has ``add_tool``, ``touch_resource`` and ``reference://notes``), one
    per run, stopped by its own handle."""
    yield from _running(lambda: start_reference_v2_server(env={"REFERENCE_V2_LIST_CHANGED": "1"}))


@pytest.fixture(scope="session")
def second_v2_server() -> Iterator[ServerProcess]:
    """A second reference v2 server, for tests with several backends (one per run)."""
    yield from _running(start_reference_v2_server)


@pytest.fixture
def plain_mcp1_server() -> Iterator[ServerProcess]:
    """A plain mcp 1.30 low-level server with tasks (``tests/peers/plain_mcp1_server.py``), as
    deployments run the official SDK: one per test, since a fault it suffers lasts for the life
    of its process. Stopped by its own handle."""
    from support import start_plain_mcp1_server

    yield from _running(start_plain_mcp1_server)


@pytest.fixture
async def tapped(reference_v1_server: ServerProcess):
    """The reference v1 server behind a recording tap (``tests/tap.py``): tests give the proxy
    ``tapped.url`` as its backend and read what reached the server in ``tapped.methods``."""
    from tap import RecordingTap

    tap = await RecordingTap.start(reference_v1_server.url)
    yield tap
    await tap.stop()


@pytest.fixture
async def fast_modern_upstream_url(aiohttp_server):
    """The benchmark's fast upstream on the modern wire, in this event loop: its MCP endpoint URL."""
    from proxy.bench.upstream import create_app

    server = await aiohttp_server(create_app("modern", poll_interval_ms=20))
    return str(server.make_url("/mcp"))
