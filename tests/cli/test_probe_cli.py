"""`mcp-tasks-proxy probe URL...` names each backend's dialect (docs/behaviour.md §2 "Upstream")."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.peers

FIXTURE_TOOLS = {
    "greet",
    "slow_compute",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
}


async def _probe(*urls: str, table: bool = False) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "probe",
        *([] if table else ["--json"]),
        *urls,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, out.decode()


async def test_probe_names_the_dialects_of_the_reference_servers(reference_v1_server, reference_v2_server):
    status, out = await _probe(reference_v1_server.url, reference_v2_server.url)
    v1, v2 = json.loads(out)
    assert status == 0
    assert (v1["dialect"], v1["protocol_versions"], v1["tool_tasks"]) == ("v1", ["2025-11-25"], True)
    assert v1["resolved_url"] == reference_v1_server.url + "/"  # the /mcp → /mcp/ redirect, followed
    assert (v2["dialect"], v2["protocol_versions"], v2["tool_tasks"]) == ("v2-modern", ["2026-07-28"], True)
    for row in (v1, v2):
        assert FIXTURE_TOOLS <= set(row["tools"])
        assert row["tools"]["greet"] == "forbidden"
        assert row["tools"]["slow_compute"] == "optional"
        assert row["tools"]["confirm_delete"] == "required"


async def test_probe_table_says_task_support(reference_v1_server):
    """Each tool's line names what it is: its task support (`tool greet: forbidden` read as an access denial)."""
    status, out = await _probe(reference_v1_server.url, table=True)
    lines = out.splitlines()
    assert status == 0
    assert lines[:4] == [reference_v1_server.url, "  dialect: v1", "  protocol versions: 2025-11-25", "  tool tasks: yes"]
    tools = [line for line in lines if line.startswith("  tool ") and not line.startswith("  tool tasks")]
    assert "  tool greet: task support forbidden" in tools
    assert "  tool slow_compute: task support optional" in tools
    assert "  tool confirm_delete: task support required" in tools
    assert all(": task support " in line for line in tools)


async def test_probe_reports_an_unreachable_backend_and_exits_1():
    status, out = await _probe("http://127.0.0.1:1/mcp")
    [row] = json.loads(out)
    assert status == 1
    assert row["error"].startswith("Backend 'http://127.0.0.1:1/mcp' unavailable: ")
