"""Supervision of stdio backends (docs/behaviour.md §7): bad output skipped, stderr logged, a
process that dies restarted with its tasks unknown, readiness, and shutdown without zombies."""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from session_support import SessionCaller
from stdio_support import TEST_KEY, gone, running_stdio_proxy
from support import Caller, until

from proxy.app import STATE, RunningProxy, start
from proxy.config import load
from proxy.demo.node_packages import STDIO_SERVERS, ensure_npm_packages
from proxy.fleet import CommandFails
from translators.errors import FORGOTTEN, UNKNOWN_TASK
from translators.sealing import Keyring

pytestmark = pytest.mark.slow  # waits out restart backoffs of seconds: kept out of the fast tier

FORGOTTEN_TASK = f"{UNKNOWN_TASK}: {FORGOTTEN}"

NOISY = [sys.executable, str(Path(__file__).resolve().parents[1] / "peers" / "noisy_stdio_server.py")]
NOTES = [sys.executable, str(Path(__file__).resolve().parents[1] / "peers" / "notes_stdio_server.py")]


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
    assert gone(pid) is False
    await proxy.stop()
    assert slot.process.process.returncode == -signal.SIGKILL
    assert gone(pid) is True


async def test_a_command_that_cannot_run_refuses_the_start_and_leaves_nothing_behind(tmp_path):
    """Issue 37, defect 8: no proxy that would retry for ever (each request waiting 5 s for a 502);
    the start is refused naming the command."""
    with pytest.raises(CommandFails) as refused:
        await _proxy(["/nonexistent/stdio-server"], tmp_path)
    assert (
        str(refused.value) == "backend 'noisy': its command '/nonexistent/stdio-server' cannot be run: No such file or directory"
    )


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
        async with asyncio.timeout(30):  # a deadline: a supervisor that never restarts fails here
            while slot.restarts == 0 or not slot.ready.is_set():
                await asyncio.sleep(0.05)
        assert gone(pid) is True
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


@pytest.mark.parametrize("backoff_s", [2.0, 60.0])
async def test_an_initialize_during_a_restarts_backoff_waits_for_the_restart_when_it_comes_in_time(
    tmp_path, monkeypatch, backoff_s
):
    """A tester's finding: an `initialize` that came while a killed process's restart waited out
    its backoff was refused at once (HTTP 502 "the process exited with status -9"), though the
    process was up again a quarter of a second later. Now it waits for the restart when the
    backoff ends within the start wait (10 s), as it waits for a process being started; a longer
    backoff is still answered at once with why the process is down. The re-probe the loss asks for
    meets the same backoff: the backend's last profile stands, as for one that refuses
    connections (a tester's finding: the probe's 502 was the newcomer's answer)."""
    from proxy.upstream.stdio import mux as stdio_mux

    monkeypatch.setattr(stdio_mux, "BACKOFF_FIRST_S", backoff_s)  # a backoff long enough to be met for certain
    proxy = await _proxy(NOTES, tmp_path)
    try:
        async with aiohttp.ClientSession() as http:
            alice = SessionCaller(http, proxy.url, authorization="Bearer alice", capabilities={})
            assert (await alice.initialize())["_status"] == 200
            [slot] = _pool(proxy).slots.values()
            backend = proxy.runner.app[STATE].fleet.members[0].backend
            # the loss's re-probe is then not held back
            await until(lambda: time.monotonic() - backend._last_probe >= 1.5, "1.5 s since the last probe", 10, 0.05)
            pid = slot.process.pid
            os.kill(pid, signal.SIGKILL)
            await until(lambda: slot.retry_at is not None, "the kill seen: the restart waiting out its backoff")
            bob = SessionCaller(http, proxy.url, authorization="Bearer bob", capabilities={})
            answer = await bob.initialize()
            if backoff_s < 10:
                assert (answer["_status"], answer["result"]["serverInfo"], slot.restarts) == (
                    200,
                    {"name": "notes", "version": "1"},
                    1,
                )
                assert (gone(pid), slot.process.pid != pid) == (True, True)
            else:
                error = {"code": -32603, "message": "Backend 'noisy' unavailable: the process exited with status -9"}
                assert (answer["_status"], answer["error"], slot.restarts) == (502, error, 0)
    finally:
        await proxy.stop()


