"""The v1 client (mcp 1.30) through the proxy to the reference v2 server: what its GET stream
carries for its tasks (docs/behaviour.md §5.7 status notifications pushed, §5.8 questions of a
task nobody waits on with `tasks/result`).

``tests/peers/mcp1_stream_checks.py`` runs in the ``mcp-v1`` peer environment once per module; one
test per check reads its JSON line. The reference v2 server (FastMCP 4.1.4 + fastmcp-tasks) pushes
nothing itself, so whatever the GET stream carries is the proxy's doing.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from peer_checks import ChecksRun, run_script, script_check_names, serving
from support import running_proxy

from proxy.demo.peers import ensure_peer_env
from proxy.demo.processes import ServerProcess, start_reference_v2_server

pytestmark = pytest.mark.peers

CHECKS_SCRIPT = Path(__file__).resolve().parents[2] / "peers" / "mcp1_stream_checks.py"
CHECK_NAMES = ["status_pushed", "question_on_get_stream", "two_questions_once"]
#: Bound for one whole run of the script (normally ~10 s; each check is bounded at 30 s).
RUN_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def reference_v2_server() -> Iterator[ServerProcess]:
    yield from serving(start_reference_v2_server)


async def _through_proxy(python: Path, upstream_url: str, state_dir: Path) -> tuple[int | None, str, str]:
    async with running_proxy(upstream_url, state_dir) as proxy:
        return await run_script(python, CHECKS_SCRIPT, proxy.url, RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def pushed_run(reference_v2_server: ServerProcess) -> ChecksRun:
    python = ensure_peer_env("mcp-v1")
    with tempfile.TemporaryDirectory(prefix="mcp1-push-") as tmp:
        return ChecksRun("proxy -> reference v2", *asyncio.run(_through_proxy(python, reference_v2_server.url, Path(tmp))))


@pytest.mark.parametrize("check", CHECK_NAMES)
def test_mcp1_client_get_stream_check_through_the_proxy(pushed_run: ChecksRun, check: str) -> None:
    line = pushed_run.lines.get(check)
    assert line is not None, f"no JSON line for check {check!r}\n{pushed_run.explain()}"
    assert line["ok"] is True, f"{check} failed: {json.dumps(line['detail'], indent=1)}"


def test_every_check_reported_and_the_exit_status(pushed_run: ChecksRun) -> None:
    assert list(pushed_run.lines) == CHECK_NAMES, pushed_run.explain()
    assert pushed_run.stray == [], pushed_run.explain()
    assert pushed_run.returncode == 0, pushed_run.explain()


def test_script_and_this_module_name_the_same_checks() -> None:
    assert script_check_names(CHECKS_SCRIPT) == CHECK_NAMES
