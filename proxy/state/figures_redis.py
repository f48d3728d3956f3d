"""The status page's figures in the Redis store (`store = "redis://…"`), added into by every
worker of every replica that names the database (docs/operations.md "Status page";
docs/decisions.md §95, §96). Each process flushes its deltas once per `FLUSH_S` in one Lua script
(`_ADD`: atomic, one round trip), never a write per request. The script names its keys itself:
a single Redis server (or one with replicas), not Redis Cluster.

Keys, under `mcp-tasks-proxy:f:` (`<r>` a replica's name):

* `c:<r>:<hour>` — a hash of counts: field `<minute> <key as JSON>` (figures.py), for `COUNT_TTL_S`;
* `cl:<r>` — a hash of client rows: field `[dialect, name, version]` (JSON), value `[requests,
  first_seen_ms, last_seen_ms, backends]`; `cls:<r>` a sorted set of the same fields by last seen
  (at most `MAX_CLIENTS`, none older than `KEEP_CLIENTS_S`);
* `s:<session id>` — a relayed session's client `[name, version]`, for `session_keep_s`
  (`session_idle_ms`), written again by a process that relays it after a quarter of that;
* `e` — a list of the last `RECENT_ERRORS` errors (JSON, with `replica`);
* `r` — a hash: replica → `[since_ms, last_flush_ms]` (a replica silent for `KEEP_CLIENTS_S` is dropped);
* `fl` — a hash: process → `[replica, flushed_ms]`, the time each process last took its deltas
  (by the Redis server's clock, read just before the take):
  a read waits until every live process (its `hb:` heartbeat, redis_store.py) flushed after the
  read began, so that what was answered before it is counted (`flushed`);
* `m:<r>` — a hash of the replica's `/metrics` samples (counters and histograms, added into), and
  `g:<r>` its gauges per process (field `<process> <sample>`), only with `--workers` > 1 (§96).
"""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis

from ..observe.figures import Batch, ClientRow, ReplicaFigures
from .redis_store import PREFIX

F = PREFIX + "f:"
COUNT_TTL_S = 26 * 3600
KEEP_CLIENTS_S = 30 * 86_400
MAX_CLIENTS = 1000
RECENT_ERRORS = 50

_ADD = """
local f, replica, process, now, started = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local b = cjson.decode(ARGV[6])
local ttl, keep, max_clients, session_ms, recent = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
for _, c in ipairs(b.counts) do
  local key = f .. 'c:' .. replica .. ':' .. c[1]
  redis.call('HINCRBY', key, c[2], c[3])
  redis.call('EXPIRE', key, ttl)
end
local cl, cls = f .. 'cl:' .. replica, f .. 'cls:' .. replica
for _, c in ipairs(b.clients) do
  local n, first, last, backends = c[2], c[3], c[4], c[5]
  local old = redis.call('HGET', cl, c[1])
  if old then
    local o = cjson.decode(old)
    n = n + o[1]
    first = math.min(first, o[2])
    last = math.max(last, o[3])
    local seen = {}
    for _, x in ipairs(o[4]) do seen[x] = true end
    for _, x in ipairs(backends) do
      if not seen[x] and #o[4] < 32 then table.insert(o[4], x); seen[x] = true end
    end
    backends = o[4]
  end
  redis.call('HSET', cl, c[1], cjson.encode({n, first, last, backends}))
  redis.call('ZADD', cls, last, c[1])
end
if #b.clients > 0 then
  local excess = redis.call('ZCARD', cls) - max_clients
  if excess > 0 then
    local gone = redis.call('ZPOPMIN', cls, excess)
    for i = 1, #gone, 2 do redis.call('HDEL', cl, gone[i]) end
  end
  local old = redis.call('ZRANGEBYSCORE', cls, '-inf', now - keep * 1000)
  for _, id in ipairs(old) do redis.call('HDEL', cl, id); redis.call('ZREM', cls, id) end
  redis.call('EXPIRE', cl, keep)
  redis.call('EXPIRE', cls, keep)
end
for _, s in ipairs(b.sessions) do
  redis.call('SET', f .. 's:' .. s[1], cjson.encode({s[2], s[3]}), 'PX', session_ms)
end
if #b.errors > 0 then
  for _, e in ipairs(b.errors) do redis.call('RPUSH', f .. 'e', e) end
  redis.call('LTRIM', f .. 'e', -recent, -1)
  redis.call('EXPIRE', f .. 'e', keep)
end
for _, m in ipairs(b.metrics) do redis.call('HINCRBYFLOAT', f .. 'm:' .. replica, m[1], m[2]) end
for _, g in ipairs(b.gauges) do redis.call('HSET', f .. 'g:' .. replica, process .. ' ' .. g[1], g[2]) end
if #b.metrics > 0 then redis.call('EXPIRE', f .. 'm:' .. replica, keep) end
if #b.gauges > 0 then redis.call('EXPIRE', f .. 'g:' .. replica, keep) end
local since = started
local was = redis.call('HGET', f .. 'r', replica)
if was then since = math.min(since, cjson.decode(was)[1]) end
redis.call('HSET', f .. 'r', replica, cjson.encode({since, now}))
redis.call('HSET', f .. 'fl', process, cjson.encode({replica, now}))
return 1
"""


def _decode_list(value: Any) -> list[Any]:
    """A Lua table cjson wrote: an empty one comes back as `{}`."""
    return list(value) if isinstance(value, list) else []


