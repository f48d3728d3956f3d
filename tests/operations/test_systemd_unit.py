"""The systemd unit in contrib/ (issue 43; README "Deploy"): `systemd-analyze verify` accepts it,
warnings included, with its `ExecStart` and `ExecReload` pointing at this checkout's installed
command (verify checks that the command exists), and it keeps its hardening."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "contrib" / "mcp-tasks-proxy.service"
INSTALLED = "/opt/mcp-tasks-proxy/bin/mcp-tasks-proxy"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_analyze_verify_accepts_the_unit_without_a_warning(tmp_path: Path) -> None:
    command = Path(sys.executable).with_name("mcp-tasks-proxy")
    assert command.exists(), command
    text = UNIT.read_text()
    assert text.count(INSTALLED) == 2  # ExecStart and ExecReload
    unit = tmp_path / "mcp-tasks-proxy.service"
    unit.write_text(text.replace(INSTALLED, str(command)))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_the_unit_runs_as_a_dynamic_user_with_its_state_directory_and_a_read_only_system() -> None:
    keys = dict(line.split("=", 1) for line in UNIT.read_text().splitlines() if "=" in line and not line.startswith("#"))
    assert {
        k: keys[k]
        for k in ("Type", "DynamicUser", "StateDirectory", "ProtectSystem", "ProtectHome", "NoNewPrivileges", "KillSignal")
    } == {
        "Type": "exec",
        "DynamicUser": "yes",
        "StateDirectory": "mcp-tasks-proxy",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "NoNewPrivileges": "yes",
        "KillSignal": "SIGTERM",
    }
    assert keys["ExecReload"] == f"{INSTALLED} reload --config /etc/mcp-tasks-proxy/config.toml --state-dir ${{STATE_DIRECTORY}}"
    assert keys["Environment"] == "MCP_TASKS_PROXY_STATE_DIR=/var/lib/mcp-tasks-proxy"
