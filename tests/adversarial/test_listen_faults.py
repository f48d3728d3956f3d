"""`subscriptions/listen` on the modern face in front of a v1 backend whose GET stream misbehaves
(docs/behaviour.md §4.9, decision 66): the fake backend of `fake_v1.py` answers the pooled
session's GET stream with whatever the test asks for."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fake_v1 import FakeV1
from support import Caller, running_proxy, until

from proxy.app import STATE
from proxy.logs import RequestIdFilter
from proxy.sse import SseParser

SUB = "io.modelcontextprotocol/subscriptionId"
TOOLS_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


@pytest.fixture
async def fake():
    backend = await FakeV1.start()
    yield backend
    await backend.stop()


@contextlib.asynccontextmanager
async def proxied(fake: FakeV1, tmp_path: Path) -> AsyncIterator[tuple[Any, Caller]]:
    async with running_proxy(fake.url, tmp_path) as running, aiohttp.ClientSession() as http:
        yield running, Caller(http, running.url)


class Listen:
    """One open listen stream: `next()` is its next JSON-RPC message."""

    def __init__(self, response: aiohttp.ClientResponse):
        self.response = response
        self.parser = SseParser()
        self.pending: list[dict[str, Any]] = []

    async def next(self) -> dict[str, Any]:
        while not self.pending:
            chunk = await self.response.content.readany()
            assert chunk, "the listen stream ended"
            self.pending += [json.loads(event.data) for event in self.parser.feed(chunk)]
        return self.pending.pop(0)


@contextlib.asynccontextmanager
async def listening(caller: Caller, notifications: dict[str, Any]) -> AsyncIterator[Listen]:
    body = caller.body("subscriptions/listen", {"notifications": notifications})
    headers = {**caller.headers("subscriptions/listen"), "Content-Type": "application/json"}
    async with caller.http.post(caller.url, data=json.dumps(body), headers=headers) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        yield Listen(response)


def book(running: Any) -> Any:
    return running.runner.app[STATE].fleet.first.follower.inputs


async def test_a_listen_whose_upstream_session_is_forgotten_hears_the_new_session(fake, tmp_path):
    """The backend forgets the pooled session while the listen holds its GET stream (its GET then
    answers 404). The listen goes on, on the principal's new pooled session: what the backend
    announces there (here: tools at that session's start) reaches it."""
    fake.on_initialized = [TOOLS_CHANGED]
    async with proxied(fake, tmp_path) as (running, caller):
        async with listening(caller, {"toolsListChanged": True}) as stream:
            ack = await asyncio.wait_for(stream.next(), 10)
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            sub = ack["params"]["_meta"][SUB]
            first = await asyncio.wait_for(stream.next(), 10)
            assert first == {**TOOLS_CHANGED, "params": {"_meta": {SUB: sub}}}
            opened = fake.received["initialize"]
            fake.forget()
            again = await asyncio.wait_for(stream.next(), 10)
            assert again == {**TOOLS_CHANGED, "params": {"_meta": {SUB: sub}}}
            assert fake.received["initialize"] == opened + 1
            newest = f"s{fake._count}"
            assert fake.open_gets[newest] == 1
            fake.push(newest, {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"})
            fake.push(newest, TOOLS_CHANGED)
            assert await asyncio.wait_for(stream.next(), 10) == {**TOOLS_CHANGED, "params": {"_meta": {SUB: sub}}}
        await until(lambda: not any(listener.subscribers for listener in book(running)._listeners.values()))


async def test_a_get_stream_refused_404_on_a_live_session_does_not_start_a_session_per_request(fake, tmp_path):
    """A backend that answers GET with 404 although the session is alive (POSTs on it are
    answered): the session is not taken for lost, so the principal's requests stay on it instead of
    each starting a new one (and the listen does not start sessions in a loop)."""
    fake.get_mode = "404"
    async with proxied(fake, tmp_path) as (_running, caller):
        async with listening(caller, {"toolsListChanged": True}) as stream:
            ack = await asyncio.wait_for(stream.next(), 10)
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            opened = fake.received["initialize"]
            for _ in range(3):
                assert (await caller.call("tools/list")).result["tools"][0]["name"] == "echo"
            assert fake.received["initialize"] == opened
            assert fake.received["ping"] == 1
            assert fake.gets == [f"s{opened}"]


async def test_listens_that_ended_leave_no_get_stream_held_upstream(fake, tmp_path):
    """Three principals each listen once and go away: no upstream GET stream stays open for them
    and the book keeps no listener (one held per pooled session ever listened to would grow
    without bound and hold a connection each)."""
    async with proxied(fake, tmp_path) as (running, caller):
        for token in ("a", "b", "c"):
            other = Caller(caller.http, caller.url, authorization=f"Bearer {token}")
            async with listening(other, {"toolsListChanged": True}) as stream:
                assert (await asyncio.wait_for(stream.next(), 10))["method"] == "notifications/subscriptions/acknowledged"
                assert sum(fake.open_gets.values()) == 1
            await until(lambda: sum(fake.open_gets.values()) == 0)
        assert len(fake.gets) == 3
        assert book(running)._listeners == {}


async def test_a_get_stream_of_odd_bytes_gives_the_listen_exactly_its_notifications(fake, tmp_path):
    """A byte order mark, CR-only line ends, NUL, invalid UTF-8 and events that are not JSON-RPC
    on the pooled session's GET stream: nothing raises, the stream stays open, and the listen gets
    the two list changes it carries, in order."""
    resources = {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}
    fake.raw_get = (
        b"\xef\xbb\xbfdata: " + json.dumps(TOOLS_CHANGED).encode() + b"\r\r"
        b"data: \x00\xff\xfe not json\r\r"
        b": comment \xc3\r"
        b"event: message\rdata: " + json.dumps(resources).encode() + b"\r\r"
    )
    async with proxied(fake, tmp_path) as (_running, caller):
        async with listening(caller, {"toolsListChanged": True, "resourcesListChanged": True}) as stream:
            sub = (await asyncio.wait_for(stream.next(), 10))["params"]["_meta"][SUB]
            assert await asyncio.wait_for(stream.next(), 10) == {**TOOLS_CHANGED, "params": {"_meta": {SUB: sub}}}
            assert await asyncio.wait_for(stream.next(), 10) == {**resources, "params": {"_meta": {SUB: sub}}}
            fake.push(f"s{fake._count}", b"data: " + json.dumps(TOOLS_CHANGED).encode() + b"\n\n")
            assert await asyncio.wait_for(stream.next(), 10) == {**TOOLS_CHANGED, "params": {"_meta": {SUB: sub}}}


async def test_one_principals_notifications_never_reach_another_principals_listen(fake, tmp_path):
    """Two principals listen (each on a pooled upstream session of its own, s2 and s3: a listen's
    answer starts once its session is open); what the backend sends on one's session reaches that
    one's listen only. A request of Alice's racing her listen's acknowledgement goes on her
    session (no third one)."""
    resources = {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}
    wanted = {"toolsListChanged": True, "resourcesListChanged": True}
    async with proxied(fake, tmp_path) as (_running, caller):
        alice = Caller(caller.http, caller.url, authorization="Bearer alice")
        bob = Caller(caller.http, caller.url, authorization="Bearer bob")
        async with listening(alice, wanted) as alice_stream, listening(bob, wanted) as bob_stream:
            listed, alice_ack, bob_ack = await asyncio.gather(
                alice.call("tools/list"), asyncio.wait_for(alice_stream.next(), 10), asyncio.wait_for(bob_stream.next(), 10)
            )
            assert listed.result["tools"][0]["name"] == "echo"
            assert fake.received["initialize"] == 3  # the probe's, Alice's, Bob's
            assert (fake.gets, dict(fake.open_gets)) == (["s2", "s3"], {"s2": 1, "s3": 1})
            to_alice = {**TOOLS_CHANGED, "params": {"_meta": {SUB: alice_ack["params"]["_meta"][SUB]}}}
            to_bob = {**resources, "params": {"_meta": {SUB: bob_ack["params"]["_meta"][SUB]}}}
            fake.push("s2", TOOLS_CHANGED)
            fake.push("s3", resources)
            assert await asyncio.wait_for(alice_stream.next(), 10) == to_alice
            assert await asyncio.wait_for(bob_stream.next(), 10) == to_bob
            fake.push("s2", TOOLS_CHANGED)
            assert await asyncio.wait_for(alice_stream.next(), 10) == to_alice
            fake.push("s3", resources)
            assert await asyncio.wait_for(bob_stream.next(), 10) == to_bob
            assert alice_stream.pending == [] and bob_stream.pending == []


async def test_a_flood_of_requests_for_input_no_task_can_take_is_bounded(fake, tmp_path):
    """The backend sends requests for input on a listened session's GET stream that belong to no
    task the proxy follows: at most `UNATTRIBUTED_LIMIT` wait to be attributed; the ones beyond are
    answered at once with -32601 (the default for a request the proxy cannot serve) instead of
    being kept for ever."""
    from proxy.state.capture import UNATTRIBUTED_LIMIT

    ask = {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {"type": "object"}}}
    async with proxied(fake, tmp_path) as (running, caller):
        async with listening(caller, {"toolsListChanged": True}) as stream:
            await asyncio.wait_for(stream.next(), 10)
            flood = b"".join(
                b"data: " + json.dumps({"jsonrpc": "2.0", "id": n, **ask}).encode() + b"\n\n"
                for n in range(UNATTRIBUTED_LIMIT + 5)
            )
            fake.push("s2", flood)
            await until(lambda: fake.received["response"] == 5)
            (listener,) = book(running)._listeners.values()
            assert [m["id"] for m in listener.unattributed] == list(range(UNATTRIBUTED_LIMIT))
            beyond = range(UNATTRIBUTED_LIMIT, UNATTRIBUTED_LIMIT + 5)
            assert [(r["id"], r["error"]["code"]) for r in fake.responses] == [(n, -32601) for n in beyond]


async def test_the_session_listener_logs_under_no_request_id(fake, tmp_path):
    """The GET stream of a pooled session serves the session, not the request that started it: its
    log lines (here: the backend refusing the stream) carry no request id, where they repeated
    that first request's for as long as the session lived."""
    fake.get_mode = "500"
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.addFilter(RequestIdFilter())
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("proxy.state.capture")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        async with proxied(fake, tmp_path) as (_running, caller):
            body = caller.body("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
            headers = {**caller.headers("subscriptions/listen"), "Content-Type": "application/json", "X-Request-Id": "the-listen"}
            async with caller.http.post(caller.url, data=json.dumps(body), headers=headers) as response:
                ack = await asyncio.wait_for(Listen(response).next(), 10)
                assert ack["method"] == "notifications/subscriptions/acknowledged"
                await until(lambda: len(fake.gets) >= 2)
        refused = [r for r in records if r.getMessage().startswith("GET stream of a session on main failed")]
        assert refused
        assert {r.getMessage() for r in refused} == {
            "GET stream of a session on main failed: Backend 'main' unavailable: GET stream answered HTTP 500"
        }
        assert [getattr(r, "request_id", "unset") for r in refused] == [None] * len(refused)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
