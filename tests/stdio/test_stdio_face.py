"""The proxy as a stdio server (`mcp-tasks-proxy stdio`), launched by a desktop-style v1 client.

The official `mcp` 1.30 SDK's stdio client launches `mcp-tasks-proxy stdio --upstream URL` in
front of the reference v2 server and runs the task checks it runs over HTTP
(`pairings/v1_client_v2_backend/test_v1_client_v2_backend.py`), except `list_tasks`: it needs two principals, told apart by
`Authorization`, which a stdio launch does not have (docs/decisions.md §60).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from peer_checks import ChecksRun, run_script

from proxy.demo.peers import ensure_peer_env

pytestmark = pytest.mark.peers
CHECKS_SCRIPT = Path(__file__).resolve().parents[1] / "peers" / "mcp1_client_checks.py"
CHECKS = [
    "sync_tool",
    "create_task_shape",
    "get_is_flat",
    "tool_error_failed",
    "result_related_meta",
    "cancel",
    "cancel_finished_and_unknown",
    "required_without_task",
    "forbidden_with_task",
    "concurrent_creations",
    "finished_still_readable",
    "elicitation_in_task",
    "sampling_in_task",
    "progress_well_formed",
]


async def test_mcp1_stdio_client_launches_the_proxy_in_front_of_the_reference_v2_server(reference_v2_server, tmp_path):
    config = tmp_path / "proxy.toml"
    config.write_text(f'state_dir = "{tmp_path}"\nlog_level = "warning"\n', encoding="utf-8")
    proxy = Path(sys.executable).with_name("mcp-tasks-proxy")
    command = shlex.join([str(proxy), "stdio", "--upstream", reference_v2_server.url, "--config", str(config)])
    returncode, stdout, stderr = await run_script(ensure_peer_env("mcp-v1"), CHECKS_SCRIPT, "stdio:" + command, 300)
    run = ChecksRun("stdio face", returncode, stdout, stderr)
    selected = {name: run.lines[name]["ok"] for name in CHECKS if name in run.lines}
    assert selected == dict.fromkeys(CHECKS, True), run.explain() + json.dumps({n: run.lines.get(n) for n in CHECKS})[:4000]
