"""A stdio process killed (-9) or stopped (SIGSTOP) while sixteen sessions call it at once
(docs/behaviour.md §7, decisions 72 and 130): every call is answered once, with its own echo or
with an error naming the loss, never with another call's answer (the sessions all use the same
JSON-RPC ids); the sessions that lost their process are told so (404) and work again on a new
one, which is started once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import aiohttp
from session_support import SessionCaller
from stdio_support import TEST_KEY, gone

from proxy.app import STATE, RunningProxy, start
from proxy.config import load
from translators.sealing import Keyring

NOISY = [sys.executable, str(Path(__file__).resolve().parents[1] / "peers" / "noisy_stdio_server.py")]
SESSIONS = 16
CALLS_BEFORE = 300
"""Calls answered, all sessions together, before the fault."""
DEADLINE_S = 30.0
STOPPED = "the process stopped answering (no message on its stdout, not even to a ping, for 1000 ms while a request waited)"
KILLED = "the process exited with status -9"
NOT_RUNNING = (502, "Backend 'noisy' unavailable: the process is not running")
SESSION_GONE = (404, "Session not found")
OWN_ECHO = (200, "own echo")


def _lost(reason: str) -> set[tuple[int, str]]:
    """What a call may be answered with once its process is gone for `reason`, besides its own echo:
    the loss itself (a call that waited), the process not running (a call between the loss and the
    new process: on the session, or while its request was being opened), the session gone (404)."""
    return {
        (502, f"Backend 'noisy' unavailable: {reason}"),
        NOT_RUNNING,
        SESSION_GONE,
    }


async def _proxy(tmp_path: Path) -> RunningProxy:
    settings = load(
        None,
        {
            "listen": "127.0.0.1:0",
            "state_dir": str(tmp_path),
            "store": "memory",
            "upstream": [{"name": "noisy", "command": NOISY, "process_scope": "shared", "liveness_timeout_ms": 1000}],
        },
    )
    return await start(settings, keyring=Keyring(TEST_KEY))


async def _under_load(tmp_path: Path, fault: signal.Signals) -> tuple[Counter, Counter, list, int]:
    """Sixteen sessions calling `echo` in a loop; `fault` sent to the process once CALLS_BEFORE
    calls were answered; each session goes on (initializing again after a 404) until it has its own
    echo from the new process. (answers before the fault, answers after it as (status, error
    message or "own echo"), the initialize errors seen while the process was away, the old pid)."""
    proxy = await _proxy(tmp_path)
    pool = proxy.runner.app[STATE].fleet.members[0].backend.connector.pool
    before: Counter = Counter()
    after: Counter = Counter()
    init_errors: list = []
    faulted = asyncio.Event()
    answered = 0

    async def session(number: int, caller: SessionCaller) -> None:
        nonlocal answered
        call = 0
        while True:
            call += 1
            text = f"{number}:{call}"
            answer = await caller.call("tools/call", {"name": "echo", "arguments": {"text": text}})
            answered += 1
            seen = faulted.is_set()
            if "result" in answer:
                outcome = "own echo" if answer["result"] == {"content": [{"type": "text", "text": text}]} else answer["result"]
                (after if seen else before)[(answer["_status"], str(outcome))] += 1
                if seen and outcome == "own echo" and caller.session_id != first_session[number]:
                    return
                continue
            (after if seen else before)[(answer["_status"], answer["error"]["message"])] += 1
            if (answer["_status"], answer["error"]["message"]) == SESSION_GONE:
                caller.session_id = None
                while caller.session_id is None:
                    opened = await caller.initialize()
                    if "error" in opened:
                        init_errors.append((opened["_status"], opened["error"]))

    try:
        async with aiohttp.ClientSession() as http:
            callers = [SessionCaller(http, proxy.url) for _ in range(SESSIONS)]
            await asyncio.gather(*(caller.initialize() for caller in callers))
            first_session = [caller.session_id for caller in callers]
            assert len(set(first_session)) == SESSIONS
            running = [asyncio.ensure_future(session(n, caller)) for n, caller in enumerate(callers)]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + DEADLINE_S
            while answered < CALLS_BEFORE:
                assert loop.time() < deadline and not any(task.done() for task in running), "the calls before the fault"
                await asyncio.sleep(0.005)
            [slot] = pool.slots.values()
            old = slot.process
            os.kill(old.pid, fault)
            faulted.set()
            done, pending = await asyncio.wait(running, timeout=DEADLINE_S)
            for task in pending:
                task.cancel()
            assert (len(pending), [task.exception() for task in done]) == (0, [None] * SESSIONS)
            while old.process.returncode is None:  # reaped by the proxy (SIGKILL after a stop)
                assert loop.time() < deadline + DEADLINE_S, "the old process to be reaped"
                await asyncio.sleep(0.02)
            assert (slot.restarts, old.process.returncode, slot.process.pid != old.pid) == (1, -signal.SIGKILL, True)
            return before, after, init_errors, old.pid
    finally:
        await proxy.stop()


async def _check(tmp_path: Path, fault: signal.Signals, reason: str) -> None:
    before, after, init_errors, pid = await _under_load(tmp_path, fault)
    assert list(before) == [OWN_ECHO]
    assert sum(before.values()) >= CALLS_BEFORE - SESSIONS  # those answered while the fault was being sent count after it
    assert set(after) <= {OWN_ECHO} | _lost(reason), after
    assert (after[SESSION_GONE], after[OWN_ECHO] >= SESSIONS) == (SESSIONS, True)  # each session told once, then served
    assert {error["message"] for _status, error in init_errors} <= {
        f"Backend 'noisy' unavailable: {reason}",
        "Backend 'noisy' unavailable: its process is still starting",
    }
    assert gone(pid) is True


async def test_a_process_killed_under_load_answers_every_call_once_with_its_own_echo_or_the_loss(tmp_path):
    await _check(tmp_path, signal.SIGKILL, KILLED)


async def test_a_process_stopped_under_load_fails_every_waiting_call_and_is_replaced_once(tmp_path):
    await _check(tmp_path, signal.SIGSTOP, STOPPED)
