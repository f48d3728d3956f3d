"""Several backends, attacked again (docs/decisions.md 23–28; docs/configuration.md "Several
backends", `reconnect_wait_ms`): waiting for a backend that refuses connections, sending a request
again after a broken connection, task ids in relayed sessions, and the task state replicas share.

1. `reconnect_wait_ms` (proxy/upstream/session_wire.py `Backend.post`, `reconnect_wait`;
   proxy/faces/modern.py `handle_post`; proxy/fleet.py `Stack.usable`; proxy/backends.py
   `BackendHandle.refresh`): a request bound to a backend that refuses connections (a task id, an
   MRTR retry, a session; with one backend every request) waits up to the configured time, then
   502 / -32603 naming the backend; new work goes to another backend at once.
2. Idempotent resend (`IDEMPOTENT_METHODS`, `RESEND_ATTEMPTS`): after a broken connection only
   methods that change nothing go again; `tools/call`, `tasks/cancel`, `tasks/update` (its answer
   upstream), `prompts/get`, `resources/read` and client answers reach a backend once.
3. Relayed sessions with several backends (`Fleet.session_task_ids`, `_relay_session`,
   proxy/relay.py `_relay_rewritten`): task ids sealed with (backend, upstream session), principal "".
4. The task state store (proxy/store.py `MemoryTaskStore`; proxy/capture.py `TaskInputs.answer`):
   bounds, expiry, and two replicas sharing one store.

Backends are the reference servers, behind taps that count what reaches them, or small aiohttp
servers of this module that misbehave on purpose. Timing assertions measure the configured wait
with a wide margin (≥ the wait, < the wait + 3 s).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import re
import time
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from adv_support import healthz_ok, wait_for_input
from aiohttp import web
from session_support import SessionCaller
from support import MODERN, TASKS_EXT, TEST_KEY, Caller, free_port, running_proxy
from tap import RecordingTap
from yarl import URL

from proxy.app import start
from proxy.config import load
from proxy.sse import SseParser
from proxy.state.store import CapturedInput, MemoryTaskStore
from proxy.upstream.endpoint import IDEMPOTENT_METHODS, RESEND_ATTEMPTS
from translators.model import CanonicalTask, InputRequest
from translators.protocol import META_RELATED_TASK
from translators.sealing import ANONYMOUS, PLAIN_TASK_IDS, RELAY_SESSION, Keyring, TaskRef

peers = pytest.mark.peers

KEYRING = Keyring(TEST_KEY)
LATER_MS = 4_102_444_800_000  # 2100-01-01: a requestState that has not expired
DOES_NOT_UNSEAL = (
    "Unknown task: the id does not unseal: it was not issued by this proxy to this caller or session, or it was altered"
)
NOT_ISSUED = "Unknown task: params.taskId must be a task id issued by this proxy"
CONFIRM = {"input-1": {"action": "accept", "content": {"confirm": True}}}
GREET = {"name": "greet", "arguments": {"name": "x"}}
SESSION_INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"elicitation": {}},
    "clientInfo": {"name": "tests", "version": "1"},
}
SLACK_S = 3.0
"""A waiting request must be answered before its wait plus this."""


def _refused(backend: str) -> str:
    return f"Backend {backend!r} unavailable: cannot reach it (ClientConnectorError)"


def _broken(backend: str) -> str:
    return f"Backend {backend!r} unavailable: cannot reach it (ServerDisconnectedError)"


def _error(answer: Any) -> tuple[int, int | None, str | None]:
    """(HTTP status, JSON-RPC error code, message) of a `Caller` answer."""
    body = answer.body if isinstance(answer.body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    return answer.status, error.get("code"), error.get("message")


def _session_error(answer: dict[str, Any]) -> tuple[int, int | None, str | None]:
    """(HTTP status, JSON-RPC error code, message) of a `SessionCaller` answer."""
    error = answer.get("error") if isinstance(answer.get("error"), dict) else {}
    return answer["_status"], error.get("code"), error.get("message")


async def _timed(awaitable: Any) -> tuple[Any, float]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await awaitable
    return result, loop.time() - started


# --- backends of our own --------------------------------------------------------------------------


class Tap(RecordingTap):
    """A recording tap on a fixed port that can stop listening (`down`: connections are refused)
    and listen again (`up`), drop the next `drop[method]` POSTs of a JSON-RPC method ("response"
    for a JSON-RPC response) by closing the connection without forwarding or answering, and hold
    POSTs of a method for `delay[method]` seconds before forwarding them. Every POST it got,
    dropped or not, is in `methods` and `bodies`."""

    def __init__(self, target: str, port: int = 0):
        super().__init__(target)
        self.port = port
        self.drop: collections.Counter[str] = collections.Counter()
        self.delay: dict[str, float] = {}

    @classmethod
    async def open(cls, target: str, port: int = 0) -> Tap:
        tap = cls(target, port)
        tap._http = aiohttp.ClientSession(auto_decompress=False)
        await tap.up()
        return tap

    async def up(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.port).start()
        self._runner = runner
        self.port = runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{self.port}{URL(self.target).path}"

    async def down(self) -> None:
        for task in list(self._handlers):
            task.cancel()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        await asyncio.sleep(0.1)  # the proxy's kept-alive connections see the close

    async def stop(self) -> None:
        await self.down()
        if self._http is not None:
            await self._http.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            raw = await request.read()
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            method = (body.get("method") or "?") if isinstance(body, dict) and "method" in body else "response"
            if self.drop[method] > 0:
                self.drop[method] -= 1
                self.methods.append(method)
                self.bodies.append(body)
                assert request.transport is not None
                request.transport.close()
                raise ConnectionResetError("tap: dropped")
            if method in self.delay:
                await asyncio.sleep(self.delay[method])
        return await super()._forward(request)

    def count(self, mark: int, method: str) -> int:
        return self.methods[mark:].count(method)


class MisbehavingModern:
    """A v2-modern backend (answers `server/discover` with 2026-07-28) of a few lines. It closes the
    connection without answering the next `drop[method]` requests of a method, and counts every
    request it received by method in `received` ("response" for JSON-RPC responses)."""

    def __init__(self) -> None:
        self.received: collections.Counter[str] = collections.Counter()
        self.drop: collections.Counter[str] = collections.Counter()
        self.url = ""
        self._runner: web.AppRunner | None = None

    @classmethod
    async def start(cls) -> MisbehavingModern:
        backend = cls()
        app = web.Application()
        app.router.add_post("/mcp", backend._handle)
        backend._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await backend._runner.setup()
        await web.TCPSite(backend._runner, "127.0.0.1", 0).start()
        backend.url = f"http://127.0.0.1:{backend._runner.addresses[0][1]}/mcp"
        return backend

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            message = json.loads(raw)
        except ValueError:
            return web.Response(status=400)
        method = message.get("method", "response") if isinstance(message, dict) else "?"
        self.received[method] += 1
        if self.drop[method] > 0:
            self.drop[method] -= 1
            assert request.transport is not None
            request.transport.close()
            raise ConnectionResetError("misbehaving backend: dropped")
        if method == "response" or "id" not in message:
            return web.Response(status=202)
        result = self._result(method, message.get("params") or {})
        if result is None:
            answer = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": f"Method not found: {method}"}}
            return web.json_response(answer, status=404 if method != "initialize" else 400)
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})

    @staticmethod
    def _result(method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        done = {"resultType": "complete"}
        if method == "server/discover":
            return {
                **done,
                "supportedVersions": [MODERN],
                "capabilities": {"tools": {}, "prompts": {}, "resources": {}, "extensions": {TASKS_EXT: {}}},
            }
        if method == "tools/list":
            return {**done, "tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
        if method == "tools/call":
            return {**done, "content": [{"type": "text", "text": "echoed"}]}
        if method == "tasks/get":
            return {
                **done,
                "taskId": params.get("taskId"),
                "status": "working",
                "createdAt": "2026-11-30T08:00:00Z",
                "lastUpdatedAt": "2026-11-30T08:00:00Z",
                "ttl": 60_000,
            }
        if method in ("tasks/cancel", "tasks/update"):
            return done
        if method == "prompts/get":
            return {**done, "messages": []}
        if method == "resources/read":
            return {**done, "contents": []}
        if method == "resources/list":
            return {**done, "resources": []}
        return None


# =================================================================================================
# 1. reconnect_wait_ms
# =================================================================================================

WAIT_MS = 1000
WAIT_S = WAIT_MS / 1000


def _dead_url() -> str:
    """An address where nothing listens: every connection is refused."""
    return f"http://127.0.0.1:{free_port()}/mcp"


async def test_with_one_backend_that_never_comes_back_requests_wait_out_the_restart_window_then_502_at_once(tmp_path):
    """With one backend every request is bound to it. The first waits for the backend until
    `reconnect_wait_ms` after its first refused connection (the start-up probe's; decision 78),
    then 502; the backend refusing for longer, tools/list, tools/call, tasks/get of a task on it, an
    MRTR retry and a session client's `initialize` each get 502 / -32603 naming the backend at once
    (before: each waited `reconnect_wait_ms`). /healthz stays up."""
    forged_task = KEYRING.seal_task_id(TaskRef("main", "sess", "t1"), ANONYMOUS)
    state = KEYRING.seal_request_state(("ex", "main"), ANONYMOUS, LATER_MS)
    async with running_proxy(_dead_url(), tmp_path, reconnect_wait_ms=WAIT_MS) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        answer, elapsed = await _timed(caller.call("tools/call", GREET))
        assert _error(answer) == (502, -32603, _refused("main")) and elapsed < WAIT_S + SLACK_S, (answer.body, elapsed)
        timings = {}
        for method, params in (
            ("tools/list", {}),
            ("tools/call", GREET),
            ("tasks/get", {"taskId": forged_task}),
            ("tools/call", {"name": "greet", "requestState": state, "inputResponses": {"r1": {"action": "decline"}}}),
        ):
            answer, elapsed = await _timed(caller.call(method, params))
            assert _error(answer) == (502, -32603, _refused("main")), (method, answer.body)
            timings[f"{method} {sorted(params)}"] = elapsed
        session = SessionCaller(http, proxy.url)
        answer, elapsed = await _timed(session.call("initialize", SESSION_INIT))
        assert _session_error(answer) == (502, -32603, _refused("main")), answer
        timings["initialize"] = elapsed
        assert all(elapsed < WAIT_S / 2 for elapsed in timings.values()), timings
        assert await healthz_ok(http, proxy.base_url)


async def test_reconnect_wait_zero_answers_502_at_once(tmp_path):
    """`reconnect_wait_ms = 0`: no waiting at all, for bound requests either."""
    forged_task = KEYRING.seal_task_id(TaskRef("main", "sess", "t1"), ANONYMOUS)
    async with running_proxy(_dead_url(), tmp_path, reconnect_wait_ms=0) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        for method, params in (("tools/list", {}), ("tools/call", GREET), ("tasks/get", {"taskId": forged_task})):
            answer, elapsed = await _timed(caller.call(method, params))
            assert _error(answer) == (502, -32603, _refused("main")), (method, answer.body)
            # Far below the default wait (5 s) a regression would take: a bound that holds on a loaded host.
            assert elapsed < 2.5, (method, elapsed)


async def test_concurrent_requests_bound_to_a_dead_backend_each_wait_only_the_configured_time(tmp_path):
    """Five requests at once, all bound to the one backend, which never comes back. Each must be
    answered 502 within `reconnect_wait_ms` (+ slack). The probe that `_serve` runs first
    (`BackendHandle.current` → `refresh`) holds `_probe_lock` while *it* waits for the backend (the
    request's `RECONNECT_WAIT_S` applies to the probe's POSTs), so the requests wait for each
    other's probes one after another: the n-th is answered after about n × the wait."""
    async with running_proxy(_dead_url(), tmp_path, reconnect_wait_ms=WAIT_MS) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        results = await asyncio.gather(*(_timed(caller.call("tools/list")) for _ in range(5)))
        assert [_error(answer) for answer, _ in results] == [(502, -32603, _refused("main"))] * 5
        elapsed = sorted(round(seconds, 2) for _, seconds in results)
        assert all(WAIT_S <= seconds < WAIT_S + SLACK_S for seconds in elapsed), (
            f"answered after {elapsed} s; the wait is {WAIT_S} s"
        )


@pytest.fixture
async def a_down_b_up(reference_v1_server, second_v1_server, tmp_path):
    """The proxy in front of `a` (a tap on a fixed port in front of the reference v1 server, taken
    down after the proxy probed it: its connections are refused) and `b` (a second reference v1
    server), with `reconnect_wait_ms` = 1.5 s."""
    a = await Tap.open(reference_v1_server.url)
    try:
        upstream = [{"name": "a", "url": a.url}, {"name": "b", "url": second_v1_server.url}]
        async with (
            running_proxy("", tmp_path, upstream=upstream, reconnect_wait_ms=1500) as proxy,
            aiohttp.ClientSession() as http,
        ):
            await a.down()
            yield SimpleNamespace(proxy=proxy, http=http, a=a, wait_s=1.5)
    finally:
        await a.stop()


@peers
async def test_new_work_while_one_backend_is_down_is_answered_at_once_by_the_other(a_down_b_up):
    """`a` refuses connections (the health check sees it within a second). New work (modern
    tools/call and tools/list, session clients' `initialize`) is answered at once (well under the
    wait) by `b`; requests bound to `a` (a task id, a relayed session) wait at most until
    `reconnect_wait_ms` after `a`'s first refused connection (decision 78), then 502 naming `a`. An MRTR retry
    naming an exchange this proxy does not hold is refused at once whatever the backend's state
    (the exchange, not the backend, is what is missing)."""
    fleet = a_down_b_up
    caller = Caller(fleet.http, fleet.proxy.url)
    fast = []
    for i in range(4):
        answer, elapsed = await _timed(caller.call("tools/call", {"name": "greet", "arguments": {"name": f"n{i}"}}))
        assert (answer.status, answer.result["content"]) == (200, [{"type": "text", "text": f"Hello, n{i}!"}])
        fast.append(elapsed)
        answer, elapsed = await _timed(caller.call("tools/list"))
        assert answer.status == 200 and {t["name"] for t in answer.result["tools"]} >= {"greet", "slow_compute"}
        fast.append(elapsed)
    for _ in range(2):
        client = SessionCaller(fleet.http, fleet.proxy.url)
        answer, elapsed = await _timed(client.call("initialize", SESSION_INIT))
        assert answer["_status"] == 200 and "result" in answer, answer
        assert KEYRING.unseal(RELAY_SESSION, client.session_id, "")[0] == "b"
        fast.append(elapsed)
    assert max(fast) < fleet.wait_s / 2, fast

    bound = {
        "tasks/get": KEYRING.seal_task_id(TaskRef("a", "sess", "t1"), ANONYMOUS),
        "mrtr": KEYRING.seal_request_state(("ex", "a"), ANONYMOUS, LATER_MS),
        "session": KEYRING.seal(RELAY_SESSION, ("a", "upstream-sid"), ""),
    }
    got = {}
    answer, elapsed = await _timed(caller.call("tasks/get", {"taskId": bound["tasks/get"]}))
    got["tasks/get"] = (_error(answer), elapsed)
    answer, elapsed = await _timed(
        caller.call(
            "tools/call", {"name": "greet", "requestState": bound["mrtr"], "inputResponses": {"r1": {"action": "decline"}}}
        )
    )
    assert _error(answer) == (400, -32602, "Unknown or expired requestState: send the original request again without it")
    assert elapsed < fleet.wait_s / 2, elapsed
    client = SessionCaller(fleet.http, fleet.proxy.url)
    client.session_id = bound["session"]
    answer, elapsed = await _timed(client.call("tools/list"))
    got["session"] = (_session_error(answer), elapsed)
    assert {kind: error for kind, (error, _) in got.items()} == {kind: (502, -32603, _refused("a")) for kind in got}
    assert all(elapsed < fleet.wait_s + SLACK_S for _, elapsed in got.values()), got
    assert await healthz_ok(fleet.http, fleet.proxy.base_url)


@peers
async def test_new_work_is_not_held_up_by_a_bound_request_waiting_for_the_down_backend(reference_v1_server, tmp_path):
    """`a` was never up. While a request bound to `a` (a task id sealed for it) waits for it, new
    work must still go to `b` at once (decision 23; configuration "new work goes to another backend
    instead"). `Fleet.pick` → `Stack.usable` re-probes `a` (at most once a second) through
    `BackendHandle.refresh`, whose `_probe_lock` the bound request's probe holds while it waits:
    new work is held up for the rest of that wait."""
    upstream = [{"name": "a", "url": _dead_url()}, {"name": "b", "url": reference_v1_server.url}]
    async with running_proxy("", tmp_path, upstream=upstream, reconnect_wait_ms=6000) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        waiting = asyncio.ensure_future(
            _timed(caller.call("tasks/get", {"taskId": KEYRING.seal_task_id(TaskRef("a", "s", "t"), ANONYMOUS)}))
        )
        await asyncio.sleep(0.2)
        answer, elapsed = await _timed(caller.call("tools/call", GREET))
        assert (answer.status, answer.result["content"]) == (200, [{"type": "text", "text": "Hello, x!"}])
        bound, bound_elapsed = await waiting
        assert _error(bound) == (502, -32603, _refused("a"))
        assert bound_elapsed < 6.0 + SLACK_S  # until 6 s after a's first refusal (decision 78)
        # Held up, new work would wait for most of the bound request's 6 s: half of it is a bound a loaded host keeps.
        assert elapsed < 3.0, f"new work waited {elapsed:.2f} s for a bound request's probe of the down backend"


@peers
async def test_a_client_that_leaves_while_its_request_waits_leaves_nothing_behind(reference_v1_server, tmp_path):
    """One backend (a tap on a fixed port) goes down; a client's tools/call waits for it and the
    client disconnects. The backend comes back within what would have been the wait: the abandoned
    tools/call must never reach it (its handler was cancelled, nothing waits on), /healthz answers,
    later requests are served, and the proxy stops promptly."""
    tap = await Tap.open(reference_v1_server.url)
    try:
        async with running_proxy(tap.url, tmp_path, reconnect_wait_ms=2500) as proxy, aiohttp.ClientSession() as http:
            caller = Caller(http, proxy.url)
            assert (await caller.call("tools/list")).status == 200
            await tap.down()
            mark = len(tap.methods)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    await caller.call("tools/call", {"name": "greet", "arguments": {"name": "ghost"}})
            assert await healthz_ok(http, proxy.base_url)
            await tap.up()
            await asyncio.sleep(2.5)  # the rest of the wait the abandoned request would have had
            assert tap.count(mark, "tools/call") == 0, tap.since(mark)
            assert await healthz_ok(http, proxy.base_url)
            later = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "later"}})
            assert (later.status, later.result["content"]) == (200, [{"type": "text", "text": "Hello, later!"}])
            assert tap.count(mark, "tools/call") == 1
            stopping = time.monotonic()
        assert time.monotonic() - stopping < 5
    finally:
        await tap.stop()


