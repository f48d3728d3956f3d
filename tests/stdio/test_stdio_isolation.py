"""Isolation of a stdio backend's processes (docs/behaviour.md §7; docs/decisions.md §70, §71).

The proxy runs `notes_stdio_server.py`, whose notes live in its process, so a `recall` shows whose
process a session reached. Clients are relayed v1 sessions (the session wire, raw) with their own
`Authorization`: nothing a client sends chooses another principal's process, no local process can
reach a child past the proxy, and a full pool refuses a newcomer rather than stop another
principal's process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import stat
import sys
from pathlib import Path

import aiohttp
import pytest
from session_support import SessionCaller
from stdio_support import TEST_KEY
from support import proxy_port

from proxy.app import STATE, RunningProxy, start
from proxy.config import load
from translators.sealing import Keyring

NOTES = [sys.executable, str(Path(__file__).resolve().parents[1] / "peers" / "notes_stdio_server.py")]


async def _proxy(tmp_path: Path, command: list[str] = NOTES, *, top: dict | None = None, **upstream) -> RunningProxy:
    """The proxy in front of `command`; `top`: settings beside the backend's (`upstream`)."""
    settings = load(
        None,
        {
            "listen": "127.0.0.1:0",
            "state_dir": str(tmp_path),
            "store": "memory",
            "upstream": [{"name": "notes", "command": command, **upstream}],
            **(top or {}),
        },
    )
    return await start(settings, keyring=Keyring(TEST_KEY))


def _pool(proxy: RunningProxy):
    """The stdio backend's `ProcessPool` (the one backend of `_proxy`)."""
    return proxy.runner.app[STATE].fleet.members[0].backend.connector.pool


def _key(pool, who: str) -> str:
    """The process key of the relayed caller `who` (`Bearer who`) under `process_scope = "principal"`:
    the proxy's principal of it (decision 144), as `_proxy`'s keyring makes it."""
    return pool.key({}, Keyring(TEST_KEY).principal(f"Bearer {who}"))


def _text(answer: dict) -> str:
    return answer["result"]["content"][0]["text"]


async def _client(http: aiohttp.ClientSession, proxy: RunningProxy, who: str, **kwargs) -> SessionCaller:
    client = SessionCaller(http, proxy.url, authorization=f"Bearer {who}", capabilities={}, **kwargs)
    answer = await client.initialize()
    assert (answer["_status"], answer["result"]["serverInfo"]) == (200, {"name": "notes", "version": "1"})
    return client


async def test_a_client_naming_itself_the_probe_gets_its_own_process_not_the_newest(tmp_path):
    proxy = await _proxy(tmp_path, process_scope="principal")
    try:
        async with aiohttp.ClientSession() as http:
            alice = await _client(http, proxy, "alice")
            assert _text(await alice.call("tools/call", {"name": "remember", "arguments": {"text": "alice's secret"}})) == "kept"
            mallory = await _client(http, proxy, "mallory", client_info={"name": "mcp-tasks-proxy-probe", "version": "0.1.0"})
            recalled = _text(await mallory.call("tools/call", {"name": "recall", "arguments": {}}))
            assert recalled == ""
            assert _text(await alice.call("tools/call", {"name": "recall", "arguments": {}})) == "alice's secret"
            pool = _pool(proxy)
            # the probe's (the anonymous principal's), alice's and mallory's
            assert len(pool.slots) == 3
    finally:
        await proxy.stop()


def _exist(*paths: str) -> list[bool]:
    return [os.path.exists(path) for path in paths]


