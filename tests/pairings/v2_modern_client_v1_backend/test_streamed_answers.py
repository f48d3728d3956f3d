"""Streamed answers on the modern face over a v1 backend (docs/behaviour.md §4.10): a v2-modern
client through the proxy to the reference v1 server (mcp==1.30.0), raw HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from peer_checks import run_script
from support import Caller, running_proxy

from proxy.demo.peers import ensure_peer_env
from proxy.sse import SseParser

pytestmark = pytest.mark.peers


@pytest.fixture
async def caller(reference_v1_server, tmp_path: Path):
    async with running_proxy(reference_v1_server.url, tmp_path) as running, aiohttp.ClientSession() as http:
        yield Caller(http, running.url)


async def _post(
    caller: Caller, name: str, arguments: dict[str, Any], extra_meta: dict[str, Any], accept: str | None = None
) -> tuple[aiohttp.ClientResponse, list[Any]]:
    body = caller.body("tools/call", {"name": name, "arguments": arguments})
    body["params"]["_meta"].update(extra_meta)
    headers = {**caller.headers("tools/call"), "Content-Type": "application/json"}
    if accept is not None:
        headers["Accept"] = accept
    async with caller.http.post(caller.url, data=json.dumps(body), headers=headers) as response:
        raw = await response.read()
    if response.headers["Content-Type"].startswith("text/event-stream"):
        return response, [json.loads(event.data) for event in SseParser().feed(raw)]
    return response, [json.loads(raw)]


def _progress(step: int, count: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "tok", "progress": step, "total": count, "message": f"step {step}"},
    }


def _log(level: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": level, "logger": "report_progress", "data": f"report_progress at {level}"},
    }


DONE = {"content": [{"type": "text", "text": "progress done"}], "isError": False, "resultType": "complete"}


async def test_progress_and_logs_at_the_requested_level_stream_before_the_answer(caller):
    response, messages = await _post(
        caller, "report_progress", {"count": 12}, {"progressToken": "tok", "io.modelcontextprotocol/logLevel": "warning"}
    )
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/event-stream"
    assert response.headers["X-Accel-Buffering"] == "no"
    assert messages[:-1] == [_progress(step, 12) for step in range(1, 13)] + [_log("warning"), _log("error")]
    assert messages[-1]["result"] == DONE


async def test_no_log_level_means_no_log_messages(caller):
    _, messages = await _post(caller, "report_progress", {"count": 3}, {"progressToken": "tok"})
    assert messages[:-1] == [_progress(1, 3), _progress(2, 3), _progress(3, 3)]
    assert messages[-1]["result"] == DONE


async def test_log_level_debug_gets_every_level(caller):
    _, messages = await _post(caller, "report_progress", {"count": 0}, {"io.modelcontextprotocol/logLevel": "debug"})
    assert messages[:-1] == [_log("debug"), _log("info"), _log("warning"), _log("error")]


async def test_an_answer_with_nothing_before_it_is_json(caller):
    response, messages = await _post(caller, "report_progress", {"count": 5}, {})
    assert response.headers["Content-Type"] == "application/json"
    assert messages == [{"jsonrpc": "2.0", "id": 1, "result": DONE}]


async def test_a_client_that_takes_json_only_gets_its_answer_as_json_without_the_notifications(caller):
    response, messages = await _post(
        caller,
        "report_progress",
        {"count": 4},
        {"progressToken": "tok", "io.modelcontextprotocol/logLevel": "debug"},
        "application/json",
    )
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/json"
    assert messages == [{"jsonrpc": "2.0", "id": 1, "result": DONE}]


async def test_a_listen_from_a_client_that_takes_json_only_is_refused_406(caller):
    body = caller.body("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    headers = {**caller.headers("subscriptions/listen"), "Content-Type": "application/json", "Accept": "application/json"}
    async with caller.http.post(caller.url, data=json.dumps(body), headers=headers) as response:
        answer = await response.json()
    assert response.status == 406
    assert answer == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32600, "message": "Not Acceptable: subscriptions/listen is answered as text/event-stream"},
    }


PROGRESS_SCRIPT = Path(__file__).resolve().parents[2] / "peers" / "fastmcp4_progress_check.py"


async def test_fastmcp4_client_progress_handler_gets_every_notification_in_order(reference_v1_server, tmp_path: Path):
    python = ensure_peer_env("fastmcp4")
    async with running_proxy(reference_v1_server.url, tmp_path) as running:
        returncode, stdout, stderr = await run_script(python, PROGRESS_SCRIPT, running.url, 120)
    assert returncode == 0, stderr
    seen = json.loads(stdout.strip().splitlines()[-1])
    assert seen["progress"] == [[step, 25, f"step {step}"] for step in range(1, 26)]
    assert seen["texts"] == ["progress done"]
    # FastMCP 4 asks for every level (logLevel debug) and its log handler gets each message once.
    assert seen["logs"] == [[level, f"report_progress at {level}"] for level in ("debug", "info", "warning", "error")]
