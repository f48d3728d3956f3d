"""The shadow process (docs/behaviour.md §8 "Shadow", docs/decisions.md §125): a child of the
proxy that asks a v2-modern candidate what its primary was asked and compares the answers, so
that the comparison's CPU (the candidate's HTTP request and answer, the canonical forms, the
diff: about 0.4 ms a call, docs/performance.md "Shadowing") runs beside the proxy's event loop,
on another core, never in front of a client's next request.

    proxy (ShadowProcess.submit) ── one JSON line per job on the child's stdin ──► child (main)
    proxy (on_result)            ◄── one JSON line per outcome on its stdout ─────  asks, follows, compares

A candidate, sent before its first job and again when it changed, `{"candidate": n, "name", "url",
"extra_headers", "concurrency", "timeout_s", "ignore", "max_body_bytes"}`: the candidate's address
and the headers its connector adds, its `shadow_concurrency` (the child asks at most that many at
once), its `shadow_timeout_ms` in s, its `shadow_ignore` paths and its `shadow_max_body_bytes` (the
child reads no more of an answer: `proxy/upstream/answer_bound.py`). A job, `{"id", "candidate": n, "method",
"params", "headers", "answer"}`: the request, the client's headers for upstream and the primary's
answer as the client got it, final (a result, or `{"error": {...}}`), put in canonical form
(`translators.shadow`) by the child. An outcome, `{"id",
"outcome", "reason"?, "diff"?, "paths"?}`: "match", "differ" (with the compact diff and the
differing paths), "candidate_error" (with the reason), "timeout" or "too_large". The proxy counts and logs them
(`proxy/shadow/mirror.py`); the child only asks and compares. It is started by its handle on the first
job and stopped by it (stdin closed, then terminated after `STOP_WAIT_S`); it ends by itself when
the proxy's end of the pipe closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

STOP_WAIT_S = 2.0
"""How long the proxy waits for the child to end once its stdin is closed before terminating it."""
BATCH_S = 0.005
"""How long either side gathers lines before writing them (s): one write and one wake-up of the
other side per batch, not per job (a comparison is never waited for)."""
LINE_LIMIT = 64 * 1024 * 1024
"""The longest line either side reads (bytes): a job or an outcome carries one answer."""


class ShadowProcess:
    """The proxy's handle on its shadow child: `start` (once), `submit` (no await, never raises),
    `close`. `on_result(job_id, outcome)` is called for each outcome, and `on_lost(job_ids)` with
    the jobs still pending when the child ended without being asked to."""

    def __init__(self, on_result: Callable[[int, dict[str, Any]], None], on_lost: Callable[[list[int]], None]):
        self.on_result = on_result
        self.on_lost = on_lost
        self.process: asyncio.subprocess.Process | None = None
        self.pending: set[int] = set()
        self.submitted = 0
        """Jobs sent to the child since it started."""
        self.state = "new"
        """"new", "starting", "running", "ended" (failed to start, died or closed: jobs stay in-process)."""
        self._reader: asyncio.Task[None] | None = None
        self._starting: asyncio.Task[None] | None = None
        self._batch: list[bytes] = []
        self._candidates: dict[str, tuple[int, dict[str, Any]]] = {}
        """Candidate name → (its number, what the child was told of it)."""
        self._numbers = itertools.count(1)

    @property
    def running(self) -> bool:
        return self.state == "running"

    def start_soon(self) -> None:
        """Start the child in the background (the first job goes in-process meanwhile)."""
        if self.state == "new":  # in a context of its own (its reader too), not the first job's request's
            self.state = "starting"
            self._starting = asyncio.get_running_loop().create_task(self._start(), context=contextvars.Context())

    async def _start(self) -> None:
        try:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "proxy.shadow.process", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                limit=LINE_LIMIT)
            assert self.process.stdout is not None
            ready = await asyncio.wait_for(self.process.stdout.readline(), 30)
            if ready.strip() != b'{"ready":true}':
                raise RuntimeError(f"the shadow process said {ready[:200]!r}")
        except (OSError, RuntimeError, TimeoutError) as exc:
            log.warning("shadow: no shadow process (%s); comparisons run in the proxy's event loop", exc)
            self.state = "ended"
            await self._stop_process()
            return
        if self.state != "starting":  # closed meanwhile
            await self._stop_process()
            return
        self.state = "running"
        self._reader = asyncio.ensure_future(self._read())

    def submit(self, name: str, candidate: dict[str, Any], job: dict[str, Any], answer: bytes) -> bool:
        """Send `job` (its "id" unique) with the primary's `answer` (its JSON, encoded already) for the
        candidate `name` (`candidate`: its "url", "extra_headers", "concurrency", "timeout_s",
        "ignore", "max_body_bytes") to the child; False when the child is not running."""
        process = self.process
        if self.state != "running" or process is None or process.stdin is None or process.stdin.is_closing():
            return False
        if not self._batch:
            asyncio.get_running_loop().call_later(BATCH_S, self._write)
        known = self._candidates.get(name)
        if known is None or known[1] != candidate:
            known = self._candidates[name] = (next(self._numbers), candidate)
            self._batch.append(json.dumps({"candidate": known[0], **candidate}, separators=(",", ":")).encode() + b"\n")
        job["candidate"] = known[0]
        self._batch.append(json.dumps(job, separators=(",", ":")).encode()[:-1] + b',"answer":' + answer + b"}\n")
        self.pending.add(job["id"])
        self.submitted += 1
        return True

    def _write(self) -> None:
        batch, self._batch = self._batch, []
        process = self.process
        if process is None or process.stdin is None or process.stdin.is_closing():
            return  # ended meanwhile: its pending jobs are reported lost by `_read`
        try:
            process.stdin.write(b"".join(batch))
        except (ConnectionError, RuntimeError):
            pass

    async def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        stdout = self.process.stdout
        try:
            while True:
                line = await stdout.readline()
                if not line:
                    break
                outcome = json.loads(line)
                job_id = outcome.pop("id")
                self.pending.discard(job_id)
                self.on_result(job_id, outcome)
        except (ValueError, KeyError, asyncio.LimitOverrunError) as exc:
            log.warning("shadow: the shadow process said something unreadable (%s)", exc)
        if self.state == "running":
            log.warning("shadow: the shadow process ended; comparisons run in the proxy's event loop")
            self.state = "ended"
            lost, self.pending = sorted(self.pending), set()
            self.on_lost(lost)

    async def close(self) -> None:
        self.state = "ended"
        if self._starting is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._starting
        await self._stop_process()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    async def _stop_process(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        if process.stdin is not None:
            self._write()
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), STOP_WAIT_S)
        except TimeoutError:
            process.terminate()
            await process.wait()


# -- the child --------------------------------------------------------------------------------------


async def _child() -> None:
    import aiohttp

    from translators import shadow as canon

    from ..upstream.answer_bound import ANSWER_BOUND, ReadBound
    from ..upstream.endpoint import Endpoint
    from .ask import candidate_outcome

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout.buffer
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), cookie_jar=aiohttp.DummyCookieJar())
    candidates: dict[int, tuple[Endpoint, asyncio.Semaphore, float, list[tuple[str, ...]], int]] = {}
    running: set[asyncio.Task[None]] = set()

    batch: list[bytes] = []

    def flush() -> None:
        out.write(b"".join(batch))
        out.flush()
        batch.clear()

    def answer(outcome: dict[str, Any]) -> None:
        if not batch:
            loop.call_later(BATCH_S, flush)
        batch.append(json.dumps(outcome, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")

    async def one(job: dict[str, Any]) -> None:
        try:
            endpoint, limit, timeout_s, ignore, max_body = candidates[job["candidate"]]
            held = job["answer"]
            if isinstance(held.get("error"), dict) and len(held) == 1:
                primary = canon.canonical_error(held["error"])
            else:
                primary = canon.canonical_answer(job["method"], held)
        except Exception as exc:  # noqa: BLE001 - a job this child cannot read is answered all the same
            answer({"id": job.get("id"), "outcome": "candidate_error", "reason": f"the shadow process: {exc!r}"})
            return
        bound = ReadBound(max_body)
        ANSWER_BOUND.set(bound)  # this job's own task: every answer it reads
        try:
            async with limit, asyncio.timeout(timeout_s):
                theirs = await candidate_outcome(endpoint, job["method"], job["params"], job["headers"])
        except TimeoutError:
            answer({"id": job["id"], "outcome": "timeout" if bound.over is None else "too_large"})
            return
        except Exception as exc:  # noqa: BLE001 - the candidate could not be asked
            if bound.over is not None:
                answer({"id": job["id"], "outcome": "too_large"})
            else:
                answer({"id": job["id"], "outcome": "candidate_error", "reason": str(exc) or exc.__class__.__name__})
            return
        found = canon.differences(primary, theirs, ignore)
        if not found:
            answer({"id": job["id"], "outcome": "match"})
        else:
            answer({"id": job["id"], "outcome": "differ", "diff": canon.compact_diff(found), "paths": [w for w, _p, _c in found]})

    answer({"ready": True})
    flush()
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            message = json.loads(line)
            if "candidate" in message and "id" not in message:
                endpoint = Endpoint(message["name"], message["url"], http, extra_headers=message["extra_headers"])
                candidates[message["candidate"]] = (endpoint, asyncio.Semaphore(message["concurrency"]), message["timeout_s"],
                                                    [canon.parse_path(p) for p in message["ignore"]], message["max_body_bytes"])
                continue
            task = asyncio.ensure_future(one(message))
            running.add(task)
            task.add_done_callback(running.discard)
        if running:
            await asyncio.wait(running)
        if batch:
            flush()
    finally:
        await http.close()


def main() -> None:
    """`python -m proxy.shadow.process`: the child, until its stdin closes."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="shadow process: %(levelname)s %(message)s")
    try:
        import uvloop

        uvloop.run(_child())
    except ImportError:
        asyncio.run(_child())


if __name__ == "__main__":
    main()
