"""`mcp-tasks-proxy demo` end to end: the walkthrough runs against the real reference v1 server
(mcp 1.30.0 in its own environment) and every step sees exactly what it should."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from proxy.demo.walkthrough import STEPS

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO_TIMEOUT_S = 120


def _run_demo(*options: str) -> tuple[subprocess.CompletedProcess[str], list[str], str]:
    """Run ``python -m proxy demo *options``; the run, its stdout lines and a report of both streams."""
    completed = subprocess.run(
        [sys.executable, "-m", "proxy", "demo", *options],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=DEMO_TIMEOUT_S,
    )
    report = f"stdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"
    return completed, completed.stdout.rstrip("\n").splitlines(), report


@pytest.mark.peers
def test_demo_quiet_passes_every_step() -> None:
    completed, lines, report = _run_demo("--quiet")
    assert completed.returncode == 0, report
    # `--quiet`: the step titles and the summary, nothing else when every check passes.
    titles = [f"Step {number}/{len(STEPS)} · {step.title}" for number, step in enumerate(STEPS, start=1)]
    assert lines == [*titles, f"{len(STEPS)}/{len(STEPS)} steps passed"], report


@pytest.mark.peers
def test_stdio_demo_quiet_passes_every_step() -> None:
    """`demo --stdio`: the same walk, with the reference v1 server a stdio server the proxy runs."""
    completed, lines, report = _run_demo("--stdio", "--quiet")
    assert completed.returncode == 0, report
    titles = [f"Step {number}/{len(STEPS)} · {step.title}" for number, step in enumerate(STEPS, start=1)]
    assert lines == [*titles, f"{len(STEPS)}/{len(STEPS)} steps passed"], report


@pytest.mark.peers
def test_reverse_demo_quiet_passes_every_step() -> None:
    """`demo --reverse`: a v1 client walks through the proxy in front of the reference v2 server."""
    from proxy.demo.reverse_walkthrough import STEPS as REVERSE_STEPS

    completed, lines, report = _run_demo("--reverse", "--quiet")
    assert completed.returncode == 0, report
    titles = [f"Step {number}/{len(REVERSE_STEPS)} · {step.title}" for number, step in enumerate(REVERSE_STEPS, start=1)]
    assert lines == [*titles, f"{len(REVERSE_STEPS)}/{len(REVERSE_STEPS)} steps passed"], report


async def test_quiet_narration_prints_the_title_and_only_failed_checks(capsys) -> None:
    from proxy.demo.narration import Narrator, Step

    async def two_checks(demo: Narrator) -> None:
        demo.check(True, "resultType = complete")
        demo.check(False, "status = completed", "working")

    quiet = await Narrator(verbose=False).run_step(1, 2, Step("a task", two_checks))
    assert capsys.readouterr().out == 'Step 1/2 · a task\n  ✘ status = completed — got "working"\n'
    assert quiet.checks == [(True, "✔ resultType = complete"), (False, '✘ status = completed — got "working"')]
    await Narrator(verbose=True).run_step(2, 2, Step("a task", two_checks))
    assert capsys.readouterr().out.endswith('  ✔ resultType = complete\n  ✘ status = completed — got "working"\n')
