"""`subscriptions/listen` on the modern face in front of a v1 backend whose GET stream misbehaves
(docs/behaviour.md §4.9, decision 66): the fake backend of `fake_v1.py` answers the pooled
session's GET stream with whatever the test asks for."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fake_v1 import FakeV1
from support import Caller, running_proxy

from proxy.app import STATE
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


async def until(predicate: Any, timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


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
