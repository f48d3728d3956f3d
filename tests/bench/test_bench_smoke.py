"""`mcp-tasks-proxy bench --quick`, the benchmark's smoke run (about 10 seconds).

It starts the fast upstream, the proxy, nginx and FastMCP 3.4.11's proxy as processes of their
own and drives every row once. Asserted: the table is printed with every row of every scenario,
and no row had an error. Nothing about time or CPU is asserted; the figures are printed into the
test log.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.bench.rows import ROWS, SCENARIOS
from proxy.bench.targets import ensure_nginx

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]
ROWS_OF = {
    "a": [r.key for r in ROWS],
    "b": [r.key for r in ROWS if "b" in r.scenarios],
    "c": [r.key for r in ROWS if "c" in r.scenarios],
}


def test_quick_bench_prints_every_row_without_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ensure_nginx()  # as the replicas' tests do: a machine of this kind can install it
    figures = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "bench", "--quick", "--json", str(figures)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
    )
    with capsys.disabled():
        print("\n" + done.stdout)
    assert done.returncode == 0, done.stderr[-4000:]

    for scenario in SCENARIOS:
        assert scenario.title in done.stdout
    for row in ROWS:
        assert row.label in done.stdout
    assert "targets (read from the figures above):" in done.stdout

    cells = json.loads(figures.read_text())["cells"]
    assert sorted(cells) == sorted(f"{s}/{r}" for s, rows in ROWS_OF.items() for r in rows)
    for key, cell in cells.items():
        # nginx is installed first (below): its row must have figures, never a silent "unavailable" (issue 46).
        assert cell["skipped"] is None, (key, cell["skipped"])
        assert len(cell["runs"]) == 1, key
        run = cell["runs"][0]
        assert run["errors"] == 0, (key, run["error_texts"])
        assert run["ops"] > 0, key
        if key.startswith("c/") and key != "c/translate":
            assert run["notifications"] == 100 * run["ops"], key  # every progress notification arrived
