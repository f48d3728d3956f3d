"""The shadow mirror (docs/behaviour.md §8 "Shadow", docs/decisions.md §89-§93): a candidate backend
(`shadow_of` on its `[[upstream]]`) is asked what its primary was asked, after the client has its
answer, and the two answers are compared in canonical form (`translators/shadow.py`).

    entry ── answer written to the client ──► Shadowing.offer ──► candidate's bounded queue ──► worker
                                                 (cheap: a set lookup,                       asks the candidate
                                                  a sample, put_nowait;                      (and the primary, when
                                                  full: counted "dropped")                   the client's answer was
                                                                                             not held whole), follows
                                                                                             tasks, compares, counts

What is mirrored (`translators.shadow.MIRRORED`): the first page of listings, `resources/read`,
`prompts/get`, and `tools/call` of a tool the PRIMARY's `tools/list` annotates `readOnlyHint: true`
or the candidate's `shadow_tools` names; never anything else. A candidate is asked as a 2026-07-28
client that declares the tasks extension and no elicitation, sampling or roots: a question it asks
is never put to anyone (its outcome is `{"asks": [...]}`), and it never sees a client stream.

Outcomes, counted in `mcp_tasks_proxy_shadow_total{backend, method, tool, outcome}` (backend: the
candidate) and shown on the status page: "match", "differ" (one log line each), "candidate_error"
(the candidate could not be asked, or gave no MCP answer), "primary_error" (the primary, asked again,
could not be), "timeout" (`shadow_timeout_ms`, tasks followed included), "dropped" (the queue was
full) and "too_large" (an answer over `shadow_max_body_bytes`: one the comparison reads alone, a
candidate's, is not read on, see `proxy/upstream/answer_bound.py`; one that comes by paths the
clients share, the client's own or a primary's through its pairing, is measured).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import logging
import random
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import Counter

from translators import shadow as canon
from translators.errors import McpError

from ..config import Settings, Upstream
from ..eventloop import cancel_and_wait
from ..logs import REQUEST_ID
from ..observe.metric_totals import stored_samples
from ..upstream.answer_bound import ANSWER_BOUND, ReadBound
from ..upstream.endpoint import Endpoint
from .ask import answer_size, both, held_outcome, relayed_answer
from .process import ShadowProcess
from .sides import Job, SideFailed, ask, outcome, primary_outcome

if TYPE_CHECKING:
    from ..fleet import Fleet, FleetMember
    from ..metrics import Metrics

log = logging.getLogger(__name__)

TOOLS_TTL_S = 60.0
"""How long a primary's read-only tools are trusted before its `tools/list` is asked again."""
TOOLS_PAGES = 10
"""The most `tools/list` pages read for the read-only tools."""
LAST_DIFFERENCES = 20
MAX_TOOL_LABELS = 100
"""Distinct tool label values a candidate counts under; more fold into "other"."""
OUTCOMES = ("match", "differ", "candidate_error", "primary_error", "timeout", "dropped", "too_large")


COUNTER = "mcp_tasks_proxy_shadow"
"""The comparisons' counter family (`Shadowing.count`); its samples are `<COUNTER>_total`."""


def summed_counts(counters: Mapping[str, float]) -> dict[str, dict[tuple[str, str], dict[str, int]]]:
    """The comparisons in `counters`, the `/metrics` counter samples added up over the workers as
    the store keeps them (`proxy/observe/metric_totals.py` `stored_samples`):
    candidate → (method, tool) → outcome → count, every outcome present, as `_Stats.counts`."""
    summed: dict[str, dict[tuple[str, str], dict[str, int]]] = {}
    for family, sample, labels, value in stored_samples(counters):
        if family != COUNTER or sample != COUNTER + "_total" or labels.get("outcome") not in OUTCOMES:
            continue
        counts = summed.setdefault(labels["backend"], {}).setdefault((labels["method"], labels["tool"]), dict.fromkeys(OUTCOMES, 0))
        counts[labels["outcome"]] += int(value)
    return summed


@dataclass
class _Stats:
    counts: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    last: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=LAST_DIFFERENCES))


