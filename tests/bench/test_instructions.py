"""`mcp-tasks-proxy bench --instructions`: the proxy counted under valgrind's callgrind.

One row, few calls (about a minute: the proxy starts under valgrind). Asserted: the command
prints its table and writes its JSON with exactly the row, scenario and calls asked for, every
call was answered rightly (the client raises otherwise, and the command fails), and the count is
a count: instructions divided by calls is the per-call figure. How many instructions a call
takes is printed, never asserted (docs/performance.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _counted(figures: Path, *options: str) -> list[str]:
    """`bench --instructions <options> --json <figures> --quiet` to its end (it must succeed): its stdout lines."""
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "bench", "--instructions", *options, "--json", str(figures), "--quiet"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


@pytest.mark.slow
def test_instructions_of_relayed_echo_calls_are_counted(tmp_path: Path) -> None:
    """Counted on the loop `serve` would choose here: uvloop, a dependency wherever it exists
    (decision 188)."""
    figures = tmp_path / "instructions.json"
    lines = _counted(figures, "--rows", "relay", "--scenarios", "a", "--calls", "20")
    assert lines[0] == "Instructions per call in the proxy process (valgrind callgrind; event loop uvloop; after a warm-up)"
    assert lines[1].split() == ["row", "scenario", "calls", "instructions/call", "what"]
    assert lines[2].split()[:3] == ["relay", "echo", "20"]
    assert len(lines) == 3
    report = json.loads(figures.read_text())
    assert report["event_loop"] == "uvloop"
    (count,) = report["counts"]
    assert (count["row"], count["scenario"], count["calls"]) == ("relay", "echo", 20)
    assert count["per_call"] == round(count["instructions"] / 20)
    assert lines[2].split()[3] == f"{count['per_call']:,}"


def test_an_unknown_row_is_refused_before_anything_starts() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "bench", "--instructions", "--rows", "relya"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert (
        done.stderr
        == "mcp-tasks-proxy bench --instructions: unknown row 'relya' (rows: relay, relay-modern, translate, stdio, stdio-translate)\n"
    )


@pytest.mark.slow
def test_the_parts_of_a_relayed_call_are_counted_each_alone(tmp_path: Path) -> None:
    """`--parts NAMES`: one line per part asked, in that order, each a count (the runs less none,
    per run) also written to the JSON; the figures are printed, never asserted. Two parts of the
    six (`bench --instructions --parts` counts all, about 45 s)."""
    from proxy.bench.parts import PARTS, REPEAT

    figures = tmp_path / "parts.json"
    lines = _counted(figures, "--parts", "request-id,json")
    report = json.loads(figures.read_text())["parts"]
    assert lines[:2] == [
        f"Instructions per run of each part of a relayed call, counted alone (valgrind callgrind; {REPEAT} runs less none)",
        f"{'part':<16} {'instructions':>12}   what",
    ]
    assert [line.split()[0] for line in lines[2:]] == [row["part"] for row in report] == ["request-id", "json"]
    assert [line.split()[1] for line in lines[2:]] == [f"{row['per_run']:,}" for row in report]
    assert [row["what"] for row in report] == [PARTS["request-id"][0], PARTS["json"][0]]


@pytest.mark.slow
def test_against_upstream_counts_the_upstream_of_the_same_calls(tmp_path: Path) -> None:
    """`--against-upstream`: the fast upstream behind the row is counted in the same run, and the
    table gives the proxy's count ÷ the upstream's (issue 45's CPU ratio, counted); a stdio row's
    upstream is the proxy's child, not counted, shown as a dash. The figures are printed, never asserted.
    On asyncio's own loop, asked for by name."""
    figures = tmp_path / "instructions.json"
    lines = _counted(
        figures, "--against-upstream", "--rows", "relay,stdio", "--scenarios", "a", "--calls", "20", "--event-loop", "asyncio"
    )
    assert lines[:3] == [
        "Instructions per call in the proxy process (valgrind callgrind; event loop asyncio; after a warm-up)",
        "and the fast upstream's for the same calls, counted the same way (stdio rows: not counted, the upstream is the proxy's child)",
        f"{'row':<14} {'scenario':<12} {'calls':>6} {'instructions/call':>18} {'upstream/call':>14} {'÷ upstream':>10}   what",
    ]
    relay, stdio = json.loads(figures.read_text())["counts"]
    assert (relay["row"], relay["scenario"], relay["calls"]) == ("relay", "echo", 20)
    assert relay["upstream_per_call"] == round(relay["upstream_instructions"] / 20)
    assert relay["ratio"] == round(relay["instructions"] / relay["upstream_instructions"], 3)
    assert lines[3].split()[:7] == [
        "relay",
        "echo",
        "20",
        f"{relay['per_call']:,}",
        f"{relay['upstream_per_call']:,}",
        # the table rounds the exact ratio once; `ratio` in the JSON is already rounded to 3 places,
        # and rounding that again to 2 differs when the exact ratio ends in .xx45 to .xx5
        f"{relay['instructions'] / relay['upstream_instructions']:.2f}",
        "×",
    ]
    assert (stdio["row"], stdio["upstream_instructions"]) == ("stdio", None)
    assert "ratio" not in stdio
    assert lines[4].split()[:6] == ["stdio", "echo", "20", f"{stdio['per_call']:,}", "—", "—"]
    assert len(lines) == 5
