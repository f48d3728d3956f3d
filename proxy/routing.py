"""Which backend answers a request (docs/behaviour.md §2 "Upstream", §6 "Task ids"), for POST,
GET and DELETE alike.

What is already bound to a backend goes back to it, whatever the weights say: a task by the
backend sealed in its id, an MRTR retry by the backend sealed in its `requestState`, a proxy
session by the backend it got at `initialize` (the session remembers it), a relayed session by
the backend sealed in its `Mcp-Session-Id`. Everything else is new work for the fleet's smooth
weighted round robin (`proxy.fleet.Fleet.pick`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, TypeVar

from translators import jsonrpc
from translators.envelope import ModernMeta
from translators.errors import INVALID_PARAMS, McpError, missing_tasks_extension, task_of_removed
from translators.fleet_ids import listened_task_ids
from translators.protocol import MRTR_METHODS, TASK_METHODS_V2
from translators.sealing import PLAIN_TASK_IDS, RELAY_SESSION, RELAY_STATE, Keyring

from .fleet import Fleet, FleetMember
from .pairings.forward import UpstreamSession
from .printable import visible_ascii
from .upstream.endpoint import BackendUnreachable, reconnect_wait

T = TypeVar("T")


class Route(NamedTuple):
    """Where a call goes: the fleet `member`, and whether the call is `bound` to it (its task, its
    MRTR exchange, its session; with one backend, everything): bound work waits for a reconnecting
    backend and never goes elsewhere, and a draining backend's bound work is counted in its `work`
    (docs/decisions.md §84)."""

    member: FleetMember
    bound: bool


class RelayedSession(NamedTuple):
    """Where a relayed session's request goes (`Router.relayed_session`): the fleet `member`, and
    the session there (`upstream`: the backend's own id, and whether its task ids are plain)."""

    member: FleetMember
    upstream: UpstreamSession


class Router:
    """Routes requests over `fleet`, opening the ids `keyring` sealed; bound work waits up to
    `reconnect_wait_s` for a backend that is reconnecting."""

    def __init__(self, fleet: Fleet, keyring: Keyring, *, shared_store: bool = False, reconnect_wait_s: float = 0.0):
        self.fleet = fleet
        self.keyring = keyring
        self.reconnect_wait_s = reconnect_wait_s
        self._single: Route | None = None
        """The route of everything with one backend."""
        self._state_fields = (2, 3) if shared_store else (2,)
        """Field counts of a held exchange's `requestState`: a holding process is named only with a shared store."""

    async def drive(self, route: Route, attempt: Callable[[Route], Awaitable[T]], *, session: bool = False) -> T:
        """`attempt(route)`, and for new work whose backend could not be reached
        (`BackendUnreachable`: nothing was sent to it) `attempt` again on the next backend the fleet
        picks (a new `session`: as `Fleet.pick` places sessions), until one answers or every
        backend was tried; bound work is tried on its backend only, waiting for it to reconnect,
        and counted in the backend's bound work while it runs. With one backend all work waits for
        it (there is nowhere else to go)."""
        tried: set[str] = set()
        while True:
            work = route.member.work if route.bound else None
            if work is not None:
                work.begin()
            try:
                with reconnect_wait(self.reconnect_wait_s if route.bound or not self.fleet.multi else 0.0):
                    return await attempt(route)
            except BackendUnreachable:
                tried.add(route.member.name)
                if route.bound or len(tried) >= len(self.fleet.members):
                    raise
                route = Route(await self.fleet.pick(frozenset(tried), session=session), False)
            finally:
                if work is not None:
                    work.end()

    def modern(self, message: jsonrpc.Message, meta: ModernMeta, principal: str) -> Route | None:
        """The route of a checked modern request that is bound to its member: a task by the backend
        sealed in its id, an MRTR retry by the one sealed in its `requestState`; None for new work,
        which `new_work` places. With one backend, always it, bound (ids that do not unseal, or name
        another backend, are then refused where they are read): no coroutine to run. A plain id
        from before goes to the fleet's `plain_owner` (docs/decisions.md §83)."""
        fleet = self.fleet
        if not fleet.multi:
            route = self._single
            if route is None or route.member is not fleet.first:  # made again after a reload that changed it
                route = self._single = Route(fleet.first, True)
            if message.method in TASK_METHODS_V2:
                self._not_removed(message.params.get("taskId"), principal)
            return route
        params = message.params
        if message.method in TASK_METHODS_V2:
            if not meta.declares_tasks:
                raise missing_tasks_extension(f"{message.method} needs the tasks extension (io.modelcontextprotocol/tasks) declared on the request")
            return Route(fleet.named(self._task_backend(params.get("taskId"), principal)), True)
        if message.method == "subscriptions/listen":
            names = {self._task_backend(task_id, principal) for task_id in listened_task_ids(params)}
            if len(names) > 1:
                raise McpError(INVALID_PARAMS, "subscriptions/listen: with several backends, one subscription can only name tasks of one backend")
            if names:
                return Route(fleet.named(names.pop()), True)
        if message.method in MRTR_METHODS and "requestState" in params:
            member = fleet.get(self._state_backend(params["requestState"], principal))
            if member is None:
                raise McpError(INVALID_PARAMS, "Invalid requestState")
            return Route(member, True)
        return None

    async def new_work(self) -> Route:
        """The route of new work: the member the fleet's weighted round robin picks, not bound."""
        return Route(await self.fleet.pick(), False)

    def _not_removed(self, task_id: Any, principal: str) -> None:
        """Raise `task_of_removed` when `task_id` is sealed with a backend the fleet no longer has
        (the one backend left answers every other id, its own or not: decision 168)."""
        ref = self.keyring.opened_task_id(task_id, principal)
        if ref is not None and self.fleet.get(ref.backend) is None:
            raise task_of_removed(ref.backend)

    def _task_backend(self, task_id: Any, principal: str) -> str:
        """The backend of a task id: the one sealed in it, or for a plain id from before (a string
        that does not unseal) the fleet's `plain_owner` (docs/decisions.md §83). Raises
        `McpError(-32602)` "Unknown task" when neither applies."""
        try:
            return self.keyring.unseal_task_id(task_id, principal).backend
        except McpError:
            if not isinstance(task_id, str):
                raise
            owner = self.fleet.plain_owner()
            if owner is None:
                self.fleet.plain_missed()  # a note another replica wrote since may name its owner
                raise
            return owner.name

    def _state_backend(self, token: Any, principal: str) -> str:
        """The backend an MRTR `requestState` belongs to: sealed by the proxy for a held exchange
        (exchange id, backend, and with a shared store the holding process), or wrapping a relayed backend's own state (backend, state). Raises
        `McpError(-32602)` "Invalid requestState" for anything else (expired ones say so)."""
        try:
            relayed = self.keyring.unseal(RELAY_STATE, str(token), principal)  # (backend, its state)
        except ValueError:
            owner = self.fleet.plain_owner()
            if owner is not None and isinstance(token, str) and not self._seals_state(token, principal):
                return owner.name  # a plain relayed state from before (docs/decisions.md §83)
            try:
                held = self.keyring.unseal_request_state(token, principal, int(time.time() * 1000))  # (exchange, backend[, holder])
            except McpError:
                if owner is None and isinstance(token, str):
                    self.fleet.plain_missed()  # a note another replica wrote since may name its owner
                raise
            if len(held) not in self._state_fields:
                raise McpError(INVALID_PARAMS, "Invalid requestState") from None
            return held[1]
        if len(relayed) != 2:
            raise McpError(INVALID_PARAMS, "Invalid requestState")
        return relayed[0]

    def _seals_state(self, token: str, principal: str) -> bool:
        """Whether `token` is a `requestState` the proxy sealed for a held exchange (expired or not)."""
        try:
            self.keyring.unseal("request-state", token, principal)
        except ValueError:
            return False
        return True

    def relayed_session(self, session_id: str, principal: Callable[[], str] | None = None) -> RelayedSession | None:
        """Where a session id the proxy's own sessions do not hold goes: to the backend sealed in it,
        with the backend's own id, whatever the size of the fleet; a plain id from before (one that
        does not unseal) to the fleet's `plain_owner` unchanged (upstream id None, docs/decisions.md
        §83); None when there is no such owner (no such session: 404). An id sealed for a principal
        (a backend that cannot check its sessions' callers, decision 138) opens only for the caller's,
        `principal()` (asked only then; None: no caller, such ids open for nobody); another
        caller's is no such session. Whether the session's task ids pass unchanged is sealed in its
        id too (`PLAIN_TASK_IDS`, decision 190)."""
        opened = self._opened_session(session_id, principal)
        if opened is None:
            owner = self.fleet.plain_owner(issued=False)  # not the `plain_issuer`: no relay hands out plain session ids (decision 192)
            return None if owner is None else RelayedSession(owner, UpstreamSession(None, False))
        name, upstream_id, bound, plain_task_ids = opened
        member = self.fleet.get(name)
        # visible ASCII: the characters the session wire allows in a session id (core 2025-11-25, Session Management)
        if member is None or not visible_ascii(upstream_id) or bound == member.backend.connector.KNOWS_CALLERS:
            return None  # a backend no longer configured, an id no backend could have given, or sealed the other way
        return RelayedSession(member, UpstreamSession(upstream_id, plain_task_ids))

    def _opened_session(self, session_id: str, principal: Callable[[], str] | None) -> tuple[str, str, bool, bool] | None:
        """(backend name, upstream session id, whether it was sealed for the caller's principal,
        whether its task ids are plain) of a relayed session id; None when it opens neither for no
        principal nor for the caller's, or holds other fields than those."""
        fields, bound = self.keyring.opened(RELAY_SESSION, session_id, ""), False
        if fields is None and principal is not None:
            fields, bound = self.keyring.opened(RELAY_SESSION, session_id, principal()), True
        if fields is None or not (len(fields) == 2 or (len(fields) == 3 and fields[2] == PLAIN_TASK_IDS)):
            return None
        return fields[0], fields[1], bound, len(fields) == 3
