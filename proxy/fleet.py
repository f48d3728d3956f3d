"""Several backends behind one proxy: one stack of rules per backend, and the router that spreads new
work over them by weight (docs/behaviour.md §2 "Upstream", §6 "Task ids").

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
import logging
import time
from typing import Any, Callable, Iterable

import aiohttp

from translators.errors import INVALID_PARAMS, McpError
from translators.fleet_ids import ids_to_backend, ids_to_client
from translators.sealing import Keyring, TaskRef

from .upstream.backend import Backend, UnsupportedBackend
from .config import Settings, Upstream
from .faces.modern import RELAY_SESSION, ModernFace
from .metrics import Metrics
from .state.store import TaskStateStore
from .pairings.v1_over_v2 import V1OverV2
from .pairings.carriage import V2SessionRules

log = logging.getLogger(__name__)

Rewrite = Callable[[dict[str, Any]], dict[str, Any]]
"""A whole JSON-RPC message in, the same message with its ids rewritten out."""
REVIVE_INTERVAL_S = 1.0
"""An unreachable backend is probed again by new work at most this often."""


class Stack:
    """One backend and the rules each face uses in front of it."""

    def __init__(self, upstream: Upstream, http: aiohttp.ClientSession, settings: Settings, keyring: Keyring, metrics: Metrics,
                 store: TaskStateStore | None = None):
        self.name = upstream.name
        self.weight = upstream.weight
        self.backend = Backend(upstream, http, settings, metrics=metrics, store=store)
        self.face = ModernFace(settings, keyring, self.backend)
        self.v1_rules = V1OverV2(settings, keyring, self.backend)
        self.v2_rules = V2SessionRules(settings, self.backend, self.face)
        self._revive_lock = asyncio.Lock()
        self._revive_at = 0.0

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
            return True  # the backend's handle has logged that it is back


class Fleet:
    """The configured backends, in configuration order. `multi` says whether relays must seal the
    ids they pass on (docs/behaviour.md §6: with one backend they pass through unchanged)."""

    def __init__(self, stacks: Iterable[Stack], keyring: Keyring):
        self.stacks = list(stacks)
        self.keyring = keyring
        if not self.stacks:
            raise ValueError("a fleet needs at least one backend")
        self._by_name = {stack.name: stack for stack in self.stacks}
        self._current = {stack.name: 0 for stack in self.stacks}
        self.multi = len(self.stacks) > 1

    @property
    def first(self) -> Stack:
        return self.stacks[0]

    def named(self, name: str) -> Stack:
        """The stack of the backend `name` sealed in an id. Raises `McpError(-32602)` "Unknown task"
        for a name no longer configured (the id outlived its backend)."""
        stack = self._by_name.get(name)
        if stack is None:
            raise McpError(INVALID_PARAMS, "Unknown task")
        return stack

    def get(self, name: str) -> Stack | None:
        """The stack of the backend `name`, None when no such backend is configured."""
        return self._by_name.get(name)

    def session_sealer(self, name: str) -> Callable[[str], str] | None:
        """How the session ids the backend `name` hands out are shown to relayed clients: sealed
        with the backend's name when there are several backends (inverse: `relayed_session`), else
        as they are (None)."""
        if not self.multi:
            return None
        return lambda session_id: self.keyring.seal(RELAY_SESSION, (name, session_id), "")

    def session_task_ids(self, name: str, upstream_id: str | None) -> tuple[Rewrite, Rewrite] | None:
        """With several backends, how task ids travel on a session relayed to the backend `name`
        (upstream session `upstream_id`): (toward the backend, toward the client), each applied to a
        whole JSON-RPC message (`translators.fleet_ids`). Toward the client a backend's task id is
        sealed with the backend and the session (principal "", like the session id: decision 25);
        toward the backend only ids sealed for this very session open, others are "Unknown task"
        (`McpError(-32602)`). None with one backend, or before the session exists (`initialize`,
        which carries no task ids): ids pass through unchanged."""
        if not self.multi or upstream_id is None:
            return None

        def seal(task_id: str) -> str:
            return self.keyring.seal_task_id(TaskRef(name, upstream_id, task_id), "")

        def unseal(task_id: str) -> str:
            ref = self.keyring.unseal_task_id(task_id, "")
            if (ref.backend, ref.session) != (name, upstream_id):
                raise McpError(INVALID_PARAMS, "Unknown task")
            return ref.task

        def unchanged(value: str) -> str:
            return value

        def to_backend(message: dict[str, Any]) -> dict[str, Any]:
            params = message.get("params")
            if isinstance(params, dict) and "taskId" in params and not isinstance(params["taskId"], str):
                self.keyring.unseal_task_id(params["taskId"], "")  # raises: not an id the proxy issued
            return ids_to_backend(message, unseal, unchanged)

        return to_backend, lambda message: ids_to_client(message, seal, unchanged)

    def relayed_session(self, session_id: str) -> tuple[Stack, str | None] | None:
        """Where a session id the proxy's own sessions do not hold goes: with one backend, to it
        unchanged (`(stack, None)`); with several, to the backend sealed in it, with the backend's
        own id; None for an id that does not unseal (no such session: 404)."""
        if not self.multi:
            return self.first, None
        try:
            name, upstream_id = self.keyring.unseal(RELAY_SESSION, session_id, "")
        except ValueError:
            return None
        stack = self._by_name.get(name)
        if stack is None or not _visible_ascii(upstream_id):
            return None  # a backend no longer configured, or an id no backend could have given
        return stack, upstream_id

    async def pick(self, exclude: frozenset[str] = frozenset()) -> Stack:
        """The backend for new work: smooth weighted round robin (each backend's share of picks is
        its weight over the sum) over the reachable backends not in `exclude`; when none is
        reachable, over all of them, so that the answer names a backend that failed."""
        candidates = [stack for stack in self.stacks if stack.name not in exclude] or self.stacks
        if len(candidates) == 1:
            return candidates[0]
        usable = [stack for stack in candidates if await stack.usable()] or candidates
        return self._next(usable)

    def _next(self, stacks: list[Stack]) -> Stack:
        """Smooth weighted round robin: each turn every candidate gains its weight, the largest
        total wins and pays back the sum of the weights (spreads a 3:1 split as A A B A, not A A A B)."""
        total = sum(stack.weight for stack in stacks)
        for stack in stacks:
            self._current[stack.name] += stack.weight
        chosen = max(stacks, key=lambda stack: self._current[stack.name])
        self._current[chosen.name] -= total
        return chosen

    async def readiness(self, probe_timeout_s: float) -> tuple[str, str] | None:
        """None when new work can reach at least one backend now (docs/decisions.md, "Readiness"):
        one has answered a probe and neither a connection to it nor a probe of it has failed since.
        Otherwise every backend is probed (at most once a second each, up to `probe_timeout_s`
        each) and, if none answers, the first backend's name and why it is not ready."""
        if any(stack.backend.ready for stack in self.stacks):
            return None
        first: tuple[str, str] | None = None
        for stack in self.stacks:
            backend = stack.backend
            try:
                await asyncio.wait_for(backend.refresh(force=True), probe_timeout_s)
            except (McpError, UnsupportedBackend, asyncio.TimeoutError) as exc:
                reason = exc.message if isinstance(exc, McpError) else str(exc) or "probe timed out"
            else:
                if backend.ready:
                    return None
                reason = backend.down or "not probed yet"  # probed less than a second ago
            first = first or (backend.name, reason)
        return first

    async def refresh_all(self) -> None:
        """Probe every backend once (at start); unreachable ones are logged and left for later.
        Raises `UnsupportedBackend` for a backend that speaks no dialect the proxy serves."""
        for stack in self.stacks:
            try:
                await stack.backend.refresh(force=True)
            except McpError as exc:  # logged by the handle as down; requests and the timer probe it again
                log.debug("backend %s not reachable at start: %s", stack.name, exc.message)

    async def keep_probing(self, interval_s: float) -> None:
        """Probe every backend again every `interval_s` seconds, for ever (run as a task; cancel to
        stop), so that a backend replaced while no request reached it is noticed within one interval
        (docs/behaviour.md §2) and `/readyz` reflects it."""
        while True:
            await asyncio.sleep(interval_s)
            for stack in self.stacks:
                try:
                    await stack.backend.refresh(force=True)
                except (McpError, UnsupportedBackend) as exc:  # logged by the handle when it goes down
                    log.debug("backend %s: timed probe failed: %s", stack.name, exc)

    async def close(self) -> None:
        for stack in self.stacks:
            await stack.backend.close()


def _visible_ascii(session_id: str) -> bool:
    """Whether `session_id` is a session id a backend may hand out: visible ASCII (0x21–0x7E),
    the characters the session wire allows (core 2025-11-25, Session Management)."""
    return bool(session_id) and all("!" <= ch <= "~" for ch in session_id)
