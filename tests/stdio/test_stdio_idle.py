"""A stdio backend's relayed sessions end when idle (docs/decisions.md §140), as the proxy's own do.

Before, a session relayed to a stdio process lived until its DELETE or its process's end:
`max_processes` callers that sent `initialize` once and went away held every process, and every
newcomer was refused (HTTP 503) until the proxy restarted. Now a session with no request in flight
and no GET stream open ends after `session_idle_ms` unused (its next request is 404), and its
process can then be replaced for a newcomer. The wait for the idle time is a wait for the event:
the newcomer's `initialize` is tried again until it is taken, within a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import aiohttp
import pytest
from session_support import SessionCaller
from stdio_support import gone
from support import Caller, until
from test_stdio_isolation import NOT_FOUND, NOTES, _client, _key, _pool, _proxy, _text

from proxy.app import STATE
from proxy.upstream.stdio import tasks as stdio_tasks

pytestmark = pytest.mark.slow  # waits for idle times of 1.5 s, several per test: kept out of the fast tier

IDLE_MS = 1500
WAIT_S = 30.0


def _refusal(bound: str, text: str) -> dict:
    return {"code": -32603, "message": f"Backend 'notes': {text} ({bound}); no other is started"}


async def _taken_when_idle_passed(caller: SessionCaller) -> dict:
    """`caller`'s `initialize`, tried again every 50 ms until it is not refused (at most `WAIT_S`)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = await caller.initialize()
        if answer["_status"] != 503 or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(0.05)


async def _failures(http, proxy) -> list[tuple[str, str, int]]:
    """The status page's failures of the last hour: (mode, reason, count)."""
    async with http.get(proxy.base_url + "/status.json") as response:
        return [(f["mode"], f["reason"], f["count"]) for f in (await response.json())["failures"]["last_hour"]]


async def test_callers_who_opened_a_session_and_left_no_longer_lock_out_a_newcomer(tmp_path, caplog):
    proxy = await _proxy(tmp_path, process_scope="principal", max_processes=2, top={"session_idle_ms": IDLE_MS})
    try:
        async with aiohttp.ClientSession() as http:
            pool = _pool(proxy)
            alice = await _client(http, proxy, "alice")
            bob = await _client(http, proxy, "bob")
            assert _text(await alice.call("tools/call", {"name": "remember", "arguments": {"text": "alice's note"}})) == "kept"
            assert _text(await bob.call("tools/call", {"name": "recall", "arguments": {}})) == ""
            carol = SessionCaller(http, proxy.url, authorization="Bearer carol", capabilities={})
            with caplog.at_level("INFO", logger="proxy.entry"):
                refused = await carol.initialize()
            full = _refusal("max_processes = 2", "all 2 of its processes hold other callers' sessions")
            assert (refused["_status"], refused["error"], refused["id"]) == (503, full, 1)
            # the proxy's bound, not the server's failure (decision 148; before: backend_unreachable, and no log
            # line); "refused" is carol's notifications/initialized, sent without a session after it
            assert await _failures(http, proxy) == [("refused", "proxy_refused", 1), ("relayed", "proxy_refused", 1)]
            assert [r.getMessage().split(": ", 1)[1] for r in caplog.records if r.name == "proxy.entry"] == [
                f"-32603 {full['message']}",
                "-32600 Bad Request: Missing session ID (session-wire clients start with initialize; 2026-07-28 clients send "
                "the MCP-Protocol-Version header and params._meta)",
            ]
            # alice and bob go away without a DELETE; once idle, carol's process replaces the older
            answer = await _taken_when_idle_passed(carol)
            assert (answer["_status"], answer["result"]["serverInfo"]) == (200, {"name": "notes", "version": "1"})
            assert sorted(pool.slots) == sorted(_key(pool, who) for who in ("bob", "carol"))
            assert await alice.call("tools/call", {"name": "recall", "arguments": {}}) == NOT_FOUND | {"id": 3, "_status": 404}
            assert await bob.call("tools/call", {"name": "recall", "arguments": {}}) == NOT_FOUND | {"id": 3, "_status": 404}
            assert _text(await carol.call("tools/call", {"name": "recall", "arguments": {}})) == ""
    finally:
        await proxy.stop()


