"""`mcp-tasks-proxy bench --workers 1,2`: the proxy rows with one worker process and with two
(`serve --workers 2` on a Redis store), side by side in one run, and their figures in the JSON;
the clients spread over two load processes (`--load-processes 2`), whose CPU is reported, and two
upstream processes of each wire (`--upstreams 2`). Nothing about time or CPU is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.bench.rows import expand_rows

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]


def test_rows_are_repeated_per_worker_count_side_by_side() -> None:
    keys = [r.key for r in expand_rows((1, 2))]
    assert keys == [
        "direct",
        "nginx",
        "relay",
        "relay-w2",
        "translate",
        "translate-w2",
        "stdio",
        "stdio-translate",
        "fastmcp3",
        "shadow",
        "shadow-10",
        "direct-modern",
        "relay-modern",
        "relay-modern-w2",
    ]
    two = {r.key: r for r in expand_rows((2,))}
    assert "relay" not in two
    assert (two["relay-w2"].label, two["relay-w2"].target, two["relay-w2"].proxy, two["relay-w2"].workers) == (
        "mcp-tasks-proxy relaying, v1 client (2 workers)",
        "proxy-w2",
        "proxy-w2",
        2,
    )
    assert (two["relay-modern-w2"].target, two["relay-modern-w2"].family) == ("proxy-modern-w2", "relay-modern")


def test_one_and_two_workers_in_one_run_from_two_load_processes_to_two_upstreams(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    figures = tmp_path / "bench.json"
    argv = [sys.executable, "-m", "proxy", "bench", "--quick", "--scenarios", "a", "--rows", "direct,relay,translate"]
    done = subprocess.run(
        [*argv, "--workers", "1,2", "--concurrency", "4", "--load-processes", "2", "--upstreams", "2", "--json", str(figures)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    with capsys.disabled():
        print("\n" + done.stdout)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "mcp-tasks-proxy relaying, v1 client (2 workers)" in done.stdout
    assert "worker processes (serve --workers; concurrency 4;" in done.stdout
    assert "; load from 2 processes; 2 upstream processes of each wire" in done.stdout.splitlines()[0]

    report = json.loads(figures.read_text())
    options = report["options"]
    assert (options["workers"], options["store"], options["load_processes"], options["upstreams"]) == ([1, 2], "redis", 2, 2)
    assert sorted(report["cells"]) == ["a/direct", "a/relay", "a/relay-w2", "a/translate", "a/translate-w2"]
    for key, cell in report["cells"].items():
        run = cell["runs"][0]
        assert (cell["skipped"], run["errors"], run["ops"] > 0) == (None, 0, True), (key, run["error_texts"])
        assert isinstance(run["load_cpu_s"], float) and run["load_cpu_s"] > 0, key  # the two load processes' own CPU
    assert sorted(report["workers"]["a"]) == ["relay", "translate"]
    for family in report["workers"]["a"].values():
        assert sorted(family) == ["1", "2"]
        assert family["1"]["rps_ratio"] == 1.0
        assert sorted(family["2"]) == ["errors", "load_cores", "p50_ms", "proxy_cpu_ms", "rps", "rps_ratio", "upstream_cpu_ms"]
