"""The task state replicas would share (proxy/store.py): the memory store's rules, and two replicas
given one store answering each other's captured requests for input (a shared store
is added without touching the faces)."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest
from support import TEST_KEY, Caller

from proxy.app import start
from proxy.config import load
from proxy.state.store import CapturedInput, MemoryTaskStore
from translators.model import CanonicalTask, InputRequest
from translators.sealing import Keyring, TaskRef

REF = TaskRef("main", "session-1", "task-1")
OTHER = TaskRef("main", "session-1", "task-2")
ASK = InputRequest(method="elicitation/create", params={"message": "Delete a.txt?"})


def _task(status: str = "completed") -> CanonicalTask:
    return CanonicalTask(
        task_id="task-1", status=status, created_at="2026-11-30T08:00:00Z", last_updated_at="2026-11-30T08:00:01Z", ttl_ms=60_000
    )


async def test_captured_requests_get_fresh_keys_never_reused_within_a_task():
    store = MemoryTaskStore(max_tasks=10)
    assert await store.capture_input(REF, 7, ASK, 60) == "input-1"
    assert await store.capture_input(REF, 7, ASK, 60) is None  # the same upstream request again
    assert await store.capture_input(REF, 8, ASK, 60) == "input-2"
    assert await store.capture_input(OTHER, 7, ASK, 60) == "input-1"  # keys are per task
    await store.answered(REF, "input-1")
    assert await store.capture_input(REF, 9, ASK, 60) == "input-3"
    assert await store.inputs(REF) == {"input-2": CapturedInput("input-2", 8, ASK), "input-3": CapturedInput("input-3", 9, ASK)}
    await store.drop_inputs(REF)
    assert await store.inputs(REF) == {}
    assert await store.inputs(OTHER) == {"input-1": CapturedInput("input-1", 7, ASK)}


async def test_inputs_returns_a_copy():
    store = MemoryTaskStore(max_tasks=10)
    await store.capture_input(REF, 1, ASK, 60)
    (await store.inputs(REF)).clear()
    assert list(await store.inputs(REF)) == ["input-1"]


async def test_outcomes_are_kept_forgotten_and_expire():
    store = MemoryTaskStore(max_tasks=10)
    await store.keep_outcome(REF, _task(), 60)
    await store.keep_outcome(OTHER, _task(), 0)  # expires at once
    await store.keep_outcome(TaskRef("other", "s", "t"), _task(), 60)
    assert (await store.outcome(REF), await store.outcome(OTHER), store.outcome_count("main"), store.outcome_count("other")) == (
        _task(),
        None,
        1,
        1,
    )
    await store.forget_outcome(REF)
    assert (await store.outcome(REF), store.outcome_count("main")) == (None, 0)


async def test_the_memory_store_is_bounded_in_count_least_recently_used_first():
    store = MemoryTaskStore(max_tasks=2)
    refs = [TaskRef("main", "s", f"t{i}") for i in range(3)]
    await store.keep_outcome(refs[0], _task(), 60)
    await store.keep_outcome(refs[1], _task(), 60)
    assert await store.outcome(refs[0]) == _task()  # refs[1] is now the least recently used
    await store.keep_outcome(refs[2], _task(), 60)
    assert [await store.outcome(r) is not None for r in refs] == [True, False, True]
    for i, ref in enumerate(refs):
        await store.capture_input(ref, i, ASK, 60)
    assert [bool(await store.inputs(r)) for r in refs] == [False, True, True]


@pytest.mark.peers
async def test_two_replicas_with_one_store_answer_each_others_captured_requests(reference_v1_server, tmp_path):
    store = MemoryTaskStore(max_tasks=100)
    async with contextlib.AsyncExitStack() as stack:
        replicas = []
        for name in ("a", "b"):
            settings = load(
                None,
                {
                    "listen": "127.0.0.1:0",
                    "upstream": [{"name": "main", "url": reference_v1_server.url}],
                    "state_dir": str(tmp_path / name),
                },
            )
            running = await start(settings, keyring=Keyring(TEST_KEY), store=store)
            stack.push_async_callback(running.stop)
            replicas.append(running)
        http = await stack.enter_async_context(aiohttp.ClientSession())
        on_a, on_b = Caller(http, replicas[0].url), Caller(http, replicas[1].url)
        created = (await on_a.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "shared.txt"}})).result
        for _ in range(100):  # replica a captures the backend's question
            seen_by_a = (await on_a.call("tasks/get", {"taskId": created["taskId"]})).result
            if seen_by_a["status"] == "input_required":
                break
            await asyncio.sleep(0.1)
        assert list(seen_by_a["inputRequests"]) == ["input-1"]
        seen_by_b = (await on_b.call("tasks/get", {"taskId": created["taskId"]})).result
        assert (seen_by_b["status"], seen_by_b["inputRequests"]) == ("input_required", seen_by_a["inputRequests"])
        ack = await on_b.call(
            "tasks/update",
            {"taskId": created["taskId"], "inputResponses": {"input-1": {"action": "accept", "content": {"confirm": True}}}},
        )
        assert (ack.status, ack.result) == (200, {"resultType": "complete"})
        final = await on_b.poll(created["taskId"])
        assert final["result"]["content"] == [{"type": "text", "text": "deleted shared.txt"}]
        assert (await on_a.poll(created["taskId"]))["result"] == final["result"]


async def test_one_claim_per_key_until_answered_or_released():
    store = MemoryTaskStore(max_tasks=10)
    await store.capture_input(REF, 7, ASK, 60)
    assert await store.claim_input(REF, "input-1") == CapturedInput("input-1", 7, ASK)
    assert await store.claim_input(REF, "input-1") is None  # a concurrent answer to the same key
    await store.release_input(REF, "input-1")  # the backend did not take the first
    assert await store.claim_input(REF, "input-1") == CapturedInput("input-1", 7, ASK)
    await store.answered(REF, "input-1")
    assert (await store.claim_input(REF, "input-1"), await store.inputs(REF)) == (None, {})
    assert await store.claim_input(REF, "input-9") is None


async def test_a_task_forgotten_under_pressure_never_gets_a_key_again():
    store = MemoryTaskStore(max_tasks=1)
    assert await store.capture_input(REF, 1, ASK, 60) == "input-1"
    assert await store.capture_input(OTHER, 1, ASK, 60) == "input-1"  # REF's entry is let go
    assert await store.capture_input(REF, 2, ASK, 60) == "input-2"  # not input-1 again
    await store.drop_inputs(REF)  # ended: dropping is not forgetting
