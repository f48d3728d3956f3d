"""A rolling upgrade behind one proxy (docs/behaviour.md §2 "Upstream", §6 "Nothing lost").

Two reference v1 servers, `a` and `b`, sit behind one proxy. Modern (2026-07-28) clients and v1
(2025-11-25 session) clients run tasks without pause. Mid-run `b` is stopped and a reference v2
server (FastMCP 4) starts on its port. Every task is followed to its end and counted:

* finished: completed with exactly its own answer (`computed <its label>`);
* unknown: -32602 "Unknown task", or, for a v1 client, its session gone (HTTP 404: on the session
  wire a task lives in its session) — allowed only for tasks that lived on `b` before the upgrade;
* wrong: any other answer (another task's result, a failure, a cancel nobody asked for) — must be 0;
* other errors: anything else a client sees once a task was started — must be none.

While `b` is down, requests bound to it wait for it (`reconnect_wait_ms`) instead of failing, and
a `tasks/get` whose answer `b` broke off by dying is asked again: no poll may see an HTTP 502. A
v1 session relayed to `b` sees what it would see without the proxy when `b` dies mid-answer: its
SSE stream ends; a poll is then retried (counted as a cut stream). A `tools/call` that `b` was
answering when it died never learns its task (a cut stream, or HTTP 502 saying the backend broke
off), and one sent on a session `b` no longer has gets HTTP 404, after which the client opens a new
session: both counted apart, allowed only on `b`.
After the upgrade new work must reach both backends from both kinds of client.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from dataclasses import dataclass, field

import aiohttp
import pytest
from session_support import SessionCaller
from support import TEST_KEY, Caller, eventually, free_port, running_proxy

from proxy.demo.processes import ServerProcess, start_reference_v1_server, start_reference_v2_server
from translators.errors import ELSEWHERE, FORGOTTEN, UNKNOWN_TASK
from translators.sealing import ANONYMOUS, RELAY_SESSION, Keyring

pytestmark = pytest.mark.peers

KEYRING = Keyring(TEST_KEY)
UNKNOWN_AFTER_UPGRADE = {f"{UNKNOWN_TASK}: {FORGOTTEN}", f"{UNKNOWN_TASK}: {ELSEWHERE}"}
TASK_SECONDS = 0.4


@dataclass
class Tally:
    phase: str = "before"
    started: collections.Counter = field(default_factory=collections.Counter)
    """(client kind, phase, backend) → tasks started."""
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    """(client kind, outcome) → tasks; outcome is finished, unknown or wrong."""
    unknown_on: collections.Counter = field(default_factory=collections.Counter)
    """(phase, backend) of each task reported unknown."""
    http_502: list = field(default_factory=list)
    """(client kind, label, method, error) of every HTTP 502 a poll got; must be none."""
    cut_streams: int = 0
    """Relayed SSE answers cut off by the backend's death; the client polled again."""
    failed_starts: list = field(default_factory=list)
    lost_sessions: list = field(default_factory=list)
    """Backends of relayed v1 sessions found gone (HTTP 404) when starting a task: the client opened
    a new one, as the session wire says."""
    cut_starts: list = field(default_factory=list)
    """Backends of `tools/call`s cut off by the backend's death while it answered (a v1 session's
    stream ends; a modern client gets HTTP 502 naming the backend and saying so): the client
    cannot know whether the task was created; it died with the backend anyway."""
    other_errors: list = field(default_factory=list)
    wrong: list = field(default_factory=list)
    """(client kind, label, phase, backend, what it got) of every wrong answer."""
    relayed_after: int = 0
    """Modern tasks on `b` after the upgrade whose sealed id names no session (relayed to v2-modern)."""

    def after_on(self, kind: str, backend: str) -> int:
        return self.started[(kind, "after", backend)]


