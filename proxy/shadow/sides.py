"""The shadow's asking in the proxy's event loop (docs/behaviour.md §8 "Shadow"): a mirrored request
(`Job`), either side asked as a 2026-07-28 client (`SHADOW_META`), straight or through the member's
own pairing, a task in its answer followed to its end, in canonical form (`translators/shadow.py`).
`proxy/shadow/mirror.py` queues and compares; the shadow process asks a v2-modern candidate itself
(`proxy/shadow/ask.py`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from translators import shadow as canon
from translators.errors import McpError

from ..faces.modern import ModernRequest
from ..upstream.answer_bound import ANSWER_BOUND, too_large
from ..upstream.backend import UnsupportedBackend
from ..upstream.modern_wire import ModernClient
from .ask import SHADOW_META, answer_size, poll_wait, relayed_answer

if TYPE_CHECKING:
    from ..fleet import FleetMember


class SideFailed(Exception):
    """A side could not be asked (`side` "candidate" or "primary")."""

    def __init__(self, side: str, reason: str):
        super().__init__(reason)
        self.side = side
        self.reason = reason


@dataclass(slots=True)
class Job:
    """One mirrored request: the primary's member, the method and params, the client's principal and
    headers for upstream, and the primary's answer as the client got it (`primary`: a v2-modern
    result, `{"error": ...}`, the bytes of a relayed JSON answer, parsed by the worker, or None when
    it was not held whole and must be asked again), with `follow`: whether a task in it can be
    followed on the primary (False, a relayed answer's sealed ids: asked again instead), and
    `request_id`: the client request's id, which the comparison's log lines carry."""

    primary: FleetMember
    method: str
    params: dict[str, Any]
    principal: str
    headers: dict[str, str]
    answer: dict[str, Any] | bytes | None
    follow: bool = True
    request_id: str | None = None


async def primary_outcome(job: Job) -> dict[str, Any]:
    """The primary's outcome: the client's answer, its task followed, or the primary asked again."""
    answer = relayed_answer(job.answer) if isinstance(job.answer, bytes) else job.answer
    if answer is None or (not job.follow and canon.result_kind(answer) == "task"):
        return await outcome(job.primary, job, "primary")
    if "error" in answer and isinstance(answer["error"], dict) and len(answer) == 1:
        return canon.canonical_error(answer["error"])
    return await settled(job.primary, job, answer, "primary")


async def outcome(member: FleetMember, job: Job, side: str) -> dict[str, Any]:
    """`member` asked `job`'s request, its answer followed to its end, in canonical form."""
    try:
        result = await ask(member, job.method, job.params, job)
    except McpError as exc:
        if exc.http_status is not None and exc.http_status >= 500:
            raise SideFailed(side, exc.message) from None
        return canon.canonical_error({"code": exc.code})
    except UnsupportedBackend as exc:
        raise SideFailed(side, str(exc)) from None
    return await settled(member, job, result, side)


async def settled(member: FleetMember, job: Job, result: dict[str, Any], side: str) -> dict[str, Any]:
    """A task in `result` followed by `tasks/get` on `member` until it ends or asks for input."""
    if canon.result_kind(result) != "task":
        return canon.canonical_answer(job.method, result)
    task_id = canon.created_task_id(result)
    wait = poll_wait(result)
    while True:
        await asyncio.sleep(wait)
        try:
            got = await ask(member, "tasks/get", {"taskId": task_id}, job)
        except McpError as exc:
            if exc.http_status is not None and exc.http_status >= 500:
                raise SideFailed(side, exc.message) from None
            return canon.canonical_error({"code": exc.code})
        if canon.task_ended(got):
            return canon.canonical_task_end(job.method, got)
        wait = poll_wait(got)


async def ask(member: FleetMember, method: str, params: dict[str, Any], job: Job) -> dict[str, Any]:
    """One request to `member` as a 2026-07-28 client (`SHADOW_META`): straight to a v2-modern
    backend, through the member's own pairing to the others (its answer in v2 shape). Raises `McpError`
    (HTTP 502 for an answer over this comparison's `ANSWER_BOUND`: a candidate's is given up as it is
    read; the primary's, through a pairing whose sessions and tasks the clients share, is read whole
    as theirs are, then measured)."""
    backend = member.backend
    profile = backend.fresh() or await backend.current({"Authorization": job.headers["Authorization"]}
                                                       if "Authorization" in job.headers else None)
    if profile.dialect == "v2-modern":
        return await ModernClient(backend.connector).request(method, params, SHADOW_META, headers=job.headers)
    pairing = member.pairing("v2-modern", profile.dialect)
    bound = ANSWER_BOUND.get()
    primary = member is job.primary
    token = ANSWER_BOUND.set(None) if primary else None
    try:
        reply = await pairing.answer(ModernRequest(method, dict(params), SHADOW_META, job.principal, job.headers))  # type: ignore[union-attr]
    finally:
        if token is not None:
            ANSWER_BOUND.reset(token)
    if primary and bound is not None and answer_size(reply.result) > bound.limit:
        raise too_large(bound, member.name)
    return reply.result
