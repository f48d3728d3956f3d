"""`TaskStateStore` in Redis (`store = "redis://host:port/db"`): the state only a proxy knows, shared
by every replica and worker process that names the same database (docs/decisions.md, "A shared
store"; the interface is `proxy/state/store.py`).

Keys (all under `mcp-tasks-proxy:`; every one has a TTL set by Redis, never by a timer here):

* `o:<ref>` — a terminal outcome (JSON), for its `keep_s`.
* `i:<ref>` — a hash of one task's captured requests: `r:<key>` (JSON: number, upstream id,
  request), `u:<upstream id>` (that id was held: never captured again), `c:<key>` (claimed by the
  process named). For the task's `keep_s`, renewed by each capture. `n:<ref>` holds the task's
  next key number for twice that, so keys are not reused when the hash expired first.
* `s:<session id>` — a proxy session (JSON), for `session_idle_ms`, renewed by use.
* `e:<backend>:<task id>` — a registry entry (JSON), and `eo:<backend>:<owner>`, a sorted set of the
  owner's task ids by order, renewed with each entry; `ord:<backend>` the order counter.
* `hb:<process>` — a process's heartbeat, renewed every `HEARTBEAT_S`, gone `HEARTBEAT_TTL_S`
  after the process died: a claim held by a dead process counts as released.
* `run` — a token the first process writes and every heartbeat reads (and renews, `RUN_TTL_S`):
  gone or changed, or Redis' own `run_id` changed (a restart), the database may have lost what it
  held, and each process puts back the questions it captured (`when_lost`, docs/decisions.md §77).

Bounds (docs/decisions.md §76): every operation waits at most `timeout_ms` (redis-py's
`socket_timeout` and `socket_connect_timeout`; `store_timeout_ms`), then raises
`StoreUnreachable` (-32603, HTTP 503, naming the store); `health` says whether the store answers
(`/readyz` reads it), its changes logged once each way (`proxy/state/health.py`).

Atomicity: a capture and a claim are each one Lua script (of two replicas racing, one wins: one
key per upstream request, one answer per key).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis

from translators import jsonrpc
from translators.model import CanonicalTask, InputRequest, TaskError
from translators.sealing import TaskRef

from .health import StoreHealth, StoreTrouble, display_url
from .held_tasks import HeldTaskStore, RedisHeldStore
from .store import CapturedInput, Entry, SessionRecord

log = logging.getLogger(__name__)

PREFIX = "mcp-tasks-proxy:"
HEARTBEAT_S = 1.0
"""How often a process renews its heartbeat key."""
HEARTBEAT_TTL_S = 5
"""A heartbeat key's lifetime: a process silent this long is taken for dead."""
ORDER_TTL_S = 30 * 86400
"""Lifetime of a backend's entry-order counter (renewed by each use)."""
RUN_TTL_S = 30 * 86400
"""Lifetime of the `run` token (renewed by every heartbeat)."""
TIMEOUT_MS = 2000
"""The default bound on one operation (`store_timeout_ms`)."""
UNREACHABLE = (OSError, aioredis.ConnectionError, aioredis.TimeoutError)
"""The client's errors that mean the store could not be reached (refused, reset, no answer in time)."""

_CAPTURE = """
local hash, counter = KEYS[1], KEYS[2]
local uid, body, keep, start = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('HEXISTS', hash, 'u:' .. uid) == 1 then return false end
local number = tonumber(redis.call('GET', counter) or '0')
if number < 1 then number = start end
redis.call('SET', counter, number + 1, 'EX', keep * 2)
local key = ARGV[5] .. number  -- translators.inputs.input_key
redis.call('HSET', hash, 'u:' .. uid, key, 'r:' .. key, cjson.encode({number, uid, body}))
redis.call('EXPIRE', hash, keep)
return key
"""

_RESTORE = """
local hash, counter = KEYS[1], KEYS[2]
local uid, body, keep, number, key = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
if redis.call('HEXISTS', hash, 'u:' .. uid) == 1 then return 0 end
local next = tonumber(redis.call('GET', counter) or '0')
if next <= number then next = number + 1 end
redis.call('SET', counter, next, 'EX', keep * 2)
redis.call('HSET', hash, 'u:' .. uid, key, 'r:' .. key, cjson.encode({number, uid, body}))
redis.call('EXPIRE', hash, keep)
return 1
"""