# =================================================================================================
# 2. Idempotent resend after a broken connection
# =================================================================================================


def test_the_idempotent_methods_change_nothing():
    """What the resend rests on: no method that creates, answers or cancels anything is listed."""
    assert not IDEMPOTENT_METHODS & {
        "tools/call",
        "tasks/cancel",
        "tasks/update",
        "prompts/get",
        "resources/read",
        "initialize",
        "subscriptions/listen",
        "elicitation/create",
        "sampling/createMessage",
    }
    assert not any(m.startswith("notifications/") for m in IDEMPOTENT_METHODS)
    assert RESEND_ATTEMPTS >= 1


async def test_a_relayed_modern_backend_gets_non_idempotent_requests_once_and_reads_again(tmp_path):
    """One v2-modern backend (relayed) that closes the connection without answering the first
    request of a method. Reads (tools/list, tasks/get, resources/list) are sent again and answered
    200; tools/call, tasks/cancel, tasks/update, prompts/get, resources/read and a notification
    reach it exactly once and the client gets 502 / -32603 (ServerDisconnectedError); the client's
    own retry is then served. A read broken on every attempt is sent 1 + RESEND_ATTEMPTS times."""
    backend = await MisbehavingModern.start()
    try:
        async with running_proxy(backend.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
            caller = Caller(http, proxy.url)
            reads = {"tools/list": {}, "tasks/get": {"taskId": "t-1"}, "resources/list": {}}
            for method, params in reads.items():
                before = backend.received[method]
                backend.drop[method] = 1
                answer = await caller.call(method, params)
                assert answer.status == 200 and "result" in answer.body, (method, answer.body)
                assert backend.received[method] - before == 2, method
            writes = {
                "tools/call": {"name": "echo", "arguments": {}},
                "tasks/cancel": {"taskId": "t-1"},
                "tasks/update": {"taskId": "t-1", "inputResponses": {"k": {"action": "decline"}}},
                "prompts/get": {"name": "p"},
                "resources/read": {"uri": "file:///x"},
            }
            wrong = []
            for method, params in writes.items():
                before = backend.received[method]
                backend.drop[method] = 1
                answer = await caller.call(method, params)
                if _error(answer) != (502, -32603, _broken("main")) or backend.received[method] - before != 1:
                    wrong.append((method, answer.status, answer.body, backend.received[method] - before))
                retried = await caller.call(method, params)
                if retried.status != 200 or backend.received[method] - before != 2:
                    wrong.append((method, "retry", retried.status, retried.body))
            assert wrong == []

            before = backend.received["notifications/cancelled"]
            backend.drop["notifications/cancelled"] = 1
            note = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 1, "_meta": caller.body("x")["params"]["_meta"]},
            }
            answer = await caller.raw(
                json.dumps(note), {**caller.headers("notifications/cancelled"), "Content-Type": "application/json"}
            )
            assert answer.status == 502 and backend.received["notifications/cancelled"] - before == 1, answer.body

            before = backend.received["tools/list"]
            backend.drop["tools/list"] = 10
            answer = await caller.call("tools/list")
            backend.drop["tools/list"] = 0
            assert _error(answer) == (502, -32603, _broken("main"))
            assert backend.received["tools/list"] - before == 1 + RESEND_ATTEMPTS
    finally:
        await backend.stop()


