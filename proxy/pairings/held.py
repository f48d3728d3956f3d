"""Held tasks: a slow plain call to a tool without task support, turned into a task the proxy
holds itself (docs/behaviour.md §9; docs/decisions.md §105-§114).

A call from a client that can take a task, to a tool its session-wire backend offers no task for,
goes upstream as a plain `tools/call` on a held exchange (`proxy/pairings/mrtr.py`). Answered
within the backend's `hold_after_ms`, the client gets the plain result (or the MRTR round the
backend asked for) exactly as without holding. Otherwise the call is *promoted*: the client gets a
task (`translators.held.created_v2` / `created_v1`), and the upstream call goes on, driven here:

* `notifications/progress` → the task's `statusMessage`;
* a request for input (elicitation, sampling, roots) → `input_required` with `inputRequests`; an
  answer (`tasks/update`, or a v1 client's answer on `tasks/result`) goes back upstream;
* the answer → `completed` with the exact result (`isError` kept); a JSON-RPC error → `failed`
  with it; `tasks/cancel` → `notifications/cancelled` upstream, `cancelled`; `hold_max_ms`
  passed → cancelled upstream, `failed`.

The record (`proxy/state/held_tasks.py`) is written at promotion and at each change, so any
replica sharing the store answers `tasks/get`; cancels and answers reaching another process are
handed to the holder (`proxy/pairings/handover.py`, kind `held`). A record that is not terminal
whose holder is gone becomes `failed` "interrupted, may have run" when it is next read.

Bounds (docs/decisions.md §109): at most `max_held_calls` held calls in a process and
`max_held_per_principal` for one principal; a call beyond them is not promoted and stays a plain
synchronous call.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from translators.differences import cancel_answer_v2, update_ack_v2
from translators.errors import FORGOTTEN, INTERNAL_ERROR, McpError, unknown_task
from translators.held import (
    HELD_SESSION,
    HOLD_EXPIRED,
    PROGRESS_TOKEN_PREFIX,
    HeldState,
    asking,
    cancelled,
    completed,
    created_v2,
    failed,
    get_v2,
    interrupted,
    is_held_token,
    new_held,
    progress_message,
    with_progress,
    with_progress_token,
)
from translators.inputs import read_input_responses
from translators.model import TaskError
from translators.protocol import H_NAME
from translators.sealing import TaskRef

from ..faces.modern import ModernRequest, Reply
from ..state.held_tasks import HeldRecord, HeldTaskStore
from ..upstream.session_wire import SessionLost, UpstreamSession
from .mrtr import Exchange, ExchangeBook

if TYPE_CHECKING:
    from ..config import Settings
    from ..upstream.backend import Backend

log = logging.getLogger(__name__)

POLL_MS = 1000
"""The `pollInterval(Ms)` a held task suggests (docs/decisions.md §107)."""

Alive = Callable[[str], Awaitable[bool]]


def _now_ms() -> int:
    return int(time.time() * 1000)


class Holding:
    """A held call this process has open: its record (the latest state) and exchange."""

    def __init__(self, record: HeldRecord, exchange: Exchange):
        self.record = record
        self.exchange = exchange
        self.driver: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.ended = asyncio.Event()
        """Set once the task is terminal (a blocking v1 `tasks/result` waits on it)."""
        self.changed = asyncio.Event()
        """Set at every change of the record (a waiting v1 `tasks/result` looks at it again)."""

    @property
    def state(self) -> HeldState:
        return self.record.state


class HeldEvents(Protocol):
    """Whom held calls report to (`proxy.observe.held.HeldMetrics`): a call promoted, a held task
    ended (its status), a slow call not promoted (bounds full), and how many are open now."""

    def promoted(self) -> None: ...

    def ended(self, outcome: str) -> None: ...

    def refused(self) -> None: ...

    def track(self, live: Callable[[], int]) -> None: ...


class HeldHome(NamedTuple):
    """Where one backend's held calls live: their records (`store`), the process holding them
    (`process`; with a shared store, `alive(process)` says whether a holder lives), and whom they
    report to (`events`)."""

    store: HeldTaskStore
    process: str
    alive: Alive | None
    events: HeldEvents


class HeldCalls:
    """The held calls of one backend: promotion, the driver of each, and their `tasks/*`."""

    def __init__(self, settings: Settings, backend: Backend, exchanges: ExchangeBook, keyring: Any, home: HeldHome):
        store, process, alive, events = home
        config = backend.config
        self.mode = settings.hold_tasks if config.hold_tasks is None else config.hold_tasks
        self.hold_after_s = config.hold_after_ms / 1000
        self.named = frozenset(config.hold_tools)
        self.hold_max_s = settings.hold_max_ms / 1000
        self.ttl_ms = settings.task_ttl_ms or settings.max_task_state_ms
        self.max_calls = settings.max_held_calls
        self.max_per_principal = settings.max_held_per_principal
        self.backend = backend
        self.exchanges = exchanges
        self.store = store
        self.process = process
        self.alive = alive
        self.events = events
        self.keyring = keyring
        self._live: dict[str, Holding] = {}
        self._background: set[asyncio.Future[Any]] = set()
        self.handover: Any = None
        """The process's `Handover` when the store is shared (cancels and answers for another holder)."""

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def holds(self, name: str, support: str, offers_tool_tasks: bool) -> bool:
        """Whether a call to tool `name` of this `support` (as the backend declares it) may become a
        held task: holding is on and the backend offers no tasks at all, or the tool is one it
        declares `forbidden` and named in `hold_tools`. A backend with tasks keeps every declaration it made
        (docs/decisions.md §151)."""
        return self.on and (not offers_tool_tasks or (support == "forbidden" and name in self.named))

    def held_tools(self, offers_tool_tasks: bool) -> frozenset[str] | None:
        """The tools a v1 `tools/list` shows held (`translators.held.tools_list_held_v1`): None for
        all of a backend's tools without task support (a backend without tasks), else those named."""
        return None if not offers_tool_tasks else self.named

    def live(self) -> int:
        """Held calls this process has open now."""
        return len(self._live)

    def has_room(self, principal: str) -> bool:
        """Whether the bounds leave room for one more held call of `principal`."""
        if len(self._live) >= self.max_calls:
            return False
        return sum(1 for h in self._live.values() if h.record.principal == principal) < self.max_per_principal

    # -- starting a call ------------------------------------------------------------------------

    def start(self, call_principal: str, name: str, params: dict[str, Any], session: UpstreamSession,
              headers: dict[str, str]) -> Exchange:
        """The upstream plain call on a new exchange, with a `progressToken` of the proxy's when the
        client gave none (so progress can become the `statusMessage`)."""
        exchange = self.exchanges.open((call_principal, "tools/call", name, headers), session)
        upstream = with_progress_token(params, PROGRESS_TOKEN_PREFIX + exchange.id)
        exchange.start(functools.partial(session.request, "tools/call", upstream, headers=headers))
        return exchange

    async def first_round(self, exchange: Exchange) -> tuple[bool, dict[str, Any] | None]:
        """Wait up to `hold_after_ms` for the call's first round: (True, requests or None) when it
        ended or asked for input in time, (False, None) when it should be promoted. A client that
        goes away cancels the upstream call."""
        try:
            async with asyncio.timeout(self.hold_after_s):  # in this task: no task and no `asyncio.wait` per call
                return True, await exchange.next_round()
        except TimeoutError:
            return False, None
        except asyncio.CancelledError:
            exchange.notify = None
            exchange.abandon()
            raise

    @staticmethod
    def client_notify(notify: Callable[[dict[str, Any]], Awaitable[None]]) -> Callable[[dict[str, Any]], Awaitable[None]]:
        """What the waiting client gets of the call's notifications before promotion: all but
        progress for the proxy's own token."""

        async def before(message: dict[str, Any]) -> None:
            params = message.get("params")
            token = params.get("progressToken") if isinstance(params, dict) else None
            if message.get("method") == "notifications/progress" and is_held_token(token):
                return
            await notify(message)

        return before

    async def promote(self, exchange: Exchange, principal: str, name: str, *, ttl_ms: int | None = None,
                      at_once: bool = False) -> Holding | None:
        """Make the call a held task (its record written, its driver started), or None when the
        bounds leave no room (the call stays synchronous). `ttl_ms`: the client's (bounded by the
        proxy's); `at_once`: a v1 client's `params.task` (no `hold_after_ms` wait)."""
        if self.backend.unreachable_at is not None:
            # The backend refuses connections: the call waits for it (reconnect_wait_ms) and has not
            # reached it, so there is nothing to hold yet; it ends as it would without holding.
            return None
        if not self.has_room(principal):
            log.warning("held task: %s on %s not promoted: %d held calls (at most %d, %d per principal); it stays synchronous",
                        name, self.backend.name, len(self._live), self.max_calls, self.max_per_principal)
            self.events.refused()
            return None
        held_id = secrets.token_urlsafe(18)
        state = new_held(held_id, _now_ms(), min(ttl_ms, self.ttl_ms) if ttl_ms else self.ttl_ms, POLL_MS)
        record = HeldRecord(state, principal, self.backend.name, name, exchange.session.session_id or "", exchange.id, self.process)
        holding = Holding(record, exchange)
        self._live[held_id] = holding
        try:
            await self.store.put(record)
        except BaseException:  # the store is down: no task can be handed out, the call ends here
            self._live.pop(held_id, None)
            exchange.abandon()
            raise
        exchange.attend(self._progress_of(holding), None)
        holding.driver = asyncio.ensure_future(self._drive(holding))
        holding.timer = asyncio.get_running_loop().call_later(self.hold_max_s, self._expire, holding)
        if at_once:
            log.info("held task: %s on %s held as a task at once (params.task; task %s…)", name, self.backend.name, held_id[:8])
        else:
            log.info("held task: %s on %s promoted to a task after %d ms (task %s…)", name, self.backend.name,
                     int(self.hold_after_s * 1000), held_id[:8])
        self.events.promoted()
        return holding

    def sealed(self, held_id: str, principal: str) -> str:
        """The client-facing id of a held task."""
        return str(self.keyring.seal_task_id(TaskRef(self.backend.name, HELD_SESSION, held_id), principal))

    def created_reply(self, holding: Holding) -> Reply:
        task_id = self.sealed(holding.record.task_id, holding.record.principal)
        return Reply(created_v2(replace(holding.state, task_id=task_id)), {H_NAME: task_id})

    # -- the driver -----------------------------------------------------------------------------

    def _progress_of(self, holding: Holding) -> Callable[[dict[str, Any]], Awaitable[None]]:
        async def note(message: dict[str, Any]) -> None:
            text = progress_message(message)
            if text is not None:
                await self._change(holding, with_progress(holding.state, text, _now_ms()))

        return note

    async def _change(self, holding: Holding, state: HeldState, questions: dict[str, Any] | None = None) -> None:
        """Write a changed state or set of questions (nothing when both are the current ones)."""
        if state is holding.state and (questions is None or questions == holding.record.questions):
            return
        holding.record = holding.record.evolve(state, questions if not state.terminal else {})
        holding.changed.set()
        try:
            await self.store.put(holding.record)
        except Exception as exc:  # the store is down: the live state here still answers
            log.warning("held task %s…: its change was not written to the store: %s", holding.record.task_id[:8], exc)

    async def _drive(self, holding: Holding) -> None:
        exchange = holding.exchange
        upstream = exchange.upstream
        assert upstream is not None
        try:
            while not upstream.done():
                seen = exchange.version
                requests = {key: request for key, (_, request) in exchange.outstanding.items()}
                ids = {key: upstream_id for key, (upstream_id, _) in exchange.outstanding.items()}
                await self._change(holding, asking(holding.state, requests, _now_ms()), ids)
                await exchange.changed(seen)
            await self._change(holding, self._outcome(holding.state, upstream))
        except Exception:
            log.exception("held task %s…: driver failed", holding.record.task_id[:8])
            await self._change(holding, failed(holding.state, TaskError(code=INTERNAL_ERROR, message="Internal error"), _now_ms()))
        finally:
            self._live.pop(holding.record.task_id, None)
            self.exchanges.release(exchange)
            if holding.timer is not None:
                holding.timer.cancel()
            self.events.ended(holding.state.status)
            holding.ended.set()
            holding.changed.set()

    @staticmethod
    def _outcome(state: HeldState, upstream: asyncio.Task[dict[str, Any]]) -> HeldState:
        now = _now_ms()
        if upstream.cancelled():
            return cancelled(state, now)
        error = upstream.exception()
        if error is None:
            return completed(state, upstream.result(), now)
        if isinstance(error, McpError):
            return failed(state, McpError(error.code, error.message, error.data), now)
        if isinstance(error, SessionLost):
            return failed(state, TaskError(code=INTERNAL_ERROR, message="The backend lost the upstream session during the call"), now)
        return failed(state, TaskError(code=INTERNAL_ERROR, message=f"The upstream call failed: {type(error).__name__}"), now)

    def _expire(self, holding: Holding) -> None:
        """`hold_max_ms` passed: `failed`, and the upstream call cancelled."""
        message = HOLD_EXPIRED.format(ms=int(self.hold_max_s * 1000))
        self._spawn(self._stop(holding, failed(holding.state, TaskError(code=INTERNAL_ERROR, message=message), _now_ms())))

    async def _stop(self, holding: Holding, state: HeldState) -> None:
        await self._change(holding, state)
        holding.exchange.abandon()

    def _spawn(self, work: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- reading, answering, cancelling (any face) ------------------------------------------------

    def holding(self, held_id: str) -> Holding | None:
        return self._live.get(held_id)

    def holdings(self) -> list[Holding]:
        """The held calls open here now."""
        return list(self._live.values())

    async def read(self, held_id: str, principal: str) -> HeldRecord:
        """The record of a held task of `principal`; one whose holder is gone is made `failed`
        (interrupted) first. Raises `McpError(-32602)` "Unknown task" when there is none."""
        holding = self._live.get(held_id)
        if holding is not None and holding.record.principal == principal:
            return holding.record
        record = await self.store.get(held_id)
        if record is None or record.principal != principal or record.backend != self.backend.name:
            raise unknown_task(FORGOTTEN)
        if not record.state.terminal and not await self._holder_alive(record.holder):
            record = record.evolve(interrupted(record.state, _now_ms()))
            await self.store.put(record)
            self.events.ended(record.state.status)
        return record

    async def _holder_alive(self, holder: str) -> bool:
        if holder == self.process:  # held here, yet not open here: its driver ended without writing an end
            return False
        return self.alive is not None and await self.alive(holder)

    async def answer(self, record: HeldRecord, responses: dict[str, Any]) -> None:
        """Answers to the task's `inputRequests` (key → the client's answer), sent upstream by
        the holder. Unknown or already answered keys are ignored."""
        holding = self._live.get(record.task_id)
        if holding is not None:
            await holding.exchange.deliver(responses)
            outstanding = holding.exchange.outstanding
            remaining = {key: request for key, (_, request) in outstanding.items()}
            await self._change(holding, asking(holding.state, remaining, _now_ms()), {k: i for k, (i, _) in outstanding.items()})
            return
        if not record.state.terminal and self.handover is not None:
            await self.handover.held(record.holder, {"op": "answer", "backend": self.backend.name, "task": record.task_id,
                                                     "principal": record.principal, "responses": responses})

    async def cancel(self, record: HeldRecord) -> None:
        """Cancel the call upstream (`notifications/cancelled`) and end the task `cancelled`."""
        holding = self._live.get(record.task_id)
        if holding is not None:
            await self._stop(holding, cancelled(holding.state, _now_ms()))
            return
        if not record.state.terminal and self.handover is not None:
            await self.handover.held(record.holder, {"op": "cancel", "backend": self.backend.name, "task": record.task_id,
                                                     "principal": record.principal})

    async def handed(self, payload: dict[str, Any]) -> None:
        """An answer or cancel another process received for a call held here (`Handover`)."""
        record = await self.read(str(payload.get("task")), str(payload.get("principal")))
        if payload.get("op") == "cancel":
            await self.cancel(record)
        else:
            responses = payload.get("responses")
            await self.answer(record, responses if isinstance(responses, dict) else {})

    # -- the v2-modern face ---------------------------------------------------------------------

    async def task_v2(self, call: ModernRequest, ref: TaskRef) -> Reply:
        """`tasks/get`, `tasks/update`, `tasks/cancel` of a held task (SEP-2663)."""
        record = await self.read(ref.task, call.principal)
        if call.method == "tasks/get":
            return Reply(get_v2(replace(record.state, task_id=call.params["taskId"])))
        if call.method == "tasks/update":
            await self.answer(record, read_input_responses(call.params))
            return Reply(update_ack_v2())
        await self.cancel(record)
        return Reply(cancel_answer_v2())

    async def drain(self, timeout_s: float) -> tuple[int, int]:
        """The process is stopping: wait up to `timeout_s` for the held calls open here to end (each
        writes its last state, which any process reads after). Returns (ended, still open); those
        still open are left to `close`."""
        open_now = list(self._live.values())
        if not open_now:
            return 0, 0
        waits = [asyncio.ensure_future(holding.ended.wait()) for holding in open_now]
        done, pending = await asyncio.wait(waits, timeout=max(0.0, timeout_s))
        for wait in pending:
            wait.cancel()
        return len(done), len(pending)

    def close(self) -> None:
        """The process stops: its held calls still open are left as they are (their records read
        `interrupted` once this process is gone)."""
        for holding in list(self._live.values()):
            if holding.timer is not None:
                holding.timer.cancel()
            if holding.driver is not None:
                holding.driver.cancel()
        for task in list(self._background):
            task.cancel()


async def drain(calls: list[HeldCalls], timeout_s: float) -> None:
    """The process is stopping: wait up to `timeout_s` for the held calls of every backend to end
    (`HeldCalls.drain`); those still open then are left `interrupted`. Logged: how many were
    waited for, and how many ended (a WARNING when some did not)."""
    open_now = [each for each in calls if each.live()]
    if not open_now:
        return
    count = sum(each.live() for each in open_now)
    log.info("stopping: waiting up to %d ms for %d held call(s) to end", max(0, int(timeout_s * 1000)), count)
    drained = await asyncio.gather(*(each.drain(timeout_s) for each in open_now))
    ended, still_open = sum(d[0] for d in drained), sum(d[1] for d in drained)
    if still_open:
        log.warning("stopping: %d held call(s) ended, %d still running left interrupted", ended, still_open)
    else:
        log.info("stopping: %d held call(s) ended", ended)


def held_home(store: Any, events: HeldEvents) -> HeldHome:
    """Where a fleet member's held calls live: records in `store` (its `held_tasks()`; in this
    process when there is no store), held by the store's process when it is shared (whose
    heartbeat then says whether a holder lives), else by a name of its own; reported to `events`."""
    from ..state.held_tasks import MemoryHeldStore

    records = store.held_tasks() if store is not None else MemoryHeldStore()
    shared = store is not None and store.shared
    process = store.process if shared else secrets.token_hex(8)
    return HeldHome(records, process, store.alive if shared else None, events)


def held_calls(settings: Settings, backend: Backend, exchanges: ExchangeBook, keyring: Any, home: HeldHome) -> HeldCalls:
    """The `HeldCalls` of one fleet member, their open count tracked by `home.events`."""
    held = HeldCalls(settings, backend, exchanges, keyring, home)
    home.events.track(held.live)
    return held
