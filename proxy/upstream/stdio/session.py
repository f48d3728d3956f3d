"""The state of one virtual session carried over a stdio process, and of its requests in flight
(docs/behaviour.md §7 "stdio backends"): what `stdio_mux.ProcessSlot` routes the process's
messages to, and what the bridge answers a session's POST and GET from.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from translators import jsonrpc, multiplex
from translators.errors import McpError

from ..inbox import Inbox

BACKLOG = 256
"""Messages kept for a virtual session with no stream open to take them (oldest dropped first)."""


@dataclass(eq=False)
class Pending:
    """A virtual session's request in flight in the process: what it was, and the queue of
    (message, final) its POST answer streams (the response is final)."""

    session: VirtualSession | None
    client_id: jsonrpc.RequestId | None
    method: str
    task: str | None
    queue: Inbox[tuple[dict[str, Any], bool]] = field(default_factory=Inbox)
    questions: list[dict[str, Any]] = field(default_factory=list)
    """Server→client requests put on this request's stream (offered elsewhere if the response comes while one is unanswered)."""
    line: tuple[bytes, int] | None = None
    """The response's line from the process and the id in it, when the client gets it as it is but for its id
    (`translators.multiplex.line_with_id`): those bytes are sent rather than encoded again."""
    status: int = 200  # the answer's HTTP status when the response comes first (`fail`)

    def fail(self, error: McpError) -> None:
        """End with `error`, answered with its HTTP status (502 for a lost process's, decision 138)."""
        self.status = error.http_status or 200
        self.queue.put_nowait((jsonrpc.error_response(self.client_id, error), True))

    def put(self, message: dict[str, Any]) -> None:
        if "id" in message and "method" in message:
            self.questions.append(message)
        self.queue.put_nowait((message, False))


@dataclass(eq=False)
class VirtualSession:
    """One client session carried over a process: its id (the `Mcp-Session-Id` the bridge
    hands out), its tasks, resource subscriptions, requests in flight (process id → `Pending`), open
    GET stream (a queue, or None), the backlog kept for it, and when it was last used."""

    id: str
    slot: Any  # the `stdio_mux.ProcessSlot` carrying it (not imported: stdio_mux imports this module)
    tasks: set[str] = field(default_factory=set)
    running_tasks: set[str] = field(default_factory=set)
    settled: set[str] = field(default_factory=set)
    """Tasks of a kept session whose outcome the proxy's face keeps (`ProcessPool.outcome_kept`, decision 147)."""
    subscriptions: set[str] = field(default_factory=set)
    inflight: dict[int, Pending] = field(default_factory=dict)
    stream: asyncio.Queue[dict[str, Any]] | None = None
    backlog: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=BACKLOG))
    lost: bool = False
    kept: bool = False  # opened by the proxy's own session face: never ended for being idle (decision 140)
    last_used: float = field(default_factory=time.monotonic)  # monotonic s: a request began or ended (decision 140)

    @property
    def holds_tasks(self) -> bool:
        """Whether a task of this session may still need its process: one whose outcome the
        proxy's face does not keep (decision 147)."""
        return not self.settled.issuperset(self.tasks)

    @property
    def running(self) -> bool:
        """Whether a task of this session may still be working (not seen terminal yet)."""
        return bool(self.running_tasks)

    def deliver(self, message: dict[str, Any], prefer: Pending | None = None) -> None:
        """Put a message for this session where its client will read it: on `prefer`'s stream when
        that request is still in flight, else the GET stream, else the newest request in flight
        that may ask (not a quiet one), else the backlog."""
        if prefer is not None and any(p is prefer for p in self.inflight.values()):
            prefer.put(message)
        elif self.stream is not None:
            self.stream.put_nowait(message)
        elif asking := [p for p in self.inflight.values() if p.method not in multiplex.QUIET_METHODS]:
            asking[-1].put(message)
        else:
            self.backlog.append(message)

    def end(self) -> None:
        """The session is over: marked lost, its requests forgotten, its GET stream woken (to end)."""
        self.lost = True
        self.inflight.clear()
        if self.stream is not None:
            self.stream.put_nowait({})

    def flush_backlog(self, pending: Pending) -> None:
        """The backlog goes out on the stream of `pending`, a request that may ask just sent
        (`tasks/result` included; docs/decisions.md §56, §72): every message of no task, and those
        of the task `pending` names; another task's wait for a stream of theirs (the GET stream, or
        a request naming that task), in their order."""
        kept: deque[dict[str, Any]] = deque(maxlen=BACKLOG)
        for message in self.backlog:
            route = multiplex.route_of(message)
            if route.kind != "task" or route.key == pending.task:
                pending.put(message)
            else:
                kept.append(message)
        self.backlog = kept