class Mirror:
    """One candidate's bounded queue and workers (`shadow_queue`, `shadow_concurrency`)."""

    def __init__(self, owner: Shadowing, config: Upstream):
        self.owner = owner
        self.name = config.name
        self.config = config
        self.queue: asyncio.Queue[Job] = asyncio.Queue(maxsize=config.shadow_queue)
        self.workers: list[asyncio.Task[None]] = []
        self.ignore = [canon.parse_path(p) for p in config.shadow_ignore]
        self.stats = _Stats()
        self.sent = 0
        """Jobs with the shadow process, not answered yet (they take room in the queue, `shadow_queue`
        + `shadow_concurrency` jobs in all)."""

    def offer(self, job: Job) -> None:
        if self.sent and self.sent + self.queue.qsize() >= self.config.shadow_queue + self.config.shadow_concurrency:
            self.owner.count(self, job.method, canon.tool_name(job.method, job.params), "dropped")
            return
        try:
            if self.owner.sent_away(self, job):
                return
        except Exception:  # a proxy bug must not reach the client: compared here instead
            log.exception("shadow %s: sending %s to the shadow process failed", self.name, job.method)
        if not self.workers:  # each in a context of its own, not the request's that started it
            loop = asyncio.get_running_loop()
            self.workers = [loop.create_task(self._work(), context=contextvars.Context())
                            for _ in range(self.config.shadow_concurrency)]
        try:
            self.queue.put_nowait(job)
        except asyncio.QueueFull:
            self.owner.count(self, job.method, canon.tool_name(job.method, job.params), "dropped")

    async def _work(self) -> None:
        while True:
            job = await self.queue.get()
            await asyncio.sleep(0)  # what the clients sent meanwhile is read first
            REQUEST_ID.set(job.request_id)  # the worker's own context: its lines name the request mirrored
            bound = ReadBound(self.config.shadow_max_body_bytes)
            ANSWER_BOUND.set(bound)  # every answer read for this comparison (proxy/upstream/answer_bound.py)
            try:
                await self.owner.run(self, job, bound)
            except asyncio.CancelledError:
                raise
            except Exception:  # a proxy bug must not stop the mirror
                log.exception("shadow %s: comparing %s failed", self.name, job.method)

    async def close(self) -> None:
        for worker in self.workers:
            worker.cancel()
        for worker in self.workers:
            await cancel_and_wait(worker)
        self.workers = []