@contextlib.asynccontextmanager
async def _alices_process_stopped(tmp_path, stop_grace_ms: int):
    """A proxy with room for one process, alice's relayed session used once on it, then her
    process stopped (SIGSTOP): deaf to the EOF and SIGTERM of a stop until its SIGKILL, two
    `stop_grace_ms` later. Yields (http, proxy, pool, her slot, its PID)."""
    top = {"session_idle_ms": IDLE_MS}
    proxy = await _proxy(tmp_path, process_scope="principal", max_processes=1, stop_grace_ms=stop_grace_ms, top=top)
    try:
        async with aiohttp.ClientSession() as http:
            alice = await _client(http, proxy, "alice")
            assert _text(await alice.call("tools/call", {"name": "recall", "arguments": {}})) == ""
            pool = _pool(proxy)
            [slot] = pool.slots.values()
            pid = slot.process.pid
            os.kill(pid, signal.SIGSTOP)
            yield http, proxy, pool, slot, pid
    finally:
        await proxy.stop()


async def test_a_newcomers_process_starts_only_once_the_one_it_replaces_has_exited(tmp_path):
    """A tester counted 4 processes under `max_processes = 3`: a replaced process was stopped in
    the background (EOF, SIGTERM, SIGKILL, `stop_grace_ms` apart) while its successor started at
    once. Now the successor starts once the replaced process is reaped (decision 150); here the
    replaced one is stopped (SIGSTOP), so only the SIGKILL ends it."""
    async with _alices_process_stopped(tmp_path, 300) as (http, proxy, pool, slot, old):
        carol = SessionCaller(http, proxy.url, authorization="Bearer carol", capabilities={})
        answer = await _taken_when_idle_passed(carol)
        assert (answer["_status"], answer["result"]["serverInfo"]) == (200, {"name": "notes", "version": "1"})
        [new] = pool.slots.values()
        assert (gone(old), new.process.pid != old, slot.process.process.returncode) == (True, True, -signal.SIGKILL)


async def test_a_process_given_away_before_it_started_still_waits_for_the_one_it_replaced(tmp_path):
    """A tester's finding: a newcomer (bob) whose process waited for the replaced one (alice's,
    stopped with SIGSTOP) gave up; his slot, holding nothing, was given to the next newcomer (carol)
    and closed at once, and carol's process started beside alice's: two processes under
    `max_processes = 1`. A slot closed before it started now ends when the stops it waited for do
    (decision 150)."""
    async with _alices_process_stopped(tmp_path, 1000) as (http, proxy, pool, first, old):
        [session] = [s for s in pool.sessions.values() if s.id not in pool.probe_sessions]
        await until(lambda: time.monotonic() - session.last_used >= IDLE_MS / 1000, "idle", WAIT_S, 0.05)
        bob = SessionCaller(http, proxy.url, authorization="Bearer bob", capabilities={})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(bob.initialize(), 0.3)  # bob gives up while alice's process is being stopped
        [bobs] = pool.slots.values()
        await until(lambda: bobs.opening == 0, "bob's wait ended", WAIT_S, 0.05)
        carol = SessionCaller(http, proxy.url, authorization="Bearer carol", capabilities={})
        answer = await carol.initialize()
        assert (answer["_status"], answer["result"]["serverInfo"]) == (200, {"name": "notes", "version": "1"})
        assert (gone(old), first.process.process.returncode, bobs.process) == (True, -signal.SIGKILL, None)


