"""What the session face streams to v1 clients from the reference v2 server, raw (docs/behaviour.md
§5.1 `logging/setLevel` and the notifications of a POST, §5.9 the upstream listen of a GET stream).

Raw session-wire requests, so every event of an answer is visible; the real mcp 1.30 client runs
through the same rules in test_v1_client_notifications.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp
import pytest
from session_support import SessionCaller
from support import running_proxy, until
from tap import RecordingTap

from proxy.app import STATE
from proxy.faces.replay import REPLAY_BYTES
from proxy.pairings import v1_lists
from proxy.pairings.v1_lists import SUBSCRIBED
from proxy.pairings.v1_over_v2 import V1OverV2
from proxy.sse import SseParser, sse_frame
from translators.subscriptions import MAX_SUBSCRIPTIONS, MAX_URI_CHARS

pytestmark = pytest.mark.peers

TASKS = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
#: Bound for a condition the proxy reaches soon after the step that causes it (loops, not timed assertions).
SETTLE_S = 10.0


def _log(level: str) -> dict[str, Any]:
    params = {"level": level, "logger": "report_progress", "data": {"msg": f"report_progress at {level}", "extra": None}}
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": params}


def _progress(step: int, total: int) -> dict[str, Any]:
    params = {"progressToken": "p", "progress": float(step), "total": float(total), "message": f"step {step}"}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


async def _messages(
    caller: SessionCaller, method: str, params: dict[str, Any], accept: str | None = None
) -> tuple[str, list[dict]]:
    """POST one request of the caller's session: (content type, every message of the answer, in order)."""
    body = {"jsonrpc": "2.0", "id": 99, "method": method, "params": params}
    headers = caller.headers({"Accept": accept} if accept else None)
    async with caller.http.post(caller.url, json=body, headers=headers) as response:
        kind = response.headers["Content-Type"].split(";")[0]
        if kind != "text/event-stream":
            return kind, [json.loads(await response.text())]
        parser, messages = SseParser(), []
        async for chunk in response.content.iter_any():
            messages.extend(json.loads(event.data) for event in parser.feed(chunk))
        return kind, messages


def _pairing(proxy: Any) -> V1OverV2:
    pairing = proxy.runner.app[STATE].fleet.first.pairing("v1", "v2-modern")
    assert isinstance(pairing, V1OverV2)
    return pairing