def _listening_tcp_ports() -> set[int]:
    """The TCP ports this process listens on (IPv4 and IPv6), from /proc."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


async def test_no_tcp_port_reaches_a_child_only_a_private_socket_and_the_backend_is_named_by_its_command(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    proxy = await _proxy(tmp_path)
    try:
        async with aiohttp.ClientSession() as http:
            alice = await _client(http, proxy, "alice")
            assert _text(await alice.call("tools/call", {"name": "remember", "arguments": {"text": "hers"}})) == "kept"
            assert _listening_tcp_ports() == {proxy_port(proxy)}
            path = proxy.runner.app[STATE].fleet.members[0].backend.connector.socket_path
            assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
            assert (stat.S_ISSOCK(os.stat(path).st_mode), stat.S_IMODE(os.stat(path).st_mode)) == (True, 0o600)
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(path)  # this user (the proxy's) may; the directory keeps every other user out
        command = " ".join(NOTES)
        probed = [r.getMessage() for r in caplog.records if r.name == "proxy.upstream.backend"]
        assert probed == [f"backend probed: notes at stdio: {command}: v1 (2025-11-25; no tool tasks)"]
        assert [
            r.getMessage() for r in caplog.records if "127.0.0.1" in r.getMessage() or "stdio.invalid" in r.getMessage()
        ] == []
    finally:
        await proxy.stop()
    assert _exist(path, os.path.dirname(path)) == [False, False]


async def test_invented_authorizations_are_refused_when_the_pool_is_full_and_evict_nobody(tmp_path):
    proxy = await _proxy(tmp_path, process_scope="principal", max_processes=3)
    try:
        async with aiohttp.ClientSession() as http:
            pool = _pool(proxy)
            alice = await _client(http, proxy, "alice")
            bob = await _client(http, proxy, "bob")
            assert _text(await alice.call("tools/call", {"name": "remember", "arguments": {"text": "alice's note"}})) == "kept"
            # the process the probe started holds only the probe's session: carol's replaces it
            carol = await _client(http, proxy, "carol")
            assert sorted(pool.slots) == sorted(_key(pool, who) for who in ("alice", "bob", "carol"))
            pids = sorted(slot.process.pid for slot in pool.slots.values())
            refused = []
            for i in range(20):
                invented = SessionCaller(http, proxy.url, authorization=f"Bearer invented-{i}", capabilities={})
                answer = await invented.initialize()
                refused.append((answer["_status"], answer["error"]))
            message = (
                "Backend 'notes': all 3 of its processes hold other callers' sessions (max_processes = 3); no other is started"
            )
            assert refused == [(503, {"code": -32603, "message": message})] * 20
            assert _text(await alice.call("tools/call", {"name": "recall", "arguments": {}})) == "alice's note"
            assert _text(await bob.call("tools/call", {"name": "recall", "arguments": {}})) == ""
            assert sorted(slot.process.pid for slot in pool.slots.values()) == pids
            # a process whose every session ended holds nothing: it makes room for a newcomer
            async with http.delete(proxy.url, headers=bob.headers()) as ended:
                assert ended.status == 200
            dave = await _client(http, proxy, "dave")
            assert _text(await dave.call("tools/call", {"name": "recall", "arguments": {}})) == ""
            assert _text(await carol.call("tools/call", {"name": "recall", "arguments": {}})) == ""
            assert _text(await alice.call("tools/call", {"name": "recall", "arguments": {}})) == "alice's note"
    finally:
        await proxy.stop()


async def test_one_principal_gets_at_most_its_bound_of_processes_and_others_still_get_theirs(tmp_path):
    proxy = await _proxy(tmp_path, process_scope="capabilities", max_processes=4, max_processes_per_principal=1)
    try:
        async with aiohttp.ClientSession() as http:
            # {} joins the process the probe started (the proxy's, nobody's); elicitation starts alice's one
            plain = await _client(http, proxy, "alice")
            asking = SessionCaller(http, proxy.url, authorization="Bearer alice", capabilities={"elicitation": {}})
            assert (await asking.initialize())["_status"] == 200
            sampling = SessionCaller(http, proxy.url, authorization="Bearer alice", capabilities={"sampling": {}})
            answer = await sampling.initialize()
            message = (
                "Backend 'notes': 1 of its processes already run for this caller (max_processes_per_principal = 1); "
                "no other is started"
            )
            assert (answer["_status"], answer["error"]) == (503, {"code": -32603, "message": message})
            bob = SessionCaller(http, proxy.url, authorization="Bearer bob", capabilities={"sampling": {}})
            assert (await bob.initialize())["_status"] == 200
            assert _text(await plain.call("tools/call", {"name": "recall", "arguments": {}})) == ""
            pool = _pool(proxy)
            assert sorted(pool.slots) == ['capabilities:{"elicitation":{}}', 'capabilities:{"sampling":{}}', "capabilities:{}"]
    finally:
        await proxy.stop()


async def test_a_backend_slow_to_start_is_logged_as_starting_then_probed_by_its_command(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr("proxy.upstream.stdio.START_WAIT_S", 0.3)  # the first probe gives up before the server answers
    caplog.set_level(logging.INFO)
    command = [*NOTES, "--slow-start", "1.5"]
    proxy = await _proxy(tmp_path, command)
    try:
        async with aiohttp.ClientSession() as http:
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                async with http.get(proxy.base_url + "/readyz") as response:
                    if response.status == 200:
                        break
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.1)
        address = "stdio: " + " ".join(command)
        logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "proxy.upstream.backend"]
        assert logged == [
            ("INFO", f"backend notes is starting: {address} (not answering yet)"),
            ("INFO", f"backend probed: notes at {address}: v1 (2025-11-25; no tool tasks)"),
        ]
    finally:
        await proxy.stop()


async def _status_and_body(response: aiohttp.ClientResponse) -> tuple[int, dict]:
    text = await response.text()
    return response.status, json.loads(text) if text else {}


@pytest.mark.parametrize("scope", ["capabilities", "principal"])
async def test_a_relayed_session_answers_its_own_caller_only(tmp_path, scope):
    """A stdio process cannot check who calls (it is given no `Authorization`), so the proxy binds
    each session relayed to it to the caller that opened it (docs/decisions.md §138): another
    caller's request with its id, or one without credentials, is "Session not found" (404) on POST,
    GET and DELETE and never reaches the process; the owner's session lives on."""
    proxy = await _proxy(tmp_path, process_scope=scope)
    try:
        async with aiohttp.ClientSession() as http:
            alice = await _client(http, proxy, "alice")
            assert _text(await alice.call("tools/call", {"name": "remember", "arguments": {"text": "alice's secret"}})) == "kept"
            for authorization in ("Bearer bob", None):
                intruder = SessionCaller(http, proxy.url, authorization=authorization, capabilities={})
                intruder.session_id = alice.session_id
                answer = await intruder.call("tools/call", {"name": "recall", "arguments": {}})
                assert answer == NOT_FOUND | {"id": 1, "_status": 404}
                async with http.get(proxy.url, headers=intruder.headers({"Accept": "text/event-stream"})) as response:
                    assert await _status_and_body(response) == (404, NOT_FOUND)
                async with http.delete(proxy.url, headers=intruder.headers()) as response:
                    assert await _status_and_body(response) == (404, NOT_FOUND)
            assert _text(await alice.call("tools/call", {"name": "recall", "arguments": {}})) == "alice's secret"
            async with http.delete(proxy.url, headers=alice.headers()) as response:
                assert response.status == 200
    finally:
        await proxy.stop()


