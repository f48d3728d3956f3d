"""A relayed v1 session in front of a v1 server that has tasks keeps every declaration the server
made, with held tasks on (the default): docs/behaviour.md §9, docs/decisions.md §151.

The server is the reference v1 server (`proxy/demo/servers/v1_server.py`, a low-level `mcp` 1.30
server with tasks whose `greet` declares no `execution.taskSupport`), over HTTP and run by the proxy
on stdio; the client the official `mcp` 1.30 SDK (`tests/peers/mcp1_client_checks.py`, every check).
What the proxy shows, and what the client makes of it, is compared with what the same server answers
with no proxy in between."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from session_support import SessionCaller
from stdio_support import running_stdio_proxy
from support import running_proxy

from proxy.app import STATE
from proxy.demo.peers import ensure_peer_env

pytestmark = pytest.mark.peers
CHECKS_SCRIPT = Path(__file__).resolve().parents[2] / "peers" / "mcp1_client_checks.py"
MCP1_CHECKS = [
    "sync_tool",
    "create_task_shape",
    "get_is_flat",
    "tool_error_failed",
    "result_related_meta",
    "cancel",
    "cancel_finished_and_unknown",
    "required_without_task",
    "forbidden_with_task",
    "list_tasks",
    "concurrent_creations",
    "finished_still_readable",
    "elicitation_in_task",
    "sampling_in_task",
    "progress_well_formed",
]


async def _declarations(http: aiohttp.ClientSession, url: str) -> tuple[dict, list[dict]]:
    """(the `initialize` capabilities, the `tools/list` tools) a session at `url` is shown."""
    caller = SessionCaller(http, url)
    init = await caller.initialize()
    tools = (await caller.call("tools/list"))["result"]["tools"]
    return init["result"]["capabilities"], tools


def _proxy(transport: str, url: str, state_dir: Path):
    return running_stdio_proxy("v1", state_dir) if transport == "stdio" else running_proxy(url, state_dir)


SERVERS_OWN = {"tool_error_failed", "required_without_task", "forbidden_with_task", "sampling_in_task"}
"""The checks the official client fails against the reference v1 server itself, with no proxy: they
were written for the translated pairing's reference v2 tools (`failing_job` runs as a task and
completes with `isError`, `greet` as a task is answered with an `isError` result, not -32601, and no
sampling tool runs as a task). A relay passes the server's answers on, so they fail through it alike."""


async def _checks(url: str) -> dict[str, bool]:
    """Each check of the official client against `url`: passed or not."""
    argv = [str(ensure_peer_env("mcp-v1")), str(CHECKS_SCRIPT), "--url", url]
    for name in MCP1_CHECKS:
        argv += ["--check", name]
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 400)
    lines = {line["check"]: line for line in map(json.loads, out.decode().splitlines()) if "check" in line}
    assert list(lines) == MCP1_CHECKS, (lines, err.decode()[-2000:])
    return {name: line["ok"] for name, line in lines.items()}


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_relayed_server_with_tasks_keeps_its_declarations_and_the_official_client_sees_the_server(
    transport, reference_v1_server, tmp_path
):
    async with aiohttp.ClientSession() as http:
        declared = await _declarations(http, reference_v1_server.url)
        refused = await _greet_as_task(http, reference_v1_server.url)
        direct = await _checks(reference_v1_server.url)
        async with _proxy(transport, reference_v1_server.url, tmp_path) as proxy:
            assert proxy.runner.app[STATE].settings.hold_tasks == "auto"  # held tasks on, as by default
            shown = await _declarations(http, proxy.url)
            greet = await _greet_as_task(http, proxy.url)
            relayed = await _checks(proxy.url)
    assert shown == declared  # capabilities and every tool's `execution` exactly as the server declared them
    assert [tool.get("execution") for tool in declared[1] if tool["name"] == "greet"] == [None]
    assert (
        greet
        == refused
        == {  # the server's own answer to `params.task` on a `forbidden` tool
            "result": {
                "content": [{"type": "text", "text": "This tool does not support task-augmented invocation"}],
                "isError": True,
            }
        }
    )
    assert relayed == direct == {name: name not in SERVERS_OWN for name in MCP1_CHECKS}


async def _greet_as_task(http: aiohttp.ClientSession, url: str) -> dict:
    """What a `tools/call` with `params.task` to the `forbidden` `greet` is answered (its result or error)."""
    caller = SessionCaller(http, url)
    await caller.initialize()
    answer = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}, "task": {"ttl": 60000}})
    return {key: value for key, value in answer.items() if key in ("result", "error")}