async def test_a_question_asked_before_the_task_creating_call_is_answered_reaches_the_task(tmp_path):
    """The question lands on the stream of the call creating the task; when the call's answer comes
    first, the question is offered again on the session's GET stream, where the task's client
    finds it (docs/decisions.md §56)."""
    racing = [sys.executable, str(Path(__file__).resolve().parents[1] / "peers" / "racing_stdio_server.py")]  # noqa: ASYNC240 - a path computed once
    assert await _word_answered_through_the_proxy(racing, tmp_path, "tide") == [{"type": "text", "text": "answer: tide"}]


async def _word_answered_through_the_proxy(racing: list[str], tmp_path: Path, word: str) -> list[dict]:
    """A modern client through the proxy to `racing` (the racing stdio server): `ask`, `tasks/get`
    every 50 ms while `working` (10 s at most), the one question found there answered with `word`;
    the final result's content."""
    proxy = await _proxy(racing, tmp_path)
    try:
        async with aiohttp.ClientSession() as http:
            client = Caller(http, proxy.url)
            created = (await client.call("tools/call", {"name": "ask", "arguments": {}})).result
            for _ in range(200):  # the question is there at once with the fix; without it, never
                task = (await client.call("tasks/get", {"taskId": created["taskId"]})).result
                if task["status"] != "working":
                    break
                await asyncio.sleep(0.05)
            assert task["status"] == "input_required"
            [(key, question)] = task["inputRequests"].items()
            assert (question["method"], question["params"]["message"]) == ("elicitation/create", "Which word?")
            await client.call(
                "tasks/update",
                {"taskId": created["taskId"], "inputResponses": {key: {"action": "accept", "content": {"word": word}}}},
            )
            final = await client.poll(created["taskId"])
        return final["result"]["content"]
    finally:
        await proxy.stop()


@pytest.mark.parametrize("keyed", [False, True], ids=["no-related-task", "related-task"])
async def test_a_task_that_asks_while_its_status_is_read_reaches_its_client(tmp_path, keyed):
    """The task announces `input_required`, then asks, while its client's `tasks/get` is in flight
    (FastMCP 3 on stdio, whose `tasks/get` says `working` and whose `tasks/result` does not wait):
    neither goes on that `tasks/get`'s stream, whose reader takes only its answer, but where the
    task's messages go over HTTP (docs/decisions.md §129). Before: the announcement went there and
    was lost, so a question without the related task could never be told to be the task's, and one
    with it was refused (-32601); the task stayed `working`."""
    racing = [sys.executable, str(PEERS / "racing_stdio_server.py"), "--during-get", *(["--keyed"] if keyed else [])]
    assert await _word_answered_through_the_proxy(racing, tmp_path, "reed") == [{"type": "text", "text": "answer: reed"}]


PEERS = Path(__file__).resolve().parents[1] / "peers"
LAUNCHER = [sys.executable, str(PEERS / "stdio_launcher.py")]
DEADLINE_S = 20.0
"""How long a test waits for an event before it fails (an event that never comes: the fault)."""


def _dead(pid: int) -> bool:
    """Whether the process `pid` has ended: gone, or a zombie nobody reaped (an orphan's parent
    here may not reap)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:  # noqa: ASYNC230 - one small read of procfs
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as children:  # noqa: ASYNC230 - one small read of procfs
        return [int(child) for child in children.read().split()]


async def _readyz(http: aiohttp.ClientSession, proxy: RunningProxy) -> tuple[int, dict]:
    async with http.get(proxy.base_url + "/readyz") as response:
        return response.status, await response.json()


async def _ready_again(http: aiohttp.ClientSession, proxy: RunningProxy) -> tuple[int, dict]:
    """`/readyz` once it is 200 again: a probe reaches the restarted process (probes of a backend
    are at least a second apart, so the first answers may still be 503); the last answer after
    `DEADLINE_S`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while (answer := await _readyz(http, proxy))[0] != 200 and loop.time() < deadline:
        await asyncio.sleep(0.1)
    return answer