_CLAIM = """
local hash, key, me = KEYS[1], ARGV[1], ARGV[2]
local body = redis.call('HGET', hash, 'r:' .. key)
if not body then return false end
local holder = redis.call('HGET', hash, 'c:' .. key)
if holder and redis.call('EXISTS', ARGV[3] .. holder) == 1 then return false end
redis.call('HSET', hash, 'c:' .. key, me)
return body
"""


def _ref(ref: TaskRef) -> str:
    return json.dumps([ref.backend, ref.session, ref.task], separators=(",", ":"))


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


Result = TypeVar("Result")


def _guarded(method: Callable[..., Awaitable[Result]], *, writes: bool = False) -> Callable[..., Awaitable[Result]]:
    """`method` of the store, raising `StoreUnreachable` when Redis cannot be reached (at once
    while it was just found so) and `StoreRefused` when it refuses to write, and noting in
    `health` whether it answered (and, for a method that `writes`, whether it wrote)."""

    @functools.wraps(method)
    async def guarded(self: RedisTaskStore, *args: Any, **kwargs: Any) -> Result:
        refusal = self.health.before()
        if refusal is not None:
            raise refusal
        try:
            result = await method(self, *args, **kwargs)
        except UNREACHABLE as exc:
            raise self.health.failed(exc) from None
        except aioredis.ResponseError as exc:
            reason = write_refusal(exc)
            if reason is None:
                raise
            raise self.health.refused(reason) from None
        self.health.answered(wrote=writes)
        return result

    return guarded


def _writing(method: Callable[..., Awaitable[Result]]) -> Callable[..., Awaitable[Result]]:
    """`_guarded` for a method that adds to what Redis holds (a write Redis refuses when full;
    one that only deletes is taken even then, and does not show that writes are taken again)."""
    return _guarded(method, writes=True)


REFUSAL_CODES = ("OOM", "READONLY", "MISCONF", "NOREPLICAS")
"""Redis's error codes for a write it refuses while it answers (out of memory under
`noeviction`, a read-only replica, a failing snapshot, too few replicas for `min-replicas`)."""


def write_refusal(exc: Exception) -> str | None:
    """The reason Redis gave for refusing a write (its code and words, e.g. "OOM command not
    allowed when used memory > 'maxmemory'."), None for any other error. In a pipeline or a script
    the refusal is wrapped in other words; the reason is taken from where the code begins."""
    text = str(exc)
    if "caused error: " in text:  # a pipeline's: 'Command # 1 (SET k v) of pipeline caused error: ("<words>",)'
        text = text.split("caused error: ", 1)[1].strip("()\"', ")
    if isinstance(exc, (aioredis.OutOfMemoryError, aioredis.ReadOnlyError)) and not text.startswith(REFUSAL_CODES):
        code = "OOM" if isinstance(exc, aioredis.OutOfMemoryError) else "READONLY"
        text = f"{code} {text}"
    for code in REFUSAL_CODES:
        at = text.find(code + " ")
        if at >= 0 and (at == 0 or not text[at - 1].isalnum()):
            return text[at:].splitlines()[0].strip()
    return None


PRUNE_AT = 1024
"""Size of the map of kept outcomes (`RedisTaskStore._outcomes`) beyond which expired ones are dropped."""

