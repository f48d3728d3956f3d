"""A proxy on a Redis store whose Redis fails for real (issue 20 items 11–13; docs/decisions.md §76, §77).

The proxy runs in this process with `store = <a redis-server of the test's own>` in front of the
reference v1 server (mcp 1.30). Redis is paused with SIGSTOP, stopped, and restarted without
persistence, by its own PID:

* paused: a store-bound request (`tasks/get`) is answered within `store_timeout_ms` with HTTP 503,
  -32603 naming the store (it used to wait for the whole stall); `/readyz` answers 503 naming the
  store until Redis answers again;
* stopped: the same answer (it used to be HTTP 500 "Internal error in mcp-tasks-proxy" with a
  traceback in the log); one WARNING when Redis goes, one when it is back, no traceback;
* paused while a v1 client's GET stream follows its task (in front of the reference v2 server):
  the stream still brings the task's `completed` (the follower used to die with a traceback);
* restarted empty while a v1 task waits for an answer: the question is put back under its key by
  the process that captured it, and its answer reaches the backend (the task used to show
  `working` for ever while the backend waited); with two replicas, the other one shows it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import aiohttp
import pytest
import redis.asyncio as aioredis
from session_support import SessionCaller
from support import TEST_KEY, Caller, until

from proxy.app import STATE, start
from proxy.config import load
from proxy.pairings.v1_task_push import TaskPush
from proxy.sse import SseParser
from proxy.state.health import StoreRefused, StoreTrouble
from proxy.state.redis_store import write_refusal
from translators.sealing import Keyring

pytestmark = pytest.mark.peers

TIMEOUT_MS = 500
OOM_WORDS = "command not allowed when used memory > 'maxmemory'."
CONFIRM_SCHEMA = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}


@contextlib.asynccontextmanager
async def _proxy(upstream: str, redis_url: str, tmp_path):
    settings = load(
        None,
        {
            "listen": "127.0.0.1:0",
            "upstream": [{"name": "main", "url": upstream}],
            "state_dir": str(tmp_path),
            "store": redis_url,
            "store_timeout_ms": TIMEOUT_MS,
            "probe_interval_ms": 600_000,
        },
    )
    running = await start(settings, keyring=Keyring(TEST_KEY))
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            yield running, http, Caller(http, running.url)
    finally:
        await running.stop()


async def _readyz_until(http: aiohttp.ClientSession, base_url: str, status: int) -> dict:
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        async with http.get(base_url + "/readyz") as response:
            body = await response.json()
            if response.status == status:
                return body
        assert asyncio.get_running_loop().time() < deadline, body
        await asyncio.sleep(0.1)


async def _readyz_reason_until(http: aiohttp.ClientSession, base_url: str, reason: str) -> dict:
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        async with http.get(base_url + "/readyz") as response:
            body = await response.json()
            if body.get("reason") == reason:
                return body
        assert asyncio.get_running_loop().time() < deadline, body
        await asyncio.sleep(0.1)


def _store_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "task state store" in r.getMessage()]


def _tracebacks(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info is not None]


async def _poll_through_outage(client: Caller, task_id: str, redis_url: str, until: str) -> tuple[dict, int]:
    """`tasks/get` until the task is `until`; answers 503 naming the store (the restart's broken
    connections) are counted, not taken for the task's state."""
    deadline = asyncio.get_running_loop().time() + 20
    refused = 0
    while True:
        answer = await client.call("tasks/get", {"taskId": task_id})
        if answer.status == 503:
            assert answer.body["error"]["message"].startswith(f"task state store {redis_url} unreachable: "), answer.body
            refused += 1
        elif answer.result["status"] == until:
            return answer.result, refused
        assert asyncio.get_running_loop().time() < deadline, answer.body
        await asyncio.sleep(0.1)


async def _finished_task(client: Caller) -> str:
    created = (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.1, "label": "r"}})).result
    final = await client.poll(created["taskId"])
    assert final["result"]["content"] == [{"type": "text", "text": "computed r"}]
    return created["taskId"]