async def test_a_session_with_its_get_stream_open_is_in_use_and_is_not_ended(tmp_path):
    proxy = await _proxy(tmp_path, process_scope="principal", max_processes=2, top={"session_idle_ms": IDLE_MS})
    try:
        async with aiohttp.ClientSession() as http:
            pool = _pool(proxy)
            alice = await _client(http, proxy, "alice")
            assert _text(await alice.call("tools/call", {"name": "remember", "arguments": {"text": "alice's note"}})) == "kept"
            listening = await http.get(proxy.url, headers=alice.headers({"Accept": "text/event-stream"}))
            assert (listening.status, listening.headers["Content-Type"]) == (200, "text/event-stream")
            bob = await _client(http, proxy, "bob")
            carol = SessionCaller(http, proxy.url, authorization="Bearer carol", capabilities={})
            answer = await _taken_when_idle_passed(carol)
            assert answer["_status"] == 200
            # bob's idle session ended and his process made room; alice, listening, kept hers
            assert sorted(pool.slots) == sorted(_key(pool, who) for who in ("alice", "carol"))
            assert _text(await alice.call("tools/call", {"name": "recall", "arguments": {}})) == "alice's note"
            assert await bob.call("tools/call", {"name": "recall", "arguments": {}}) == NOT_FOUND | {"id": 2, "_status": 404}
            listening.close()
    finally:
        await proxy.stop()


async def test_a_caller_at_its_own_bound_gets_a_new_key_once_its_idle_process_holds_nothing(tmp_path):
    top = {"session_idle_ms": IDLE_MS}
    proxy = await _proxy(tmp_path, process_scope="capabilities", max_processes=4, max_processes_per_principal=1, top=top)
    try:
        async with aiohttp.ClientSession() as http:
            pool = _pool(proxy)
            asking = SessionCaller(http, proxy.url, authorization="Bearer alice", capabilities={"elicitation": {}})
            assert (await asking.initialize())["_status"] == 200
            sampling = SessionCaller(http, proxy.url, authorization="Bearer alice", capabilities={"sampling": {}})
            refused = await sampling.initialize()
            own = _refusal("max_processes_per_principal = 1", "1 of its processes already run for this caller")
            assert (refused["_status"], refused["error"]) == (503, own)
            answer = await _taken_when_idle_passed(sampling)
            assert answer["_status"] == 200
            assert sorted(pool.slots) == ['capabilities:{"sampling":{}}', "capabilities:{}"]
            assert await asking.call("tools/list", {}) == NOT_FOUND | {"id": 2, "_status": 404}
    finally:
        await proxy.stop()


async def test_a_delete_ends_the_sessions_get_stream_and_drain_counts_the_session_no_more(tmp_path):
    """Before, the GET stream of a session ended by DELETE stayed open, silent, until its client
    left; and the stream's end counted the session again for drain (decision 146), so a drained
    backend waited `session_idle_ms` for it."""
    proxy = await _proxy(tmp_path, process_scope="principal")
    try:
        async with aiohttp.ClientSession() as http:
            work = proxy.runner.app[STATE].fleet.members[0].work
            alice = await _client(http, proxy, "alice")
            assert work.relayed_sessions() == 1
            async with http.get(proxy.url, headers=alice.headers({"Accept": "text/event-stream"})) as listening:
                assert listening.status == 200
                async with http.delete(proxy.url, headers=alice.headers()) as ended:
                    assert ended.status == 200
                rest = await asyncio.wait_for(listening.content.read(), WAIT_S)  # to its end
                assert b"data:" not in rest
            deadline = time.monotonic() + WAIT_S
            while work.in_flight and time.monotonic() < deadline:  # until the stream's handler has ended too
                await asyncio.sleep(0.02)
            assert (work.in_flight, work.relayed_sessions()) == (0, 0)
    finally:
        await proxy.stop()