class RedisFigures:
    """The figures in the Redis database of `redis` (the Redis store's client: the same bounds,
    `store_timeout_ms`). Errors of the client are raised (`proxy/observe/lasting.py` keeps the
    batch and tries again). `session_keep_s`: how long a relayed session's client is kept unused."""

    shared = True
    suspends = True
    """`add` waits on Redis: a flush is shielded, so that a cancelled caller does not cut it short."""

    def __init__(self, redis: aioredis.Redis, *, session_keep_s: float):
        self.redis = redis
        self.session_keep_s = session_keep_s
        self._add = redis.register_script(_ADD)

    async def add(self, replica: str, process: str, batch: Batch, started_ms: int, now_ms: int,
                  metrics: list[tuple[str, float]] | None = None, gauges: list[tuple[str, float]] | None = None) -> None:
        """Add one flush of `process` (of `replica`); `metrics` are sample deltas to add, `gauges`
        this process's gauge samples now."""
        body = {
            "counts": [[minute // 60, f"{minute} {json.dumps(key)}", n] for (minute, key), n in batch.counts.items()],
            "clients": [[json.dumps(list(client)), n, first, last, backends]
                        for client, (n, first, last, backends) in batch.clients.items()],
            "sessions": [[sid, name, version] for sid, (name, version) in batch.sessions.items()],
            "errors": [json.dumps({**e, "replica": replica}) for e in batch.errors],
            "metrics": [[name, repr(value)] for name, value in metrics or ()],
            "gauges": [[name, repr(value)] for name, value in gauges or ()],
        }
        await self._add(args=[F, replica, process, now_ms, started_ms, json.dumps(body), COUNT_TTL_S, KEEP_CLIENTS_S, MAX_CLIENTS,
                              int(self.session_keep_s * 1000), RECENT_ERRORS])

    async def read(self, now_ms: int) -> tuple[list[ReplicaFigures], list[dict[str, Any]]]:
        """Every replica's figures of the last day, and the recent errors (oldest first)."""
        known = await self.redis.hgetall(F + "r")
        replicas, gone = [], []
        for name in sorted(known):
            since, last = json.loads(known[name])
            if int(last) < now_ms - KEEP_CLIENTS_S * 1000:  # silent for 30 days: its client rows are gone too
                gone.append(name)
                continue
            replicas.append(ReplicaFigures(name, int(since), int(last)))
        if gone:
            await self.redis.hdel(F + "r", *gone)
        hour = now_ms // 3_600_000
        first = now_ms // 60_000 - 1440 + 1
        async with self.redis.pipeline(transaction=False) as pipe:
            for replica in replicas:
                for h in range(hour - 24, hour + 1):
                    pipe.hgetall(f"{F}c:{replica.name}:{h}")
                pipe.hgetall(f"{F}cl:{replica.name}")
            pipe.lrange(F + "e", 0, -1)
            answers = await pipe.execute()
        for i, replica in enumerate(replicas):
            part = answers[i * 26:(i + 1) * 26]
            for counts in part[:25]:
                for field, n in counts.items():
                    minute, _, key = field.partition(" ")
                    if int(minute) >= first:
                        replica.minutes.setdefault(int(minute), {})[tuple(json.loads(key))] = int(n)
            for field, value in part[25].items():
                dialect, name, version = json.loads(field)
                n, first_ms, last_ms, backends = json.loads(value)
                row = replica.clients[(dialect, name, version)] = ClientRow(int(first_ms), int(n), int(last_ms))
                row.backends = set(_decode_list(backends))
                row.replicas = {replica.name}
        errors = [json.loads(e) for e in answers[-1]]
        return replicas, errors

    async def session_client(self, session_id: str) -> tuple[str, str] | None:
        raw = await self.redis.get(F + "s:" + session_id)
        if raw is None:
            return None
        name, version = json.loads(raw)
        return name, version

    async def clock_ms(self) -> int:
        """The Redis server's time, Unix ms: the one clock of every flush stamp (`f:fl`)."""
        seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def keep_session(self, session_id: str, client: tuple[str, str]) -> None:
        """Write a relayed session's client now (`Lasting.session_begun`)."""
        await self.redis.set(F + "s:" + session_id, json.dumps(list(client)), px=int(self.session_keep_s * 1000))

    async def flushed(self) -> dict[str, tuple[str, int]]:
        """Each live process's replica and when it last took its deltas (Unix ms); the fields of
        processes whose heartbeat is gone are deleted."""
        stamps = await self.redis.hgetall(F + "fl")
        if not stamps:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for process in stamps:
                pipe.exists(PREFIX + "hb:" + process)
            alive = await pipe.execute()
        dead = [process for process, live in zip(stamps, alive, strict=True) if not live]
        if dead:
            await self.redis.hdel(F + "fl", *dead)
        return {process: (json.loads(raw)[0], int(json.loads(raw)[1])) for (process, raw), live in zip(stamps.items(), alive, strict=True)
                if live}

    async def metrics(self, replica: str, processes: set[str]) -> tuple[dict[str, float], dict[str, float]]:
        """The replica's `/metrics` samples added up, and its gauges summed over `processes` (the live ones)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(F + "m:" + replica)
            pipe.hgetall(F + "g:" + replica)
            counters, gauges = await pipe.execute()
        summed: dict[str, float] = {}
        stale = []
        for field, value in gauges.items():
            process, _, sample = field.partition(" ")
            if process in processes:
                summed[sample] = summed.get(sample, 0.0) + float(value)
            else:
                stale.append(field)
        if stale:
            await self.redis.hdel(F + "g:" + replica, *stale)
        return {name: float(value) for name, value in counters.items()}, summed

    async def done(self, process: str) -> None:
        """The process stops (its last flush made): reads no longer wait for it."""
        await self.redis.hdel(F + "fl", process)
