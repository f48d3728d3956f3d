"""MRTR rounds (core 2026-07-28, MRTR): held upstream exchanges, and the one rounds loop.

Synchronous MRTR over a session-wire backend (docs/behaviour.md §4.8; core 2026-07-28 MRTR).

When a v1 backend sends a server→client request while a synchronous call (`tools/call`,
`prompts/get`, `resources/read`) is in flight, the proxy keeps that upstream exchange open, answers
the client with an `InputRequiredResult` whose sealed `requestState` names the held exchange, and,
when the client retries with `inputResponses`, answers upstream and continues reading the same
upstream response. An exchange lives in the process that started it; with a shared store a retry
reaching another process is handed to it (`proxy/pairings/handover.py`). An unknown or expired one
is -32602.

A session client is asked instead (`input_rounds`): the proxy puts each round's requests to it on
the POST's stream and retries upstream with the answers.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from translators import jsonrpc
from translators.errors import INTERNAL_ERROR, INVALID_PARAMS, McpError
from translators.inputs import input_key, input_request_from_v1, input_response_to_v1, is_input_request, mrtr_retry_params
from translators.model import InputRequest
from translators.streaming import request_notification

from ..faces.modern import Notify
from ..upstream.session_wire import UpstreamSession, refuse_server_request

BATCH_S = 0.05
"""After a first request for input arrives, how long to wait for others sent with it (e.g. two
questions asked concurrently) so they go to the client in one round."""


Asked = tuple[str, str, str, Mapping[str, str]]
"""What an exchange holds the request of, (principal, method, name, headers): who asked, its
method and the tool, prompt or resource name, and the headers its upstream requests carry. A
plain tuple: one is made for every call that may ask for input."""

class Exchange:
    """One held upstream request and the requests for input it is waiting on."""

    def __init__(self, exchange_id: str, asked: Asked, session: UpstreamSession, expires_at: float, context: Any = None):
        self.id = exchange_id
        self.principal, self.method, self.name, headers = asked
        self.session = session
        self.headers = dict(headers)
        self.expires_at = expires_at
        self.context = context
        self.outstanding: dict[str, tuple[jsonrpc.RequestId, InputRequest]] = {}
        self.upstream: asyncio.Task[dict[str, Any]] | None = None
        self._count = 0
        self._waiters: list[asyncio.Future[None]] = []
        """One per `next_round` waiting: resolved by the next request for input or the upstream call's end."""
        self.version = 0
        """Counts changes of `outstanding` (a request arrived, one was answered): `changed` waits for one."""
        self._change_waiters: list[asyncio.Future[None]] = []
        """One per `changed` waiting: resolved by the next change or the upstream call's end."""
        self.notify: Notify | None = None
        """Where notifications about the request go while a client waits on one of its rounds
        (None between rounds: they are dropped, no client is waiting)."""
        self.log_level: str | None = None

    def attend(self, notify: Notify, log_level: str | None) -> None:
        """A client waits on this exchange's next round: its notifications go to `notify`
        (`translators.streaming.request_notification`, log messages at `log_level` or above)."""
        self.notify = notify
        self.log_level = log_level

    async def _on_notification(self, message: dict[str, Any]) -> None:
        notify = self.notify
        if notify is not None:
            out = request_notification(message, self.log_level)
            if out is not None:
                await notify(out)

    def start(self, call: Callable[..., Awaitable[dict[str, Any]]]) -> None:
        """Run `call(on_server_request=..., on_notification=...)` in the background: the upstream
        request, or the reading of its answer's SSE stream (`UpstreamSession.open`)."""
        self.upstream = asyncio.ensure_future(self._called(call))
        self.upstream.add_done_callback(self._ended)

    async def _called(self, call: Callable[..., Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """The upstream call, waking whoever waits on it in the call's own last step: a client's
        round then resumes in the next turn of the event loop, not one turn after the task's done
        callbacks (about 20,000 instructions a translated call; docs/decisions.md §183)."""
        try:
            return await call(on_server_request=self._on_server_request, on_notification=self._on_notification)
        finally:
            self._wake()
            self._wake(self._change_waiters)

    def _ended(self, done: asyncio.Task[dict[str, Any]]) -> None:
        if not done.cancelled():
            done.exception()  # an abandoned exchange's outcome is nobody's business: not logged as unretrieved
        self._wake()  # a call cancelled before it began never ran `_called`
        self._wake(self._change_waiters)

    def _wake(self, waiters: list[asyncio.Future[None]] | None = None) -> None:
        for waiter in self._waiters if waiters is None else waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _on_server_request(self, message: dict[str, Any]) -> dict[str, Any] | None:
        if not is_input_request(message):
            return await refuse_server_request(message)
        self._count += 1
        self.outstanding[input_key("r", self._count)] = (message.get("id"), input_request_from_v1(message))  # type: ignore[assignment]
        self._wake()
        self._note_change()
        return None

    def _note_change(self) -> None:
        self.version += 1
        self._wake(self._change_waiters)

    async def changed(self, seen: int) -> None:
        """Wait until `version` is no longer `seen` (requests for input arrived or were answered)
        or the upstream call ended (a held task's driver, `proxy/pairings/held.py`)."""
        assert self.upstream is not None
        while self.version == seen and not self.upstream.done():
            waiter = asyncio.get_running_loop().create_future()
            self._change_waiters.append(waiter)
            try:
                await waiter
            finally:
                self._change_waiters.remove(waiter)

    async def deliver(self, responses: Mapping[str, Any]) -> None:
        """Answer upstream each outstanding key present in `responses`; other keys are ignored.
        Raises `McpError` (502) or `SessionLost` when the backend does not take an answer."""
        for key, value in responses.items():
            held = self.outstanding.pop(key, None)  # taken at once: a concurrent retry finds it answered
            if held is None:
                continue
            try:
                await self.session.deliver(input_response_to_v1(held[0], value), headers=self.headers)
            except BaseException:
                self.outstanding[key] = held  # the backend did not take it: the key stays outstanding
                raise
            self._note_change()

    async def next_round(self) -> dict[str, InputRequest] | None:
        """Wait until the upstream call ends (None; its result is `upstream.result()`) or requests
        for input are outstanding (returned by key)."""
        assert self.upstream is not None
        if not self.outstanding:
            if not self.upstream.done():
                # One future, resolved by `_wake` (no waiter task, no `asyncio.wait`: a sync call
                # pays for one await). A cancelled round cancels only this future, never the call.
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                try:
                    await waiter
                finally:
                    self._waiters.remove(waiter)
            if self.outstanding and not self.upstream.done():
                await asyncio.sleep(BATCH_S)
        if self.upstream.done():
            self.outstanding.clear()  # the backend stopped waiting for them
            return None
        return {key: request for key, (_, request) in self.outstanding.items()}

    def abandon(self) -> None:
        """Give up on the exchange: the upstream request is cancelled (the session wire is told with
        `notifications/cancelled`)."""
        if self.upstream is not None and not self.upstream.done():
            self.upstream.cancel()


@dataclass(frozen=True)
class Finished:
    """What finishing an exchange held by another process needs of it (`V2OverV1.finish`)."""

    method: str
    context: Any
    session: UpstreamSession


class ExchangeBook:
    """Held exchanges by id, each dropped (and cancelled upstream) when it expires. `handover`
    (set when the store is shared) reaches exchanges other processes hold."""

    def __init__(self, *, lifetime_ms: int, max_exchanges: int = 10_000):
        self.lifetime_s = lifetime_ms / 1000
        self.max_exchanges = max_exchanges
        self._held: dict[str, Exchange] = {}
        self.handover: Any = None
        """A `proxy.pairings.handover.Handover` when the store is shared (it imports this module)."""

    def holds(self, exchange_id: str) -> bool:
        """Whether this process holds the exchange `exchange_id` now."""
        return exchange_id in self._held

    def open(self, asked: Asked, session: UpstreamSession, context: Any = None) -> Exchange:
        """A new exchange (not yet held: `hold` it when a round ends with input required)."""
        return Exchange(secrets.token_urlsafe(18), asked, session, time.monotonic() + self.lifetime_s, context)

    def hold(self, exchange: Exchange) -> None:
        self._sweep()
        if len(self._held) >= self.max_exchanges:
            oldest = min(self._held.values(), key=lambda e: e.expires_at)
            self.drop(oldest)
        self._held[exchange.id] = exchange

    def take(self, exchange_id: str, principal: str, method: str, name: str) -> Exchange:
        """The held exchange for a retry. Raises `McpError(-32602)` when it is unknown, expired,
        another principal's, or for another method or name."""
        self._sweep()
        exchange = self._held.get(exchange_id)
        if exchange is None or (exchange.principal, exchange.method, exchange.name) != (principal, method, name):
            raise McpError(INVALID_PARAMS, "Unknown or expired requestState: send the original request again without it")
        return exchange

    def drop(self, exchange: Exchange) -> None:
        """Forget an exchange and cancel its upstream request if it still runs."""
        self._held.pop(exchange.id, None)
        exchange.abandon()

    def is_held(self, exchange: Exchange) -> bool:
        return self._held.get(exchange.id) is exchange

    def release(self, exchange: Exchange) -> None:
        """Forget an exchange whose upstream request ended."""
        self._held.pop(exchange.id, None)

    def _sweep(self) -> None:
        now = time.monotonic()
        for exchange in [e for e in self._held.values() if e.expires_at <= now]:
            self.drop(exchange)

    def close(self) -> None:
        for exchange in list(self._held.values()):
            self.drop(exchange)


MAX_ROUNDS = 16
"""Most input rounds one request may take before the proxy gives up on it (every pairing that
turns MRTR rounds into questions to a session client: `input_rounds`)."""


async def input_rounds(method: str, params: dict[str, Any], result: dict[str, Any],
                       once: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
                       ask: Callable[[InputRequest], Awaitable[dict[str, Any] | McpError]]) -> dict[str, Any]:
    """Carry a request's MRTR rounds (core 2026-07-28, MRTR) to a client that is asked instead:
    while `result` is an `InputRequiredResult`, each of its `inputRequests` is put to the client
    (`ask`), and the request is sent again (`once`) with the answers and the round's
    `requestState` (`translators.inputs.mrtr_retry_params`). Returns the first result that asks
    for nothing. Raises the client's error answer (`McpError`), and `McpError(-32603)` after
    `MAX_ROUNDS` rounds."""
    rounds = 0
    while result.get("resultType") == "input_required":
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise McpError(INTERNAL_ERROR, f"{method} asked for input more than {MAX_ROUNDS} times")
        responses: dict[str, Any] = {}
        for key, raw in (result.get("inputRequests") or {}).items():
            answer = await ask(InputRequest.model_validate(raw))
            if isinstance(answer, McpError):
                raise answer
            responses[key] = answer
        result = await once(mrtr_retry_params(params, result, responses))
    return result
