"""Several backends behind one proxy: one member per backend (its backend, state and pairings),
and the smooth weighted round robin that spreads new work over them (docs/behaviour.md §2 "Upstream", §6 "Task ids").

What is already bound to a backend goes back to it, whatever the weights say: a task by the backend
sealed in its id, an MRTR retry by the backend sealed in its `requestState`, a session by the
backend it was opened on (a proxy session remembers it; a relayed session's id is sealed with it).
Only new work (a `tools/call` without `requestState`, an `initialize`, any other request) is routed:
smooth weighted round robin over the backends that can be reached. A backend whose connection was
refused is left out of new work; at most once a second a request probes it again, and it is back
as soon as a probe answers (a restarted or replaced backend, with its new dialect).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import aiohttp

from translators.errors import McpError, task_of_removed
from translators.sealing import Keyring

from .config import Settings, Upstream
from .metrics import Metrics
from .observe.held import HeldMetrics
from .pairings import PAIRINGS, Pairing, Relay
from .pairings.held import held_calls, held_home
from .pairings.held_v1 import HeldSessions
from .pairings.mrtr import ExchangeBook
from .pairings.parts import MemberParts
from .state.fleet_notes import FleetNotes, MemoryNotes
from .state.store import TaskStateStore
from .state.v1_tasks import V1Follower
from .upstream.backend import Backend, UnsupportedBackend
from .upstream.tls import request_options
from .work import BoundWork

log = logging.getLogger(__name__)

REVIVE_INTERVAL_S = 1.0
"""An unreachable backend is probed again by new work at most this often."""


class CommandFails(UnsupportedBackend):
    """A stdio backend's command cannot be run, or its first process exited before answering the
    probe's `initialize`: the proxy (or the reload that adds it) is refused, rather than retrying
    for ever while every request waits and fails (issue 37; later exits are supervised, with backoff)."""


def start_failure(member: FleetMember) -> str | None:
    """Why `member`'s stdio command failed at its first start (`StdioEndpoint.start_failure`), else None."""
    failure = getattr(member.backend.connector, "start_failure", None)
    return failure if isinstance(failure, str) else None


class FleetMember:
    """One configured backend (`backend`), the state kept for it (`follower`: its v1 tasks
    followed for modern clients; held MRTR exchanges) and one instance of each pairing in front
    of it (`pairing`)."""

    def __init__(self, upstream: Upstream, http: aiohttp.ClientSession, settings: Settings, keyring: Keyring, metrics: Metrics,
                 store: TaskStateStore | None = None, options: dict[str, Any] | None = None):
        self.name = upstream.name
        self.weight = upstream.weight
        self.draining = upstream.drain
        """No new work comes here; what is bound to it runs to its end (docs/decisions.md §84)."""
        self.work = BoundWork(settings.session_idle_ms / 1000)
        """Requests in flight and relayed sessions bound to it (`proxy/work.py`)."""
        self.backend = Backend(upstream, http, settings, metrics=metrics,
                               on_hop=functools.partial(metrics.upstream, upstream.name))  # mcp_tasks_proxy_upstream_seconds
        # TLS and the outbound proxy (`options`: built already by a reload, which checked them first).
        self.backend.connector.use_options(request_options(upstream) if options is None else options)
        self.follower = V1Follower(max_tasks=settings.max_tasks, max_task_state_ms=settings.max_task_state_ms,
                                   input_capture_wait_ms=settings.input_capture_wait_ms, store=store, backend=upstream.name)
        # Followed v1 tasks not finished; a backend no longer v1 (upgraded in place) forgot them.
        metrics.track_live(lambda: self.follower.unfinished() if self.backend.dialect == "v1" else 0, upstream.name)
        self.exchanges = ExchangeBook(lifetime_ms=settings.request_state_ttl_ms)
        self.held = held_calls(settings, self.backend, self.exchanges, keyring, held_home(store, HeldMetrics(metrics, upstream.name)))
        self.held_sessions = HeldSessions(self.held, settings, keyring)
        """Held tasks of v1 clients on sessions relayed to this backend (`proxy/pairings/held_v1.py`)."""
        parts = MemberParts(settings, keyring, self.backend, self.follower, self.exchanges, self.held)
        self._pairings: dict[type, Pairing] = {cls: cls(parts) for cls in dict.fromkeys(PAIRINGS.values())}
        self._revive_lock = asyncio.Lock()
        self._revive_at = 0.0

    @property
    def relay(self) -> Relay:
        """The member's relay (the diagonal of `PAIRINGS`), also for relayed GET and DELETE."""
        relay = self._pairings[Relay]
        assert isinstance(relay, Relay)
        return relay

    def pairing(self, client: str, backend: str) -> Pairing:
        """This member's pairing for a client of dialect `client` in front of its backend
        speaking `backend` (`proxy.pairings.PAIRINGS`)."""
        return self._pairings[PAIRINGS[(client, backend)]]

    async def usable(self) -> bool:
        """Whether new work may go here: the backend's connection was not refused, or a probe
        (at most once per `REVIVE_INTERVAL_S`, one at a time) has just found it answering again."""
        if self.backend.unreachable_at is None:
            return True
        if self._revive_lock.locked() or time.monotonic() - self._revive_at < REVIVE_INTERVAL_S:
            return False
        async with self._revive_lock:
            self._revive_at = time.monotonic()
            try:
                await self.backend.refresh(force=True, throttle=False)
            except (McpError, UnsupportedBackend) as exc:
                log.debug("backend %s still unreachable: %s", self.name, exc)
                return False
            return True  # the backend has logged that it is back

    async def close(self) -> None:
        """Release the member's state (upstream sessions stay open: docs/decisions.md §2)."""
        self.exchanges.close()
        self.held.close()
        self.follower.close()
        await self.backend.close()