async def test_a_stopped_process_is_found_hung_its_calls_fail_at_once_and_it_is_restarted(tmp_path):
    """SIGSTOP: every waiting call of every session fails once the process has said nothing for
    `liveness_timeout_ms`, `/readyz` is 503 until the restarted process answers, then work goes
    on (docs/decisions.md §72). Before: the calls waited for their timeout, `/readyz` said 200."""
    (tmp_path / "gate").mkdir()
    gated = [*NOISY, "--gate", str(tmp_path / "gate")]
    proxy = await _proxy(gated, tmp_path, liveness_timeout_ms=1000, process_scope="shared", hold_after_ms=30_000)
    try:
        async with aiohttp.ClientSession() as http:
            first, second = SessionCaller(http, proxy.url), SessionCaller(http, proxy.url)
            modern = Caller(http, proxy.url)
            await first.initialize()
            await second.initialize()
            echo = {"name": "echo", "arguments": {"text": "before"}}
            assert (await first.call("tools/call", echo))["result"]["content"] == [{"type": "text", "text": "before"}]
            [slot] = _pool(proxy).slots.values()
            stopped = slot.process
            pid = stopped.pid
            os.kill(pid, signal.SIGSTOP)
            calls = [asyncio.ensure_future(caller.call("tools/call", echo)) for caller in (first, second)]
            translated = asyncio.ensure_future(modern.call("tools/call", echo))
            answers = await asyncio.wait_for(asyncio.gather(*calls), DEADLINE_S)
            reason = (
                "the process stopped answering (no message on its stdout, not even to a ping, for 1000 ms while a request waited)"
            )
            lost = {"code": -32603, "message": f"Backend 'noisy' unavailable: {reason}"}  # a gateway's 502, as over HTTP
            assert [(answer["_status"], answer["error"]) for answer in answers] == [(502, lost)] * 2
            answer = await asyncio.wait_for(translated, DEADLINE_S)
            assert (answer.status, answer.body["error"]) == (502, lost)
            async with http.get(proxy.base_url + "/status.json") as response:
                failures = {(f["mode"], f["reason"]): f["count"] for f in (await response.json())["failures"]["last_hour"]}
            assert failures == {("relayed", "backend_unreachable"): 2, ("translated", "backend_unreachable"): 1}
            await until(lambda: stopped.process.returncode is not None, "the stopped process to be killed", DEADLINE_S)
            assert (stopped.process.returncode, gone(pid)) == (-signal.SIGKILL, True)
            status, body = await _readyz(http, proxy)
            assert (status, body["status"], body["backend"]) == (503, "not ready", "noisy")
            assert body["reason"] == f"Backend 'noisy' unavailable: {reason}"  # as marked down, or as the pool says
            (tmp_path / "gate" / "open").touch()
            await until(lambda: slot.ready.is_set() and slot.restarts == 1, "the process to be started again", DEADLINE_S)
            assert await _ready_again(http, proxy) == (200, {"status": "ready"})
            again = SessionCaller(http, proxy.url)
            await again.initialize()
            answer = await again.call("tools/call", {"name": "echo", "arguments": {"text": "after"}})
            assert answer["result"]["content"] == [{"type": "text", "text": "after"}]
            assert slot.process.pid != pid
    finally:
        await proxy.stop()


async def test_a_silent_process_answering_pings_is_not_restarted(tmp_path):
    """A request that takes longer than `liveness_timeout_ms` on a process that answers its pings
    completes; the process is not restarted."""
    racing = [sys.executable, str(PEERS / "racing_stdio_server.py"), "--after"]
    proxy = await _proxy(racing, tmp_path, liveness_timeout_ms=600, process_scope="shared")
    try:
        async with aiohttp.ClientSession() as http:
            client = SessionCaller(http, proxy.url)
            await client.initialize()
            created = await client.call("tools/call", {"name": "ask", "arguments": {}, "task": {"ttl": 60000}})
            assert created["result"]["task"]["status"] == "working"
            [slot] = _pool(proxy).slots.values()
            pid = slot.process.pid

            async def answer_later(question):
                await asyncio.sleep(2.0)  # over three liveness timeouts with the process silent but for its answers to pings
                return {"action": "accept", "content": {"word": "late"}}

            client.on_request = answer_later
            result = await asyncio.wait_for(
                client.call("tasks/result", {"taskId": created["result"]["task"]["taskId"]}), DEADLINE_S
            )
            assert result["result"]["content"] == [{"type": "text", "text": "answer: late"}]
            assert (slot.restarts, slot.process.pid) == (0, pid)
    finally:
        await proxy.stop()