class Shadowing:
    """Every candidate's mirror in one application; `offer` is called by the entry after an answer."""

    def __init__(self, settings: Settings, fleet: Fleet, metrics: Metrics):
        self.settings = settings
        self.fleet = fleet
        self._seen: list[Upstream] | None = None
        self._by_primary: dict[str, list[Upstream]] = {}
        self.mirrors: dict[str, Mirror] = {}
        self._tools: dict[str, tuple[float, frozenset[str], frozenset[str]]] = {}
        """primary name → (when learnt, read-only tools, listed tools)."""
        self._counter: Counter | None = None
        if getattr(metrics, "registry", None) is not None:
            self._counter = Counter(COUNTER, "Shadow comparisons by candidate backend, method, tool and outcome",
                                    ["backend", "method", "tool", "outcome"], registry=metrics.registry)
        self._tool_labels: dict[str, set[str]] = {}
        self._children: dict[tuple[str, str, str, str], Any] = {}
        """Pre-bound counter children (bounded: backends, `MIRRORED`, tool labels, `OUTCOMES`)."""
        self.process = ShadowProcess(self._answered, self._lost)
        """Where the comparisons of held answers with v2-modern candidates run (docs/decisions.md §125)."""
        self._ids = itertools.count(1)
        self._sent: dict[int, tuple[Mirror, str, str | None, str, str | None]] = {}
        """Job id → (mirror, method, tool, primary's name, request id) of the jobs with the shadow process."""

    # -- the entry's side: cheap ----------------------------------------------------------------------

    def _candidates(self, primary: str) -> list[Upstream]:
        upstream = self.settings.upstream
        if upstream is not self._seen:  # a reload replaced the list (proxy/fleet_config.py)
            self._seen = upstream
            self._by_primary = {}
            for config in upstream:
                if config.shadow_of is not None:
                    self._by_primary.setdefault(config.shadow_of, []).append(config)
            shadows = {config.name for configs in self._by_primary.values() for config in configs}
            for name in [name for name in self.mirrors if name not in shadows]:  # removed by the reload
                for worker in self.mirrors.pop(name).workers:
                    worker.cancel()
        return self._by_primary.get(primary, [])

    def wants(self, primary: str, method: str | None) -> bool:
        """Whether an answer of `primary` to `method` may be mirrored (before any parsing)."""
        return method in canon.MIRRORED and bool(self._candidates(primary))

    def wants_any(self, method: str | None) -> bool:
        """Whether an answer to `method` may be mirrored for some backend (before its backend is known)."""
        if method not in canon.MIRRORED:
            return False
        self._candidates("")
        return bool(self._by_primary)

    def offer(self, primary: FleetMember, method: str, params: Mapping[str, Any], principal: str, headers: dict[str, str],
              answer: dict[str, Any] | None, *, follow: bool = True) -> None:
        """Queue the comparison of `primary`'s answer (see `Job`) with each of its candidates'
        (sampled by `shadow_percent`); never waits, never raises."""
        if not canon.mirrorable(method, params):
            return
        request_id = REQUEST_ID.get()
        for config in self._candidates(primary.name):
            if config.shadow_percent < 100 and random.random() * 100 >= config.shadow_percent:
                continue
            mirror = self.mirrors.get(config.name)
            if mirror is None:
                mirror = self.mirrors[config.name] = Mirror(self, config)
            mirror.config = config  # after a reload: an equal table (its shadow keys cannot change)
            mirror.offer(Job(primary, method, canon.mirror_params(params), principal, headers, answer, follow,
                             request_id))

    # -- the worker's side ----------------------------------------------------------------------------

    async def run(self, mirror: Mirror, job: Job, bound: ReadBound) -> None:
        tool = canon.tool_name(job.method, job.params)
        candidate = self.fleet.get(mirror.name)
        if candidate is None:  # removed by a reload
            return
        try:
            async with asyncio.timeout(mirror.config.shadow_timeout_ms / 1000):
                if job.method == "tools/call" and tool not in mirror.config.shadow_tools:
                    read_only = await self._read_only(job)
                    if (read_only is None or tool not in read_only) and bound.over is None:
                        return  # never asked: not annotated read-only by the primary, nor listed
                if bound.over is None and answer_size(job.answer) > bound.limit:
                    bound.over = job.primary.name  # the client's answer
                if bound.over is not None:  # that, or the primary's tools/list
                    raise SideFailed("primary", "an answer over shadow_max_body_bytes")
                held = held_outcome(job.method, job.answer)
                if held is not None:  # the client's answer, final: only the candidate is asked
                    primary, theirs = held, await outcome(candidate, job, "candidate")
                else:
                    primary, theirs = await both(primary_outcome(job), outcome(candidate, job, "candidate"))
        except TimeoutError:
            if bound.over is None:
                self.count(mirror, job.method, tool, "timeout")
                return
        except SideFailed as exc:
            if bound.over is None:
                log.info("shadow %s: %s %s: the %s could not be asked: %s", mirror.name, job.method, tool or "", exc.side,
                         exc.reason)
                self.count(mirror, job.method, tool, f"{exc.side}_error")
                return
        if bound.over is not None:  # whatever a pairing made of the answer it gave up
            self._too_large(mirror, job.method, tool, bound.over)
            return
        found = canon.differences(primary, theirs, mirror.ignore)
        if job.method == "tools/list" and "result" in primary:
            self._learn(job.primary.name, primary["result"])
        if not found:
            self.count(mirror, job.method, tool, "match")
            return
        self._differs(mirror, job.primary.name, job.method, tool, canon.compact_diff(found), [where for where, _p, _c in found])

    def _differs(self, mirror: Mirror, primary: str, method: str, tool: str | None, diff: str, paths: list[str]) -> None:
        log.warning("shadow %s differs from %s on %s%s: %s", mirror.name, primary, method, f" {tool}" if tool else "",
                    diff.replace("\n", "; "))
        mirror.stats.last.appendleft({"at_ms": int(time.time() * 1000), "method": method, "tool": tool, "diff": diff,
                                      "paths": paths})
        self.count(mirror, method, tool, "differ")

    def _too_large(self, mirror: Mirror, method: str, tool: str | None, backend: str) -> None:
        log.info("shadow %s: %s %s: not compared: %s's answer is over shadow_max_body_bytes (%d)", mirror.name, method,
                 tool or "", backend, mirror.config.shadow_max_body_bytes)
        self.count(mirror, method, tool, "too_large")

    # -- the shadow process's side (proxy/shadow/process.py) ---------------------------------------------

    def sent_away(self, mirror: Mirror, job: Job) -> bool:
        """Send `job` to the shadow process when it can be compared there: the primary's answer held
        and final, the candidate a v2-modern backend over HTTP whose profile is fresh, and, for a
        `tools/call`, the primary's read-only tools known (else the job stays in this event loop,
        which asks for them). True when it was sent, or needs no asking at all."""
        if not self.process.running:
            self.process.start_soon()
            return False
        candidate = self.fleet.get(mirror.name)
        if candidate is None:
            return True  # removed by a reload
        profile = candidate.backend.fresh()
        connector = candidate.backend.connector
        if profile is None or profile.dialect != "v2-modern" or type(connector) is not Endpoint or connector.request_options:
            return False  # (a candidate reached with TLS files or a proxy is asked from this event loop)
        tool = canon.tool_name(job.method, job.params)
        if job.method == "tools/call" and tool not in mirror.config.shadow_tools:
            known = self._tools.get(job.primary.name)
            if known is None or time.monotonic() - known[0] >= TOOLS_TTL_S:
                return False
            if tool not in known[1]:
                return True  # never asked: not annotated read-only by the primary, nor listed
        answer, limit = job.answer, mirror.config.shadow_max_body_bytes
        if isinstance(answer, bytes):
            if len(answer) > limit:
                self._too_large(mirror, job.method, tool, job.primary.name)
                return True
            answer = relayed_answer(answer)
            if answer is None:
                return False
            job.answer = answer
        if not isinstance(answer, dict) or canon.result_kind(answer) != "final":
            return False  # a task to follow on the primary, or a question: in this event loop
        job_id = next(self._ids)
        candidate_config = {"name": mirror.name, "url": connector.url, "extra_headers": connector.extra_headers,
                            "concurrency": mirror.config.shadow_concurrency, "timeout_s": mirror.config.shadow_timeout_ms / 1000,
                            "ignore": mirror.config.shadow_ignore, "max_body_bytes": limit}
        encoded = json.dumps(answer, separators=(",", ":"), ensure_ascii=False).encode()
        if len(encoded) > limit:
            self._too_large(mirror, job.method, tool, job.primary.name)
            return True
        job_line = {"id": job_id, "method": job.method, "params": job.params, "headers": job.headers}
        if not self.process.submit(mirror.name, candidate_config, job_line, encoded):
            return False
        if job.method == "tools/list" and "error" not in answer:
            self._learn(job.primary.name, answer)
        self._sent[job_id] = (mirror, job.method, tool, job.primary.name, job.request_id)
        mirror.sent += 1
        return True

    def _answered(self, job_id: int, outcome: dict[str, Any]) -> None:
        """One outcome of the shadow process, counted (and logged) as `run` does."""
        sent = self._sent.pop(job_id, None)
        if sent is None:
            return
        mirror, method, tool, primary, request_id = sent
        mirror.sent -= 1
        token = REQUEST_ID.set(request_id)  # the line names the request mirrored, not the one that started the reader
        try:
            kind = outcome.get("outcome")
            if kind == "differ":
                self._differs(mirror, primary, method, tool, str(outcome.get("diff", "")), list(outcome.get("paths") or ()))
                return
            if kind == "too_large":
                self._too_large(mirror, method, tool, mirror.name)
                return
            if kind == "candidate_error":
                log.info("shadow %s: %s %s: the candidate could not be asked: %s", mirror.name, method, tool or "",
                         outcome.get("reason"))
            self.count(mirror, method, tool, kind if kind in ("match", "timeout", "candidate_error") else "candidate_error")
        finally:
            REQUEST_ID.reset(token)

    def _lost(self, job_ids: list[int]) -> None:
        """The jobs the shadow process had when it ended: counted as candidate errors."""
        for job_id in job_ids:
            self._answered(job_id, {"outcome": "candidate_error", "reason": "the shadow process ended"})

    async def _read_only(self, job: Job) -> frozenset[str] | None:
        """The primary's read-only tools (`TOOLS_TTL_S` old at most; its `tools/list` asked, all pages
        up to `TOOLS_PAGES`, when not known); None when the primary's list cannot be had."""
        known = self._tools.get(job.primary.name)
        if known is not None and time.monotonic() - known[0] < TOOLS_TTL_S:
            return known[1]
        tools: list[Any] = []
        params: dict[str, Any] = {}
        try:
            for _page in range(TOOLS_PAGES):
                page = await ask(job.primary, "tools/list", params, job)
                tools.extend(page.get("tools") or ())
                cursor = page.get("nextCursor")
                if not isinstance(cursor, str):
                    break
                params = {"cursor": cursor}
        except McpError as exc:
            log.info("shadow: the read-only tools of %s are not known: %s", job.primary.name, exc.message)
            return None
        return self._learn(job.primary.name, {"tools": tools})

    def _learn(self, primary: str, tools_list: dict[str, Any]) -> frozenset[str]:
        read_only = canon.read_only_tools(tools_list)
        self._tools[primary] = (time.monotonic(), read_only, canon.listed_tools(tools_list))
        return read_only

    # -- reporting ------------------------------------------------------------------------------------

    def count(self, mirror: Mirror, method: str, tool: str | None, outcome: str) -> None:
        label = self._tool_label(mirror, tool)
        counts = mirror.stats.counts.setdefault((method, label), dict.fromkeys(OUTCOMES, 0))
        counts[outcome] += 1
        if self._counter is not None:
            key = (mirror.name, method, label, outcome)
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._counter.labels(*key)
            child.inc()

    def _tool_label(self, mirror: Mirror, tool: str | None) -> str:
        if tool is None:
            return ""
        labels = self._tool_labels.setdefault(mirror.name, set())
        if tool in labels:
            return tool
        known = self._tools.get(mirror.config.shadow_of or "")
        if (tool in mirror.config.shadow_tools or (known is not None and tool in known[2])) and len(labels) < MAX_TOOL_LABELS:
            labels.add(tool)
            return tool
        return "other"

    def snapshot(self, counters: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
        """Each candidate: `{backend, shadow_of, percent, queued, rows: [{method, tool, match, differ,
        candidate_error, primary_error, timeout, dropped, match_rate}], last_differences: [{at_ms, method,
        tool, diff, paths}]}`; `match_rate` is match / (match + differ), None before any comparison.
        The rows count this process's comparisons, or, given `counters` (the `/metrics` counters
        added up over the workers in the store: `summed_counts`), those of every worker; `queued` and
        the last differences are this process's either way (docs/decisions.md §181)."""
        summed = summed_counts(counters) if counters is not None else None
        out = []
        for config in self.settings.upstream:
            if config.shadow_of is None:
                continue
            mirror = self.mirrors.get(config.name)
            stats = mirror.stats if mirror is not None else _Stats()
            rows = []
            counted = stats.counts if summed is None else summed.get(config.name, {})
            for (method, tool), counts in sorted(counted.items()):
                compared = counts["match"] + counts["differ"]
                rows.append({"method": method, "tool": tool, **counts,
                             "match_rate": round(counts["match"] / compared, 4) if compared else None})
            out.append({"backend": config.name, "shadow_of": config.shadow_of, "percent": config.shadow_percent,
                        "queued": mirror.queue.qsize() + mirror.sent if mirror is not None else 0, "rows": rows,
                        "last_differences": list(stats.last)})
        return out

    async def close(self) -> None:
        for mirror in self.mirrors.values():
            await mirror.close()
        await self.process.close()


def held_body(response: web.StreamResponse) -> bytes | None:
    """The body of a relayed answer held whole (a 200 JSON `web.Response`), None for a streamed one."""
    if isinstance(response, web.Response) and response.status == 200 and isinstance(response.body, bytes):
        return response.body
    return None


async def written(request: web.Request, response: web.StreamResponse) -> bool:
    """Send `response` to the client now (aiohttp then skips what is already done), so that shadow
    work queued after it never comes before the client's answer; False when the client has gone."""
    try:
        if not response.prepared:
            await response.prepare(request)
        await response.write_eof()
    except (ConnectionError, RuntimeError):
        return False
    return True