class Fleet:
    """The configured backends, in configuration order. `multi` says whether relays must seal the
    ids they pass on (docs/behaviour.md §6: with one backend they pass through unchanged)."""

    def __init__(self, members: Iterable[FleetMember]):
        self.members = list(members)
        if not self.members:
            raise ValueError("a fleet needs at least one backend")
        self._current: dict[str, int] = {}
        self.balance = "picks"
        """How weights split new sessions: "picks" (each new session is a pick of the weighted
        round robin) or "live-sessions" (`pick`); set from `Settings.balance`, also at a reload."""
        self.proxy_sessions: Callable[[str], int] = lambda _name: 0
        """The proxy's own live sessions on a backend, by its name (set by the application: `SessionStore.count_for`)."""
        self.reloads: collections.deque[dict[str, Any]] = collections.deque(maxlen=10)
        """This process's last reloads, applied or refused (`proxy/reload.py`), oldest first: the status page's."""
        self.rollout: Any = None
        """The rollout's driver, which sets the weights of the backends it moves (`proxy/rollout/driver.py`)."""
        self.plain_issuer: str | None = None
        """The backend that handed out its own task ids to modern clients while it was the only one
        (docs/decisions.md §192): it keeps getting the ids that do not unseal once there are several."""
        self.notes: FleetNotes = MemoryNotes()
        """Where `plain_issuer` lasts across restarts (`proxy/state/fleet_notes.py`; set by the application)."""
        self._note_read_at = -NOTE_RETRY_S
        self._note_reading: asyncio.Future[None] | None = None
        self.arrange(self.members)

    def arrange(self, members: list[FleetMember]) -> None:
        """Make `members` the fleet, in this order (at start, and at a reload: `proxy/fleet_config.py`,
        which keeps the same member objects for the backends that stay). Ids that do not unseal
        (docs/decisions.md §83, §192) go to `plain_owner`. The only backend relays modern task ids
        as it gives them (`Relay.own_task_ids`) and becomes the `plain_issuer`."""
        self.members = list(members)
        self._by_name = {member.name: member for member in self.members}
        self._current = {member.name: self._current.get(member.name, 0) for member in self.members}
        self.multi = len(self.members) > 1
        lone_http = not self.multi and self.first.backend.connector.KNOWS_CALLERS  # a stdio process's stay sealed
        if lone_http:
            self.plain_issuer = self.first.name
        owner = self.plain_owner()
        for member in self.members:
            member.relay.plain_ids = member is owner
            member.relay.own_task_ids = lone_http

    def plain_owner(self, *, issued: bool = True) -> FleetMember | None:
        """The backend an id that does not unseal belongs to: the only backend; with several, the one
        configured with `plain_ids = true` (ids an older proxy handed out, docs/decisions.md §83), else
        for a modern task id or `requestState` (`issued`; not a session id, which every relay seals)
        the `plain_issuer` while it is configured (decision 192); None when there is none of these."""
        if len(self.members) == 1:
            return self.members[0]
        configured = next((member for member in self.members if member.backend.config.plain_ids), None)
        if configured is not None or not issued or self.plain_issuer is None:
            return configured
        return self._by_name.get(self.plain_issuer)

    async def remember_plain_issuer(self) -> None:
        """Read the `plain_issuer` a fleet of one backend noted before (at start with several), or
        note this one's (decision 192); then the relays' `plain_ids` again. A store that cannot be
        read or written leaves it as it is (logged)."""
        try:
            if self.multi:
                noted = await self.notes.plain_issuer()
                if noted is not None and noted != self.plain_issuer:
                    self.plain_issuer = noted
                    self.arrange(self.members)
            elif self.plain_issuer is not None and await self.notes.plain_issuer() != self.plain_issuer:
                await self.notes.note_plain_issuer(self.plain_issuer)
        except Exception as exc:  # the store is down: ids that do not unseal go where they went
            log.warning("the backend that handed out plain task ids could not be read or noted in the store (%s)", exc)

    def plain_missed(self) -> asyncio.Future[None] | None:
        """A modern id that does not unseal found no `plain_owner` among several backends (and was
        refused): read a shared note again (Redis), at most every `NOTE_RETRY_S`, in the background,
        for a replica that started before another noted its backend or whose store did not answer
        then (docs/decisions.md §192). The read under way, or None when none was started."""
        now = time.monotonic()
        if not (self.multi and self.notes.shared) or self._note_reading is not None or now - self._note_read_at < NOTE_RETRY_S:
            return None
        self._note_read_at = now
        reading = self._note_reading = asyncio.ensure_future(self.remember_plain_issuer())
        reading.add_done_callback(lambda _done: setattr(self, "_note_reading", None))
        return reading

    @classmethod
    def build(cls, settings: Settings, http: aiohttp.ClientSession, keyring: Keyring, metrics: Metrics,
              store: TaskStateStore | None = None) -> Fleet:
        """One member per configured backend (`settings.upstream`), in configuration order."""
        fleet = cls(FleetMember(upstream, http, settings, keyring, metrics, store) for upstream in settings.upstream)
        fleet.balance = settings.balance
        return fleet

    @property
    def first(self) -> FleetMember:
        return self.members[0]

    def named(self, name: str) -> FleetMember:
        """The member of the backend `name` sealed in an id. Raises `McpError(-32602)` "Unknown task"
        naming it for a name no longer configured (the id outlived its backend: `task_of_removed`)."""
        member = self._by_name.get(name)
        if member is None:
            raise task_of_removed(name)
        return member

    def get(self, name: str) -> FleetMember | None:
        """The member of the backend `name`, None when no such backend is configured."""
        return self._by_name.get(name)

    def request_options(self, name: str) -> dict[str, Any]:
        """The request options of the backend `name` (`Endpoint.request_options`: TLS, outbound proxy);
        empty for a backend not configured."""
        member = self._by_name.get(name)
        return member.backend.connector.request_options if member is not None else {}

    async def pick(self, exclude: frozenset[str] = frozenset(), *, session: bool = False) -> FleetMember:
        """The backend for new work: smooth weighted round robin (each backend's share of picks is
        its weight over the sum) over the reachable backends not in `exclude` that take new work
        (weight above 0, not draining); when none is reachable, over all of those, so that the answer
        names a backend that failed. A new `session` (an `initialize`) with `balance =
        "live-sessions"` goes instead to the one with the fewest live sessions per unit of weight
        (docs/decisions.md §84)."""
        taking = [member for member in self.members if member.weight > 0 and not member.draining] or self.members
        candidates = [member for member in taking if member.name not in exclude] or taking
        if len(candidates) == 1:
            return candidates[0]
        usable = [member for member in candidates if await member.usable()] or candidates
        if session and self.balance == "live-sessions":
            return self._fewest_sessions(usable)
        return self._next(usable)

    def live_sessions(self, member: FleetMember) -> int:
        """Sessions live on `member` now: the proxy's own on it and the relayed ones opened through it."""
        return self.proxy_sessions(member.name) + member.work.relayed_sessions()

    def _fewest_sessions(self, members: list[FleetMember]) -> FleetMember:
        """The member whose live sessions, one more counted, are the fewest per unit of weight; the
        first in configuration order on a tie (weights 3:1 from no session: A A A B)."""
        return min(members, key=lambda member: (self.live_sessions(member) + 1) / member.weight)

    def _next(self, members: list[FleetMember]) -> FleetMember:
        """Smooth weighted round robin: each turn every candidate gains its weight, the largest
        total wins and pays back the sum of the weights (spreads a 3:1 split as A A B A, not A A A B)."""
        total = sum(member.weight for member in members)
        for member in members:
            self._current[member.name] += member.weight
        chosen = max(members, key=lambda member: self._current[member.name])
        self._current[chosen.name] -= total
        return chosen

    async def readiness(self, probe_timeout_s: float) -> tuple[str, str] | None:
        """None when new work can reach at least one backend now (docs/decisions.md, "Readiness"):
        one has answered a probe and neither a connection to it nor a probe of it has failed since.
        Otherwise every backend is probed (at most once a second each, up to `probe_timeout_s`
        each) and, if none answers, the first backend's name and why it is not ready."""
        if any(member.backend.ready for member in self.members):
            return None
        first: tuple[str, str] | None = None
        for member in self.members:
            backend = member.backend
            try:
                await asyncio.wait_for(backend.refresh(force=True), probe_timeout_s)
            except (TimeoutError, McpError, UnsupportedBackend) as exc:
                reason = exc.message if isinstance(exc, McpError) else str(exc) or "probe timed out"
            else:
                reason = backend.down or "not probed yet"  # probed less than a second ago
            if backend.ready:  # a Bearer challenge too: up and protected (docs/decisions.md §82)
                return None
            first = first or (backend.name, reason)
        return first

    async def refresh_all(self) -> None:
        """Probe every backend once (at start); unreachable ones are logged and left for later.
        Raises `UnsupportedBackend` for a backend that speaks no dialect the proxy serves, and
        `CommandFails` (the fleet closed first: no process left running) for a stdio backend whose
        command cannot be run or whose first process exited before answering the probe."""
        for member in self.members:
            try:
                await member.backend.refresh(force=True)
            except McpError as exc:  # logged by the handle as down; requests and the timer probe it again
                failure = start_failure(member)
                if failure is not None:
                    await self.close()
                    raise CommandFails(f"backend {member.name!r}: {failure}") from None
                log.debug("backend %s not reachable at start: %s", member.name, exc.message)

    async def keep_probing(self, interval_s: float) -> None:
        """Probe every backend again every `interval_s` seconds, for ever (run as a task; cancel to
        stop), so that a backend replaced while no request reached it is noticed within one interval
        (docs/behaviour.md §2) and `/readyz` reflects it."""
        while True:
            await asyncio.sleep(interval_s)
            for member in self.members:
                try:
                    await member.backend.refresh(force=True)
                except (McpError, UnsupportedBackend) as exc:  # logged by the handle when it goes down
                    log.debug("backend %s: timed probe failed: %s", member.name, exc)

    async def keep_checking(self, interval_s: float) -> None:
        """Check every backend's health every `interval_s` seconds (config `health_interval_ms`), for
        ever (run as a task; cancel to stop): one TCP connection each, all at once, each given
        `health_timeout_s(interval_s)`, so that a backend that died is down (`/readyz`, new work,
        requests bound to it: docs/decisions.md §78) within about one interval, and back once it
        accepts connections and answers a probe."""
        timeout_s = health_timeout_s(interval_s)
        while True:
            await asyncio.sleep(interval_s)
            if self.multi:
                await asyncio.gather(*(member.backend.check_health(timeout_s) for member in self.members))
            else:  # one backend: no task and gathering future a second (docs/performance.md "Issue 45, ninth")
                await self.first.backend.check_health(timeout_s)

    async def close(self) -> None:
        for member in self.members:
            await member.backend.close()


NOTE_RETRY_S = 5.0
"""How often at most an id without an owner makes the fleet read its note again (`Fleet.plain_missed`)."""


def health_timeout_s(interval_s: float) -> float:
    """How long a health check's TCP connection may take (s): the interval, within 1..5 s."""
    return min(max(interval_s, 1.0), 5.0)
