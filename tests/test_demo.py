"""`mcp-tasks-proxy demo` end to end: the walkthrough runs against the real reference v1 server
(mcp 1.30.0 in its own environment) and every step sees exactly what it should."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from proxy.demo.walkthrough import STEPS

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_TIMEOUT_S = 120


@pytest.mark.peers
def test_demo_quiet_passes_every_step() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "proxy", "demo", "--quiet"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=DEMO_TIMEOUT_S,
    )
    report = f"stdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"
    assert completed.returncode == 0, report
    lines = completed.stdout.rstrip("\n").splitlines()
    assert lines, report
    assert lines[-1] == f"{len(STEPS)}/{len(STEPS)} steps passed", report


@pytest.mark.peers
def test_reverse_demo_quiet_passes_every_step() -> None:
    """`demo --reverse`: a v1 client walks through the proxy in front of the reference v2 server."""
    from proxy.demo.reverse_walkthrough import STEPS as REVERSE_STEPS

    completed = subprocess.run(
        [sys.executable, "-m", "proxy", "demo", "--reverse", "--quiet"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=DEMO_TIMEOUT_S,
    )
    report = f"stdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"
    assert completed.returncode == 0, report
    lines = completed.stdout.rstrip("\n").splitlines()
    assert lines, report
    assert lines[-1] == f"{len(REVERSE_STEPS)}/{len(REVERSE_STEPS)} steps passed", report
