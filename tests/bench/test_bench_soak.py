"""`mcp-tasks-proxy bench --soak`, its smoke run (20 clients for 30 s, about 40 s in all): v1 and v2
clients running task lifecycles with a question through two replicas on Redis behind round-robin
nginx. Asserted: no errors, no wrong answers, lifecycles of both dialects, requests answered by
both replicas, and every figure in the JSON. Nothing about time or memory is asserted (the memory
verdict is a figure of the benchmark)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]
KEYS = {
    "clients",
    "duration_s",
    "elapsed_s",
    "sample_interval_s",
    "lifecycles",
    "errors",
    "wrong",
    "error_texts",
    "rate_per_s",
    "latency_ms",
    "samples",
    "replicas",
    "redis_keys",
    "memory_flat",
    "flat_rule",
    "requests_per_replica",
    "cpu_s",
    "nofile",
    "nginx_worker_connections",
    "settings",
}
REPLICA_KEYS = {
    "rss_start",
    "settled_at_s",
    "rss_settled",
    "rss_end",
    "window_min",
    "window_max",
    "window_spread",
    "growth",
    "threshold",
    "flat",
}


def test_soak_smoke_has_no_errors_and_no_wrong_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figures = tmp_path / "soak.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "proxy",
            "bench",
            "--soak",
            "--soak-clients",
            "20",
            "--soak-minutes",
            "0.5",
            "--json",
            str(figures),
        ],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    with capsys.disabled():
        print("\n" + done.stdout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "memory flat (RSS growth from 20% of the run to its end" in done.stdout

    soak = json.loads(figures.read_text())["soak"]
    assert set(soak) == KEYS
    assert (soak["errors"], soak["wrong"], soak["error_texts"]) == (
        {"v1": 0, "v2": 0, "total": 0},
        {"v1": 0, "v2": 0, "total": 0},
        [],
    )
    assert soak["clients"] == {"v1": 10, "v2": 10}
    assert (soak["lifecycles"]["v1"] > 0, soak["lifecycles"]["v2"] > 0) == (True, True)
    assert soak["lifecycles"]["total"] == soak["lifecycles"]["v1"] + soak["lifecycles"]["v2"]
    assert (soak["duration_s"], soak["sample_interval_s"], len(soak["samples"])) == (30.0, 3.0, 11)
    assert [set(r) for r in soak["replicas"]] == [REPLICA_KEYS, REPLICA_KEYS]
    assert [len(s["rss_bytes"]) for s in soak["samples"]] == [2] * 11
    assert len(soak["redis_keys"]["samples"]) == 11
    assert [n > 0 for n in soak["requests_per_replica"]] == [True, True]  # round robin reached both
    assert sorted(soak["cpu_s"]) == ["load generator", "nginx", "redis", "replica a", "replica b", "upstream"]
    assert soak["settings"] == {
        "replicas": 2,
        "store": "redis",
        "task_ttl_ms": 60_000,
        "poll_interval_ms": 100,
        "session_lifecycles": 20,
    }