async def test_a_paused_redis_answers_503_naming_the_store_within_the_bound(reference_v1_server, own_redis, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    async with _proxy(reference_v1_server.url, own_redis.url, tmp_path) as (running, http, client):
        task_id = await _finished_task(client)
        assert (await _readyz_until(http, running.base_url, 200)) == {"status": "ready"}
        own_redis.pause()
        try:
            answer = await asyncio.wait_for(client.call("tasks/get", {"taskId": task_id}), 20)
            assert (answer.status, answer.body["error"]) == (
                503,
                {"code": -32603, "message": f"task state store {own_redis.url} unreachable: no answer within {TIMEOUT_MS} ms"},
            )
            assert (await _readyz_until(http, running.base_url, 503)) == {
                "status": "not ready",
                "store": own_redis.url,
                "reason": f"no answer within {TIMEOUT_MS} ms",
            }
        finally:
            own_redis.resume()
        assert (await _readyz_until(http, running.base_url, 200)) == {"status": "ready"}
        final = (await client.call("tasks/get", {"taskId": task_id})).result
        assert (final["status"], final["result"]["content"]) == ("completed", [{"type": "text", "text": "computed r"}])
    assert _store_lines(caplog) == [
        f"task state store {own_redis.url} is unreachable: no answer within {TIMEOUT_MS} ms",
        f"task state store {own_redis.url} is reachable again",
    ]
    assert _tracebacks(caplog) == []


async def test_a_stopped_redis_answers_503_one_line_per_outage_and_no_traceback(reference_v1_server, own_redis, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    async with _proxy(reference_v1_server.url, own_redis.url, tmp_path) as (running, http, client):
        task_id = await _finished_task(client)
        own_redis.halt()
        try:
            assert (await _readyz_until(http, running.base_url, 503))["store"] == own_redis.url
            assert (await _readyz_reason_until(http, running.base_url, "connection refused")) == {
                "status": "not ready",
                "store": own_redis.url,
                "reason": "connection refused",
            }
            answers = [await client.call("tasks/get", {"taskId": task_id}) for _ in range(3)]
            assert {(a.status, a.body["error"]["code"]) for a in answers} == {(503, -32603)}
            # A pooled connection's first use after the stop finds it closed; new ones are refused.
            assert {a.body["error"]["message"] for a in answers} <= {
                f"task state store {own_redis.url} unreachable: connection refused",
                f"task state store {own_redis.url} unreachable: Connection closed by server.",
            }
        finally:
            own_redis.start_again()
        assert (await _readyz_until(http, running.base_url, 200)) == {"status": "ready"}
        final = (await client.call("tasks/get", {"taskId": task_id})).result
        assert final["status"] == "completed"  # the outcome was lost with Redis: asked of the backend again
    lines = _store_lines(caplog)
    assert lines[1:] == [
        f"task state store {own_redis.url} is reachable again",
        f"task state store {own_redis.url}: Redis restarted; 0 captured question(s) held by this process put back",
    ]
    assert lines[0] in {
        f"task state store {own_redis.url} is unreachable: connection refused",
        f"task state store {own_redis.url} is unreachable: Connection closed by server.",
    }
    assert _tracebacks(caplog) == []


async def test_a_question_lost_in_a_redis_restart_is_put_back_and_answered(reference_v1_server, own_redis, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    async with _proxy(reference_v1_server.url, own_redis.url, tmp_path) as (running, http, client):
        task_id = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "lost.txt"}})).result[
            "taskId"
        ]
        ask = {
            "input-1": {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": "Delete lost.txt?", "requestedSchema": CONFIRM_SCHEMA},
            }
        }
        before = await client.poll(task_id, until=("input_required",))
        assert before["inputRequests"] == ask
        own_redis.restart()  # nothing persisted: every key is gone
        after, _ = await _poll_through_outage(client, task_id, own_redis.url, "input_required")
        assert after["inputRequests"] == ask
        ack = await client.call(
            "tasks/update", {"taskId": task_id, "inputResponses": {"input-1": {"action": "accept", "content": {"confirm": True}}}}
        )
        assert (ack.status, ack.result) == (200, {"resultType": "complete"})
        final = await client.poll(task_id)
        assert (final["status"], final["result"]["content"]) == ("completed", [{"type": "text", "text": "deleted lost.txt"}])
    assert [line for line in _store_lines(caplog) if "put back" in line] == [
        f"task state store {own_redis.url}: Redis restarted; 1 captured question(s) held by this process put back"
    ]


