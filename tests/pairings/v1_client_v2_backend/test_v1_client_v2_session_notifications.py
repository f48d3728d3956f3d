"""The v1 client (mcp 1.30) through the proxy to a v2-session backend that announces changes and logs
on its sessions' GET streams (the minimal v2-session peer with its opt-in, ``tests/peers/v2_session_lists.py``):
the capabilities that say so, log messages and progress on its POSTs at its level (docs/behaviour.md §5.1),
list changes, resource updates and session-wide log messages on its GET stream, to no other session (§5.9).

Two scripts run in the ``mcp-v1`` peer environment once per module: ``mcp1_notification_checks.py``, the
checks the same client passes in front of the reference v2 server (test_v1_client_notifications.py), and
``mcp1_own_session_checks.py``, what only a session-wire backend sends (session-wide logs) and what must
reach one session only. One test per check reads its JSON line.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import pytest
from peer_checks import ChecksRun, run_script, script_check_names
from peers.v2_session_server import start
from support import running_proxy

from proxy.demo.peers import ensure_peer_env

pytestmark = pytest.mark.peers

PEERS = Path(__file__).resolve().parents[2] / "peers"
SCRIPTS = {
    "mcp1_notification_checks.py": ["capabilities", "logs_at_level", "no_level_no_logs", "tools_list_changed_once"],
    "mcp1_own_session_checks.py": ["session_logs_at_level", "changes_to_their_session"],
}
#: Bound for one whole run of a script (normally a few seconds; each check is bounded at 30 s).
RUN_TIMEOUT_S = 120.0


async def _through_proxy(python: Path, state_dir: Path) -> dict[str, ChecksRun]:
    runner, url = await start("127.0.0.1", 0, lists=True)
    try:
        async with running_proxy(url, state_dir) as proxy:
            return {
                script: ChecksRun(
                    f"proxy -> v2-session peer: {script}", *await run_script(python, PEERS / script, proxy.url, RUN_TIMEOUT_S)
                )
                for script in SCRIPTS
            }
    finally:
        await runner.cleanup()


@pytest.fixture(scope="module")
def runs() -> dict[str, ChecksRun]:
    python = ensure_peer_env("mcp-v1")
    with tempfile.TemporaryDirectory(prefix="mcp1-v2-session-") as tmp:
        return asyncio.run(_through_proxy(python, Path(tmp)))


@pytest.mark.parametrize(("script", "check"), [(script, check) for script, checks in SCRIPTS.items() for check in checks])
def test_mcp1_client_check_in_front_of_a_v2_session_backend(runs: dict[str, ChecksRun], script: str, check: str) -> None:
    run = runs[script]
    line = run.lines.get(check)
    assert line is not None, f"no JSON line for check {check!r}\n{run.explain()}"
    assert line["ok"] is True, f"{check} failed: {json.dumps(line['detail'], indent=1)}"


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_every_check_reported_and_the_exit_status(runs: dict[str, ChecksRun], script: str) -> None:
    run = runs[script]
    assert list(run.lines) == SCRIPTS[script], run.explain()
    assert run.stray == [], run.explain()
    assert run.returncode == 0, run.explain()


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_scripts_and_this_module_name_the_same_checks(script: str) -> None:
    assert script_check_names(PEERS / script) == SCRIPTS[script]