@peers
async def test_a_translated_v1_backend_gets_non_idempotent_requests_once(reference_v1_server, tmp_path):
    """Modern clients, the reference v1 server behind a tap that breaks the connection of the next
    POST of a method. The proxy's own upstream calls: tools/list and tasks/get go again (200);
    tools/call, tasks/cancel and the answer a tasks/update sends upstream reach the backend once
    (502 / -32603, the question stays outstanding), and the client's retry is served."""
    tap = await Tap.open(reference_v1_server.url)
    try:
        async with running_proxy(tap.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
            caller = Caller(http, proxy.url)
            long_task = (
                await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 30, "label": "l"}})
            ).result

            mark = len(tap.methods)
            tap.drop["tools/list"] = 1
            answer = await caller.call("tools/list")
            assert answer.status == 200 and "greet" in {t["name"] for t in answer.result["tools"]}
            assert tap.count(mark, "tools/list") == 2

            mark = len(tap.methods)
            tap.drop["tasks/get"] = 1
            answer = await caller.call("tasks/get", {"taskId": long_task["taskId"]})
            assert (answer.status, answer.result["status"]) == (200, "working")
            assert tap.count(mark, "tasks/get") == 2

            mark = len(tap.methods)
            tap.drop["tools/call"] = 1
            answer = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "once"}})
            assert _error(answer) == (502, -32603, _broken("main"))
            assert tap.count(mark, "tools/call") == 1
            again = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "once"}})
            assert again.result["content"] == [{"type": "text", "text": "Hello, once!"}]
            assert tap.count(mark, "tools/call") == 2

            asking = (await caller.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "once.txt"}})).result
            await wait_for_input(caller, asking["taskId"])
            mark = len(tap.methods)
            tap.drop["response"] = 1
            answer = await caller.call("tasks/update", {"taskId": asking["taskId"], "inputResponses": CONFIRM})
            assert _error(answer) == (502, -32603, _broken("main"))
            assert tap.count(mark, "response") == 1
            waiting = (await caller.call("tasks/get", {"taskId": asking["taskId"]})).result
            assert (waiting["status"], list(waiting["inputRequests"])) == ("input_required", ["input-1"])
            ack = await caller.call("tasks/update", {"taskId": asking["taskId"], "inputResponses": CONFIRM})
            assert (ack.status, ack.result) == (200, {"resultType": "complete"})
            assert tap.count(mark, "response") == 2
            assert (await caller.poll(asking["taskId"]))["result"]["content"] == [{"type": "text", "text": "deleted once.txt"}]

            mark = len(tap.methods)
            tap.drop["tasks/cancel"] = 1
            answer = await caller.call("tasks/cancel", {"taskId": long_task["taskId"]})
            assert _error(answer) == (502, -32603, _broken("main"))
            assert tap.count(mark, "tasks/cancel") == 1
            assert (await caller.call("tasks/cancel", {"taskId": long_task["taskId"]})).result == {"resultType": "complete"}
            assert tap.count(mark, "tasks/cancel") == 2
    finally:
        await tap.stop()