class RedisTaskStore:
    """`TaskStateStore` in the Redis database `url` (`redis://host:port/db`). Opening makes no
    connection; the first call does. Every operation waits at most `timeout_ms` (ms), then raises
    `StoreUnreachable` (docs/decisions.md §76). `process` names this process in claims and its
    heartbeat (random by default)."""

    shared = True

    def __init__(self, url: str, *, process: str | None = None, timeout_ms: int = TIMEOUT_MS):
        self.url = url
        self.process = process or secrets.token_hex(8)
        self.health = StoreHealth(display_url(url), timeout_ms)
        self.redis: aioredis.Redis = aioredis.Redis.from_url(url, decode_responses=True, socket_timeout=timeout_ms / 1000,
                                                             socket_connect_timeout=timeout_ms / 1000)
        self._capture = self.redis.register_script(_CAPTURE)
        self._restore = self.redis.register_script(_RESTORE)
        self._claim = self.redis.register_script(_CLAIM)
        self._outcomes: dict[TaskRef, float] = {}
        """Outcomes this process kept and their deadlines (monotonic): `outcome_count` answers from it.
        Expired ones are dropped when it is asked, and whenever the map has doubled since the last
        drop: without a metrics scrape it would otherwise hold every task of the last `keep_s`."""
        self._prune_at = PRUNE_AT
        self._run: tuple[str, str] | None = None
        """(the `run` token, Redis' `run_id`) this process last saw; None before the first heartbeat."""
        self._when_lost: list[Callable[[], Awaitable[int]]] = []
        self._loss: str | None = None
        self._held = RedisHeldStore(self)
        """How the database lost its data, while the questions held here are not all put back yet."""

    def when_lost(self, restore: Callable[[], Awaitable[int]]) -> None:
        """Call `restore()` (it returns how many questions it put back) whenever the database may
        have lost what it held: Redis restarted (its `run_id` changed) or the `run` token is gone
        (docs/decisions.md §77)."""
        self._when_lost.append(restore)

    async def maintain(self) -> None:
        """Run until cancelled: renew this process's heartbeat every `HEARTBEAT_S` (which also
        notes whether the store answers, and whether it lost its data)."""
        while True:
            with contextlib.suppress(StoreTrouble):  # logged once per outage (or refusal) by `health`
                await self.heartbeat()
            await asyncio.sleep(HEARTBEAT_S)

    async def heartbeat(self) -> None:
        """Renew this process's heartbeat once (also done by `maintain`), and check that the
        database still holds what it held (`when_lost`). Raises `StoreUnreachable`, or
        `StoreRefused` when Redis refuses the heartbeat's write."""
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.set(PREFIX + "hb:" + self.process, "1", ex=HEARTBEAT_TTL_S)
                pipe.set(PREFIX + "run", secrets.token_hex(8), nx=True, ex=RUN_TTL_S)
                pipe.get(PREFIX + "run")
                pipe.expire(PREFIX + "run", RUN_TTL_S)
                pipe.info("server")
                beat, _, token, _, info = await pipe.execute(raise_on_error=False)
        except UNREACHABLE as exc:
            raise self.health.failed(exc) from None
        if isinstance(beat, Exception):
            reason = write_refusal(beat)
            raise beat if reason is None else self.health.refused(reason)
        self.health.answered()
        # A Redis that refuses INFO (a managed service may) is followed by the run token alone.
        run = (str(token), str(info.get("run_id", "")) if isinstance(info, dict) else "")
        previous, self._run = self._run, run
        if previous is not None and previous != run:
            self._loss = "Redis restarted" if previous[1] != run[1] else "its data is gone"
        if self._loss is not None:
            restored = 0
            for restore in self._when_lost:
                restored += await restore()  # StoreUnreachable: tried again on the next heartbeat
            log.warning("task state store %s: %s; %d captured question(s) held by this process put back",
                        self.health.name, self._loss, restored)
            self._loss = None

    @_guarded
    async def alive(self, process: str) -> bool:
        """Whether the process `process` renewed its heartbeat within `HEARTBEAT_TTL_S`."""
        return bool(await self.redis.exists(PREFIX + "hb:" + process))

    @_writing
    async def restore_input(self, ref: TaskRef, captured: CapturedInput, keep_s: float) -> bool:
        """Put back a request for input this process captured, under its own key, unless the
        store still knows its upstream id (held, or answered): whether it was put back. The task's
        key counter is raised past it, so keys are still never reused (docs/decisions.md §77)."""
        number = int(captured.key.rpartition("-")[2])
        done = await self._restore(keys=[PREFIX + "i:" + _ref(ref), PREFIX + "n:" + _ref(ref)],
                                   args=[json.dumps(captured.upstream_id), captured.request.model_dump_json(),
                                         max(1, int(keep_s + 0.999)), number, captured.key])
        return bool(done)

    async def close(self) -> None:
        with contextlib.suppress(OSError, aioredis.RedisError):
            await self.redis.delete(PREFIX + "hb:" + self.process)
        await self.redis.aclose()

    # -- terminal outcomes ---------------------------------------------------------------------------

    @_guarded
    async def outcome(self, ref: TaskRef) -> CanonicalTask | None:
        body = await self.redis.get(PREFIX + "o:" + _ref(ref))
        return CanonicalTask.model_validate_json(body) if body is not None else None

    @_writing
    async def keep_outcome(self, ref: TaskRef, task: CanonicalTask, keep_s: float) -> None:
        await self.redis.set(PREFIX + "o:" + _ref(ref), task.model_dump_json(), px=_ms(keep_s))
        self._outcomes[ref] = time.monotonic() + keep_s
        if len(self._outcomes) > self._prune_at:
            self._prune()

    def _prune(self) -> None:
        now = time.monotonic()
        for ref in [r for r, deadline in self._outcomes.items() if deadline <= now]:
            del self._outcomes[ref]
        self._prune_at = max(PRUNE_AT, 2 * len(self._outcomes))

    @_guarded
    async def forget_outcome(self, ref: TaskRef) -> None:
        await self.redis.delete(PREFIX + "o:" + _ref(ref))
        self._outcomes.pop(ref, None)

    def outcome_count(self, backend: str) -> int:
        """Outcomes of `backend` this process kept and that are not expired (another process's
        are counted by it)."""
        self._prune()
        return sum(1 for ref in self._outcomes if ref.backend == backend)

    # -- captured requests for input -------------------------------------------------------------

    @_writing
    async def capture_input(self, ref: TaskRef, upstream_id: jsonrpc.RequestId, request: InputRequest, keep_s: float) -> str | None:
        key = await self._capture(keys=[PREFIX + "i:" + _ref(ref), PREFIX + "n:" + _ref(ref)],
                                  args=[json.dumps(upstream_id), request.model_dump_json(), max(1, int(keep_s + 0.999)), 1, "input-"])
        return key if isinstance(key, str) else None

    @_guarded
    async def inputs(self, ref: TaskRef) -> dict[str, CapturedInput]:
        fields = await self.redis.hgetall(PREFIX + "i:" + _ref(ref))
        held = []
        for name, value in fields.items():
            if name.startswith("r:"):
                number, uid, body = json.loads(value)
                held.append((number, CapturedInput(name[2:], json.loads(uid), InputRequest.model_validate_json(body))))
        return {captured.key: captured for _, captured in sorted(held, key=lambda item: item[0])}

    @_guarded
    async def seen_ids(self, ref: TaskRef) -> set[jsonrpc.RequestId]:
        """The upstream request ids of `ref` the store knows it held (outstanding or answered)."""
        names = await self.redis.hkeys(PREFIX + "i:" + _ref(ref))
        return {json.loads(name[2:]) for name in names if name.startswith("u:")}

    @_guarded
    async def claim_input(self, ref: TaskRef, key: str) -> CapturedInput | None:
        value = await self._claim(keys=[PREFIX + "i:" + _ref(ref)], args=[key, self.process, PREFIX + "hb:"])
        if not isinstance(value, str):
            return None
        _, uid, body = json.loads(value)
        return CapturedInput(key, json.loads(uid), InputRequest.model_validate_json(body))

    @_guarded
    async def release_input(self, ref: TaskRef, key: str) -> None:
        await self.redis.hdel(PREFIX + "i:" + _ref(ref), "c:" + key)

    @_guarded
    async def answered(self, ref: TaskRef, key: str) -> None:
        await self.redis.hdel(PREFIX + "i:" + _ref(ref), "r:" + key, "c:" + key)

    @_guarded
    async def drop_inputs(self, ref: TaskRef) -> None:
        await self.redis.delete(PREFIX + "i:" + _ref(ref))

    # -- the proxy's own sessions ------------------------------------------------------------------

    def held_tasks(self) -> HeldTaskStore:
        return self._held

    @_guarded
    async def guard(self, work: Callable[[], Awaitable[Result]]) -> Result:
        """`work()` under the store's bound and health (for `proxy/state/held_tasks.py`)."""
        return await work()

    @_writing
    async def guard_write(self, work: Callable[[], Awaitable[Result]]) -> Result:
        """`guard` for work that adds to what Redis holds."""
        return await work()

    @_writing
    async def keep_session(self, record: SessionRecord, keep_s: float) -> None:
        body = json.dumps({"principal": record.principal, "face": record.face, "backend": record.backend,
                           "params": record.params, "protocol_version": record.protocol_version})
        await self.redis.set(PREFIX + "s:" + record.session_id, body, px=_ms(keep_s))

    @_guarded
    async def session(self, session_id: str) -> SessionRecord | None:
        raw = await self.redis.get(PREFIX + "s:" + session_id)
        if raw is None:
            return None
        body = json.loads(raw)
        return SessionRecord(session_id, body["principal"], body["face"], body["backend"], body["params"], body["protocol_version"])

    @_guarded
    async def forget_session(self, session_id: str) -> None:
        await self.redis.delete(PREFIX + "s:" + session_id)

    # -- the v1 face's task registry ---------------------------------------------------------------

    @_writing
    async def keep_entry(self, backend: str, entry: Entry, keep_s: float) -> None:
        if entry.held_expires_at is not None:
            keep_s = min(keep_s, entry.held_expires_at - time.time())
        body = json.dumps({"ref": [entry.ref.backend, entry.ref.session, entry.ref.task], "session_id": entry.session_id,
                           "owner": entry.owner, "order": entry.order,
                           "last": entry.last.model_dump(mode="json"), "cancelled": entry.cancelled,
                           "failure": entry.failure.model_dump(mode="json") if entry.failure is not None else None,
                           "asked": sorted(entry.asked), "held_expires_at": entry.held_expires_at})
        owned = f"{PREFIX}eo:{backend}:{entry.owner}"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(f"{PREFIX}e:{backend}:{entry.task_id}", body, px=_ms(keep_s))
            pipe.zadd(owned, {entry.task_id: entry.order})
            pipe.pexpire(owned, _ms(keep_s), gt=True)
            pipe.pexpire(owned, _ms(keep_s), nx=True)
            await pipe.execute()

    @staticmethod
    def _entry(task_id: str, raw: str) -> Entry:
        body = json.loads(raw)
        failure = body["failure"]
        return Entry(task_id, TaskRef(*body["ref"]), body["owner"], body["order"], CanonicalTask.model_validate(body["last"]),
                     body["session_id"], cancelled=body["cancelled"],
                     failure=TaskError.model_validate(failure) if failure is not None else None,
                     asked=set(body["asked"]), held_expires_at=body["held_expires_at"])

    @_guarded
    async def entry(self, backend: str, task_id: str) -> Entry | None:
        raw = await self.redis.get(f"{PREFIX}e:{backend}:{task_id}")
        return self._entry(task_id, raw) if raw is not None else None

    @_guarded
    async def entries_of(self, backend: str, owner: str) -> list[Entry]:
        owned = f"{PREFIX}eo:{backend}:{owner}"
        ids = await self.redis.zrange(owned, 0, -1)
        if not ids:
            return []
        raws = await self.redis.mget([f"{PREFIX}e:{backend}:{task_id}" for task_id in ids])
        gone = [task_id for task_id, raw in zip(ids, raws, strict=False) if raw is None]
        if gone:
            await self.redis.zrem(owned, *gone)
        return [self._entry(task_id, raw) for task_id, raw in zip(ids, raws, strict=False) if raw is not None]

    @_guarded
    async def forget_entry(self, backend: str, task_id: str) -> None:
        raw = await self.redis.getdel(f"{PREFIX}e:{backend}:{task_id}")
        if raw is not None:
            await self.redis.zrem(f"{PREFIX}eo:{backend}:{json.loads(raw)['owner']}", task_id)

    @_writing
    async def next_order(self, backend: str) -> int:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.incr(f"{PREFIX}ord:{backend}")
            pipe.expire(f"{PREFIX}ord:{backend}", ORDER_TTL_S)
            order, _ = await pipe.execute()
        return int(order)

    async def key_count(self) -> int:
        """Keys of this proxy in the database now (for the soak's bound)."""
        count = 0
        async for _ in self.redis.scan_iter(match=PREFIX + "*", count=1000):
            count += 1
        return count

    # -- messages between processes ------------------------------------------------------------------

    @_guarded
    async def publish(self, channel: str, payload: dict[str, Any]) -> int:
        """Send `payload` (JSON) to every process listening on `channel`; how many listen."""
        return int(await self.redis.publish(PREFIX + channel, json.dumps(payload)))

    async def listen(self, channel: str, deliver: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """Run until cancelled: `deliver` each payload published on `channel` (reconnecting after
        a lost connection, which counts as the store unreachable in `health`; what was published
        meanwhile is lost, as pub/sub is). Waits for messages `HEARTBEAT_S` at a time, so that
        `timeout_ms` bounds only the store's answers, never the silence of the channel."""
        while True:
            try:
                async with self.redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(PREFIX + channel)
                    while True:
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=HEARTBEAT_S)
                        if message is None or message.get("type") != "message":
                            continue
                        try:
                            await deliver(json.loads(message["data"]))
                        except Exception:
                            log.exception("delivering a message from %s", channel)
            except UNREACHABLE as exc:
                self.health.failed(exc)  # logged once per outage
                await asyncio.sleep(HEARTBEAT_S)
