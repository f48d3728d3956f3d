"""The backend that handed out plain task ids (docs/decisions.md §192): noted by a fleet of one
backend in each store (memory, SQLite, a real Redis), read back by a fleet of several, which sends
the ids that do not unseal to it; a backend configured with `plain_ids = true` comes first."""

from __future__ import annotations

import aiohttp
import pytest
from support import TEST_KEY

from proxy.config import load
from proxy.fleet import Fleet
from proxy.metrics import Metrics
from proxy.routing import Router
from proxy.state.fleet_notes import MemoryNotes, RedisNotes, SqliteNotes, notes_for
from proxy.state.redis_store import PREFIX, RedisTaskStore
from proxy.state.sqlite_store import SqliteTaskStore
from translators import jsonrpc
from translators.envelope import ModernMeta
from translators.errors import NOT_ISSUED, UNKNOWN_TASK, McpError
from translators.sealing import ANONYMOUS, Keyring

KEYRING = Keyring(TEST_KEY)


def _fleet(http: aiohttp.ClientSession, *upstream: dict) -> Fleet:
    return Fleet.build(load(None, {"upstream": list(upstream)}), http, KEYRING, Metrics())


def _http(name: str, **keys) -> dict:
    return {"name": name, "url": f"http://127.0.0.1:9/{name}", **keys}


async def test_each_store_keeps_the_last_backend_noted(tmp_path, own_redis):
    path = tmp_path / "state" / "tasks.sqlite3"
    sqlite = SqliteTaskStore(path, max_tasks=10, max_sessions=10)
    redis = RedisTaskStore(own_redis.url, process="a")
    try:
        notes = [MemoryNotes(), notes_for(sqlite), notes_for(redis)]
        assert [type(n) for n in notes] == [MemoryNotes, SqliteNotes, RedisNotes]
        assert [await n.plain_issuer() for n in notes] == [None, None, None]
        for n in notes:
            await n.note_plain_issuer("a")
            await n.note_plain_issuer("b")
        assert [await n.plain_issuer() for n in notes] == ["b", "b", "b"]
        assert await redis.redis.get(PREFIX + "fleet:plain-issuer") == "b"
    finally:
        await sqlite.close()
        await redis.close()
    reopened = SqliteTaskStore(path, max_tasks=10, max_sessions=10)  # a restart on the same state
    try:
        assert await notes_for(reopened).plain_issuer() == "b"
    finally:
        await reopened.close()
    assert type(notes_for(None)) is MemoryNotes


async def test_a_fleet_of_one_notes_its_backend_and_a_fleet_of_several_sends_plain_ids_to_it():
    async with aiohttp.ClientSession() as http:
        alone = _fleet(http, _http("a"))
        notes = alone.notes = MemoryNotes()
        assert (alone.plain_issuer, alone.first.relay.own_task_ids, alone.first.relay.plain_ids) == ("a", True, True)
        await alone.remember_plain_issuer()
        assert await notes.plain_issuer() == "a"
        alone.arrange([alone.first, *_fleet(http, _http("b")).members])  # a reload that adds b
        assert [(m.name, m.relay.own_task_ids, m.relay.plain_ids) for m in alone.members] == [
            ("a", False, True),
            ("b", False, False),
        ]
        restarted = _fleet(http, _http("b"), _http("a"))  # a restart with both: the note says a
        restarted.notes = notes
        assert restarted.plain_owner() is None
        await restarted.remember_plain_issuer()
        assert (restarted.plain_issuer, restarted.plain_owner().name) == ("a", "a")
        assert restarted.plain_owner(issued=False) is None  # a session id that does not unseal: no such session
        assert [m.relay.plain_ids for m in restarted.members] == [False, True]
        configured = _fleet(http, _http("b", plain_ids=True), _http("a"))
        configured.notes = notes
        await configured.remember_plain_issuer()
        assert configured.plain_owner().name == "b"  # `plain_ids = true` comes first (decision 83)
        gone = _fleet(http, _http("b"), _http("c"))  # the noted backend is no longer configured
        gone.notes = notes
        await gone.remember_plain_issuer()
        assert (gone.plain_issuer, gone.plain_owner()) == ("a", None)
        for fleet in (alone, restarted, configured, gone):
            await fleet.close()


async def test_a_stdio_backend_alone_keeps_sealing_its_task_ids(tmp_path):
    """A stdio process sees no caller's credentials: its task ids stay sealed for the principal
    (decision 138), and it is not noted as handing out plain ones."""
    async with aiohttp.ClientSession() as http:
        fleet = _fleet(http, {"name": "s", "command": ["true"]})
        assert (fleet.plain_issuer, fleet.first.relay.own_task_ids) == (None, False)
        await fleet.close()


class _Down:
    shared = True

    async def plain_issuer(self) -> str | None:
        raise ConnectionError("store down")

    async def note_plain_issuer(self, name: str) -> None:
        raise ConnectionError("store down")


@pytest.mark.parametrize("names", [("a",), ("a", "b")])
async def test_a_store_that_does_not_answer_leaves_the_fleet_as_it_was(names, caplog):
    async with aiohttp.ClientSession() as http:
        fleet = _fleet(http, *(_http(n) for n in names))
        fleet.notes = _Down()
        before = fleet.plain_issuer
        await fleet.remember_plain_issuer()
        assert fleet.plain_issuer == before
        assert [r.getMessage() for r in caplog.records] == [
            "the backend that handed out plain task ids could not be read or noted in the store (store down)"
        ]
        await fleet.close()


async def test_a_replica_that_finds_no_owner_reads_the_shared_note_again(own_redis):
    """A replica of several backends that started before another, alone, noted its backend refuses
    that backend's plain ids until it reads the note again: at the first refusal, in the background,
    at most every NOTE_RETRY_S (decision 192)."""
    meta = ModernMeta("2026-07-28", {"extensions": {"io.modelcontextprotocol/tasks": {}}})
    get = jsonrpc.parse(jsonrpc.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": "a-own-id"}}))
    store = RedisTaskStore(own_redis.url, process="p")
    async with aiohttp.ClientSession() as http:
        several = _fleet(http, _http("b"), _http("a"))
        several.notes = notes_for(store)
        await several.remember_plain_issuer()
        alone = _fleet(http, _http("a"))
        alone.notes = notes_for(store)
        await alone.remember_plain_issuer()  # noted after the other replica started
        router = Router(several, KEYRING)
        with pytest.raises(McpError) as refused:
            router.modern(get, meta, ANONYMOUS)
        assert refused.value.message == f"{UNKNOWN_TASK}: {NOT_ISSUED}"
        reading = several._note_reading
        assert reading is not None and several.plain_missed() is None  # one read at a time, then not again for a while
        await reading
        assert router.modern(get, meta, ANONYMOUS) == (several.named("a"), True)
        for fleet in (several, alone):
            await fleet.close()
    await store.close()
