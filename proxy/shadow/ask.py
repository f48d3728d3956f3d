"""Asking a v2-modern candidate directly, its task followed to its end (docs/behaviour.md §8
"Shadow"): what the shadow process (`proxy/shadow/process.py`) does for each job. The answer is
put in canonical form by `translators/shadow.py`."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any

from translators import jsonrpc
from translators import shadow as canon
from translators.envelope import ModernMeta
from translators.errors import McpError
from translators.protocol import MODERN_VERSION, TASKS_EXTENSION

from ..upstream.endpoint import Endpoint
from ..upstream.modern_wire import ModernClient

SHADOW_META = ModernMeta(MODERN_VERSION, {"extensions": {TASKS_EXTENSION: {}}}, {"name": "mcp-tasks-proxy-shadow", "version": "1"})
"""The envelope a mirrored request carries: tasks declared, nothing a backend could ask a user with."""
POLL_MIN_S, POLL_MAX_S = 0.05, 2.0
"""Bounds on the wait between two `tasks/get` of a followed task (its `pollInterval`, else 0.2 s)."""


class CandidateFailed(Exception):
    """The candidate could not be asked (unreachable, or an answer that is not MCP: HTTP 5xx)."""


def poll_wait(task: Mapping[str, Any]) -> float:
    """The wait (s) before the next `tasks/get` of `task`: its `pollInterval` (ms) within the bounds."""
    interval = task.get("pollInterval")
    seconds = interval / 1000 if isinstance(interval, int | float) and not isinstance(interval, bool) else 0.2
    return min(max(seconds, POLL_MIN_S), POLL_MAX_S)


async def candidate_outcome(endpoint: Endpoint, method: str, params: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    """The candidate at `endpoint` asked `method` with `params` as a 2026-07-28 client
    (`SHADOW_META`), a task in its answer followed by `tasks/get` until it ends or asks for input,
    in canonical form. Raises `CandidateFailed`."""
    client = ModernClient(endpoint)
    try:
        result = await client.request(method, params, SHADOW_META, headers=headers)
        if canon.result_kind(result) != "task":
            return canon.canonical_answer(method, result)
        task_id = canon.created_task_id(result)
        wait = poll_wait(result)
        while True:
            await asyncio.sleep(wait)
            got = await client.request("tasks/get", {"taskId": task_id}, SHADOW_META, headers=headers)
            if canon.task_ended(got):
                return canon.canonical_task_end(method, got)
            wait = poll_wait(got)
    except McpError as exc:
        if exc.http_status is not None and exc.http_status >= 500:
            raise CandidateFailed(exc.message) from None
        return canon.canonical_error({"code": exc.code})


def relayed_answer(body: bytes) -> dict[str, Any] | None:
    """The answer in a relayed JSON body (its `result`, or `{"error": ...}`), None for one that is
    not a JSON-RPC answer (then the primary is asked again)."""
    try:
        message = jsonrpc.parse(body).raw
    except (McpError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    if isinstance(message.get("result"), dict):
        return dict(message["result"])
    if isinstance(message.get("error"), dict):
        return {"error": message["error"]}
    return None


def held_outcome(method: str, answer: dict[str, Any] | bytes | None) -> dict[str, Any] | None:
    """The canonical outcome of the client's answer to `method` when it is held and final (no task
    to follow), else None."""
    if not isinstance(answer, dict) or canon.result_kind(answer) == "task":
        return None
    if "error" in answer and isinstance(answer["error"], dict) and len(answer) == 1:
        return canon.canonical_error(answer["error"])
    return canon.canonical_answer(method, answer)


async def both(primary: Any, candidate: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both outcomes, asked at once; when one side fails the other is cancelled."""
    tasks = [asyncio.ensure_future(primary), asyncio.ensure_future(candidate)]
    try:
        return await tasks[0], await tasks[1]
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


def answer_size(answer: dict[str, Any] | bytes | None) -> int:
    """The size in bytes of an answer held as bytes or as a decoded JSON object (compact UTF-8 JSON)."""
    if answer is None:
        return 0
    if isinstance(answer, bytes):
        return len(answer)
    return len(json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode())
