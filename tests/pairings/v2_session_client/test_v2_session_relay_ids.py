"""A v2-session client relayed to a v2-session backend (docs/decisions.md §190): the session's task
ids are the backend's own both ways, its answers and GET stream reach the client as the backend
wrote them, and the one repair every v2 relay makes on a stream still happens (a task status
notification under v1's name gets the extension's, decision 157).

The backend is the v2-session peer (`tests/peers/v2_session_server.py`), in this process, so that
the test can push to the session's GET stream and look at the tasks the peer holds.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import aiohttp
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from peers.v2_session_server import SESSIONS, start  # noqa: E402
from session_support import SessionCaller  # noqa: E402
from support import TEST_KEY, running_proxy, until  # noqa: E402

from proxy.sse import SseParser  # noqa: E402
from translators.sealing import PLAIN_TASK_IDS, RELAY_SESSION, Keyring  # noqa: E402

EXT = "io.modelcontextprotocol/tasks"
KEYRING = Keyring(TEST_KEY)


@pytest.fixture
async def peer():
    runner, url = await start("127.0.0.1", 0)
    yield runner.app, url
    await runner.cleanup()


async def test_a_relayed_v2_session_keeps_the_backend_s_task_ids_and_stream_bytes(peer, tmp_path):
    app, url = peer
    async with running_proxy(url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url, capabilities={"extensions": {EXT: {}}})
        init = await caller.initialize()
        assert init["result"]["serverInfo"]["name"] != "mcp-tasks-proxy"  # relayed: the backend's own answer
        name, upstream_session, plain = KEYRING.unseal(RELAY_SESSION, caller.session_id, "")
        assert (name, plain) == ("main", PLAIN_TASK_IDS)
        session = app[SESSIONS][upstream_session]

        created = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 30, "label": "v"}})
        task_id = created["result"]["taskId"]
        assert re.fullmatch(r"[A-Za-z0-9_-]{32}", task_id) and list(session.tasks) == [task_id]  # the backend's own
        polled = await caller.call("tasks/get", {"taskId": task_id})
        assert (polled["result"]["taskId"], polled["result"]["status"]) == (task_id, "working")

        stream = await http.get(proxy.url, headers=caller.headers({"Accept": "text/event-stream"}))
        assert stream.status == 200
        await until(lambda: session.get_queue is not None)
        status = {"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": {"taskId": task_id, "status": "working"}}
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": f"taskId {task_id} café"},
        }
        session.push(status)
        session.push(note)
        parser, events = SseParser(), []
        while len(events) < 2:
            events += [e for e in parser.feed(await stream.content.readany()) if e.data.strip()]
        stream.close()
        assert json.loads(events[0].data) == {**status, "method": "notifications/tasks"}  # renamed, the id as it was
        assert events[1].data == json.dumps(note)  # the bytes the backend wrote (its \u00e9 escape included)

        cancelled = await caller.call("tasks/cancel", {"taskId": task_id})
        assert cancelled["result"] == {"resultType": "complete"}
        assert session.tasks[task_id].status == "cancelled"