async def test_initialize_shows_logging_and_no_list_changes_in_front_of_a_backend_without_listen(reference_v2_server, tmp_path):
    async with running_proxy(reference_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        result = (await SessionCaller(http, proxy.url).initialize())["result"]
    assert result["capabilities"] == {
        "logging": {},
        "prompts": {},
        "resources": {},
        "tools": {},
        "extensions": {"io.modelcontextprotocol/ui": {}},
        "tasks": TASKS,
    }


async def test_initialize_shows_list_changes_and_subscribe_in_front_of_a_backend_that_listens(listing_v2_server, tmp_path):
    async with running_proxy(listing_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        result = (await SessionCaller(http, proxy.url).initialize())["result"]
    assert result["capabilities"] == {
        "logging": {},
        "prompts": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "tools": {"listChanged": True},
        "extensions": {"io.modelcontextprotocol/ui": {}},
        "tasks": TASKS,
    }


async def test_set_level_refuses_what_is_not_a_level(reference_v2_server, tmp_path):
    async with running_proxy(reference_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        answer = await caller.call("logging/setLevel", {"level": "loud"})
    assert answer["error"] == {
        "code": -32602,
        "message": "Invalid log level: expected one of debug, info, notice, warning, error, critical, alert, emergency",
    }


async def test_the_sessions_level_goes_with_each_request_and_survives_a_restart(reference_v2_server, tmp_path):
    async with aiohttp.ClientSession() as http:
        async with running_proxy(reference_v2_server.url, tmp_path) as proxy:
            caller = SessionCaller(http, proxy.url)
            await caller.initialize()
            assert (await caller.call("logging/setLevel", {"level": "error"}))["result"] == {}
            kind, first = await _messages(
                caller, "tools/call", {"name": "report_progress", "arguments": {"count": 2}, "_meta": {"progressToken": "p"}}
            )
        assert kind == "text/event-stream"
        assert first[:-1] == [_progress(1, 2), _progress(2, 2), _log("error")]
        assert first[-1]["result"]["content"] == [{"type": "text", "text": "progress done"}]
        async with running_proxy(reference_v2_server.url, tmp_path) as restarted:  # same state directory and key
            caller.url = restarted.url
            _, again = await _messages(caller, "tools/call", {"name": "report_progress", "arguments": {"count": 0}})
    assert again[:-1] == [_log("error")]
    assert again[-1]["id"] == 99 and "result" in again[-1]


async def test_a_client_that_takes_json_only_gets_its_answer_without_the_notifications(reference_v2_server, tmp_path):
    async with running_proxy(reference_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        await caller.call("logging/setLevel", {"level": "debug"})
        kind, messages = await _messages(
            caller,
            "tools/call",
            {"name": "report_progress", "arguments": {"count": 3}, "_meta": {"progressToken": "p"}},
            "application/json",
        )
    assert kind == "application/json"
    assert [message["result"]["content"] for message in messages] == [[{"type": "text", "text": "progress done"}]]


async def test_no_listen_is_held_in_front_of_a_backend_without_list_changes(reference_v2_server, tmp_path):
    async with running_proxy(reference_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        stream = await http.get(proxy.url, headers=caller.headers({"Accept": "text/event-stream"}))
        assert stream.status == 200
        assert (await caller.call("ping"))["result"] == {}
        assert len(_pairing(proxy).lists) == 0
        stream.close()


async def test_one_listen_per_session_for_as_long_as_its_get_stream(listing_v2_server, tmp_path):
    async with running_proxy(listing_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        lists = _pairing(proxy).lists
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        assert len(lists) == 0  # no GET stream, no listen
        headers = caller.headers({"Accept": "text/event-stream"})
        stream = await http.get(proxy.url, headers=headers)
        assert stream.status == 200
        assert (await caller.call("ping"))["result"] == {}  # answered by the proxy, without waiting for the listen
        assert len(lists) == 1
        second = await http.get(proxy.url, headers=headers)
        assert second.status == 409
        second.release()
        assert (await caller.call("resources/subscribe", {"uri": "reference://notes"}))["result"] == {}
        assert len(lists) == 1  # opened again with the URI: still one
        stream.close()  # the client goes away: the listen goes with its stream
        await until(lambda: len(lists) == 0, "the proxy to get there", SETTLE_S)
        resumed = await http.get(proxy.url, headers=headers)
        assert resumed.status == 200
        assert (await caller.call("ping"))["result"] == {}
        assert len(lists) == 1
        assert (await caller.call("tools/call", {"name": "add_tool", "arguments": {"name": "from_raw_test"}}))["result"][
            "content"
        ] == [{"type": "text", "text": "added from_raw_test"}]
        parser, heard = SseParser(), []

        async def hear() -> None:
            while not heard:
                heard.extend(json.loads(event.data) for event in parser.feed(await resumed.content.readany()))

        await asyncio.wait_for(hear(), SETTLE_S)
        resumed.close()
        await until(lambda: len(lists) == 0, "the proxy to get there", SETTLE_S)
    assert heard == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}]


async def test_resource_subscriptions_are_kept_with_the_session_and_bounded(listing_v2_server, tmp_path):
    async with running_proxy(listing_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        refused = await caller.call("resources/subscribe", {"uri": 7})
        assert refused["error"] == {"code": -32602, "message": "resources/subscribe needs params.uri (a string)"}
        for n in range(MAX_SUBSCRIPTIONS):
            assert (await caller.call("resources/subscribe", {"uri": f"reference://r{n}"}))["result"] == {}
        assert (await caller.call("resources/subscribe", {"uri": "reference://r0"}))["result"] == {}  # again: no new one
        beyond = await caller.call("resources/subscribe", {"uri": "reference://one-too-many"})
        assert beyond["error"] == {"code": -32602, "message": f"At most {MAX_SUBSCRIPTIONS} resource subscriptions per session"}
        assert (await caller.call("resources/unsubscribe", {"uri": "reference://r1"}))["result"] == {}
        session = proxy.runner.app[STATE].session_face.sessions.held(caller.session_id)
        assert session.state[SUBSCRIBED] == [f"reference://r{n}" for n in range(2, MAX_SUBSCRIPTIONS)] + ["reference://r0"]


async def test_a_subscribed_uri_is_at_most_max_uri_chars_long(listing_v2_server, tmp_path):
    longest = "reference://" + "n" * (MAX_URI_CHARS - len("reference://"))
    async with running_proxy(listing_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        assert (await caller.call("resources/subscribe", {"uri": longest}))["result"] == {}
        beyond = await caller.call("resources/subscribe", {"uri": longest + "n"})
        assert beyond["error"] == {
            "code": -32602,
            "message": f"resources/subscribe: params.uri is longer than {MAX_URI_CHARS} characters",
        }
        session = proxy.runner.app[STATE].session_face.sessions.held(caller.session_id)
        assert session.state[SUBSCRIBED] == [longest]
        stored = await proxy.runner.app[STATE].store.session(caller.session_id)
    assert stored.params["state"][SUBSCRIBED] == [longest]


async def test_a_listen_never_acknowledged_is_waited_for_once_and_never_by_what_the_proxy_answers(
    listing_v2_server, tmp_path, caplog, monkeypatch
):
    caplog.set_level(logging.INFO, logger="proxy")
    tap = await RecordingTap.start(listing_v2_server.url)
    tap.held_back.add("subscriptions/listen")  # a gateway that opens the SSE answer and holds the acknowledgement back
    try:
        async with running_proxy(tap.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
            caller = SessionCaller(http, proxy.url)
            await caller.initialize()
            stream = await http.get(proxy.url, headers=caller.headers({"Accept": "text/event-stream"}))
            assert stream.status == 200
            monkeypatch.setattr(v1_lists, "READY_WAIT_S", 3600.0)  # answered by the proxy: never waits at all
            assert (await asyncio.wait_for(caller.call("ping"), SETTLE_S))["result"] == {}
            assert (await asyncio.wait_for(caller.call("logging/setLevel", {"level": "info"}), SETTLE_S))["result"] == {}
            monkeypatch.setattr(v1_lists, "READY_WAIT_S", 0.2)
            call = {"name": "report_progress", "arguments": {"count": 0}}
            for _ in range(3):  # the first waits its fill; the others go on at once
                assert (await caller.call("tools/call", call))["result"]["content"] == [{"type": "text", "text": "progress done"}]
            monkeypatch.setattr(v1_lists, "READY_WAIT_S", 3600.0)  # the replacing listen is not waited for either
            assert (await asyncio.wait_for(caller.call("resources/subscribe", {"uri": "reference://notes"}), SETTLE_S))[
                "result"
            ] == {}
            answer = await asyncio.wait_for(caller.call("tools/call", call), SETTLE_S)
            assert answer["result"]["content"] == [{"type": "text", "text": "progress done"}]
            await until(lambda: tap.methods.count("subscriptions/listen") == 2, "the proxy to get there", SETTLE_S)
            stream.close()
    finally:
        await tap.stop()
    warnings = [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        (
            "proxy.pairings.v1_lists",
            "backend main did not acknowledge subscriptions/listen for a v1 session within 0.2 s (a gateway holding the "
            "stream back?); requests of the session no longer wait for it",
        )
    ]


async def _events(response: aiohttp.ClientResponse, parser: SseParser, until_id: int) -> list[tuple[int, dict]]:
    """(id, message) of each event on a GET stream, up to and with the event `until_id`."""
    events: list[tuple[int, dict]] = []
    while not events or events[-1][0] != until_id:
        events.extend((int(event.id), json.loads(event.data)) for event in parser.feed(await response.content.readany()))
    return events


async def test_the_replay_buffer_keeps_the_newest_events_within_replay_bytes(listing_v2_server, tmp_path):
    uri = "reference://" + "u" * (MAX_URI_CHARS - len("reference://"))
    touches = 140  # of about 8.2 KB each: more than REPLAY_BYTES together, fewer than replay_events
    async with running_proxy(listing_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        headers = caller.headers({"Accept": "text/event-stream"})
        stream = await http.get(proxy.url, headers=headers)
        assert (await caller.call("resources/subscribe", {"uri": uri}))["result"] == {}
        for _ in range(touches):
            touched = await caller.call("tools/call", {"name": "touch_resource", "arguments": {"uri": uri}})
            assert touched["result"]["content"] == [{"type": "text", "text": f"touched {uri}"}]
        heard = await asyncio.wait_for(_events(stream, SseParser(), touches), SETTLE_S)
        resumed = await http.get(proxy.url, headers={**headers, "Last-Event-ID": "0"})
        replayed = await asyncio.wait_for(_events(resumed, SseParser(), touches), SETTLE_S)
        resumed.close()
        stream.close()
    updated = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}
    assert heard == [(n, updated) for n in range(1, touches + 1)]
    kept, size = 0, 0  # the newest events whose frames fit in REPLAY_BYTES together
    while size + len(sse_frame(touches - kept, updated)) <= REPLAY_BYTES:
        size += len(sse_frame(touches - kept, updated))
        kept += 1
    assert kept == 126
    assert replayed == heard[-kept:]