async def test_sessions_never_used_again_are_swept_when_later_ones_open(tmp_path):
    """Without a full pool nothing asked for room, so sessions opened and left stayed in memory
    (each with its backlog) until the proxy stopped."""
    proxy = await _proxy(tmp_path, process_scope="shared", top={"session_idle_ms": IDLE_MS})
    try:
        async with aiohttp.ClientSession() as http:
            pool = _pool(proxy)
            for who in ("a", "b", "c", "d", "e"):
                await _client(http, proxy, who)
            left = set(pool.sessions)
            [slot] = pool.slots.values()
            deadline = time.monotonic() + WAIT_S
            while set(pool.sessions) & left and time.monotonic() < deadline:
                await _client(http, proxy, "later")  # each opens a session, which may sweep
                await asyncio.sleep(0.05)
            assert (set(pool.sessions) & left, set(slot.sessions) & left) == (set(), set())
    finally:
        await proxy.stop()


async def _use_until_idle_passed(use) -> None:
    """Call `use()` every 0.3 s until twice `IDLE_MS` has passed (a session in use that long)."""
    deadline = time.monotonic() + 2 * IDLE_MS / 1000
    while time.monotonic() < deadline:
        await use()
        await asyncio.sleep(0.3)


FULL = _refusal("max_processes = 1", "all 1 of its processes hold other callers' sessions")


async def test_a_session_polling_its_held_task_is_in_use_though_the_polls_never_reach_the_process(tmp_path):
    """A held task's `tasks/get` is answered by the proxy (docs/behaviour.md §9): before, the
    session polling it was ended as idle, its process given to another caller (alice's note lost)."""
    proxy = await _proxy(tmp_path, process_scope="principal", max_processes=1, top={"session_idle_ms": IDLE_MS})
    try:
        async with aiohttp.ClientSession() as http:
            alice = await _client(http, proxy, "alice")
            assert _text(await alice.call("tools/call", {"name": "remember", "arguments": {"text": "alice's note"}})) == "kept"
            created = await alice.call("tools/call", {"name": "recall", "arguments": {}, "task": {"ttl": 60_000}})
            task_id = created["result"]["task"]["taskId"]

            async def poll() -> None:
                assert (await alice.call("tasks/get", {"taskId": task_id}))["_status"] == 200

            await _use_until_idle_passed(poll)
            assert proxy.runner.app[STATE].fleet.members[0].work.relayed_sessions() == 1  # drain counts it too
            bob = SessionCaller(http, proxy.url, authorization="Bearer bob", capabilities={})
            refused = await bob.initialize()
            assert (refused["_status"], refused["error"]) == (503, FULL)
            assert _text(await alice.call("tools/call", {"name": "recall", "arguments": {}})) == "alice's note"
    finally:
        await proxy.stop()


def _recalled(answer) -> str:
    return answer.result["content"][0]["text"]


async def test_the_proxys_own_session_on_a_process_outlives_its_idle_time_until_a_bound_needs_the_process(tmp_path):
    """A modern client's calls go over the proxy's own pooled session (docs/behaviour.md §4). It is
    not ended for being idle between its calls (decision 140: before, it was, and the process, its
    state with it, given away); but when a bound is reached and it has been idle `session_idle_ms`
    with no task, it yields its process as a relayed session does (decision 145: before, such
    sessions held their processes while the proxy ran, so modern callers could lock out every
    newcomer), and the proxy opens it again at its next call."""
    proxy = await _proxy(tmp_path, process_scope="principal", max_processes=1, top={"session_idle_ms": IDLE_MS})
    try:
        async with aiohttp.ClientSession() as http:
            pool = _pool(proxy)
            alice = Caller(http, proxy.url, authorization="Bearer alice")
            assert (
                _recalled(await alice.call("tools/call", {"name": "remember", "arguments": {"text": "alice's note"}})) == "kept"
            )
            [own] = [session for session in pool.sessions.values() if session.kept]
            await until(lambda: time.monotonic() - own.last_used >= 2 * IDLE_MS / 1000, "idle", WAIT_S, 0.05)
            assert _recalled(await alice.call("tools/call", {"name": "recall", "arguments": {}})) == "alice's note"
            bob = SessionCaller(http, proxy.url, authorization="Bearer bob", capabilities={})
            answer = await _taken_when_idle_passed(bob)  # refused until alice's session is idle again
            assert (answer["_status"], answer["result"]["serverInfo"]) == (200, {"name": "notes", "version": "1"})
            assert (own.lost, sorted(pool.slots)) == (True, [_key(pool, "bob")])
            refused = await alice.call("tools/call", {"name": "recall", "arguments": {}})
            assert (refused.status, refused.body["error"]) == (503, FULL)
            assert ("translated", "proxy_refused", 1) in await _failures(http, proxy)  # before: backend_unreachable
            deadline = time.monotonic() + WAIT_S
            while (again := await alice.call("tools/call", {"name": "recall", "arguments": {}})).status == 503:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert (again.status, _recalled(again)) == (200, "")  # a new process: alice's note went with the old one
            ended = await bob.call("tools/call", {"name": "recall", "arguments": {}})  # bob had been idle in turn
            assert ended == NOT_FOUND | {"id": bob._id, "_status": 404}
    finally:
        await proxy.stop()


