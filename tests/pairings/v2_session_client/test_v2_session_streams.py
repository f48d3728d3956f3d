"""What v2-session clients get besides answers, in front of the reference v1 server and the
reference v2-modern server (both opted in to list changes and resource subscriptions):
`initialize` capabilities, list changes and resource updates on the session's GET stream, and
`logging/setLevel` honoured on each request's POST stream (docs/behaviour.md §3 "v2-session
client", §4.10, §5.9).

No public v2-session client runs here, so the client is the tests' raw session-wire caller
declaring the extension, which is all a v2-session client is on the wire.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from session_support import SessionCaller
from support import running_proxy

from proxy.app import STATE
from proxy.pairings.carriage import V2SessionCarriage
from proxy.sse import SseParser

pytestmark = pytest.mark.peers
EXT = "io.modelcontextprotocol/tasks"
NOTES = "reference://notes"
#: Bound for a condition the proxy reaches soon after the step that causes it (loops, not timed assertions).
SETTLE_S = 10.0

BACKENDS = {
    "v1": "resources_v1_server",
    "v2-modern": "listing_v2_server",
}


@pytest.fixture(params=sorted(BACKENDS))
async def proxied(request, tmp_path):
    """(backend dialect, running proxy, aiohttp session) in front of that reference server."""
    server = request.getfixturevalue(BACKENDS[request.param])
    async with running_proxy(server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        yield request.param, proxy, http


def _caller(http: aiohttp.ClientSession, url: str, who: str) -> SessionCaller:
    return SessionCaller(http, url, authorization=f"Bearer {who}", capabilities={"extensions": {EXT: {}}})


def _pairing(proxy: Any) -> V2SessionCarriage:
    pairing = proxy.runner.app[STATE].fleet.first.pairing("v2-session", proxy.runner.app[STATE].fleet.first.backend.dialect)
    assert isinstance(pairing, V2SessionCarriage)
    return pairing


class GetStream:
    """A session's GET stream and every message it carried so far."""

    def __init__(self, response: aiohttp.ClientResponse):
        self.response = response
        self.parser = SseParser()
        self.messages: list[dict[str, Any]] = []

    @classmethod
    async def open(cls, caller: SessionCaller) -> GetStream:
        response = await caller.http.get(caller.url, headers=caller.headers({"Accept": "text/event-stream"}))
        assert response.status == 200
        return cls(response)

    async def until(self, message: dict[str, Any], count: int = 1) -> list[dict[str, Any]]:
        """Read until `message` has come `count` times; everything the stream carried."""

        async def read() -> None:
            while self.messages.count(message) < count:
                chunk = await self.response.content.readany()
                assert chunk, "the GET stream ended"
                self.messages.extend(json.loads(event.data) for event in self.parser.feed(chunk))

        await asyncio.wait_for(read(), SETTLE_S)
        return self.messages

    def close(self) -> None:
        self.response.close()


def _updated(uri: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}


TOOLS_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


async def _call_ok(caller: SessionCaller, method: str, params: dict[str, Any]) -> dict[str, Any]:
    answer = await caller.call(method, params)
    assert "result" in answer, answer
    return answer["result"]


async def _touch(caller: SessionCaller, uri: str) -> None:
    result = await _call_ok(caller, "tools/call", {"name": "touch_resource", "arguments": {"uri": uri}})
    assert result["content"] == [{"type": "text", "text": f"touched {uri}"}]


async def test_initialize_declares_what_the_proxy_carries(proxied):
    dialect, proxy, http = proxied
    capabilities = (await _caller(http, proxy.url, "alice").initialize())["result"]["capabilities"]
    if dialect == "v1":
        assert capabilities == {
            "tools": {"listChanged": True},
            "resources": {"subscribe": True},
            "logging": {},
            "extensions": {EXT: {}},
        }
    else:
        assert capabilities == {
            "tools": {"listChanged": True},
            "prompts": {"listChanged": True},
            "resources": {"subscribe": True, "listChanged": True},
            "logging": {},
            "extensions": {EXT: {}},
        }


