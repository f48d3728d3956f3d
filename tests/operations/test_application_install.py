"""Installed as an application (issue 43; README "Installing it as an application"): `pipx install`
of a checkout gives a `mcp-tasks-proxy` command in an environment of its own (its import names
`proxy` and `translators` kept away from every other environment), and that command's demo passes.
pipx itself is pinned and kept in a cached environment of its own (`~/.cache/mcp-tasks-proxy/`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]
PIPX = "pipx==1.7.1"
CACHE = Path(os.environ.get("MCP_TASKS_PROXY_CACHE", Path.home() / ".cache" / "mcp-tasks-proxy"))


def _pipx() -> Path:
    venv = CACHE / PIPX.replace("==", "-")
    if not (venv / "bin" / "pipx").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", PIPX], check=True, timeout=300)
    return venv / "bin" / "pipx"


def test_pipx_install_of_a_checkout_gives_a_command_whose_demo_passes(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PIPX_HOME": str(tmp_path / "pipx"),
        "PIPX_BIN_DIR": str(tmp_path / "bin"),
        "PIPX_MAN_DIR": str(tmp_path / "man"),
    }
    installed = subprocess.run(
        [str(_pipx()), "install", str(ROOT)], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    command = tmp_path / "bin" / "mcp-tasks-proxy"
    version = subprocess.run([str(command), "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert version.stdout.startswith("mcp-tasks-proxy "), version
    demo = subprocess.run([str(command), "demo"], capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)
    assert (demo.returncode, demo.stdout.strip().splitlines()[-1]) == (0, "12/12 steps passed"), (
        demo.stdout[-3000:] + demo.stderr[-2000:]
    )
