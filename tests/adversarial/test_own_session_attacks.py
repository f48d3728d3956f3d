"""A v1 client in front of a v2-session backend, attacked (docs/behaviour.md §5.9, decision 68): its
session deleted while its own upstream session's GET stream is held, bad levels and URIs on the
forwarded paths. The backend is the in-process v2-session peer with its opt-in lists."""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from peers.v2_session_server import LISTS, SESSIONS, start  # noqa: E402
from session_support import SessionCaller  # noqa: E402
from support import running_proxy, until  # noqa: E402

from proxy.app import STATE  # noqa: E402

NOTES = "reference://notes"


@pytest.fixture
async def peer():
    runner, url = await start("127.0.0.1", 0, lists=True)
    yield runner.app, url
    await runner.cleanup()


def _held(session) -> bool:
    """Whether the peer's session has a GET stream whose connection is up (the peer notices a
    closed one only at its next write)."""
    request = session.get_request
    return (
        session.get_stream_open and request is not None and request.transport is not None and not request.transport.is_closing()
    )


async def test_a_session_deleted_while_its_get_stream_is_held_lets_the_upstream_stream_go(peer, tmp_path):
    app, url = peer
    async with running_proxy(url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        own = proxy.runner.app[STATE].fleet.first.pairing("v1", "v2-session").own
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        stream = await http.get(proxy.url, headers=caller.headers({"Accept": "text/event-stream"}))
        assert stream.status == 200
        assert (await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}}))["result"]["content"] == [
            {"type": "text", "text": "Hello, Ada!"}
        ]
        await until(lambda: sum(_held(s) for s in app[SESSIONS].values()) == 1)
        async with http.delete(proxy.url, headers=caller.headers()) as deleted:
            assert deleted.status == 200
        assert await stream.content.read() == b""  # the v1 GET stream ends
        stream.close()
        await until(lambda: len(own) == 0)
        await until(lambda: not any(_held(s) for s in app[SESSIONS].values()))  # its connection closed by the proxy
        async with http.post(proxy.url, json={"jsonrpc": "2.0", "id": 9, "method": "ping"}, headers=caller.headers()) as after:
            assert after.status == 404


async def test_bad_levels_and_uris_are_refused_before_anything_goes_upstream(peer, tmp_path):
    app, url = peer
    async with running_proxy(url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        refused = [
            await caller.call("logging/setLevel", {"level": "loud"}),
            await caller.call("logging/setLevel", {"level": ["debug"]}),
            await caller.call("logging/setLevel", {}),
            await caller.call("resources/subscribe", {"uri": 7}),
            await caller.call("resources/subscribe", {}),
            await caller.call("resources/subscribe", {"uri": "x" * 8193}),
        ]
        assert [answer["error"]["code"] for answer in refused] == [-32602] * 6
        assert (await caller.call("logging/setLevel", {"level": "error"}))["result"] == {}
    assert list(app[LISTS].levels.values()) == ["error"]
    assert app[LISTS].subscriptions == {}