async def test_a_killed_launcher_ends_its_process_group_and_the_server_is_started_again(tmp_path, caplog):
    """A launcher (like `npx`) runs the server as its child, which holds the pipes. kill -9 of the
    launcher: the proxy notices its exit, ends the group (the child too), starts it again and
    serves calls (docs/decisions.md §72). Before: calls answered "the process is not running" for
    as long as the child lived, nothing was logged and `/readyz` said ready."""
    caplog.set_level(logging.INFO)
    proxy = await _proxy([*LAUNCHER, *NOISY], tmp_path, process_scope="shared", stop_grace_ms=500)
    try:
        async with aiohttp.ClientSession() as http:
            client = SessionCaller(http, proxy.url)
            await client.initialize()
            echo = {"name": "echo", "arguments": {"text": "through the launcher"}}
            assert (await client.call("tools/call", echo))["result"]["content"] == [
                {"type": "text", "text": "through the launcher"}
            ]
            [slot] = _pool(proxy).slots.values()
            launcher = slot.process.pid
            [server] = _children(launcher)
            os.kill(launcher, signal.SIGKILL)
            await until(lambda: slot.restarts == 1 and slot.ready.is_set(), "the server to be started again", DEADLINE_S)
            await until(lambda: _dead(server), "the server the launcher ran to end", DEADLINE_S)
            assert gone(launcher) is True
            messages = [r.getMessage() for r in caplog.records if r.name.startswith("proxy.upstream")]
            assert f"backend noisy: process {launcher} exited with status -9" in messages
            assert "backend noisy is down: Backend 'noisy' unavailable: the process exited with status -9" in messages
            again = SessionCaller(http, proxy.url)
            await again.initialize()
            answer = await again.call("tools/call", {"name": "echo", "arguments": {"text": "again"}})
            assert answer["result"]["content"] == [{"type": "text", "text": "again"}]
            assert await _ready_again(http, proxy) == (200, {"status": "ready"})
    finally:
        await proxy.stop()


async def test_shutdown_ends_the_whole_process_group(tmp_path):
    """On shutdown the group gets SIGTERM, then SIGKILL: the launcher and the server it runs, which
    ignores EOF and SIGTERM, both end. Before: only the launcher was signalled, and the stop waited
    for ever on the pipes the server held."""
    proxy = await _proxy([*LAUNCHER, *NOISY, "--stubborn"], tmp_path, process_scope="shared", stop_grace_ms=300)
    [slot] = _pool(proxy).slots.values()
    await until(slot.ready.is_set, "the server to answer initialize", DEADLINE_S)
    launcher = slot.process.pid
    [server] = _children(launcher)
    await proxy.stop()
    assert gone(launcher) is True
    await until(lambda: _dead(server), "the server, which ignores SIGTERM, to end", DEADLINE_S)


async def test_a_response_over_max_line_bytes_answers_its_request_with_an_error_naming_the_limit(tmp_path):
    """The response (its `id` last, as the TypeScript SDK writes it) is not kept, and its request is
    answered at once with -32603 naming the limit; the process serves on (docs/decisions.md §72).
    Before: the line was dropped and the request waited for ever."""
    proxy = await _proxy(NOISY, tmp_path, max_line_bytes=4096, process_scope="shared")
    try:
        async with aiohttp.ClientSession() as http:
            client = SessionCaller(http, proxy.url)
            await client.initialize()
            # {"jsonrpc": "2.0", "result": {"content": [{"type": "text", "text": "yy…"}]}, "id": 3}: 100,082 bytes
            big = client.call("tools/call", {"name": "big", "arguments": {"size": 100_000}})
            answer = await asyncio.wait_for(big, DEADLINE_S)
            assert answer["error"] == {
                "code": -32603,
                "message": "Backend 'noisy': its response was 100082 bytes long, over max_line_bytes (4096); it was not kept",
            }
            small = await client.call("tools/call", {"name": "big", "arguments": {"size": 10}})
            assert small["result"]["content"] == [{"type": "text", "text": "y" * 10}]
            [slot] = _pool(proxy).slots.values()
            assert slot.restarts == 0
    finally:
        await proxy.stop()


