"""A v1 client in front of a v2-session backend, raw (docs/behaviour.md §5.1, §5.9): each v1 session on an
upstream session of its own, `logging/setLevel` and `resources/subscribe` forwarded to it, and what that
session's GET stream carries on the v1 session's GET stream, to no other session.

The backend is the minimal v2-session peer with its opt-in (`tests/peers/v2_session_lists.py`), run in-process
so the tests can read the session state it holds; the real mcp 1.30 client runs through the same rules in
test_v1_client_v2_session_notifications.py.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from peers.v2_session_server import LISTS, SESSIONS, start
from session_support import SessionCaller
from support import running_proxy

from proxy.app import STATE
from proxy.pairings.v1_over_v2 import V1OverV2
from proxy.sse import SseParser

pytestmark = pytest.mark.peers

TASKS = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
NOTES, OTHER, ELSEWHERE = "reference://notes", "reference://other", "reference://elsewhere"
#: Bound for a stream event the proxy sends soon after the step that causes it (loops, not timed assertions).
SETTLE_S = 10.0


@pytest.fixture
async def peer():
    runner, url = await start("127.0.0.1", 0, lists=True)
    yield runner.app, url
    await runner.cleanup()


@pytest.fixture
async def plain_peer():
    runner, url = await start("127.0.0.1", 0)
    yield url
    await runner.cleanup()


def _note(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, **({} if params is None else {"params": params})}


def _session_log(level: str) -> dict[str, Any]:
    return _note("notifications/message", {"level": level, "logger": "session", "data": f"session log at {level}"})


def _pairing(proxy: Any) -> V1OverV2:
    pairing = proxy.runner.app[STATE].fleet.first.pairing("v1", "v2-session")
    assert isinstance(pairing, V1OverV2)
    return pairing


async def _call_tool(caller: SessionCaller, name: str, arguments: dict[str, Any]) -> list[dict]:
    answer = await caller.call("tools/call", {"name": name, "arguments": arguments})
    return answer["result"]["content"]


async def _events(response: aiohttp.ClientResponse, parser: SseParser, count: int) -> list[tuple[int, dict]]:
    """(id, message) of the next `count` events on a GET stream."""
    events: list[tuple[int, dict]] = []

    async def read() -> None:
        while len(events) < count:
            events.extend((int(event.id), json.loads(event.data)) for event in parser.feed(await response.content.readany()))

    await asyncio.wait_for(read(), SETTLE_S)
    return events


async def _get_stream(http: aiohttp.ClientSession, proxy_url: str, caller: SessionCaller, **extra: str) -> aiohttp.ClientResponse:
    stream = await http.get(proxy_url, headers=caller.headers({"Accept": "text/event-stream", **extra}))
    assert stream.status == 200
    return stream


async def test_initialize_declares_list_changes_subscribe_and_logging_where_the_backend_does(peer, plain_peer, tmp_path):
    async with aiohttp.ClientSession() as http:
        async with running_proxy(peer[1], tmp_path / "lists") as proxy:
            listing = (await SessionCaller(http, proxy.url).initialize())["result"]["capabilities"]
        async with running_proxy(plain_peer, tmp_path / "plain") as proxy:
            plain = (await SessionCaller(http, proxy.url).initialize())["result"]["capabilities"]
    assert listing == {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
        "resources": {"listChanged": True, "subscribe": True},
        "logging": {},
        "tasks": TASKS,
    }
    assert plain == {"tools": {}, "tasks": TASKS}


async def test_each_v1_session_sets_its_level_and_uris_on_an_upstream_session_of_its_own(peer, tmp_path):
    app, url = peer
    async with running_proxy(url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        first, second = SessionCaller(http, proxy.url), SessionCaller(http, proxy.url)  # the same (anonymous) principal
        await first.initialize()
        await second.initialize()
        assert (await first.call("logging/setLevel", {"level": "warning"}))["result"] == {}
        assert (await first.call("resources/subscribe", {"uri": NOTES}))["result"] == {}
        assert (await first.call("resources/subscribe", {"uri": OTHER}))["result"] == {}
        assert (await second.call("resources/subscribe", {"uri": OTHER}))["result"] == {}
        assert (await first.call("resources/unsubscribe", {"uri": OTHER}))["result"] == {}
        assert await _call_tool(second, "greet", {"name": "Ada"}) == [{"type": "text", "text": "Hello, Ada!"}]
        lists = app[LISTS]
        owners = {sid for sid in lists.subscriptions}
    assert len(owners) == 2  # two upstream sessions, one per v1 session
    assert sorted(map(sorted, lists.subscriptions.values())) == [[NOTES], [OTHER]]
    (first_sid,) = [sid for sid, uris in lists.subscriptions.items() if uris == {NOTES}]
    assert lists.levels == {first_sid: "warning"}
    assert all(app[SESSIONS][sid].declares_tasks for sid in owners)


async def test_the_get_stream_carries_the_sessions_own_changes_updates_and_logs_and_nothing_to_another(peer, tmp_path):
    async with running_proxy(peer[1], tmp_path) as proxy, aiohttp.ClientSession() as http:
        first, second = SessionCaller(http, proxy.url), SessionCaller(http, proxy.url)
        await first.initialize()
        await second.initialize()
        await first.call("logging/setLevel", {"level": "warning"})
        await second.call("logging/setLevel", {"level": "debug"})
        await first.call("resources/subscribe", {"uri": NOTES})
        await second.call("resources/subscribe", {"uri": OTHER})
        first_stream = await _get_stream(http, proxy.url, first)
        second_stream = await _get_stream(http, proxy.url, second)
        assert await _call_tool(first, "add_tool", {"name": "added_one"}) == [{"type": "text", "text": "added added_one"}]
        await _call_tool(first, "touch_resource", {"uri": ELSEWHERE})  # subscribed by nobody
        await _call_tool(first, "touch_resource", {"uri": NOTES})
        assert await _call_tool(first, "log_to_session", {}) == [{"type": "text", "text": "logged"}]
        await _call_tool(first, "touch_resource", {"uri": NOTES})  # the last event: nothing came twice before it
        heard = await _events(first_stream, SseParser(), 5)
        await _call_tool(second, "touch_resource", {"uri": OTHER})  # the second session's first event, if nothing leaked
        other = await _events(second_stream, SseParser(), 1)
        resumed = await _get_stream(http, proxy.url, first, **{"Last-Event-ID": "0"})
        replayed = await _events(resumed, SseParser(), 5)
        tools = (await first.call("tools/list"))["result"]["tools"]
        resumed.close()
        second_stream.close()
        first_stream.close()
    updated = _note("notifications/resources/updated", {"uri": NOTES})
    assert heard == [
        (1, _note("notifications/tools/list_changed")),
        (2, updated),
        (3, _session_log("warning")),
        (4, _session_log("error")),
        (5, updated),
    ]
    assert other == [(1, _note("notifications/resources/updated", {"uri": OTHER}))]
    assert replayed == heard
    assert "added_one" in [tool["name"] for tool in tools]


async def test_log_messages_of_a_request_come_on_its_post_stream_at_the_sessions_level(peer, tmp_path):
    async with running_proxy(peer[1], tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        await caller.call("logging/setLevel", {"level": "warning"})
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
        body["params"] = {"name": "report_progress", "arguments": {"count": 2}, "_meta": {"progressToken": "p"}}
        async with http.post(proxy.url, json=body, headers=caller.headers()) as response:
            assert response.headers["Content-Type"].split(";")[0] == "text/event-stream"
            parser, messages = SseParser(), []
            async for chunk in response.content.iter_any():
                messages.extend(json.loads(event.data) for event in parser.feed(chunk))

    def progress(step: int) -> dict[str, Any]:
        return _note(
            "notifications/progress", {"progressToken": "p", "progress": float(step), "total": 2.0, "message": f"step {step}"}
        )

    def logged(level: str) -> dict[str, Any]:
        data = {"msg": f"report_progress at {level}", "extra": None}
        return _note("notifications/message", {"level": level, "logger": "report_progress", "data": data})

    assert messages[:-1] == [progress(1), progress(2), logged("warning"), logged("error")]
    assert messages[-1] == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"content": [{"type": "text", "text": "progress done"}], "isError": False},
    }


async def test_tasks_reach_their_upstream_session_from_another_session_and_after_a_restart(peer, tmp_path):
    app, url = peer
    auth = "Bearer one-principal"
    async with aiohttp.ClientSession() as http:
        async with running_proxy(url, tmp_path) as proxy:
            first, second = SessionCaller(http, proxy.url, authorization=auth), SessionCaller(http, proxy.url, authorization=auth)
            await first.initialize()
            await second.initialize()
            await first.call("logging/setLevel", {"level": "error"})
            await first.call("resources/subscribe", {"uri": NOTES})
            created = await first.call(
                "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "x"}, "task": {}}
            )
            task_id = created["result"]["task"]["taskId"]
            from_second = (await second.call("tasks/get", {"taskId": task_id}))["result"]
        assert from_second["taskId"] == task_id and from_second["status"] in ("working", "completed")
        before = set(app[SESSIONS])
        async with running_proxy(url, tmp_path) as restarted:  # same state directory and key: the sessions come back
            first.url = restarted.url
            assert await _call_tool(first, "greet", {"name": "Ada"}) == [{"type": "text", "text": "Hello, Ada!"}]
            again = (await first.call("tasks/get", {"taskId": task_id}))["result"]
    (fresh,) = [sid for sid in set(app[SESSIONS]) - before if app[LISTS].levels.get(sid)]  # the probe sets nothing
    assert app[LISTS].levels[fresh] == "error"  # set again on the session's new upstream session
    assert app[LISTS].subscriptions[fresh] == {NOTES}
    assert again["taskId"] == task_id and again["status"] in ("working", "completed")


async def test_nothing_is_held_upstream_for_a_get_stream_in_front_of_a_backend_that_declares_nothing(plain_peer, tmp_path):
    async with running_proxy(plain_peer, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        stream = await _get_stream(http, proxy.url, caller)
        assert (await caller.call("ping"))["result"] == {}
        assert len(_pairing(proxy).own) == 0
        stream.close()


async def test_the_upstream_get_stream_lasts_as_long_as_the_sessions(peer, tmp_path):
    app, url = peer
    async with running_proxy(url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        own = _pairing(proxy).own
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        assert len(own) == 0  # no GET stream, none held
        stream = await _get_stream(http, proxy.url, caller)
        assert (await caller.call("ping"))["result"] == {}
        assert len(own) == 1
        await _call_tool(caller, "greet", {"name": "Ada"})  # waits for the upstream stream to be answered
        assert sum(session.get_stream_open for session in app[SESSIONS].values()) == 1
        stream.close()
        deadline = asyncio.get_running_loop().time() + SETTLE_S
        while len(own):
            assert asyncio.get_running_loop().time() < deadline, "the upstream GET stream was not let go"
            await asyncio.sleep(0.02)
        resumed = await _get_stream(http, proxy.url, caller)
        await _call_tool(caller, "add_tool", {"name": "after_resume"})
        heard = await _events(resumed, SseParser(), 1)
        resumed.close()
    assert heard == [(1, _note("notifications/tools/list_changed"))]


async def test_a_forgotten_upstream_session_is_replaced_with_the_sessions_level_and_uris(peer, tmp_path):
    app, url = peer
    async with running_proxy(url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        await caller.call("logging/setLevel", {"level": "error"})
        await caller.call("resources/subscribe", {"uri": NOTES})
        stream = await _get_stream(http, proxy.url, caller)
        await _call_tool(caller, "greet", {"name": "Ada"})
        (old,) = [sid for sid in app[LISTS].levels]
        app[SESSIONS].pop(old).close()  # the backend forgets it (404 from now on); its GET stream ends
        assert await _call_tool(caller, "greet", {"name": "Bo"}) == [{"type": "text", "text": "Hello, Bo!"}]  # sent again
        (new,) = [sid for sid in app[LISTS].levels if sid != old]
        deadline = asyncio.get_running_loop().time() + SETTLE_S
        while not app[SESSIONS][new].get_stream_open:  # the proxy's GET stream went on the new session
            assert asyncio.get_running_loop().time() < deadline, "no GET stream on the new upstream session"
            await asyncio.sleep(0.02)
        await _call_tool(caller, "log_to_session", {})
        await _call_tool(caller, "touch_resource", {"uri": NOTES})
        heard = await _events(stream, SseParser(), 2)
        stream.close()
    assert (app[LISTS].levels[new], app[LISTS].subscriptions[new]) == ("error", {NOTES})
    assert heard == [(1, _session_log("error")), (2, _note("notifications/resources/updated", {"uri": NOTES}))]