async def test_a_v1_sessions_get_stream_follows_its_task_through_a_paused_redis(
    reference_v2_server, own_redis, tmp_path, caplog, monkeypatch
):
    """The follower of a v1 session's GET stream (decision 53) used to die with a traceback on the
    first store error, and the client then heard nothing more of its tasks. Redis is resumed only
    once the follower's own read of the session's tasks has met the paused store (it logs nothing
    of it: the store logged the outage once, decision 76), seen by recording what that read raised."""
    caplog.set_level(logging.INFO)
    met: list[str] = []  # the follower's reads that met the store's trouble, by their message
    read_open_tasks = TaskPush._open_tasks

    async def recording_open_tasks(self: TaskPush, session):  # the real read, its StoreTrouble recorded
        try:
            return await read_open_tasks(self, session)
        except StoreTrouble as exc:
            met.append(exc.message)
            raise

    monkeypatch.setattr(TaskPush, "_open_tasks", recording_open_tasks)
    async with _proxy(reference_v2_server.url, own_redis.url, tmp_path) as (running, http, _client):
        caller = SessionCaller(http, running.url)
        await caller.initialize()
        headers = {**caller.headers(), "Accept": "text/event-stream"}
        async with http.get(running.url, headers=headers) as stream:
            assert stream.status == 200
            created = await caller.call(
                "tools/call", {"name": "slow_compute", "arguments": {"seconds": 4, "label": "p"}, "task": {"ttl": 60_000}}
            )
            task_id = created["result"]["task"]["taskId"]
            own_redis.pause()
            try:
                await _readyz_until(http, running.base_url, 503)
                # The follower reads the session's tasks every second at most: it meets the paused store.
                await until(lambda: met, "the GET stream's follower to meet the paused store", 20)
            finally:
                own_redis.resume()
            assert met[0] == f"task state store {own_redis.url} unreachable: no answer within {TIMEOUT_MS} ms"
            parser, statuses = SseParser(), []
            async with asyncio.timeout(20):
                async for chunk in stream.content.iter_any():
                    for event in parser.feed(chunk):
                        message = json.loads(event.data) if event.data else {}
                        if message.get("method") == "notifications/tasks/status" and message["params"]["taskId"] == task_id:
                            statuses.append(message["params"]["status"])
                    if "completed" in statuses:
                        break
        assert statuses[-1] == "completed"
    assert _tracebacks(caplog) == []


async def test_a_question_lost_in_a_redis_restart_is_shown_again_by_the_other_replica(reference_v1_server, own_redis, tmp_path):
    """Two replicas on one Redis: replica a captured the question; after Redis restarted empty,
    replica b shows it again (a put it back) and b's answer reaches the backend."""
    async with (
        _proxy(reference_v1_server.url, own_redis.url, tmp_path / "a") as (_a, _http_a, on_a),
        _proxy(reference_v1_server.url, own_redis.url, tmp_path / "b") as (_b, _http_b, on_b),
    ):
        task_id = (await on_a.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "two.txt"}})).result[
            "taskId"
        ]
        before = await on_a.poll(task_id, until=("input_required",))
        assert list(before["inputRequests"]) == ["input-1"]
        own_redis.restart()
        after, _ = await _poll_through_outage(on_b, task_id, own_redis.url, "input_required")
        assert after["inputRequests"] == before["inputRequests"]
        ack = await on_b.call(
            "tasks/update", {"taskId": task_id, "inputResponses": {"input-1": {"action": "accept", "content": {"confirm": True}}}}
        )
        assert (ack.status, ack.result) == (200, {"resultType": "complete"})
        final = await on_b.poll(task_id)
        assert (final["status"], final["result"]["content"]) == ("completed", [{"type": "text", "text": "deleted two.txt"}])


