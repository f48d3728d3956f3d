"""A migration steered live (issue 22, docs/migration.md "2b"): while 50 clients (25 on the
official `mcp` 1.30 SDK, 25 on the 2026-07-28 wire) run task lifecycles with a question each, a v2
backend is added next to the v1 one, the weights go 9:1 → 1:1 → 0:1 by reload, the v1 backend is
drained and, once the status page says "drained", removed. No error, every answer right, every
task that started on the v1 backend finished there, and no session torn down.

The SDK clients run in the `mcp-v1` peer environment (tests/peers/mcp1_task_loops.py); each of
their lifecycles is `initialize`, two tasks with a question, the SDK's DELETE, so that new sessions
follow the weights."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from pathlib import Path

import aiohttp
import pytest
from support import TEST_KEY, Caller, eventually, running_proxy

from proxy.config import load
from proxy.demo.peers import ensure_peer_env
from translators.sealing import ANONYMOUS, Keyring

pytestmark = pytest.mark.peers

KEYRING = Keyring(TEST_KEY)
CLIENTS = 25
"""Of each kind: SDK v1 clients and modern clients."""
LOOPS_SCRIPT = Path(__file__).resolve().parents[1] / "peers" / "mcp1_task_loops.py"
WAIT_S = 120.0
V2_SERVER_INFO = {"io.modelcontextprotocol/serverInfo": {"name": "mcp-tasks-proxy-reference-v2", "version": "4.1.4"}}
CONFIRM = {"action": "accept", "content": {"confirm": True}}


class Tally:
    """What the clients saw: tasks finished per backend, and anything wrong."""

    def __init__(self) -> None:
        self.finished: dict[str, int] = {"old": 0, "new": 0}
        self.errors: list[str] = []
        self.stop = asyncio.Event()

    async def counts(self) -> dict[str, int]:
        return dict(self.finished)


async def _modern_client(http: aiohttp.ClientSession, url: str, tally: Tally, n: int) -> None:
    caller = Caller(http, url)
    round_ = 0
    while not tally.stop.is_set():
        round_ += 1
        name = f"m{n}-{round_}.txt"
        created = await caller.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": name}})
        task_id = created.body.get("result", {}).get("taskId")
        if task_id is None:
            tally.errors.append(f"modern client {n}: {created.body}")
            return
        sealed = KEYRING.opened_task_id(task_id, ANONYMOUS)
        backend = sealed.backend if sealed is not None else "new"  # relayed by new alone: its own id (decision 192)
        waiting = await caller.poll(task_id, until=("input_required", "completed", "failed", "cancelled"), timeout=WAIT_S)
        if waiting["status"] != "input_required":
            tally.errors.append(f"modern client {n} on {backend}: {waiting}")
            return
        [key] = waiting["inputRequests"]
        ack = await caller.call("tasks/update", {"taskId": task_id, "inputResponses": {key: CONFIRM}})
        final = await caller.poll(task_id, timeout=WAIT_S)
        acked = {
            "resultType": "complete",
            **({"_meta": V2_SERVER_INFO} if backend == "new" else {}),
        }  # relayed: the backend's own
        if ack.body.get("result") != acked or final.get("result", {}).get("content") != [
            {"type": "text", "text": f"deleted {name}"}
        ]:
            tally.errors.append(f"modern client {n} on {backend}: {ack.body} / {final}")
            return
        tally.finished[backend] += 1


async def test_a_migration_by_reloads_and_a_drain_loses_nothing(reference_v1_server, reference_v2_server, tmp_path):
    old = {"name": "old", "url": reference_v1_server.url}
    new = {"name": "new", "url": reference_v2_server.url}

    def fleet(*upstream: dict):
        return load(None, {"listen": "127.0.0.1:0", "state_dir": str(tmp_path), "upstream": list(upstream)})

    async with (
        running_proxy("", tmp_path, upstream=[old], task_ttl_ms=600_000) as proxy,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
    ):
        tally = Tally()
        clients = [asyncio.ensure_future(_modern_client(http, proxy.url, tally, n)) for n in range(CLIENTS)]
        sdk = await asyncio.create_subprocess_exec(
            str(ensure_peer_env("mcp-v1")),
            str(LOOPS_SCRIPT),
            "--url",
            proxy.url,
            "--clients",
            str(CLIENTS),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )

        async def status() -> dict[str, dict]:
            async with http.get(proxy.base_url + "/status.json") as response:
                return {b["name"]: b for b in (await response.json())["backends"]}

        try:
            await eventually(tally.counts, lambda done: done["old"] >= CLIENTS, f"{CLIENTS} tasks finished on old", WAIT_S, 0.2)
            assert await proxy.reload(fleet({**old, "weight": 9}, {**new, "weight": 1})) == [
                "backend old: weight 1 -> 9",
                f"backend new added ({reference_v2_server.url}, weight 1)",
            ]
            await eventually(tally.counts, lambda done: done["new"] >= 5, "5 tasks finished on new", WAIT_S, 0.2)
            await proxy.reload(fleet({**old, "weight": 1}, {**new, "weight": 1}))
            await proxy.reload(fleet({**old, "weight": 0}, {**new, "weight": 1}))
            await proxy.reload(fleet({**old, "weight": 0, "drain": True}, {**new, "weight": 1}))
            drained = await eventually(status, lambda backends: backends["old"]["drain"] == "drained", "old drained", WAIT_S, 0.2)
            assert drained["old"]["remaining"] == {"sessions": 0, "requests": 0, "tasks": 0, "held": 0}
            assert await proxy.reload(fleet({**new, "weight": 1})) == ["backend old removed"]
            at_removal = dict(tally.finished)
            await eventually(
                tally.counts,
                lambda done: done["new"] >= at_removal["new"] + CLIENTS,
                f"{CLIENTS} more tasks finished on new after old's removal",
                WAIT_S,
                0.2,
            )
        finally:
            tally.stop.set()
            sdk.send_signal(signal.SIGUSR1)  # each SDK client finishes its lifecycle and stops
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(asyncio.gather(*clients), WAIT_S)
            try:
                out, err = await asyncio.wait_for(sdk.communicate(), WAIT_S)
            finally:
                if sdk.returncode is None:
                    sdk.kill()
                    await sdk.wait()
        lines = [json.loads(line) for line in out.decode().splitlines()]
        assert (sdk.returncode, [line["errors"] for line in lines]) == (0, [[]] * CLIENTS), err.decode()[-3000:]
        assert all(line["tasks"] >= 2 for line in lines)  # every SDK client finished at least one lifecycle
        assert tally.errors == []
        assert tally.finished["old"] == at_removal["old"]  # nothing went to the old backend after its removal
        assert [name for name in await status()] == ["new"]