@peers
async def test_a_relayed_v1_session_gets_non_idempotent_requests_once(reference_v1_server, tmp_path):
    """A v1 client relayed to the v1 backend (one backend): a broken tools/call and a broken
    JSON-RPC response (the client answering a server request) reach the backend once (502 /
    -32603); a broken tools/list goes again and is answered."""
    tap = await Tap.open(reference_v1_server.url)
    try:
        async with running_proxy(tap.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
            client = SessionCaller(http, proxy.url)
            await client.initialize()
            mark = len(tap.methods)
            tap.drop["tools/list"] = 1
            answer = await client.call("tools/list")
            assert answer["_status"] == 200 and "greet" in {t["name"] for t in answer["result"]["tools"]}
            assert tap.count(mark, "tools/list") == 2

            tap.drop["tools/call"] = 1
            answer = await client.call("tools/call", {"name": "greet", "arguments": {"name": "r"}})
            assert _session_error(answer) == (502, -32603, _broken("main"))
            assert tap.count(mark, "tools/call") == 1

            tap.drop["response"] = 1
            reply = {"jsonrpc": "2.0", "id": 4242, "result": {"action": "decline"}}
            async with http.post(proxy.url, json=reply, headers=client.headers()) as posted:
                body = await posted.json()
                assert (posted.status, body["error"]["code"], body["error"]["message"]) == (502, -32603, _broken("main"))
            assert tap.count(mark, "response") == 1
    finally:
        await tap.stop()


# =================================================================================================
# 3. Relayed sessions with several backends: sealed task ids
# =================================================================================================


@pytest.fixture
async def two_v1(reference_v1_server, second_v1_server, tmp_path):
    """The proxy in front of two v1 backends `a` and `b` (each behind a tap); session clients of the
    same dialect are relayed, with sealed session ids. Each client then uses its session's id as a
    proxy from before decision 190 sealed it (two fields, without `PLAIN_TASK_IDS`): such a session
    keeps sealed task ids, and these tests attack them (`test_a_new_sessions_task_ids_are_the_backends_own`:
    a session begun now)."""
    a = await Tap.open(reference_v1_server.url)
    b = await Tap.open(second_v1_server.url)
    try:
        upstream = [{"name": "a", "url": a.url}, {"name": "b", "url": b.url}]
        async with running_proxy("", tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
            clients = [SessionCaller(http, proxy.url) for _ in range(3)]
            for client in clients:
                await client.initialize()
            where = [KEYRING.unseal(RELAY_SESSION, client.session_id, "") for client in clients]
            assert [(name, plain) for name, _, plain in where] == [
                ("a", PLAIN_TASK_IDS),
                ("b", PLAIN_TASK_IDS),
                ("a", PLAIN_TASK_IDS),
            ]
            for client, (name, upstream_id, _) in zip(clients, where, strict=True):
                client.session_id = KEYRING.seal(RELAY_SESSION, (name, upstream_id), "")  # as sealed before decision 190
            yield SimpleNamespace(
                proxy=proxy,
                http=http,
                a=a,
                b=b,
                x=clients[0],
                on_b=clients[1],
                same=clients[2],
                sid_x=where[0][1],
                sid_same=where[2][1],
            )
            assert await healthz_ok(http, proxy.base_url)
    finally:
        await a.stop()
        await b.stop()


TASK_METHODS = ("tasks/get", "tasks/result", "tasks/cancel")


def _reached(tap: Tap, mark: int) -> list[str]:
    """Client methods naming tasks (tasks/*, tools/call) that reached a backend since `mark`."""
    return [m for m in tap.methods[mark:] if m.startswith("tasks/") or m == "tools/call"]


@peers
async def test_task_ids_of_other_sessions_and_raw_ids_are_unknown_and_never_forwarded(two_v1):
    """A task created in session X (on `a`). Its sealed id used in another session on `a` or on `b`,
    the backend's own id (in X and elsewhere), X's task sealed naming `b`, X's id sealed for a
    principal, and X's id as the related task of a request: HTTP 200, -32602 "Unknown task",
    nothing reaches a backend. X itself still reaches its task, also with another Authorization
    (ids are not bound to the principal: decision 25)."""
    f = two_v1
    created = await f.x.call(
        "tools/call", {"name": "slow_compute", "arguments": {"seconds": 30, "label": "x"}, "task": {"ttl": 60_000}}
    )
    task_id = created["result"]["task"]["taskId"]
    ref = KEYRING.unseal_task_id(task_id, "")
    assert (ref.backend, ref.session) == ("a", f.sid_x)
    cases = {
        "X's id in another session on a": (f.same, task_id),
        "X's id in a session on b": (f.on_b, task_id),
        "the backend's own id in X": (f.x, ref.task),
        "the backend's own id in another session on a": (f.same, ref.task),
        "the backend's own id on b": (f.on_b, ref.task),
        "X's task sealed naming b": (f.x, KEYRING.seal_task_id(TaskRef("b", f.sid_x, ref.task), "")),
        "X's task sealed naming the other session": (f.x, KEYRING.seal_task_id(TaskRef("a", f.sid_same, ref.task), "")),
        "X's id sealed for a principal": (f.x, KEYRING.seal_task_id(ref, ANONYMOUS)),
        "a relay-session token": (f.x, KEYRING.seal(RELAY_SESSION, ("a", f.sid_x), "")),
    }
    marks = (len(f.a.methods), len(f.b.methods))
    wrong = []
    for method in TASK_METHODS:
        for label, (client, forged) in cases.items():
            answer = await client.call(method, {"taskId": forged})
            expected = DOES_NOT_UNSEAL  # another session's id says no more than a forged one (decision 86)
            if _session_error(answer) != (200, -32602, expected) or answer.get("id") != client._id:
                wrong.append((method, label, answer))
    for label, client in (("another session on a", f.same), ("a session on b", f.on_b)):
        answer = await client.call(
            "tools/call", {"name": "greet", "arguments": {"name": "r"}, "_meta": {META_RELATED_TASK: {"taskId": task_id}}}
        )
        if _session_error(answer) != (200, -32602, DOES_NOT_UNSEAL):
            wrong.append(("related-task _meta", label, answer))
    assert wrong == []
    assert (_reached(f.a, marks[0]), _reached(f.b, marks[1])) == ([], [])

    mine = await f.x.call("tasks/get", {"taskId": task_id})
    assert (mine["_status"], mine["result"]["taskId"], mine["result"]["status"]) == (200, task_id, "working")
    refreshed = await f.x.call("tasks/get", {"taskId": task_id}, headers={"Authorization": "Bearer refreshed-token"})
    assert (refreshed["_status"], refreshed["result"]["taskId"]) == (200, task_id)
    cancelled = await f.x.call("tasks/cancel", {"taskId": task_id})
    assert (cancelled["_status"], cancelled["result"]["taskId"], cancelled["result"]["status"]) == (200, task_id, "cancelled")


@peers
async def test_a_huge_task_id_in_a_relayed_session_is_refused_by_the_proxy(two_v1):
    """A task id longer than any the proxy seals (20 KB, 1 MB): 200 / -32602 "Unknown task: ...
    issued by this proxy", nothing reaches the backend."""
    f = two_v1
    mark = len(f.a.methods)
    for size in (20_000, 1_000_000):
        for method in TASK_METHODS:
            answer = await f.x.call(method, {"taskId": "A" * size})
            assert _session_error(answer) == (200, -32602, NOT_ISSUED), (method, size, answer)
    assert _reached(f.a, mark) == []


@peers
async def test_a_non_string_task_id_in_a_relayed_session_never_reaches_the_backend(two_v1):
    """Decision 27: "ids that do not unseal never reach a backend"; decision 25: with several
    backends the task ids of a relayed session are the proxy's sealed ids. A `taskId` that is a
    number, null, an object, a list or a boolean cannot be one; the modern face refuses the same
    values (400 / -32602 "... issued by this proxy"). `translators.fleet_ids` maps only strings and
    leaves anything else as it is, so `_relay_session` forwards these to the backend (which here
    happens to answer -32602 "Invalid request parameters"; a backend that coerces ids to strings
    would look the number up as its own task id). Expected: 200 / -32602 from the proxy, nothing
    forwarded."""
    f = two_v1
    mark = len(f.a.methods)
    wrong = []
    for method in TASK_METHODS:
        for value in (12345, None, {"taskId": "x"}, ["x"], True, 1.5):
            answer = await f.x.call(method, {"taskId": value})
            if _session_error(answer) != (200, -32602, NOT_ISSUED):
                wrong.append((method, value, _session_error(answer)))
    reached = _reached(f.a, mark)
    assert (wrong, reached) == ([], []), f"{len(reached)} requests with a non-string taskId reached backend a: {wrong}"


@peers
async def test_a_new_sessions_task_ids_are_the_backends_own(two_v1):
    """A session begun since decision 190 (its id holds `PLAIN_TASK_IDS`) is routed by its session
    id alone: its task ids are the backend's own both ways, and reach it as the client sent them.
    Another session's id goes to the backend that session is on, which answers as it would a
    direct client (mcp 1.30 binds its tasks to their session: "Task not found"); so does a
    `taskId` that is not a string. The task's own session reaches it throughout."""
    f = two_v1
    fresh = [SessionCaller(f.http, f.proxy.url) for _ in range(4)]
    for client in fresh:
        await client.initialize()
    where = [KEYRING.unseal(RELAY_SESSION, client.session_id, "") for client in fresh]
    assert {plain for _, _, plain in where} == {PLAIN_TASK_IDS}
    on = {name: [c for c, (n, _, _) in zip(fresh, where, strict=True) if n == name] for name in ("a", "b")}
    assert (len(on["a"]), len(on["b"])) == (2, 2)
    x, same, on_b = on["a"][0], on["a"][1], on["b"][0]
    created = await x.call(
        "tools/call", {"name": "slow_compute", "arguments": {"seconds": 30, "label": "x"}, "task": {"ttl": 60_000}}
    )
    task_id = created["result"]["task"]["taskId"]
    assert re.fullmatch(r"[0-9a-f]{32}:[0-9a-f-]{36}", task_id)  # mcp 1.30's own form, as the backend gave it
    marks = (len(f.a.methods), len(f.b.methods))
    answers = {
        "another session on a": await same.call("tasks/get", {"taskId": task_id}),
        "a session on b": await on_b.call("tasks/get", {"taskId": task_id}),
    }
    assert {label: _session_error(answer) for label, answer in answers.items()} == {
        label: (200, -32602, f"Task not found: {task_id}") for label in answers
    }
    odd = await x.call("tasks/get", {"taskId": 12345})
    assert _session_error(odd) == (200, -32602, "Invalid request parameters")  # mcp 1.30's own answer
    assert (f.a.methods[marks[0] :], f.b.methods[marks[1] :]) == (["tasks/get", "tasks/get"], ["tasks/get"])
    assert [b["params"]["taskId"] for b in f.a.bodies[-2:]] == [task_id, 12345]  # as the clients sent them

    mine = await x.call("tasks/get", {"taskId": task_id})
    assert (mine["_status"], mine["result"]["taskId"], mine["result"]["status"]) == (200, task_id, "working")
    cancelled = await x.call("tasks/cancel", {"taskId": task_id})
    assert (cancelled["_status"], cancelled["result"]["taskId"], cancelled["result"]["status"]) == (200, task_id, "cancelled")


def _task_ids_in(message: Any) -> list[str]:
    """Every string under a `taskId` key anywhere in `message`."""
    found = []
    if isinstance(message, dict):
        for key, value in message.items():
            if key == "taskId" and isinstance(value, str):
                found.append(value)
            else:
                found.extend(_task_ids_in(value))
    elif isinstance(message, list):
        for value in message:
            found.extend(_task_ids_in(value))
    return found


@peers
async def test_answers_streams_and_server_requests_of_a_relayed_session_carry_only_sealed_ids(two_v1):
    """In session X (on `a`), with its GET stream open: two tasks, one asking for input. The
    CreateTaskResults, tasks/list, the server request (related-task `_meta`) on the tasks/result
    stream, tasks/result's `_meta`, and the status notifications on the GET stream carry only ids
    sealed for (a, X's session); no backend id appears in any byte the client gets. The client's
    JSON-RPC response to the server request passes through (202) and reaches `a` once."""
    f = two_v1
    stream: list[bytes] = []
    arrived = asyncio.Event()

    async def hold_get() -> None:
        # No total timeout on the long-lived stream: a request of the test that hangs fails with
        # its own error, not with this stream's (which would hide it).
        async with f.http.get(
            f.proxy.url, headers={**f.x.headers(), "Accept": "text/event-stream"}, timeout=aiohttp.ClientTimeout(total=None)
        ) as response:
            assert (response.status, response.headers["Content-Type"].split(";")[0]) == (200, "text/event-stream")
            async for chunk in response.content.iter_any():
                stream.append(chunk)
                arrived.set()

    async def first_task_end_on_stream() -> None:
        while not (b'"completed"' in b"".join(stream) and ids[0].encode() in b"".join(stream)):
            arrived.clear()
            await arrived.wait()

    getter = asyncio.ensure_future(hold_get())
    try:
        await asyncio.sleep(0.3)
        seen: list[Any] = []
        asking = await f.x.call(
            "tools/call", {"name": "confirm_delete", "arguments": {"filename": "s.txt"}, "task": {"ttl": 60_000}}
        )
        quick = await f.x.call(
            "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.1, "label": "q"}, "task": {"ttl": 60_000}}
        )
        seen += [asking, quick]
        ids = [asking["result"]["task"]["taskId"], quick["result"]["task"]["taskId"]]
        refs = [KEYRING.unseal_task_id(task_id, "") for task_id in ids]
        assert [(r.backend, r.session) for r in refs] == [("a", f.sid_x)] * 2
        own = [r.task for r in refs]

        async def answer_question(request: dict[str, Any]) -> dict[str, Any]:
            return {"action": "accept", "content": {"confirm": True}}

        f.x.on_request = answer_question
        mark, body_mark = len(f.a.methods), len(f.a.bodies)
        result = await f.x.call("tasks/result", {"taskId": ids[0]})
        seen.append(result)
        assert result["result"]["content"] == [{"type": "text", "text": "deleted s.txt"}]
        assert result["result"]["_meta"][META_RELATED_TASK] == {"taskId": ids[0]}
        [question] = f.x.seen_requests
        seen.append(question)
        assert question["params"]["_meta"][META_RELATED_TASK] == {"taskId": ids[0]}
        assert f.a.count(mark, "response") == 1  # the client's answer, relayed once (SessionCaller checked its 202)

        listed = await f.x.call("tasks/list")
        seen.append(listed)
        assert sorted(t["taskId"] for t in listed["result"]["tasks"]) == sorted(ids)
        other = await f.same.call("tasks/list")  # the other session on `a` sees none of X's tasks
        assert [t["taskId"] for t in other["result"]["tasks"]] == []

        with contextlib.suppress(TimeoutError):  # the GET stream reports the first task's end (checked below)
            await asyncio.wait_for(first_task_end_on_stream(), 30)
    finally:
        getter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await getter
    raw = b"".join(stream)
    events = [json.loads(e.data) for e in SseParser().feed(raw + b"\n\n") if e.data.strip()]
    notes = [e for e in events if e.get("method") == "notifications/tasks/status"]
    assert ids[0] in [n["params"]["taskId"] for n in notes], events
    everything = seen + events
    assert all(task_id in ids for task_id in _task_ids_in(everything)), _task_ids_in(everything)
    # The JSON-RPC id of the backend's request (mcp 1.30 builds it from its own task id) must come
    # back unchanged in the client's answer, so it is not rewritten (like `inputRequests` keys,
    # decision 27); the answer that reached `a` carries it. Anything else naming the task is sealed.
    [answer_upstream] = [b for b in f.a.bodies[body_mark:] if isinstance(b, dict) and "method" not in b]
    assert answer_upstream["id"] == question["id"]
    text = json.dumps([{**m, "id": None} if m is question else m for m in everything]).encode() + raw
    assert not [task for task in own if task.encode() in text]


# =================================================================================================
# 4. The task state store
# =================================================================================================

REF = TaskRef("main", "session-1", "task-1")
OTHER = TaskRef("main", "session-1", "task-2")
ASK = InputRequest(method="elicitation/create", params={"message": "Delete a.txt?"})
ASK_B = InputRequest(method="elicitation/create", params={"message": "Delete b.txt?"})


def _terminal() -> CanonicalTask:
    return CanonicalTask(
        task_id="task-1",
        status="completed",
        created_at="2026-11-30T08:00:00Z",
        last_updated_at="2026-11-30T08:00:01Z",
        ttl_ms=60_000,
    )


async def test_memory_store_entries_expire_after_their_own_keep_time():
    store = MemoryTaskStore(max_tasks=10)
    await store.keep_outcome(REF, _terminal(), 0.15)
    await store.keep_outcome(OTHER, _terminal(), 60)
    assert await store.capture_input(REF, 1, ASK, 0.15) == "input-1"
    assert await store.capture_input(OTHER, 1, ASK, 60) == "input-1"
    await asyncio.sleep(0.25)
    assert (await store.outcome(REF), await store.outcome(OTHER), store.outcome_count("main")) == (None, _terminal(), 1)
    assert (await store.inputs(REF), list(await store.inputs(OTHER))) == ({}, ["input-1"])
    await store.answered(REF, "input-1")  # on an expired task: nothing happens
    assert await store.inputs(REF) == {}


async def test_memory_store_a_request_answered_and_sent_again_is_not_captured_again():
    """The backend sends the same request (same JSON-RPC id) again after its answer was delivered
    (e.g. on a re-opened tasks/result stream): it must not become outstanding again, or a client
    could answer it twice."""
    store = MemoryTaskStore(max_tasks=10)
    assert await store.capture_input(REF, 7, ASK, 60) == "input-1"
    await store.answered(REF, "input-1")
    assert await store.capture_input(REF, 7, ASK, 60) is None
    assert await store.inputs(REF) == {}
    await store.answered(REF, "input-1")  # answered twice: no error, nothing changes
    assert await store.capture_input(REF, 8, ASK_B, 60) == "input-2"
    assert await store.inputs(REF) == {"input-2": CapturedInput("input-2", 8, ASK_B)}


async def test_memory_store_keys_are_not_reused_within_a_task_after_eviction():
    """Decision 13: input keys are never reused within a task (SEP-2663 asks for uniqueness over
    the task's life), and docs/behaviour.md §6 "Bounded state": what the proxy had to let go is
    unknown afterwards, never wrong. With `max_tasks` = 1 a second task's question evicts the first
    task's entry, counter included; the first task's next question must still get a new key, so
    that a client answering the earlier `input-1` cannot answer the new question."""
    store = MemoryTaskStore(max_tasks=1)
    assert await store.capture_input(REF, 7, ASK, 60) == "input-1"
    assert await store.capture_input(OTHER, 1, ASK, 60) == "input-1"  # evicts REF's entry
    assert await store.inputs(REF) == {}
    key = await store.capture_input(REF, 9, ASK_B, 60)
    assert key is not None and key != "input-1", f"{key!r} is reused for another request of the same task"


async def _replicas(stack: contextlib.AsyncExitStack, url: str, tmp_path: Any, count: int) -> list[Any]:
    store = MemoryTaskStore(max_tasks=100)
    replicas = []
    for n in range(count):
        settings = load(
            None, {"listen": "127.0.0.1:0", "upstream": [{"name": "main", "url": url}], "state_dir": str(tmp_path / f"r{n}")}
        )
        running = await start(settings, keyring=Keyring(TEST_KEY), store=store)
        stack.push_async_callback(running.stop)
        replicas.append(running)
    return replicas


def _answers_delivered(tap: Tap, mark: int) -> list[Any]:
    """Answers to requests for input (JSON-RPC responses carrying an elicitation `action`) that
    reached the backend since `mark` (a length of `tap.bodies`)."""
    return [
        body
        for body in tap.bodies[mark:]
        if isinstance(body, dict) and "method" not in body and isinstance(body.get("result"), dict) and "action" in body["result"]
    ]


@pytest.fixture
async def tapped_v1(reference_v1_server):
    tap = await Tap.open(reference_v1_server.url)
    yield tap
    await tap.stop()


@peers
async def test_a_key_one_replica_delivered_is_ignored_by_the_other(tapped_v1, tmp_path):
    """Two replicas, one store: `a` delivers `input-1`; `b`'s later tasks/update of the same key
    (even with another answer) is acknowledged and ignored — the backend gets one answer, the task
    ends as the first answer said."""
    tap = tapped_v1
    async with contextlib.AsyncExitStack() as stack:
        on_a_proxy, on_b_proxy = await _replicas(stack, tap.url, tmp_path, 2)
        http = await stack.enter_async_context(aiohttp.ClientSession())
        on_a, on_b = Caller(http, on_a_proxy.url), Caller(http, on_b_proxy.url)
        created = (await on_a.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "seq.txt"}})).result
        await wait_for_input(on_a, created["taskId"])
        seen_by_b = (await on_b.call("tasks/get", {"taskId": created["taskId"]})).result
        assert list(seen_by_b["inputRequests"]) == ["input-1"]
        mark = len(tap.bodies)
        first = await on_a.call("tasks/update", {"taskId": created["taskId"], "inputResponses": CONFIRM})
        assert (first.status, first.result) == (200, {"resultType": "complete"})
        late = await on_b.call(
            "tasks/update", {"taskId": created["taskId"], "inputResponses": {"input-1": {"action": "decline"}}}
        )
        assert (late.status, late.result) == (200, {"resultType": "complete"})
        final = await on_b.poll(created["taskId"])
        assert final["result"]["content"] == [{"type": "text", "text": "deleted seq.txt"}]
        assert len(_answers_delivered(tap, mark)) == 1, _answers_delivered(tap, mark)


