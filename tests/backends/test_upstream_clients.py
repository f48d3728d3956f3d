"""Which HTTP client carries the proxy's requests to a backend (docs/decisions.md §115, §128):
relays and the session and modern wires of translations use the proxy's own keep-alive client,
which sends no `User-Agent`; the probe's `server/discover` keeps aiohttp's, which names itself.
Read by a recording tap (`tests/tap.py`) in front of the reference servers."""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
import pytest
from session_support import SessionCaller
from support import Caller, running_proxy
from tap import RecordingTap

from proxy.demo.processes import ServerProcess

pytestmark = pytest.mark.peers

AIOHTTP_AGENT = f"Python/{sys.version_info.major}.{sys.version_info.minor} aiohttp/{aiohttp.__version__}"
GREET = {"name": "greet", "arguments": {"name": "Ada"}}


Seen = tuple[str, str | None]
"""(JSON-RPC method, `User-Agent`) of one POST the tap saw."""


def _seen(tap: RecordingTap, mark: int = 0) -> list[Seen]:
    return list(zip(tap.methods[mark:], tap.user_agents[mark:], strict=True))


async def test_a_translated_sync_call_and_lifecycle_reach_a_v1_backend_on_the_proxys_own_client(reference_v1_server, tmp_path):
    tap = await RecordingTap.start(reference_v1_server.url)
    try:
        async with running_proxy(tap.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
            assert _seen(tap)[:2] == [("server/discover", AIOHTTP_AGENT)] * 2  # the probe: modern, then the legacy wire
            assert {agent for _method, agent in _seen(tap)[2:]} == {None}
            mark = len(tap.methods)
            caller = Caller(http, proxy.url)
            answer = await caller.call("tools/call", GREET)
            assert answer.result == {
                "content": [{"type": "text", "text": "Hello, Ada!"}],
                "isError": False,
                "resultType": "complete",
            }
            assert _seen(tap, mark) == [("initialize", None), ("notifications/initialized", None), ("tools/call", None)]

            mark = len(tap.methods)
            created = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": "x"}})
            assert created.result["resultType"] == "task", created.body
            done = await caller.poll(created.result["taskId"])
            assert done["status"] == "completed", done
            methods = [method for method, _agent in _seen(tap, mark)]
            # created, polled until it ends (how often depends on timing), its result read once
            assert (methods[0], set(methods[1:-1]), methods[-1]) == ("tools/call", {"tasks/get"}, "tasks/result"), methods
            assert {agent for _method, agent in _seen(tap, mark)} == {None}
    finally:
        await tap.stop()


async def _greet_in_a_session(server: ServerProcess, tmp_path: Path) -> tuple[list[Seen], dict, list[Seen]]:
    """A session-wire client's `initialize` and one `greet` through the proxy in front of `server`:
    (what the tap saw before the client came, the greet's answer, what it saw from then on)."""
    tap = await RecordingTap.start(server.url)
    try:
        async with running_proxy(tap.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
            before = _seen(tap)
            mark = len(tap.methods)
            session = SessionCaller(http, proxy.url)
            await session.initialize()
            answer = await session.call("tools/call", GREET)
            return before, answer, _seen(tap, mark)
    finally:
        await tap.stop()


async def test_a_v1_session_reaches_a_v2_backend_on_the_proxys_own_client(reference_v2_server, tmp_path):
    before, answer, seen = await _greet_in_a_session(reference_v2_server, tmp_path)
    assert before[0] == ("server/discover", AIOHTTP_AGENT)
    assert answer["result"]["content"] == [{"text": "Hello, Ada!", "type": "text"}], answer
    # `greet` is not known yet: its `Mcp-Param-*` headers are learnt from the backend's `tools/list` first (decision 157)
    assert seen == [("tools/list", None), ("tools/call", None)]


async def test_a_relayed_v1_session_reaches_its_backend_on_the_proxys_own_client(reference_v1_server, tmp_path):
    _before, answer, seen = await _greet_in_a_session(reference_v1_server, tmp_path)
    assert answer["result"]["content"] == [{"type": "text", "text": "Hello, Ada!"}], answer
    assert seen == [("initialize", None), ("notifications/initialized", None), ("tools/call", None)]