async def test_a_question_sent_while_no_stream_is_open_goes_out_on_the_next_tasks_result(tmp_path):
    """The task asks after the call creating it has been answered, while its client (a v1 session,
    relayed) has no stream open: the question waits in the session's backlog and goes out on the
    client's `tasks/result` (docs/decisions.md §56, §72). Before: it waited for a GET stream the
    client never opened, and `tasks/result` never returned."""
    racing = [sys.executable, str(PEERS / "racing_stdio_server.py"), "--after"]
    proxy = await _proxy(racing, tmp_path, process_scope="shared")
    try:
        async with aiohttp.ClientSession() as http:
            client = SessionCaller(http, proxy.url)
            await client.initialize()
            created = await client.call("tools/call", {"name": "ask", "arguments": {}, "task": {"ttl": 60000}})
            assert created["result"]["task"]["status"] == "working"
            [session] = [s for s in _pool(proxy).sessions.values() if s.tasks]
            await until(
                lambda: len(session.backlog) == 2, "the status notification and the question to wait in the backlog", DEADLINE_S
            )

            async def answer(question):
                return {"action": "accept", "content": {"word": "tide"}}

            client.on_request = answer
            result = await asyncio.wait_for(
                client.call("tasks/result", {"taskId": created["result"]["task"]["taskId"]}), DEADLINE_S
            )
            assert result["result"]["content"] == [{"type": "text", "text": "answer: tide"}]
            assert [(q["id"], q["method"], q["params"]["message"]) for q in client.seen_requests] == [
                ("q1", "elicitation/create", "Which word?")
            ]
            assert list(session.backlog) == []
    finally:
        await proxy.stop()


def _descendants(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        found += [child, *_descendants(child)]
    return found


@pytest.mark.peers
async def test_the_readme_npx_example_survives_killing_the_process_the_proxy_launched(tmp_path, caplog):
    """The README's `--upstream-command 'npx -y @modelcontextprotocol/server-memory'` (run where the
    package is installed, so npx takes it from there): kill -9 of the `npx` the proxy launched, and
    the proxy notices, ends its group (the node server too), starts it again, and calls work."""
    caplog.set_level(logging.INFO)
    prefix = await asyncio.to_thread(ensure_npm_packages, "stdio-servers", STDIO_SERVERS)
    command = shlex.split("npx -y @modelcontextprotocol/server-memory")
    memory = {"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")}
    proxy = await _proxy(command, tmp_path, cwd=str(prefix), env=memory, process_scope="shared", stop_grace_ms=1000)
    try:
        async with aiohttp.ClientSession() as http:
            client = SessionCaller(http, proxy.url)
            await client.initialize()
            entity = {"name": "proxy", "entityType": "program", "observations": ["survives npx"]}
            created = await client.call("tools/call", {"name": "create_entities", "arguments": {"entities": [entity]}})
            assert created["result"].get("isError", False) is False
            [slot] = _pool(proxy).slots.values()
            launched = slot.process.pid
            started = _descendants(launched)
            assert len(started) >= 1  # npm exec's shell and the node server, or the server alone
            os.kill(launched, signal.SIGKILL)
            await until(lambda: slot.restarts == 1 and slot.ready.is_set(), "npx to be started again", DEADLINE_S)
            await until(lambda: all(_dead(pid) for pid in started), "what npx started to end", DEADLINE_S)
            messages = [r.getMessage() for r in caplog.records if r.name.startswith("proxy.upstream")]
            assert f"backend noisy: process {launched} exited with status -9" in messages
            again = SessionCaller(http, proxy.url)
            await again.initialize()
            read = await again.call("tools/call", {"name": "open_nodes", "arguments": {"names": ["proxy"]}})
            [node] = read["result"]["structuredContent"]["entities"]
            assert (node["name"], node["observations"]) == ("proxy", ["survives npx"])
            assert await _ready_again(http, proxy) == (200, {"status": "ready"})
    finally:
        await proxy.stop()


async def test_a_process_that_never_answers_initialize_is_said_to_have_timed_out(tmp_path, monkeypatch):
    """It reads every line and answers none: the reason given is the wait that ran out, not an exit
    (the stop that follows the wait used to make it read "exited before answering initialize")."""
    from proxy.upstream.stdio import mux as stdio_mux

    monkeypatch.setattr(stdio_mux, "INITIALIZE_TIMEOUT_S", 0.5)
    mute = [sys.executable, "-c", "import sys\nfor line in sys.stdin:\n    pass\n"]
    proxy = await _proxy(mute, tmp_path)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(proxy.base_url + "/readyz") as response:
                body = await response.json()
        assert (response.status, body) == (
            503,
            {
                "status": "not ready",
                "backend": "noisy",
                "reason": "Backend 'noisy' unavailable: the process did not answer initialize within 0.5 s",
            },
        )
    finally:
        await proxy.stop()