async def test_list_changes_and_subscribed_updates_reach_the_sessions_get_stream_only(proxied):
    dialect, proxy, http = proxied
    alice, bob = _caller(http, proxy.url, "alice"), _caller(http, proxy.url, "bob")
    await alice.initialize()
    await bob.initialize()
    alice_get, bob_get = await GetStream.open(alice), await GetStream.open(bob)
    try:
        assert await _call_ok(alice, "resources/subscribe", {"uri": NOTES}) == {}
        assert await _call_ok(bob, "resources/subscribe", {"uri": "reference://bob-only"}) == {}
        added = await _call_ok(alice, "tools/call", {"name": "add_tool", "arguments": {"name": f"added_for_{dialect}"}})
        assert added["content"] == [{"type": "text", "text": f"added added_for_{dialect}"}]
        await _touch(alice, "reference://elsewhere")  # nobody subscribed to it
        await _touch(alice, NOTES)
        await _touch(alice, "reference://bob-only")
        await _touch(alice, NOTES)
        heard_by_alice = await alice_get.until(_updated(NOTES), 2)
        heard_by_bob = await bob_get.until(_updated("reference://bob-only"))
        assert len(_pairing(proxy).push) == 2  # one feed per session with a GET stream
    finally:
        alice_get.close()
        bob_get.close()
    assert heard_by_alice == [TOOLS_CHANGED, _updated(NOTES), _updated(NOTES)]
    if dialect == "v1":
        # Bob's pooled upstream session is not Alice's: the v1 server announces the change to hers only.
        assert heard_by_bob == [_updated("reference://bob-only")]
    else:
        # The v2 server announces its list change to every listen that asked for list changes.
        assert heard_by_bob == [TOOLS_CHANGED, _updated("reference://bob-only")]


async def test_an_unsubscribed_uri_is_no_longer_announced(proxied):
    _, proxy, http = proxied
    caller = _caller(http, proxy.url, "carol")
    await caller.initialize()
    stream = await GetStream.open(caller)
    try:
        assert await _call_ok(caller, "resources/subscribe", {"uri": NOTES}) == {}
        assert await _call_ok(caller, "resources/subscribe", {"uri": "reference://later"}) == {}
        assert await _call_ok(caller, "resources/unsubscribe", {"uri": NOTES}) == {}
        await _touch(caller, NOTES)
        await _touch(caller, "reference://later")
        heard = await stream.until(_updated("reference://later"))
    finally:
        stream.close()
    assert heard == [_updated("reference://later")]


def _log(dialect: str, level: str) -> dict[str, Any]:
    text = f"report_progress at {level}"
    data: Any = text if dialect == "v1" else {"msg": text, "extra": None}
    return {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": level, "logger": "report_progress", "data": data},
    }


def _progress() -> dict[str, Any]:
    params = {"progressToken": "p", "progress": 1.0, "total": 1.0, "message": "step 1"}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


async def _messages(caller: SessionCaller, method: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """POST one request of the caller's session: every message of its answer, in order."""
    body = {"jsonrpc": "2.0", "id": 99, "method": method, "params": params}
    async with caller.http.post(caller.url, json=body, headers=caller.headers()) as response:
        if response.headers["Content-Type"].split(";")[0] != "text/event-stream":
            return [json.loads(await response.text())]
        parser, messages = SseParser(), []
        async for chunk in response.content.iter_any():
            messages.extend(json.loads(event.data) for event in parser.feed(chunk))
        return messages


async def test_log_messages_at_the_sessions_level_go_to_the_requests_stream_only(proxied):
    dialect, proxy, http = proxied
    caller, other = _caller(http, proxy.url, "dave"), _caller(http, proxy.url, "dave")
    await caller.initialize()
    await other.initialize()
    stream, other_stream = await GetStream.open(caller), await GetStream.open(other)
    report = {"name": "report_progress", "arguments": {"count": 1}, "_meta": {"progressToken": "p"}}
    try:
        assert await _call_ok(caller, "resources/subscribe", {"uri": NOTES}) == {}
        assert await _call_ok(other, "resources/subscribe", {"uri": NOTES}) == {}
        before = await _messages(caller, "tools/call", report)
        assert await _call_ok(caller, "logging/setLevel", {"level": "warning"}) == {}
        after = await _messages(caller, "tools/call", report)
        others = await _messages(other, "tools/call", report)  # the other session set no level
        refused = await caller.call("logging/setLevel", {"level": "loud"})
        await _touch(caller, NOTES)
        heard = await stream.until(_updated(NOTES))
        heard_by_other = await other_stream.until(_updated(NOTES))
    finally:
        stream.close()
        other_stream.close()
    assert refused["error"] == {
        "code": -32602,
        "message": "Invalid log level: expected one of debug, info, notice, warning, error, critical, alert, emergency",
    }
    done = [{"type": "text", "text": "progress done"}]
    assert before[:-1] == [_progress()]
    assert before[-1]["result"]["content"] == done
    assert after[:-1] == [_progress(), _log(dialect, "warning"), _log(dialect, "error")]
    assert after[-1]["result"]["content"] == done
    assert others[:-1] == [_progress()]
    assert heard == [_updated(NOTES)]  # no log message on a GET stream
    assert heard_by_other == [_updated(NOTES)]
    session = proxy.runner.app[STATE].session_face.sessions.held(caller.session_id)
    stored = await proxy.runner.app[STATE].store.session(caller.session_id)
    assert session.state["logLevel"] == "warning"
    assert stored.params["state"]["logLevel"] == "warning"