async def test_a_delete_answers_the_sessions_request_in_flight_at_once(tmp_path):
    """Before, the POST of a request in flight when its session was DELETEd waited for its
    timeout (`upstream_timeout_ms`, 300 s by default), then was 502 without its id."""
    proxy = await _proxy(tmp_path, top={"upstream_timeout_ms": 120_000})
    try:
        async with aiohttp.ClientSession() as http:
            alice = SessionCaller(http, proxy.url, authorization="Bearer alice", capabilities={})
            assert (await alice.initialize())["_status"] == 200
            call = asyncio.ensure_future(alice.call("tools/call", {"name": "hang", "arguments": {}}))
            pool = _pool(proxy)
            deadline = time.monotonic() + WAIT_S
            while not any(session.inflight for session in pool.sessions.values()) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)  # until the call is in the process
            async with http.delete(proxy.url, headers=alice.headers()) as ended:
                assert ended.status == 200
            answer = await asyncio.wait_for(call, WAIT_S)
            message = "The session was ended (DELETE) before this request was answered; it was cancelled"
            assert answer == {"jsonrpc": "2.0", "id": 2, "error": {"code": -32603, "message": message}, "_status": 200}
    finally:
        await proxy.stop()


async def test_a_modern_caller_whose_task_is_done_yields_the_process_though_the_proxy_still_listens(tmp_path, monkeypatch):
    """Before a task, the proxy opens a GET stream on its pooled session to hear the server's
    questions (`SessionListener`) and keeps it open: counted as use, it held alice's process for
    good, and every newcomer was refused (a tester's finding, decision 145). The proxy's own stream
    is not a client listening: once alice's task is forgotten by the pool (its ttl here, without
    decision 134's ten minutes after it) and her session idle, bob is given the process."""
    monkeypatch.setattr(stdio_tasks, "GRACE_S", 0.0)
    top = {"session_idle_ms": IDLE_MS, "task_ttl_ms": 1000}
    proxy = await _proxy(tmp_path, [*NOTES, "--tasks"], process_scope="principal", max_processes=1, top=top)
    try:
        async with aiohttp.ClientSession() as http:
            pool = _pool(proxy)
            alice = Caller(http, proxy.url, authorization="Bearer alice")
            created = await alice.call("tools/call", {"name": "work", "arguments": {}})
            done = await alice.poll(created.result["taskId"])
            assert (done["status"], done["result"]["content"]) == ("completed", [{"type": "text", "text": ""}])
            [own] = [session for session in pool.sessions.values() if session.kept]
            [slot] = pool.slots.values()
            await until(lambda: own.stream is not None and not slot.busy, "listened to with its task forgotten", WAIT_S, 0.05)
            bob = SessionCaller(http, proxy.url, authorization="Bearer bob", capabilities={})
            answer = await _taken_when_idle_passed(bob)
            assert (answer["_status"], answer["result"]["serverInfo"]) == (200, {"name": "notes", "version": "1"})
            assert (own.lost, sorted(pool.slots)) == (True, [_key(pool, "bob")])
    finally:
        await proxy.stop()


