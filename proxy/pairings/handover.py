"""MRTR exchanges handed over between processes sharing a Redis store (docs/decisions.md, "An MRTR
retry reaching another replica").

A held exchange (`proxy/pairings/mrtr.py`) is an upstream response still open in the process that
started it, the *holder*; the sealed `requestState` names that process. A retry reaching another
process is put to the holder over pub/sub on the holder's channel (`process:<name>`): the holder
answers the exchange's requests upstream, waits for its next round and replies on the asker's
channel with the round (`requests`), the upstream answer (`answer`) or an error (`error`);
notifications about the request come the same way while the asker waits. The holder's heartbeat
key decides whether it is alive: a retry naming a dead holder (or one not listening) is answered
-32602 "Unknown or expired requestState", never left hanging. The asker that loses its client
tells the holder (`cancel`); the exchange stays held for the client's next retry, as it would in
one process.

Messages (JSON objects with `kind` and `id`, the asker's request id):

* `resume` (asker → holder): `reply` (the asker's process), `backend`, `exchange`, `principal`,
  `method`, `name`, `responses` (key → the client's answer), `log_level`.
* `cancel` (asker → holder): `reply`.
* `notify` (holder → asker): `message` (a JSON-RPC notification for the client).
* `reply` (holder → asker): `requests` (key → `{method, params}`), or `answer` with `session`,
  `context` and `method` (what `finish` needs), or `error` (`{code, message, data}`).
* `held` (asker → holder): an answer or cancel of a held task (`proxy/pairings/held.py`): `op`
  ("answer" or "cancel"), `backend`, `task`, `principal`, `responses`, `reply`; the holder
  replies with an empty `reply` or its `error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from translators.errors import INTERNAL_ERROR, INVALID_PARAMS, McpError
from translators.model import InputRequest

from ..faces.modern import ModernRequest, Notify
from ..upstream.session_wire import SessionLost
from .mrtr import ExchangeBook

log = logging.getLogger(__name__)

CHANNEL = "process:"
"""Each process listens on `process:<its name>` for messages about exchanges it holds or waits on."""
LIVENESS_S = 1.0
"""How often an asker waiting on a holder's reply checks the holder's heartbeat."""
NOTIFY_TIMEOUT_S = 1.0
"""Longest a notification for a client may take to write before it is dropped (the listener
serves every exchange of the process)."""
GONE = "Unknown or expired requestState: the proxy process holding it is gone; send the original request again without it"



class HeldAt(NamedTuple):
    """Where an MRTR exchange is held: the process `holder`, for the backend `backend`, as `exchange`."""

    holder: str
    backend: str
    exchange: str

class Handover:
    """Both ends of the handover for one process. `store` is the shared store (`publish`,
    `listen`, `alive`, `process`); `book_for(backend)` is the backend's `ExchangeBook` here (None
    for a backend not configured). Run `listen()` as a task while the process serves."""

    def __init__(self, store: Any, book_for: Callable[[str], ExchangeBook | None]):
        self.store = store
        self.process: str = store.process
        self.book_for = book_for
        self._waiting: dict[str, tuple[asyncio.Future[dict[str, Any]], Notify]] = {}
        self._serving: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._telling: set[asyncio.Future[None]] = set()
        self.held_for: Callable[[str], Any] | None = None
        """The `HeldCalls` of a backend here (None for a backend not configured), for held tasks' answers and cancels."""

    async def listen(self) -> None:
        """Run until cancelled: serve the messages on this process's channel."""
        try:
            await self.store.listen(CHANNEL + self.process, self.deliver)
        finally:
            for task in list(self._serving.values()):
                task.cancel()

    # -- the asker --------------------------------------------------------------------------------

    async def resume(self, held: HeldAt, call: ModernRequest, name: str, responses: Mapping[str, Any]) -> dict[str, Any]:
        """Put a retry (`call`, of the prompt or resource `name`, answering with `responses`) to the
        process that holds its exchange (`held`) and wait for its reply (the `reply` message without
        `kind` and `id`). Raises `McpError(-32602)` when the holder is gone, stops beating, or does
        not hold the exchange, and the holder's error otherwise."""
        holder = held.holder
        request_id = secrets.token_hex(8)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = (future, call.notify)
        try:
            listeners = await self.store.publish(CHANNEL + holder, {
                "kind": "resume", "id": request_id, "reply": self.process, "backend": held.backend, "exchange": held.exchange,
                "principal": call.principal, "method": call.method, "name": name, "responses": dict(responses),
                "log_level": call.meta.log_level})
            if listeners == 0:
                raise McpError(INVALID_PARAMS, GONE)
            while not future.done():
                await asyncio.wait({future}, timeout=LIVENESS_S)
                if not future.done() and not await self.store.alive(holder):
                    raise McpError(INVALID_PARAMS, GONE)
        except asyncio.CancelledError:
            # The client went away: the holder keeps the exchange for the next retry.
            telling = asyncio.ensure_future(self._tell(holder, {"kind": "cancel", "id": request_id, "reply": self.process}))
            self._telling.add(telling)
            telling.add_done_callback(self._telling.discard)
            raise
        finally:
            self._waiting.pop(request_id, None)
        reply = future.result()
        error = reply.get("error")
        if isinstance(error, dict):
            raise McpError(int(error.get("code", INTERNAL_ERROR)), str(error.get("message", "")), error.get("data"))
        return reply

    async def _tell(self, process: str, payload: dict[str, Any]) -> None:
        try:
            await self.store.publish(CHANNEL + process, payload)
        except Exception as exc:  # the store is down: the other side's liveness check decides
            log.warning("handover: message to process %s not sent: %s", process, exc)

    async def held(self, holder: str, payload: dict[str, Any]) -> None:
        """Hand an answer or cancel of a held task to the process `holder` that has its call open
        (`proxy/pairings/held.py`; `payload`: `op`, `backend`, `task`, `principal`, `responses`)
        and wait for its acknowledgement. Raises the holder's error, and nothing when the holder
        is gone (its record then reads `interrupted`)."""
        request_id = secrets.token_hex(8)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = (future, _ignore)
        try:
            listeners = await self.store.publish(CHANNEL + holder, {**payload, "kind": "held", "id": request_id, "reply": self.process})
            while listeners and not future.done():
                await asyncio.wait({future}, timeout=LIVENESS_S)
                if not future.done() and not await self.store.alive(holder):
                    return
        finally:
            self._waiting.pop(request_id, None)
        error = future.result().get("error") if future.done() else None
        if isinstance(error, dict):
            raise McpError(int(error.get("code", INTERNAL_ERROR)), str(error.get("message", "")), error.get("data"))

    async def _serve_held(self, payload: dict[str, Any]) -> None:
        asker, request_id = str(payload.get("reply")), str(payload.get("id"))
        reply: dict[str, Any] = {}
        held = self.held_for(str(payload.get("backend"))) if self.held_for is not None else None
        try:
            if held is not None:
                await held.handed(payload)
        except McpError as exc:
            reply = {"error": {"code": exc.code, "message": exc.message, "data": exc.data}}
        except Exception as exc:
            log.exception("handover: serving a held task's %s for process %s", payload.get("op"), asker)
            reply = {"error": {"code": INTERNAL_ERROR, "message": f"Internal error: {type(exc).__name__}"}}
        await self._tell(asker, {"kind": "reply", "id": request_id, **reply})

    # -- both: messages arriving -------------------------------------------------------------------

    async def deliver(self, payload: dict[str, Any]) -> None:
        """One message on this process's channel (see the module docstring)."""
        kind, request_id = payload.get("kind"), str(payload.get("id"))
        if kind == "reply":
            waiting = self._waiting.get(request_id)
            if waiting is not None and not waiting[0].done():
                waiting[0].set_result(payload)
        elif kind == "notify":
            waiting = self._waiting.get(request_id)
            if waiting is not None and isinstance(payload.get("message"), dict):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(waiting[1](payload["message"]), NOTIFY_TIMEOUT_S)
        elif kind == "resume":
            key = (str(payload.get("reply")), request_id)
            task = asyncio.ensure_future(self._serve(payload))
            self._serving[key] = task
            task.add_done_callback(lambda _: self._serving.pop(key, None))
        elif kind == "held":
            task = asyncio.ensure_future(self._serve_held(payload))
            self._serving[(str(payload.get("reply")), request_id)] = task
            task.add_done_callback(lambda _: self._serving.pop((str(payload.get("reply")), request_id), None))
        elif kind == "cancel":
            task = self._serving.get((str(payload.get("reply")), request_id))
            if task is not None:
                task.cancel()

    # -- the holder -------------------------------------------------------------------------------

    async def _serve(self, payload: dict[str, Any]) -> None:
        asker, request_id = str(payload.get("reply")), str(payload.get("id"))
        try:
            reply = await self._round(payload, asker, request_id)
        except asyncio.CancelledError:
            return
        except McpError as exc:
            reply = {"error": {"code": exc.code, "message": exc.message, "data": exc.data}}
        except SessionLost:
            reply = {"error": {"code": INVALID_PARAMS, "message": "Unknown or expired requestState: the backend lost the session"}}
        except Exception as exc:
            log.exception("handover: serving a retry for process %s", asker)
            reply = {"error": {"code": INTERNAL_ERROR, "message": f"Internal error: {type(exc).__name__}"}}
        await self._tell(asker, {"kind": "reply", "id": request_id, **reply})

    async def _round(self, payload: dict[str, Any], asker: str, request_id: str) -> dict[str, Any]:
        """What `V2OverV1._resume` does for a local exchange, with the answer as a message."""
        book = self.book_for(str(payload.get("backend")))
        if book is None:
            raise McpError(INVALID_PARAMS, "Unknown or expired requestState: send the original request again without it")
        exchange = book.take(str(payload.get("exchange")), str(payload.get("principal")), str(payload.get("method")),
                             str(payload.get("name")))

        async def notify(message: dict[str, Any]) -> None:
            await self._tell(asker, {"kind": "notify", "id": request_id, "message": message})

        exchange.attend(notify, payload.get("log_level"))
        responses = payload.get("responses")
        try:
            await exchange.deliver(responses if isinstance(responses, dict) else {})
        except SessionLost:
            book.drop(exchange)
            raise
        try:
            requests = await exchange.next_round()
        finally:
            exchange.notify = None  # nobody waits on the exchange until the client's retry
        if requests is not None:
            book.hold(exchange)
            return {"requests": {key: request.to_wire() for key, request in requests.items()}}
        book.release(exchange)
        assert exchange.upstream is not None
        return {"answer": exchange.upstream.result(), "session": exchange.session.session_id or "",
                "context": exchange.context, "method": exchange.method}


async def _ignore(_message: dict[str, Any]) -> None:
    return None


def requests_of(reply: Mapping[str, Any]) -> dict[str, InputRequest]:
    """The round a holder replied with, by key."""
    return {key: InputRequest.model_validate(raw) for key, raw in (reply.get("requests") or {}).items()}
