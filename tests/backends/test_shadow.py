"""Shadowing with real peers (docs/behaviour.md §8, issue 23 part 1): a plain v1 server on the
official `mcp` 1.30 SDK as the primary, a v2 server on FastMCP 4 + fastmcp-tasks with the same tools
as its shadow (`tests/peers/shadow_mcp1_server.py`, `tests/peers/shadow_v2_server.py`); `forecast`
answers differently, `remember` has no `readOnlyHint`. Clients: a 2026-07-28 client (translated to
the v1 primary: its answers are held whole and compared) and a v1 client (relayed: the primary is
asked again). Each server records the calls it runs in its own log file."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from browser import dump_dom, tables
from session_support import SessionCaller
from support import Caller, running_proxy, shadow_row

from proxy.demo.peers import ensure_peer_env
from proxy.demo.processes import ServerProcess
from proxy.observe.terminal import render

pytestmark = pytest.mark.peers

PEERS = Path(__file__).resolve().parents[1] / "peers"
IGNORE = ["result.prompts.*.arguments.*.description"]
"""FastMCP 4 describes a prompt argument itself ("Provide a value matching ..."); the v1 primary does not."""


@pytest.fixture
def shadow_peers(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess, Path, Path]]:
    """(primary, candidate, primary's call log, candidate's call log), each server stopped by its handle."""
    primary_log, candidate_log = tmp_path / "primary-calls.log", tmp_path / "candidate-calls.log"
    primary = ServerProcess.start(
        [str(ensure_peer_env("mcp-v1")), str(PEERS / "shadow_mcp1_server.py"), "--host", "127.0.0.1", "--port", "0"],
        env={"SHADOW_CALL_LOG": str(primary_log)},
    )
    try:
        env = {"SHADOW_CALL_LOG": str(candidate_log), "FASTMCP_SHOW_SERVER_BANNER": "false", "FASTMCP_CHECK_FOR_UPDATES": "off"}
        candidate = ServerProcess.start(
            [str(ensure_peer_env("fastmcp4")), str(PEERS / "shadow_v2_server.py"), "--host", "127.0.0.1", "--port", "0"], env=env
        )
        try:
            yield primary, candidate, primary_log, candidate_log
        finally:
            candidate.stop()
    finally:
        primary.stop()


def _upstream(primary: ServerProcess, candidate: ServerProcess, **shadow: object) -> list[dict[str, object]]:
    return [
        {"name": "legacy", "url": primary.url},
        {"name": "next", "url": candidate.url, "shadow_of": "legacy", "shadow_ignore": IGNORE, **shadow},
    ]


async def _shadow_rows(http: aiohttp.ClientSession, base_url: str, total: int, timeout_s: float = 60.0) -> dict:
    """The status's shadow section once its counts add up to `total` (polled: the comparisons end
    in the background after the answers)."""
    deadline = time.monotonic() + timeout_s
    while True:
        async with http.get(base_url + "/status.json") as response:
            shadow = (await response.json())["shadow"]
        counted = sum(
            sum(row[k] for k in ("match", "differ", "candidate_error", "primary_error", "timeout", "dropped", "too_large"))
            for entry in shadow
            for row in entry["rows"]
        )
        if counted >= total or time.monotonic() > deadline:
            return shadow[0]
        await asyncio.sleep(0.1)


def _calls(log: Path) -> list[str]:
    return sorted(log.read_text().splitlines()) if log.exists() else []


async def test_a_v2_candidate_shadows_a_v1_primary(shadow_peers, tmp_path):
    primary, candidate, primary_log, candidate_log = shadow_peers
    async with (
        running_proxy("", tmp_path, upstream=_upstream(primary, candidate), store="memory") as proxy,
        aiohttp.ClientSession() as http,
    ):
        modern = Caller(http, proxy.url)
        sent = [
            ("tools/list", {}),
            ("resources/list", {}),
            ("prompts/list", {}),
            ("resources/read", {"uri": "notes://readme"}),
            ("prompts/get", {"name": "greeting", "arguments": {"name": "Ada"}}),
        ]
        sent += [("tools/call", {"name": "lookup", "arguments": {"key": key}}) for key in ("a", "b", "c")]
        sent += [("tools/call", {"name": "forecast", "arguments": {"city": city}}) for city in ("Oslo", "Bergen")]
        sent += [("tools/call", {"name": "remember", "arguments": {"note": note}}) for note in ("one", "two")]
        sent += [("tools/call", {"name": "slow_lookup", "arguments": {"key": "s"}})]
        answers = [await modern.call(method, params) for method, params in sent]
        assert [a.status for a in answers] == [200] * len(sent)
        assert answers[7].result["content"] == [{"type": "text", "text": "value of c"}]
        assert answers[9].result["content"] == [{"type": "text", "text": "sunny in Bergen"}]  # the primary's answer only
        assert answers[-1].result["resultType"] == "task"  # the primary's task, followed by the shadow to its end
        polled = await modern.poll(answers[-1].result["taskId"])
        assert polled["result"]["content"] == [{"type": "text", "text": "slow value of s"}]

        v1 = SessionCaller(http, proxy.url, client_info={"name": "legacy-client", "version": "1"})
        await v1.initialize()
        for name, arguments in (("lookup", {"key": "d"}), ("forecast", {"city": "Rome"}), ("remember", {"note": "three"})):
            answer = await v1.call("tools/call", {"name": name, "arguments": arguments})
            assert "result" in answer, answer

        # A v2-session client: one of the proxy's own sessions (translated to the v1 primary), asked again.
        v2_session = SessionCaller(http, proxy.url, capabilities={"extensions": {"io.modelcontextprotocol/tasks": {}}})
        await v2_session.initialize()
        assert "result" in await v2_session.call("tools/call", {"name": "lookup", "arguments": {"key": "e"}})

        shadow = await _shadow_rows(http, proxy.base_url, 14)
        async with http.get(proxy.base_url + "/metrics") as response:
            metrics = await response.text()
        dom = await dump_dom(proxy.base_url + "/status")

    assert shadow["backend"] == "next" and shadow["shadow_of"] == "legacy" and shadow["queued"] == 0
    assert shadow["rows"] == [
        shadow_row("prompts/get", "", match=1),
        shadow_row("prompts/list", "", match=1),
        shadow_row("resources/list", "", match=1),
        shadow_row("resources/read", "", match=1),
        shadow_row("tools/call", "forecast", differ=3),
        shadow_row("tools/call", "lookup", match=5),
        shadow_row("tools/call", "slow_lookup", match=1),
        shadow_row("tools/list", "", match=1),
    ]
    assert sorted(d["diff"] for d in shadow["last_differences"]) == [
        'result.content.0.text: "sunny in Bergen" → "rainy in Bergen"',
        'result.content.0.text: "sunny in Oslo" → "rainy in Oslo"',
        'result.content.0.text: "sunny in Rome" → "rainy in Rome"',
    ]
    assert {(d["method"], d["tool"], tuple(d["paths"])) for d in shadow["last_differences"]} == {
        ("tools/call", "forecast", ("result.content.0.text",))
    }

    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("mcp_tasks_proxy_shadow_total{")
    }
    assert samples == {
        f'mcp_tasks_proxy_shadow_total{{backend="next",method="{m}",outcome="{o}",tool="{t}"}}': n
        for m, t, o, n in [
            ("prompts/get", "", "match", 1.0),
            ("prompts/list", "", "match", 1.0),
            ("resources/list", "", "match", 1.0),
            ("resources/read", "", "match", 1.0),
            ("tools/call", "forecast", "differ", 3.0),
            ("tools/call", "lookup", "match", 5.0),
            ("tools/call", "slow_lookup", "match", 1.0),
            ("tools/list", "", "match", 1.0),
        ]
    }

    # The status command's tables (`mcp-tasks-proxy status`) from the same data.
    printed = render(
        {
            "now_ms": 0,
            "backends": [],
            "matrix": {"last_hour": [], "last_day": []},
            "matrix_by_backend": {"last_hour": []},
            "last_v1_ms": None,
            "v1_clients": [],
            "clients": [],
            "recent_errors": [],
            "shadow": [shadow],
            "counting": {"covers": "process", "store": "memory", "since_ms": 0, "replica": None, "replicas": [], "late": []},
        }
    )
    lines = printed.split("Shadow comparison: next shadows legacy (100%; this process, since its start)\n", 1)[1].splitlines()
    assert [line.split() for line in lines[2:10]] == [
        ["prompts/get", "-", "1", "0", "0", "0", "0", "0", "0", "100.0%"],
        ["prompts/list", "-", "1", "0", "0", "0", "0", "0", "0", "100.0%"],
        ["resources/list", "-", "1", "0", "0", "0", "0", "0", "0", "100.0%"],
        ["resources/read", "-", "1", "0", "0", "0", "0", "0", "0", "100.0%"],
        ["tools/call", "forecast", "0", "3", "0", "0", "0", "0", "0", "0.0%"],
        ["tools/call", "lookup", "5", "0", "0", "0", "0", "0", "0", "100.0%"],
        ["tools/call", "slow_lookup", "1", "0", "0", "0", "0", "0", "0", "100.0%"],
        ["tools/list", "-", "1", "0", "0", "0", "0", "0", "0", "100.0%"],
    ]
    assert sorted(lines[10:]) == [
        f'  tools/call forecast: result.content.0.text: "sunny in {c}" → "rainy in {c}"' for c in ("Bergen", "Oslo", "Rome")
    ]

    rendered = tables(dom)
    assert rendered["shadow-next"] == [
        [
            "method",
            "tool",
            "match",
            "differ",
            "candidate error",
            "primary error",
            "timeout",
            "dropped",
            "too large",
            "match rate",
        ],
        ["prompts/get", "—", "1", "0", "0", "0", "0", "0", "0", "100.0%"],
        ["prompts/list", "—", "1", "0", "0", "0", "0", "0", "0", "100.0%"],
        ["resources/list", "—", "1", "0", "0", "0", "0", "0", "0", "100.0%"],
        ["resources/read", "—", "1", "0", "0", "0", "0", "0", "0", "100.0%"],
        ["tools/call", "forecast", "0", "3", "0", "0", "0", "0", "0", "0.0%"],
        ["tools/call", "lookup", "5", "0", "0", "0", "0", "0", "0", "100.0%"],
        ["tools/call", "slow_lookup", "1", "0", "0", "0", "0", "0", "0", "100.0%"],
        ["tools/list", "—", "1", "0", "0", "0", "0", "0", "0", "100.0%"],
    ]
    diffs = rendered["shadow-diffs-next"]
    assert diffs[0] == ["when", "method", "tool", "difference"]
    assert sorted(row[1:] for row in diffs[1:]) == [
        ["tools/call", "forecast", 'result.content.0.text: "sunny in Bergen" → "rainy in Bergen"'],
        ["tools/call", "forecast", 'result.content.0.text: "sunny in Oslo" → "rainy in Oslo"'],
        ["tools/call", "forecast", 'result.content.0.text: "sunny in Rome" → "rainy in Rome"'],
    ]

    # The candidate's own record: every read-only call, never `remember`.
    assert _calls(candidate_log) == sorted(
        [
            *(f"lookup {json.dumps({'key': k})}" for k in "abcde"),
            *(f"forecast {json.dumps({'city': c})}" for c in ("Oslo", "Bergen", "Rome")),
            f"slow_lookup {json.dumps({'key': 's'})}",
        ]
    )
    # The primary ran the clients' calls, and the session clients' read-only ones once more (asked
    # again: a session's answer is not held); the task it made was followed, not run again.
    assert _calls(primary_log) == sorted(
        [
            *(f"lookup {json.dumps({'key': k})}" for k in "abcddee"),
            *(f"forecast {json.dumps({'city': c})}" for c in ("Oslo", "Bergen", "Rome", "Rome")),
            *(f"remember {json.dumps({'note': n})}" for n in ("one", "two", "three")),
            f"slow_lookup {json.dumps({'key': 's'})}",
        ]
    )


async def test_shadow_tools_mirrors_a_tool_without_read_only_hint(shadow_peers, tmp_path):
    """`shadow_tools = ["remember"]`: the operator's explicit list is mirrored too."""
    primary, candidate, _primary_log, candidate_log = shadow_peers
    upstream = _upstream(primary, candidate, shadow_tools=["remember"])
    async with running_proxy("", tmp_path, upstream=upstream, store="memory") as proxy, aiohttp.ClientSession() as http:
        modern = Caller(http, proxy.url)
        assert (await modern.call("tools/call", {"name": "remember", "arguments": {"note": "x"}})).status == 200
        shadow = await _shadow_rows(http, proxy.base_url, 1)
    assert shadow["rows"] == [shadow_row("tools/call", "remember", match=1)]
    assert _calls(candidate_log) == [f"remember {json.dumps({'note': 'x'})}"]


async def test_the_official_v1_client_s_tools_list_on_relayed_sessions_is_mirrored(shadow_peers, tmp_path):
    """Issue 39, part 5: session clients are mirrored too (docs/behaviour.md §8). The official `mcp`
    1.30 client lists the tools at the start of each of four sessions, relayed to the v1 primary:
    each listing is asked again of the primary and compared with the candidate's."""
    primary, candidate, _, _ = shadow_peers
    async with (
        running_proxy("", tmp_path, upstream=_upstream(primary, candidate), store="memory") as proxy,
        aiohttp.ClientSession() as http,
    ):
        process = await asyncio.create_subprocess_exec(
            str(ensure_peer_env("mcp-v1")),
            str(PEERS / "mcp1_list_tools.py"),
            "--url",
            proxy.url,
            "--sessions",
            "4",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode == 0, err.decode()[-2000:]
        listed = json.loads(out.decode().strip().splitlines()[-1])["tools"]
        shadow = await _shadow_rows(http, proxy.base_url, 4)
    assert (listed, shadow["rows"]) == ([4, 4, 4, 4], [shadow_row("tools/list", "", match=4)])