async def _finished_and_idle(http, proxy, alice: Caller) -> tuple[str, object]:
    """alice's note kept and a `work` task created (finished at once, not polled yet); returns the
    task id and her pooled session once it and its process have been idle `2 * IDLE_MS`."""
    assert _recalled(await alice.call("tools/call", {"name": "remember", "arguments": {"text": "alice's note"}})) == "kept"
    created = await alice.call("tools/call", {"name": "work", "arguments": {}})
    pool = _pool(proxy)
    [own] = [session for session in pool.sessions.values() if session.kept]
    [slot] = pool.slots.values()
    await until(lambda: not slot.in_flight and time.monotonic() - own.last_used >= 2 * IDLE_MS / 1000, "idle", WAIT_S, 0.05)
    return created.result["taskId"], own


async def _refused_though_idle(http, proxy, own) -> None:
    """bob's `initialize` is refused once alice's session has been idle again: her task holds the process."""
    await until(lambda: time.monotonic() - own.last_used >= 2 * IDLE_MS / 1000, "idle", WAIT_S, 0.05)
    refused = await SessionCaller(http, proxy.url, authorization="Bearer bob", capabilities={}).initialize()
    assert (refused["_status"], refused["error"]) == (503, FULL)


NOTE = [{"type": "text", "text": "alice's note"}]


async def test_a_modern_callers_finished_task_no_longer_holds_the_process_once_the_proxy_has_its_outcome(tmp_path):
    """A modern caller's task is the proxy's to answer once it has stored the task's outcome for
    the task's ttl (docs/behaviour.md §4.4). Before, the task still held the process for its ttl
    and ten minutes more (decision 134: 70 minutes at the default ttl), and every newcomer was
    refused meanwhile; now only until the proxy has the outcome (decision 147). A cancel of the
    finished task changes nothing (before, it dropped the stored outcome, which a process given
    away since could not give again), and alice's task is answered from the store once her
    process is gone."""
    top = {"session_idle_ms": IDLE_MS}
    proxy = await _proxy(tmp_path, [*NOTES, "--tasks"], process_scope="principal", max_processes=1, top=top)
    try:
        async with aiohttp.ClientSession() as http:
            pool = _pool(proxy)
            alice = Caller(http, proxy.url, authorization="Bearer alice")
            task_id, own = await _finished_and_idle(http, proxy, alice)
            await _refused_though_idle(http, proxy, own)  # the outcome is still only in the process
            done = await alice.poll(task_id)
            assert (done["status"], done["result"]["content"], own.settled) == ("completed", NOTE, {"task-1"})
            cancelled = await alice.call("tasks/cancel", {"taskId": task_id})
            assert (cancelled.status, cancelled.result) == (200, {"resultType": "complete"})
            bob = SessionCaller(http, proxy.url, authorization="Bearer bob", capabilities={})
            answer = await _taken_when_idle_passed(bob)
            assert (answer["_status"], answer["result"]["serverInfo"]) == (200, {"name": "notes", "version": "1"})
            assert (own.lost, sorted(pool.slots)) == (True, [_key(pool, "bob")])
            again = await alice.call("tools/call", {"name": "recall", "arguments": {}})
            assert (again.status, again.body["error"]) == (503, FULL)  # her state went with the process; bob has it now
            stored = await alice.call("tasks/get", {"taskId": task_id})
            assert (stored.status, stored.result["status"], stored.result["result"]["content"]) == (200, "completed", NOTE)
    finally:
        await proxy.stop()


