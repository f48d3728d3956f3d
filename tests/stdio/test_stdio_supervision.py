"""Supervision of stdio backends (docs/behaviour.md §7): bad output skipped, stderr logged, a
process that dies restarted with its tasks unknown, readiness, and shutdown without zombies."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

import aiohttp
from stdio_support import TEST_KEY, running_stdio_proxy
from support import Caller

from proxy.app import STATE, RunningProxy, start
from proxy.config import load
from translators.errors import FORGOTTEN, UNKNOWN_TASK
from translators.sealing import Keyring

FORGOTTEN_TASK = f"{UNKNOWN_TASK}: {FORGOTTEN}"

NOISY = [sys.executable, str(Path(__file__).resolve().parents[1] / "peers" / "noisy_stdio_server.py")]


def _pool(proxy: RunningProxy):
    return proxy.runner.app[STATE].fleet.members[0].backend.connector.pool


async def _proxy(command: list[str], tmp_path: Path, **upstream) -> RunningProxy:
    settings = load(
        None,
        {
            "listen": "127.0.0.1:0",
            "state_dir": str(tmp_path),
            "store": "memory",
            "upstream": [{"name": "noisy", "command": command, **upstream}],
        },
    )
    return await start(settings, keyring=Keyring(TEST_KEY))


def _gone(pid: int) -> bool:
    """Whether no process (not even a zombie) has this pid any more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_lines_that_are_not_json_or_too_long_are_skipped_and_stderr_is_logged(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    proxy = await _proxy(NOISY, tmp_path, max_line_bytes=2048)
    try:
        async with aiohttp.ClientSession() as http:
            answer = await Caller(http, proxy.url).call("tools/call", {"name": "echo", "arguments": {"text": "still here"}})
        assert answer.result["content"] == [{"type": "text", "text": "still here"}]
    finally:
        await proxy.stop()
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("proxy.upstream.stdio")]
    assert "backend noisy: stdout line that is not JSON skipped: b'this is not json'" in messages
    assert "backend noisy: stdout line that is not a JSON-RPC message skipped: b'[1, 2]'" in messages
    assert "backend noisy: stdout line over 2048 bytes skipped" in messages
    assert "backend noisy stderr: starting up" in messages


async def test_shutdown_kills_a_process_that_ignores_eof_and_sigterm_and_reaps_it(tmp_path):
    proxy = await _proxy([*NOISY, "--stubborn"], tmp_path, stop_grace_ms=200)
    [slot] = _pool(proxy).slots.values()
    pid = slot.process.pid
    assert _gone(pid) is False
    await proxy.stop()
    assert slot.process.process.returncode == -signal.SIGKILL
    assert _gone(pid) is True


async def test_a_command_that_cannot_run_leaves_the_backend_not_ready(tmp_path):
    proxy = await _proxy(["/nonexistent/stdio-server"], tmp_path)
    try:
        async with aiohttp.ClientSession() as http, http.get(proxy.base_url + "/readyz") as response:
            assert response.status == 503
            body = await response.json()
        assert (body["status"], body["backend"]) == ("not ready", "noisy")
        assert body["reason"] == (
            "Backend 'noisy' unavailable: answered HTTP 502: Backend 'noisy': its process is not running "
            "(cannot start '/nonexistent/stdio-server': No such file or directory)"
        )
    finally:
        await proxy.stop()


async def test_a_killed_process_is_restarted_its_tasks_are_unknown_and_new_work_is_served(tmp_path):
    async with running_stdio_proxy("v1", tmp_path, store="memory") as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url)
        created = (
            await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "lost"}})
        ).result
        assert created["status"] == "working"
        [slot] = [s for s in _pool(proxy).slots.values() if s.busy]
        pid = slot.process.pid
        os.kill(pid, signal.SIGKILL)
        while slot.restarts == 0 or not slot.ready.is_set():
            await asyncio.sleep(0.05)
        assert _gone(pid) is True
        lost = await client.call("tasks/get", {"taskId": created["taskId"]})
        assert lost.error == {
            "code": -32602,
            "message": FORGOTTEN_TASK,
        }
        answer = await client.call("tools/call", {"name": "greet", "arguments": {"name": "again"}})
        assert answer.result["content"] == [{"type": "text", "text": "Hello, again!"}]
        async with http.get(proxy.base_url + "/readyz") as response:
            assert (response.status, await response.json()) == (200, {"status": "ready"})
        created = (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "new"}})).result
        final = await client.poll(created["taskId"])
        assert final["result"]["content"] == [{"type": "text", "text": "computed new"}]


async def test_a_question_asked_before_the_task_creating_call_is_answered_reaches_the_task(tmp_path):
    """The question lands on the stream of the call creating the task; when the call's answer comes
    first, the question is offered again on the session's GET stream, where the task's client
    finds it (docs/decisions.md §56)."""
    racing = [sys.executable, str(Path(__file__).resolve().parents[1] / "peers" / "racing_stdio_server.py")]  # noqa: ASYNC240 - a path computed once
    proxy = await _proxy(racing, tmp_path)
    try:
        async with aiohttp.ClientSession() as http:
            client = Caller(http, proxy.url)
            created = (await client.call("tools/call", {"name": "ask", "arguments": {}})).result
            for _ in range(200):  # the question is there at once with the fix; without it, never
                task = (await client.call("tasks/get", {"taskId": created["taskId"]})).result
                if task["status"] == "input_required":
                    break
                await asyncio.sleep(0.05)
            [(key, question)] = task["inputRequests"].items()
            assert (question["method"], question["params"]["message"]) == ("elicitation/create", "Which word?")
            await client.call(
                "tasks/update",
                {"taskId": created["taskId"], "inputResponses": {key: {"action": "accept", "content": {"word": "tide"}}}},
            )
            final = await client.poll(created["taskId"])
        assert final["result"]["content"] == [{"type": "text", "text": "answer: tide"}]
    finally:
        await proxy.stop()
