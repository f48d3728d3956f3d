"""The v1 client (mcp 1.30) through the proxy to the reference v2 server opted in to list changes:
log messages at the session's `logging/setLevel` level and progress on its POSTs (docs/behaviour.md
§5.1), list changes and resource updates on its GET stream (§5.9), and the capabilities that say so.

``tests/peers/mcp1_notification_checks.py`` runs in the ``mcp-v1`` peer environment once per
module; one test per check reads its JSON line. The reference v2 server (FastMCP 4.1.4 +
fastmcp-tasks, ``REFERENCE_V2_LIST_CHANGED=1``) speaks only the 2026-07-28 wire: it sends log
messages only for requests whose `_meta` names a level, and list changes only on
`subscriptions/listen` streams, so whatever the v1 client gets of them is the proxy's doing.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import pytest
from peer_checks import ChecksRun, run_script, script_check_names
from support import running_proxy

from proxy.demo.peers import ensure_peer_env
from proxy.demo.processes import ServerProcess

pytestmark = pytest.mark.peers

CHECKS_SCRIPT = Path(__file__).resolve().parents[2] / "peers" / "mcp1_notification_checks.py"
CHECK_NAMES = ["capabilities", "logs_at_level", "no_level_no_logs", "tools_list_changed_once"]
#: Bound for one whole run of the script (normally ~5 s; each check is bounded at 30 s).
RUN_TIMEOUT_S = 120.0


async def _through_proxy(python: Path, upstream_url: str, state_dir: Path) -> tuple[int | None, str, str]:
    async with running_proxy(upstream_url, state_dir) as proxy:
        return await run_script(python, CHECKS_SCRIPT, proxy.url, RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def notified_run(listing_v2_server: ServerProcess) -> ChecksRun:
    python = ensure_peer_env("mcp-v1")
    with tempfile.TemporaryDirectory(prefix="mcp1-notify-") as tmp:
        return ChecksRun(
            "proxy -> reference v2 (list changes)", *asyncio.run(_through_proxy(python, listing_v2_server.url, Path(tmp)))
        )


@pytest.mark.parametrize("check", CHECK_NAMES)
def test_mcp1_client_notification_check_through_the_proxy(notified_run: ChecksRun, check: str) -> None:
    line = notified_run.lines.get(check)
    assert line is not None, f"no JSON line for check {check!r}\n{notified_run.explain()}"
    assert line["ok"] is True, f"{check} failed: {json.dumps(line['detail'], indent=1)}"


def test_every_check_reported_and_the_exit_status(notified_run: ChecksRun) -> None:
    assert list(notified_run.lines) == CHECK_NAMES, notified_run.explain()
    assert notified_run.stray == [], notified_run.explain()
    assert notified_run.returncode == 0, notified_run.explain()


def test_script_and_this_module_name_the_same_checks() -> None:
    assert script_check_names(CHECKS_SCRIPT) == CHECK_NAMES