async def _first_refusal(client: Caller, task_id: str) -> dict:
    """`tasks/get` until one is refused (the task finished upstream: its outcome is to be kept);
    until then it is `working`."""
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        answer = await client.call("tasks/get", {"taskId": task_id})
        if answer.status != 200:
            return answer.body
        assert answer.result["status"] == "working", answer.body
        assert asyncio.get_running_loop().time() < deadline, answer.body
        await asyncio.sleep(0.05)


async def test_a_full_redis_refuses_writes_with_503_naming_the_store_and_takes_them_again(
    reference_v1_server, own_redis, tmp_path, caplog
):
    """Redis at its `maxmemory` with `noeviction` answers writes with OOM: a request whose state
    cannot be written (a `tasks/get` that would keep the task's outcome) is refused with HTTP 503,
    -32603 naming the store and Redis's reason (it used to be HTTP 500 "Internal error in
    mcp-tasks-proxy" with a traceback); `/readyz` stays ready (the store answers); one WARNING when
    the store starts refusing, one when it takes writes again; nothing is lost: once Redis has room,
    the same task completes with its result."""
    import redis

    caplog.set_level(logging.INFO)
    admin = redis.Redis.from_url(own_redis.url)
    async with _proxy(reference_v1_server.url, own_redis.url, tmp_path) as (running, http, client):
        await _finished_task(client)
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", "1")  # below what it holds: every write is refused
        try:
            created = (
                await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.1, "label": "full"}})
            ).result
            refused = await _first_refusal(client, created["taskId"])  # once it has finished upstream
            again = (await client.call("tasks/get", {"taskId": created["taskId"]})).body
            with pytest.raises(StoreRefused) as beat:  # the heartbeat's write too: its loop goes on (it used to die)
                await running.runner.app[STATE].store.heartbeat()
            assert (await _readyz_until(http, running.base_url, 200)) == {"status": "ready"}
        finally:
            admin.config_set("maxmemory", "0")
        final = await client.poll(created["taskId"])
    reason = "OOM command not allowed when used memory > 'maxmemory'."
    error = {"code": -32603, "message": f"task state store {own_redis.url} refused the write: {reason}"}
    assert (refused["error"], again["error"], beat.value.message) == (error, error, error["message"])
    assert (final["status"], final["result"]["content"]) == ("completed", [{"type": "text", "text": "computed full"}])
    assert _store_lines(caplog) == [
        f"task state store {own_redis.url} refuses writes: {reason}",
        f"task state store {own_redis.url} takes writes again",
    ]
    assert _tracebacks(caplog) == []


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (aioredis.OutOfMemoryError(OOM_WORDS), f"OOM {OOM_WORDS}"),  # redis-py takes the code off
        (aioredis.OutOfMemoryError(f'Command # 1 (SET k v) of pipeline caused error: ("{OOM_WORDS}",)'), f"OOM {OOM_WORDS}"),
        (
            aioredis.ReadOnlyError("You can't write against a read only replica."),
            "READONLY You can't write against a read only replica.",
        ),
        (
            aioredis.ResponseError("MISCONF Redis is configured to save RDB snapshots"),
            "MISCONF Redis is configured to save RDB snapshots",
        ),
        (
            aioredis.ResponseError("NOREPLICAS Not enough good replicas to write."),
            "NOREPLICAS Not enough good replicas to write.",
        ),
        (aioredis.ResponseError("ERR unknown command 'x'"), None),
        (aioredis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), None),
    ],
)
def test_a_write_refusal_is_told_by_its_code_and_other_errors_are_not(error, reason):
    assert write_refusal(error) == reason