async def test_a_finished_task_the_proxy_keeps_shorter_than_its_ttl_still_holds_the_process(tmp_path):
    """`max_task_state_ms` below the task's ttl: the proxy would forget the outcome before the
    process may, so the process stays the task's keeper (decision 147)."""
    top = {"session_idle_ms": IDLE_MS, "max_task_state_ms": 600_000}  # the task's ttl: task_ttl_ms, an hour
    proxy = await _proxy(tmp_path, [*NOTES, "--tasks"], process_scope="principal", max_processes=1, top=top)
    try:
        async with aiohttp.ClientSession() as http:
            alice = Caller(http, proxy.url, authorization="Bearer alice")
            task_id, own = await _finished_and_idle(http, proxy, alice)
            done = await alice.poll(task_id)
            assert (done["status"], done["result"]["content"], own.settled) == ("completed", NOTE, set())
            await _refused_though_idle(http, proxy, own)
    finally:
        await proxy.stop()


async def test_an_outcome_the_store_refused_to_keep_leaves_the_task_holding_the_process(tmp_path, own_redis):
    """Redis at its `maxmemory` refuses the write of the outcome (HTTP 503 to alice's poll, the
    backend's answers already in): the process keeps the task, and alice's next poll, once Redis
    takes writes again, is answered by it (a tester's finding: when the answers passing the pool
    counted as kept, bob got the process and alice's task was unknown)."""
    import redis

    top = {"session_idle_ms": IDLE_MS, "store": own_redis.url, "store_timeout_ms": 2000}
    proxy = await _proxy(tmp_path, [*NOTES, "--tasks"], process_scope="principal", max_processes=1, top=top)
    admin = redis.Redis.from_url(own_redis.url)
    try:
        async with aiohttp.ClientSession() as http:
            alice = Caller(http, proxy.url, authorization="Bearer alice")
            task_id, own = await _finished_and_idle(http, proxy, alice)
            admin.config_set("maxmemory-policy", "noeviction")
            admin.config_set("maxmemory", "1")  # below what it holds: every write is refused
            try:
                refused = await alice.call("tasks/get", {"taskId": task_id})
            finally:
                admin.config_set("maxmemory", "0")
            reason = "OOM command not allowed when used memory > 'maxmemory'."
            error = {"code": -32603, "message": f"task state store {own_redis.url} refused the write: {reason}"}
            assert (refused.status, refused.body["error"], own.settled) == (503, error, set())
            await _refused_though_idle(http, proxy, own)
            done = await alice.poll(task_id)
            assert (done["status"], done["result"]["content"], own.settled) == (
                "completed",
                NOTE,
                {"task-1"},
            )
    finally:
        admin.close()
        await proxy.stop()


async def test_newcomers_racing_for_one_freed_process_get_it_once_and_the_bound_at_once(tmp_path):
    """Before, a process being started for one newcomer held no session yet, so each next newcomer
    stopped it to start its own: 7 of 8 waited 10 s for a 502 "its process is still starting"."""
    proxy = await _proxy(tmp_path, process_scope="principal", max_processes=1, top={"session_idle_ms": IDLE_MS})
    try:
        async with aiohttp.ClientSession() as http:
            alice = await _client(http, proxy, "alice")
            assert _text(await alice.call("tools/call", {"name": "recall", "arguments": {}})) == ""
            pool = _pool(proxy)
            [session] = [session for session in pool.sessions.values() if session.id not in pool.probe_sessions]
            await until(lambda: time.monotonic() - session.last_used >= IDLE_MS / 1000, "idle", WAIT_S, 0.05)
            racers = [SessionCaller(http, proxy.url, authorization=f"Bearer racer{n}", capabilities={}) for n in range(8)]
            answers = await asyncio.gather(*(racer.initialize() for racer in racers))
            statuses = sorted(answer["_status"] for answer in answers)
            assert statuses == [200] + [503] * 7
            assert [answer["error"] for answer in answers if answer["_status"] == 503] == [FULL] * 7
    finally:
        await proxy.stop()