async def _modern_worker(http: aiohttp.ClientSession, url: str, tally: Tally, stop: asyncio.Event, worker: int) -> None:
    caller = Caller(http, url)
    for n in range(10_000):
        if stop.is_set():
            return
        label = f"m{worker}-{n}"
        phase = tally.phase
        created = await caller.call(
            "tools/call", {"name": "slow_compute", "arguments": {"seconds": TASK_SECONDS, "label": label}}
        )
        if created.status == 502 and _cut_off(created.error["message"]):
            tally.cut_starts.append(created.error["message"].split("'")[1])  # the backend it names
            continue
        if created.status != 200 or "result" not in created.body:
            tally.failed_starts.append(("modern", label, created.status, created.body))
            continue
        task_id = created.result["taskId"]
        ref = KEYRING.unseal_task_id(task_id, ANONYMOUS)
        tally.started[("modern", phase, ref.backend)] += 1
        if phase == "after" and ref.backend == "b" and ref.session == "":
            tally.relayed_after += 1
        deadline = asyncio.get_running_loop().time() + 60  # a task that never ends fails here instead of hanging
        while True:
            assert asyncio.get_running_loop().time() < deadline, (label, task_id)
            answer = await caller.call("tasks/get", {"taskId": task_id})
            if answer.status == 502:
                tally.http_502.append(("modern", label, "tasks/get", answer.body))
                await asyncio.sleep(0.2)
                continue
            if "error" in answer.body:
                # Forgotten by the restarted server, or held by the old one (translated then, relayed now).
                if (answer.status, answer.error["code"]) == (400, -32602) and answer.error["message"] in UNKNOWN_AFTER_UPGRADE:
                    tally.outcomes[("modern", "unknown")] += 1
                    tally.unknown_on[(phase, ref.backend)] += 1
                else:
                    tally.other_errors.append(("modern", label, answer.status, answer.body))
                break
            status = answer.result["status"]
            if status == "completed" and answer.result["result"]["content"][0]["text"] == f"computed {label}":
                tally.outcomes[("modern", "finished")] += 1
                break
            if status in ("completed", "failed", "cancelled"):
                tally.outcomes[("modern", "wrong")] += 1
                tally.wrong.append(("modern", label, phase, ref.backend, answer.result))
                break
            await asyncio.sleep(0.1)


def _cut_off(message: str) -> bool:
    """Whether a 502 says the backend died while answering (the request had reached it)."""
    return "stream broke" in message or "connection failed while reading" in message or "closed the response stream" in message


def _relayed_backend(client: SessionCaller) -> str | None:
    """The backend sealed in a relayed session's id (None for a proxy session)."""
    try:
        return KEYRING.unseal(RELAY_SESSION, client.session_id or "", "")[0]
    except ValueError:
        return None


def _v1_backend(client: SessionCaller, task_id: str) -> tuple[str, bool]:
    """Which backend a v1 client's task runs on, and whether its session is relayed: a relayed
    session's id is sealed with its backend; a proxy session's task ids are sealed with theirs."""
    try:
        return KEYRING.unseal(RELAY_SESSION, client.session_id or "", "")[0], True
    except ValueError:
        return KEYRING.unseal_task_id(task_id, ANONYMOUS).backend, False


async def _v1_call(client: SessionCaller, method: str, params: dict) -> dict:
    """A session-wire request; a relayed SSE answer cut off by the backend's death (as it would be
    without the proxy: relays pass the stream through) is `{"_status": 0}`."""
    try:
        return await client.call(method, params)
    except AssertionError as exc:
        if str(exc) != "stream ended without an answer":
            raise
        return {"_status": 0}


async def _v1_worker(http: aiohttp.ClientSession, url: str, tally: Tally, stop: asyncio.Event, worker: int) -> None:
    client: SessionCaller | None = None
    for n in range(10_000):
        if stop.is_set():
            return
        if client is None or n % 3 == 0:  # clients come and go: a new session every third task
            client = SessionCaller(http, url)
            init = await _v1_call(
                client,
                "initialize",
                {"protocolVersion": "2025-11-25", "capabilities": client.capabilities, "clientInfo": client.client_info},
            )
            if init["_status"] == 0:  # relayed to b, which died answering it: its session id names b
                tally.cut_starts.append(_relayed_backend(client))
                client = None
                continue
            async with http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=client.headers()):
                pass
            if init["_status"] != 200:
                tally.failed_starts.append(("v1", "initialize", init["_status"], init))
                client = None
                continue
        label = f"v{worker}-{n}"
        phase = tally.phase
        created = await _v1_call(
            client,
            "tools/call",
            {"name": "slow_compute", "arguments": {"seconds": TASK_SECONDS, "label": label}, "task": {"ttl": 60_000}},
        )
        if created["_status"] == 0:
            tally.cut_starts.append(_relayed_backend(client))
            client = None
            continue
        if created["_status"] == 404:
            tally.lost_sessions.append(_relayed_backend(client))
            client = None  # the session was lost with its backend: a new one, as the session wire says
            continue
        if "result" not in created:
            tally.failed_starts.append(("v1", label, created["_status"], created))
            client = None
            continue
        task_id = created["result"]["task"]["taskId"]
        backend, _relayed = _v1_backend(client, task_id)
        tally.started[("v1", phase, backend)] += 1
        while True:
            answer = await _v1_call(client, "tasks/get", {"taskId": task_id})
            if answer["_status"] == 200 and answer.get("result", {}).get("status") == "completed":
                # The payload: a second request, which may meet the backend's end as the first did.
                answer = await _v1_call(client, "tasks/result", {"taskId": task_id})
                if "result" in answer:
                    text = answer["result"].get("content", [{}])[0].get("text")
                    if text == f"computed {label}":
                        tally.outcomes[("v1", "finished")] += 1
                    else:
                        tally.outcomes[("v1", "wrong")] += 1
                        tally.wrong.append(("v1", label, phase, backend, answer))
                    break
            if answer["_status"] in (0, 502):
                if answer["_status"] == 0:
                    tally.cut_streams += 1
                else:
                    tally.http_502.append(("v1", label, "tasks/get", answer))
                await asyncio.sleep(0.2)
                continue
            unknown = answer["_status"] == 404 or (answer.get("error") or {}).get("code") == -32602
            if unknown:
                tally.outcomes[("v1", "unknown")] += 1
                tally.unknown_on[(phase, backend)] += 1
                if answer["_status"] == 404:
                    client = None  # the session is gone with the old backend: a new one
                break
            if "error" in answer:
                tally.other_errors.append(("v1", label, answer["_status"], answer))
                break
            status = answer["result"]["status"]
            if status in ("completed", "failed", "cancelled"):
                tally.outcomes[("v1", "wrong")] += 1
                tally.wrong.append(("v1", label, phase, backend, answer))
                break
            await asyncio.sleep(0.1)


