"""`mcp-tasks-proxy bench` on the shadow row (docs/performance.md "Shadowing", decisions.md
§125-§126): it prints how many calls were compared and how many dropped, read from the shadow
proxy's `/status.json`, and the CPU of the proxy's shadow process, where the comparisons ran.
Nothing about time is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]


def test_the_shadow_row_reports_comparisons_and_the_shadow_process_cpu(tmp_path: Path) -> None:
    figures = tmp_path / "bench.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "proxy",
            "bench",
            "--quick",
            "--rows",
            "translate,shadow",
            "--scenarios",
            "a",
            "--json",
            str(figures),
        ],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(figures.read_text())
    counts = report["shadow"]["proxy-shadow"]
    assert sorted(counts) == ["candidate_error", "differ", "dropped", "match", "primary_error", "timeout", "too_large"]
    assert counts["match"] > 0
    assert {k: v for k, v in counts.items() if k != "match"} == {
        "candidate_error": 0,
        "differ": 0,
        "dropped": 0,
        "primary_error": 0,
        "timeout": 0,
        "too_large": 0,
    }
    run = report["cells"]["a/shadow"]["runs"][0]
    assert run["cpu_s"]["shadow"] > 0  # the comparisons ran in the proxy's shadow process
    assert "candidate" in run["cpu_s"]
    assert "shadow comparisons:" in done.stdout
    assert (
        f"proxy-shadow: {counts['match']} compared ({counts['match']} match, 0 differ), 0 dropped, 0 timeouts, 0 errors"
        in done.stdout
    )
