"""Options the benchmark cannot run with: one line on stderr and exit 2, before any process starts
(nothing is printed on stdout, where the table would be)."""

from __future__ import annotations

import sys

import pytest

from proxy.cli import main

LIMITS = "mcp-tasks-proxy bench: --concurrency and --runs must be at least 1, --duration above 0 and at most 3600 s\n"
SPREAD = (
    "mcp-tasks-proxy bench: --load-processes and --upstreams must be at least 1, and --concurrency at least --load-processes\n"
)
CALLS_NOT_COUNTED = (
    "mcp-tasks-proxy bench: --calls counts whole calls with --instructions (the table runs for --duration; "
    "--parts repeats each part a fixed number of times)\n"
)
NOT_COUNTED = (
    "mcp-tasks-proxy bench --instructions: counts one proxy process on the SQLite store with one client: "
    "--workers, --store, --concurrency, --load-processes, --upstreams, --soak and --memory do not apply\n"
)


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        (["--rows", ","], "mcp-tasks-proxy bench: --rows names at least one row, e.g. relay or direct,relay\n"),
        (["--duration", "nan"], LIMITS),
        (["--duration", "inf"], LIMITS),
        (["--duration", "0"], LIMITS),
        (["--concurrency", "0"], LIMITS),
        (["--workers", "0"], "mcp-tasks-proxy bench: --workers takes worker counts of at least 1, e.g. 2 or 1,2\n"),
        (
            ["--memory-only", "--memory-clients", "0"],
            "mcp-tasks-proxy bench: --live-tasks, --memory-clients and --completed must be at least 1\n",
        ),
        (["--instructions", "--calls", "0"], "mcp-tasks-proxy bench --instructions: --calls must be at least 1\n"),
        (["--instructions", "--calls", "-5"], "mcp-tasks-proxy bench --instructions: --calls must be at least 1\n"),
        (
            ["--instructions", "--rows", ","],
            "mcp-tasks-proxy bench --instructions: --rows names at least one row (relay, relay-modern, translate, stdio, stdio-translate)\n",
        ),
        (["--instructions", "--workers", "2"], NOT_COUNTED),
        (["--instructions", "--store", "redis"], NOT_COUNTED),
        (["--instructions", "--concurrency", "8"], NOT_COUNTED),
        (
            ["--instructions", "--scenarios", "d"],
            "mcp-tasks-proxy bench --instructions: unknown scenario 'd' (scenarios: a, b, c)\n",
        ),
        (["--scenarios", "abx"], "mcp-tasks-proxy bench: unknown scenario 'x' (scenarios: a, b, c)\n"),
        (["--calls", "50"], CALLS_NOT_COUNTED),
        (["--instructions", "--parts", "--calls", "50"], CALLS_NOT_COUNTED),
        (["--instructions", "--load-processes", "2"], NOT_COUNTED),
        (["--instructions", "--upstreams", "2"], NOT_COUNTED),
        (["--parts"], "mcp-tasks-proxy bench: --parts counts with --instructions\n"),
        (["--against-upstream"], "mcp-tasks-proxy bench: --against-upstream counts with --instructions\n"),
        (
            ["--instructions", "--parts", "--against-upstream"],
            "mcp-tasks-proxy bench: --against-upstream counts whole calls, not --parts\n",
        ),
        (
            ["--instructions", "--against-upstream", "--rows", "stdio,stdio-translate"],
            "mcp-tasks-proxy bench --instructions: --against-upstream needs an HTTP row (a stdio row's upstream is the proxy's child, not counted)\n",
        ),
        (
            ["--instructions", "--upstream", "reference"],
            "mcp-tasks-proxy bench --instructions: counts the proxy in front of the fast upstream: --upstream reference does not apply\n",
        ),
        (
            ["--instructions", "--parts", "json,heads"],
            "mcp-tasks-proxy bench --instructions: unknown part 'heads' "
            "(parts: request-head, json, upstream-head, upstream-answer, answer, request-id)\n",
        ),
        (["--load-processes", "3", "--concurrency", "2"], SPREAD),
        (["--load-processes", "0"], SPREAD),
        (["--upstreams", "0"], SPREAD),
        (["--upstreams", "2", "--upstream", "reference"], "mcp-tasks-proxy bench: --upstreams is for the fast upstream\n"),
        (["--soak", "--soak-replicas", "3"], "mcp-tasks-proxy bench: --soak-replicas takes 1 or 2\n"),
        (
            ["--soak", "--soak-replicas", "1", "--soak-kill-at", "10"],
            "mcp-tasks-proxy bench: --soak-kill-at needs two replicas and a time within the run (seconds, more than 0)\n",
        ),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_an_option_out_of_range_is_refused_before_anything_starts(
    arguments: list[str], refusal: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run in this process: a refusal returns before any process, socket or event loop is made."""
    status = main(["bench", *arguments])
    captured = capsys.readouterr()
    assert (status, captured.out, captured.err) == (2, "", refusal)


def test_counting_on_uvloop_without_it_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before valgrind starts the proxy (which would fail to start, in a traceback): where
    uvloop does not exist (Windows), as here with its import made to fail."""
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    status = main(["bench", "--instructions", "--event-loop", "uvloop", "--rows", "relay"])
    captured = capsys.readouterr()
    assert (status, captured.out) == (2, "")
    assert captured.err == (
        "mcp-tasks-proxy bench --instructions: MCP_TASKS_PROXY_EVENT_LOOP=uvloop but uvloop is not installed "
        "(it is a dependency where it exists: not on Windows)\n"
    )