async def test_rolling_upgrade_of_one_backend_of_two(tmp_path):
    port_b = free_port()
    servers: list[ServerProcess] = []
    try:
        servers.append(await asyncio.to_thread(start_reference_v1_server))
        servers.append(await asyncio.to_thread(start_reference_v1_server, port_b))
        upstream = [{"name": "a", "url": servers[0].url}, {"name": "b", "url": servers[1].url}]
        # Long enough for b to stop (up to 5 s) and its replacement to start (FastMCP 4: 18 s at a load
        # of 8 on two cores), counted from b's first refused connection (docs/decisions.md §78).
        async with (
            running_proxy("", tmp_path, upstream=upstream, reconnect_wait_ms=60_000) as proxy,
            aiohttp.ClientSession() as http,
        ):
            tally, stop = Tally(), asyncio.Event()
            workers = [asyncio.create_task(_modern_worker(http, proxy.url, tally, stop, i)) for i in range(3)]
            workers += [asyncio.create_task(_v1_worker(http, proxy.url, tally, stop, i)) for i in range(2)]
            try:
                await eventually(
                    lambda: all(tally.started[(kind, "before", name)] >= 5 for kind in ("modern", "v1") for name in "ab"),
                    what=lambda: f"tasks on both backends before the upgrade: {tally}",
                    timeout_s=60,
                )
                await asyncio.to_thread(servers[1].stop)
                await asyncio.sleep(0.5)  # clients meet the stopped backend for a while
                servers.append(await asyncio.to_thread(start_reference_v2_server, port_b))
                tally.phase = "after"
                await eventually(
                    lambda: all(tally.after_on(kind, name) >= 5 for kind in ("modern", "v1") for name in "ab"),
                    what=lambda: f"new work on both backends after the upgrade: {tally}",
                    timeout_s=90,
                )
            finally:
                stop.set()
                done = await asyncio.gather(*workers, return_exceptions=True)
            assert [d for d in done if d is not None] == []
    finally:
        for server in servers:
            with contextlib.suppress(Exception):
                server.stop()

    started = sum(tally.started.values())
    finished = tally.outcomes[("modern", "finished")] + tally.outcomes[("v1", "finished")]
    unknown = tally.outcomes[("modern", "unknown")] + tally.outcomes[("v1", "unknown")]
    wrong = tally.outcomes[("modern", "wrong")] + tally.outcomes[("v1", "wrong")]
    print(
        f"\nrolling upgrade: started={started} finished={finished} unknown={unknown} wrong={wrong} "
        f"http_502={len(tally.http_502)} cut_streams={tally.cut_streams} cut_starts={len(tally.cut_starts)} "
        f"lost_sessions={len(tally.lost_sessions)} failed_starts={len(tally.failed_starts)} "
        f"other_errors={len(tally.other_errors)}"
    )
    print(f"started by (client, phase, backend): {dict(sorted(tally.started.items()))}")
    print(f"unknown by (phase, backend): {dict(tally.unknown_on)}; modern tasks relayed to b after: {tally.relayed_after}")
    assert tally.other_errors == []
    assert tally.http_502 == []
    assert tally.failed_starts == []
    assert set(tally.cut_starts) <= {"b"}
    assert set(tally.lost_sessions) <= {"b"}
    assert tally.wrong == []
    assert wrong == 0
    assert started == finished + unknown
    # Only tasks that lived on the stopped backend, started before it was replaced, are unknown.
    assert set(tally.unknown_on) <= {("before", "b")}
    # After the upgrade `b` is v2-modern: modern clients are relayed to it (ids sealed without a
    # session), v1 clients translated; both kinds reach both backends.
    assert tally.relayed_after == tally.after_on("modern", "b")
    assert min(tally.after_on(kind, name) for kind in ("modern", "v1") for name in "ab") >= 5
