"""The official MCP TypeScript SDK v2 client (npm `@modelcontextprotocol/client` 2.4.0, a 2026-07-28
client) through the proxy to two 2025-11-25 servers: the TypeScript reference server
`@modelcontextprotocol/server-everything` 2026.8.31 and the reference v1 server (mcp==1.30.0,
with its opt-in `add_tool`). What streams (docs/behaviour.md §4.9, §4.10): progress to the
client's `onprogress` callback, log messages at the per-request level (server-everything logs
only session-wide, which no request gets: decision 66), and `listen()`, with the tools
server-everything adds as its session starts.

`tests/node/sdk_client.mjs` drives the client with its own Streamable HTTP transport; the
packages are pinned in `proxy/demo/node_packages.py` and installed into the cache on first use,
and Node 22 is the one the conformance suite uses (`proxy/demo/node_tools.py`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import RunningProxy, running_proxy

from proxy.demo.node_packages import OFFICIAL_SCHEMAS, SERVER_EVERYTHING, ensure_npm_packages
from proxy.demo.node_tools import ensure_conformance
from proxy.demo.processes import ServerProcess

pytestmark = pytest.mark.peers

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
SCRIPT = NODE_DIR / "sdk_client.mjs"
RUN_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def node() -> str:
    """Node 22 (the SDK v2 client's engine)."""
    return str(ensure_conformance().node)


@pytest.fixture(scope="module")
def everything(node: str) -> Iterator[ServerProcess]:
    """server-everything over Streamable HTTP on 127.0.0.1:<ephemeral> (loopback_listen.mjs binds it)."""
    prefix = ensure_npm_packages("server-everything", SERVER_EVERYTHING)
    entry = prefix / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    server = ServerProcess.start(
        [node, "--import", str(NODE_DIR / "loopback_listen.mjs"), str(entry), "streamableHttp"], env={"PORT": "0"}
    )
    try:
        yield server
    finally:
        server.stop()


async def _client(node: str, proxy: RunningProxy, mode: str, argument: dict[str, Any]) -> dict[str, Any]:
    prefix = ensure_npm_packages("official-schemas", OFFICIAL_SCHEMAS)
    process = await asyncio.create_subprocess_exec(
        node, str(SCRIPT), str(prefix), proxy.url, mode, json.dumps(argument), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(process.communicate(), RUN_TIMEOUT_S)
    assert process.returncode == 0
    answer: dict[str, Any] = json.loads(out)
    assert answer["ok"] is True, answer
    return answer


@pytest.fixture
async def via_everything(everything: ServerProcess, tmp_path: Path) -> AsyncIterator[RunningProxy]:
    async with running_proxy(everything.url, tmp_path) as proxy:
        yield proxy


@pytest.fixture
async def via_v1(listing_v1_server: ServerProcess, tmp_path: Path) -> AsyncIterator[RunningProxy]:
    async with running_proxy(listing_v1_server.url, tmp_path) as proxy:
        yield proxy


EVERYTHING_TOOLS = [
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "gzip-file-as-resource",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-long-running-operation",
]
"""server-everything's tools before `notifications/initialized`."""


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


# -- server-everything -------------------------------------------------------------------------


async def test_everything_progress_reaches_the_callback_every_step_in_order(node, via_everything):
    answer = await _client(
        node, via_everything, "progress", {"tool": "trigger-long-running-operation", "arguments": {"duration": 1, "steps": 10}}
    )
    assert answer["progress"] == [{"progress": step, "total": 10} for step in range(1, 11)]
    assert answer["result"]["content"] == [
        {"type": "text", "text": "Long running operation completed. Duration: 1 seconds, Steps: 10."}
    ]


async def test_everything_capabilities_show_what_the_proxy_delivers(node, via_everything):
    answer = await _client(node, via_everything, "progress", {"tool": "echo", "arguments": {"message": "hi"}})
    assert answer["capabilities"] == {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "logging": {},
        "completions": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    }
    assert answer["progress"] == []
    assert answer["result"]["content"] == [{"type": "text", "text": "Echo: hi"}]


async def test_everything_listen_is_acknowledged_and_a_resource_list_change_delivered(node, via_everything):
    data = "data:text/plain;base64,aGVsbG8="  # "hello": no network needed
    answer = await _client(
        node,
        via_everything,
        "listen",
        {
            "filter": {"toolsListChanged": True, "resourcesListChanged": True, "promptsListChanged": True},
            "tool": "gzip-file-as-resource",
            "arguments": {"name": "hello.gz", "data": data},
            "wait": "notifications/resources/list_changed",
        },
    )
    assert answer["honored"] == [{"toolsListChanged": True, "resourcesListChanged": True, "promptsListChanged": True}]
    # the tool added at the session's start (see below), then the resource the call added
    assert answer["delivered"] == ["notifications/tools/list_changed", "notifications/resources/list_changed"]
    assert answer["closed"] == ["local"]


async def test_everything_listen_hears_the_tools_the_backend_adds_when_its_session_starts(node, via_everything):
    # server-everything registers its conditional tools at `notifications/initialized`; the listen
    # opens the principal's upstream session, whose GET stream is open before that (decision 66).
    answer = await _client(
        node,
        via_everything,
        "listen",
        {
            "filter": {"toolsListChanged": True},
            "tool": "echo",
            "arguments": {"message": "after listen"},
            "wait": "notifications/tools/list_changed",
        },
    )
    assert answer["honored"] == [{"toolsListChanged": True}]
    assert answer["delivered"] == ["notifications/tools/list_changed"]
    assert answer["result"]["content"] == [{"type": "text", "text": "Echo: after listen"}]
    assert answer["tools"] == [*EVERYTHING_TOOLS, "simulate-research-query"]  # the one it added for this client
    assert answer["closed"] == ["local"]


async def test_everything_a_subscribed_resource_update_reaches_the_listener(node, via_everything):
    uri = "demo://resource/dynamic/text/1"
    answer = await _client(
        node,
        via_everything,
        "listen",
        {
            "filter": {"resourceSubscriptions": [uri]},
            "tool": "toggle-subscriber-updates",
            "arguments": {},
            "wait": "notifications/resources/updated",
        },
    )
    assert answer["honored"] == [{"resourceSubscriptions": [uri]}]
    assert answer["delivered"] == [f"notifications/resources/updated {uri}"]


async def test_everything_session_wide_logs_reach_no_request(node, via_everything):
    # server-everything logs only session-wide (no related request); with the upstream GET stream
    # held by a listen, the proxy hears them and must not put them on the call's answer (§4.10,
    # decision 66). The second call toggles the simulated logging off again.
    argument = {"tool": "toggle-simulated-logging", "arguments": {}, "level": "debug", "listen": {"toolsListChanged": True}}
    started = await _client(node, via_everything, "logs", {**argument, "settleMs": 300})
    stopped = await _client(node, via_everything, "logs", argument)
    assert started["logs"] == []
    assert stopped["logs"] == []
    [text] = [block["text"] for block in started["result"]["content"]]
    session = text.removeprefix("Started simulated, random-leveled logging for session ").split(" ", 1)[0]
    assert text.startswith(f"Started simulated, random-leveled logging for session {session} at a 5 second pace.")
    assert stopped["result"]["content"] == [{"type": "text", "text": f"Stopped simulated logging for session {session}"}]


# -- the reference v1 server (`listing_v1_server`: tools.listChanged and add_tool) ---------------


async def test_v1_progress_reaches_the_callback_every_step_in_order(node, via_v1):
    answer = await _client(node, via_v1, "progress", {"tool": "report_progress", "arguments": {"count": 100}})
    assert answer["capabilities"] == {
        "tools": {"listChanged": True},
        "logging": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    }
    assert answer["progress"] == [{"progress": step, "total": 100, "message": f"step {step}"} for step in range(1, 101)]
    assert answer["result"] == _text("progress done")


@pytest.mark.parametrize(
    ("level", "levels"),
    [("warning", ["warning", "error"]), ("debug", ["debug", "info", "warning", "error"]), ("error", ["error"])],
)
async def test_v1_log_messages_at_the_requested_level_only(node, via_v1, level, levels):
    answer = await _client(node, via_v1, "logs", {"tool": "report_progress", "arguments": {"count": 0}, "level": level})
    assert answer["logs"] == [
        {"level": name, "logger": "report_progress", "data": f"report_progress at {name}"} for name in levels
    ]
    assert answer["result"] == _text("progress done")
    assert answer["setLoggingLevel"] == "SdkError"  # on 2026-07-28 the level goes per request only


async def test_v1_listen_is_acknowledged_and_a_tools_list_change_delivered(node, via_v1):
    answer = await _client(
        node,
        via_v1,
        "listen",
        {
            "filter": {"toolsListChanged": True, "promptsListChanged": True},
            "tool": "add_tool",
            "arguments": {"name": "added_by_listen"},
            "wait": "notifications/tools/list_changed",
        },
    )
    assert answer["honored"] == [{"toolsListChanged": True}]
    assert answer["delivered"] == ["notifications/tools/list_changed"]
    assert answer["result"] == _text("added added_by_listen")
    assert answer["tools"][-2:] == ["add_tool", "added_by_listen"]
    assert answer["closed"] == ["local"]


async def test_v1_two_listeners_of_one_client_each_get_the_change(node, via_v1):
    answer = await _client(
        node,
        via_v1,
        "listen",
        {
            "filter": {"toolsListChanged": True},
            "listeners": 2,
            "tool": "add_tool",
            "arguments": {"name": "added_for_two"},
            "wait": "notifications/tools/list_changed",
        },
    )
    assert answer["honored"] == [{"toolsListChanged": True}, {"toolsListChanged": True}]
    assert answer["delivered"] == ["notifications/tools/list_changed", "notifications/tools/list_changed"]
    assert answer["closed"] == ["local", "local"]
