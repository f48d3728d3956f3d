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
    "failures",
    "errors",
    "wrong",
    "error_texts",
    "rate_per_s",
    "latency_ms",
    "settled_latency_ms",
    "refusal_ms",
    "samples",
    "replicas",
    "redis_keys",
    "memory_flat",
    "replica_cores",
    "flat_rule",
    "requests_per_replica",
    "recovery",
    "cpu_s",
    "nginx_errors",
    "nginx_timings_ms",
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
    "growth_share",
}
NO_FAILURES = {kind: {"v1": 0, "v2": 0, "total": 0} for kind in ("refused", "reset", "timeout", "wrong", "error")}
NGINX_QUIET = {"reset": 0, "closed": 0, "refused": 0, "timed out": 0, "no live upstreams": 0, "other": 0}


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
    assert soak["failures"] == NO_FAILURES
    assert soak["nginx_errors"] == NGINX_QUIET  # no replica reset, closed or refused a connection
    timings = soak["nginx_timings_ms"]  # every request nginx passed on, timed (each lifecycle has several)
    assert (timings["count"] >= 2 * soak["lifecycles"]["total"], set(timings)) == (
        True,
        {"count", "request", "connect", "replica"},
    )
    assert [sorted(timings[part]) for part in ("request", "connect", "replica")] == [["max", "p50", "p99"]] * 3
    assert "  each request at nginx (" in done.stdout
    assert (soak["recovery"]["recovered"], len(soak["recovery"]["rss_bytes"])) == (True, 2)
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
        "kill_at_s": None,
        "overload_lag_ms": None,
        "store": "redis",
        "task_ttl_ms": 60_000,
        "poll_interval_ms": 100,
        "session_lifecycles": 20,
    }


def test_a_soak_with_one_replica_killed_fails_only_lifecycles_begun_before_the_kill(tmp_path: Path) -> None:
    """Replica b is killed (SIGKILL) 12 s into a 30 s soak: lifecycles in flight on it may fail,
    none begun after the kill does (nginx takes the refused connections to replica a), and the
    survivor answers on after the load."""
    figures = tmp_path / "soak.json"
    argv = ["--soak", "--soak-clients", "20", "--soak-minutes", "0.5", "--soak-kill-at", "12", "--json", str(figures)]
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "bench", *argv],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    soak = json.loads(figures.read_text())["soak"]
    assert soak["after_kill"] == {"refused": 0, "reset": 0, "timeout": 0, "wrong": 0, "error": 0}
    assert (soak["killed_at_s"] >= 12, soak["wrong"]["total"]) == (True, 0)
    assert (soak["recovery"]["recovered"], len(soak["recovery"]["rss_bytes"]), len(soak["requests_per_replica"])) == (True, 1, 1)
    assert soak["settings"]["kill_at_s"] == 12
