"""The SQLite state store under faults (docs/decisions.md, "State that survives a restart"):
a file whose pages are damaged, a second process on the same state directory, and a disk that
fills up while the proxy runs. Real SQLite files; a full disk is SQLite's own `SQLITE_FULL`,
produced by capping the file's page count (`PRAGMA max_page_count`) on the store's connection."""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap

import aiohttp
import pytest
from adv_support import wait_for_input
from support import Caller, running_proxy

from proxy.app import STATE
from proxy.config import ConfigError, load
from proxy.state.opening import open_store as _open_store
from proxy.state.sqlite_store import SqliteTaskStore
from proxy.state.store import SessionRecord
from translators.model import InputRequest
from translators.sealing import TaskRef

REF = TaskRef("main", "s", "t")
ASK = InputRequest(method="elicitation/create", params={"message": "sure?"})
BIG = InputRequest(method="elicitation/create", params={"message": "sure? " * 1000})
"""A request that needs pages of its own."""


def _settings(state_dir):
    return load(None, {"upstream": [{"name": "main", "url": "http://127.0.0.1:1/mcp"}], "state_dir": str(state_dir)})


def _fill(db: sqlite3.Connection) -> None:
    """Make the file full: no page may be added, and no row fits in the pages it has."""
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count={pages}")
    n = 0
    for size in (2000, 500, 100, 20, 1):
        with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
            while True:
                n += 1
                db.execute("INSERT INTO meta VALUES (?, ?)", (f"pad-{n}", "x" * size))


async def test_a_file_with_damaged_pages_is_refused_at_start_not_on_a_later_request(tmp_path):
    good = tmp_path / "good"
    store = SqliteTaskStore(good / "tasks.sqlite3", max_tasks=5000, max_sessions=5000)
    for i in range(2000):
        await store.keep_session(
            SessionRecord(f"s{i}", "p", "v1", "main", {"clientInfo": {"name": "c" * 100}}, "2025-11-25"), 600
        )
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    await store.close()
    damaged = tmp_path / "damaged"
    shutil.copytree(good, damaged)
    with open(damaged / "tasks.sqlite3", "r+b") as file:  # noqa: ASYNC230 - a few bytes of test setup
        file.seek(4096 * 3)
        file.write(b"\xa5" * 4096)  # one page of a table overwritten (the header and schema intact)
    with pytest.raises(ConfigError) as refused:
        _open_store(_settings(damaged))
    assert str(refused.value) == (
        f"store: {damaged / 'tasks.sqlite3'} is damaged (quick check: *** in database main *** "
        "Page 4: btreeInitPage() returns error code 11): "
        "move it away to start with an empty store"
    )


async def test_a_second_process_on_the_same_state_directory_is_refused(tmp_path):
    store = _open_store(_settings(tmp_path))
    await store.capture_input(REF, 7, ASK, 60)
    assert await store.claim_input(REF, "input-1") is not None  # this process is delivering the answer
    other = subprocess.run(  # noqa: ASYNC221 - the second process must be refused before the test goes on
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        from proxy.state.opening import open_store as _open_store
        from proxy.config import ConfigError, load
        try:
            _open_store(load(None, {{"upstream": [{{"url": "http://127.0.0.1:1/mcp"}}], "state_dir": {str(tmp_path)!r}}}))
        except ConfigError as exc:
            print(exc)
    """),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.getcwd(),
    )
    assert (other.stdout, other.returncode) == (
        f"store: {tmp_path / 'tasks.sqlite3'} is in use by another process (one proxy per state_dir)\n",
        0,
    )
    # The live claim was not released by the other process's start: the key cannot be claimed twice.
    assert await store.claim_input(REF, "input-1") is None
    await store.close()
    reopened = _open_store(_settings(tmp_path))  # the first process is done with it: a new one may start
    assert await reopened.claim_input(REF, "input-1") is not None
    await reopened.close()


async def test_a_full_store_keeps_state_in_memory_and_says_so(tmp_path, caplog):
    store = SqliteTaskStore(tmp_path / "tasks.sqlite3", max_tasks=10, max_sessions=10)
    await store.capture_input(REF, 1, ASK, 60)
    _fill(store._db)
    with caplog.at_level(logging.ERROR, logger="proxy.state.sqlite_store"):
        assert await store.capture_input(REF, 2, BIG, 60) == "input-2"
        assert await store.capture_input(TaskRef("main", "s", "u"), 3, BIG, 60) == "input-1"
    assert list(await store.inputs(REF)) == ["input-1", "input-2"]
    assert await store.claim_input(REF, "input-2") is not None
    await store.answered(REF, "input-2")
    assert list(await store.inputs(REF)) == ["input-1"]
    assert [r.getMessage() for r in caplog.records] == [
        f"state store {tmp_path / 'tasks.sqlite3'} cannot be written (database or disk is full): task state is kept in memory "
        "from now on and will not survive a restart"
    ]
    await store.close()


@pytest.mark.peers
async def test_a_question_captured_while_the_disk_is_full_is_still_shown_and_answered(reference_v1_server, tmp_path, caplog):
    async with running_proxy(reference_v1_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        _fill(proxy.runner.app[STATE].store._db)
        caller = Caller(http, proxy.url)
        created = (await caller.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "full.txt"}})).result
        task = await wait_for_input(caller, created["taskId"])
        assert list(task["inputRequests"]) == ["input-1"]
        answer = await caller.call(
            "tasks/update",
            {"taskId": created["taskId"], "inputResponses": {"input-1": {"action": "accept", "content": {"confirm": True}}}},
        )
        assert answer.result == {"resultType": "complete"}
        final = await caller.poll(created["taskId"])
        assert (final["status"], final["result"]["content"][0]["text"]) == ("completed", "deleted full.txt")
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [
        f"state store {tmp_path / 'tasks.sqlite3'} cannot be written (database or disk is full): task state is kept "
        "in memory from now on and will not survive a restart"
    ]