NOT_FOUND = {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Session not found"}}


async def test_initialize_inside_a_relayed_session_is_refused_as_on_the_proxys_own_sessions(tmp_path):
    """docs/behaviour.md §2 rule 4: before, the bridge answered the process's first `initialize`
    result again, with 200, as if a new session had begun (decision 138), then counted its refusal
    as the backend's (decision 141)."""
    proxy = await _proxy(tmp_path)
    try:
        async with aiohttp.ClientSession() as http:
            alice = await _client(http, proxy, "alice")
            again = await alice.call(
                "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
            )
            refused = {"code": -32600, "message": "Session already initialized"}
            assert again == {"jsonrpc": "2.0", "id": 2, "error": refused, "_status": 400}
            assert _text(await alice.call("tools/call", {"name": "recall", "arguments": {}})) == ""
            # the proxy's refusal (the process never saw it), counted as on its own sessions; before: backend_refused
            async with http.get(proxy.base_url + "/status.json") as response:
                failures = [(f["mode"], f["reason"], f["count"]) for f in (await response.json())["failures"]["last_hour"]]
            assert failures == [("relayed", "proxy_refused", 1)]
    finally:
        await proxy.stop()


async def test_with_replicas_the_proxy_says_a_stdio_backends_sessions_need_affinity(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="proxy.upstream.backend"):
        proxy = await _proxy(tmp_path, top={"replicas": 2})
        await proxy.stop()
    said = [r.getMessage() for r in caplog.records if r.name == "proxy.upstream.backend"]
    assert said == [
        "backend notes runs its processes in this replica: with replicas = 2, route each session (Mcp-Session-Id) "
        "and task (Mcp-Name) to the replica that opened it"
    ]