@peers
@pytest.mark.parametrize("replicas", [2, 1], ids=["two-replicas", "one-replica"])
async def test_the_same_key_answered_at_once_reaches_the_backend_once(tapped_v1, tmp_path, replicas):
    """Two tasks/update with the same key at the same moment — on two replicas sharing one store,
    or twice on one proxy — while the answer takes a moment to reach the backend (the tap holds
    answers 0.3 s). The backend must receive at most one answer per key (docs/behaviour.md §4.5:
    keys already answered are ignored; docs/decisions.md §30: the key is claimed in the store
    before the answer is sent)."""
    tap = tapped_v1
    async with contextlib.AsyncExitStack() as stack:
        running = await _replicas(stack, tap.url, tmp_path, replicas)
        http = await stack.enter_async_context(aiohttp.ClientSession())
        callers = [Caller(http, r.url) for r in running] * (3 - replicas)
        created = (await callers[0].call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "race.txt"}})).result
        await wait_for_input(callers[0], created["taskId"])
        seen = (await callers[1].call("tasks/get", {"taskId": created["taskId"]})).result
        assert list(seen["inputRequests"]) == ["input-1"]
        tap.delay["response"] = 0.3
        mark = len(tap.bodies)
        acks = await asyncio.gather(
            *(caller.call("tasks/update", {"taskId": created["taskId"], "inputResponses": CONFIRM}) for caller in callers[:2])
        )
        assert [(ack.status, ack.body.get("result")) for ack in acks] == [(200, {"resultType": "complete"})] * 2
        final = await callers[0].poll(created["taskId"])
        assert final["result"]["content"] == [{"type": "text", "text": "deleted race.txt"}]
        delivered = _answers_delivered(tap, mark)
        assert len(delivered) == 1, f"the backend received {len(delivered)} answers to one request for input: {delivered}"
