"""Whether a shared task state store (Redis) answers, and the error a request gets when it does not
(docs/decisions.md §76).

Every operation of the Redis store is bounded by `store_timeout_ms` (redis-py's `socket_timeout`
and `socket_connect_timeout`). One that fails to reach the store — refused, reset, or silent for
the whole bound — marks the store unreachable and raises `StoreUnreachable`: -32603, HTTP 503,
"task state store redis://host:port/db unreachable: <why>". While the store is unreachable an
operation fails at once, without waiting again, unless `RETRY_S` passed since the last attempt
(the store's heartbeat, every second, is that attempt too): a request touching the store several
times waits at most one bound. The change is logged once each way, WARNING, without a traceback:
`task state store <url> is unreachable: <why>` and `task state store <url> is reachable again`.
`/readyz` answers 503 while `reachable` is False (proxy/app.py).

A store that answers but refuses to write (Redis out of memory under `noeviction`, a read-only
replica, a snapshot that fails) raises `StoreRefused`: -32603, HTTP 503, "task state store <url>
refused the write: <the store's reason>"; logged once, WARNING, without a traceback (`task state
store <url> refuses writes: <reason>`), and once when a write is taken again (`... takes writes
again`). Reads still answer meanwhile, and `/readyz` stays as it is.
"""

from __future__ import annotations

import errno
import logging
import time
from urllib.parse import urlsplit, urlunsplit

from translators.errors import INTERNAL_ERROR, McpError

log = logging.getLogger(__name__)

RETRY_S = 0.5
"""While the store is unreachable, operations fail at once for this long after an attempt failed."""


class StoreTrouble(McpError):
    """-32603 (HTTP 503): the task state store failed an operation for `reason`; the message names
    the store (its URL without a password). Logged once by `StoreHealth` however many requests
    meet it, so those who catch it log it no more than at DEBUG (decision 76)."""

    WHAT = "failed"

    def __init__(self, store: str, reason: str):
        super().__init__(INTERNAL_ERROR, f"task state store {store} {self.WHAT}: {reason}", http_status=503)
        self.store = store
        self.reason = reason


class StoreUnreachable(StoreTrouble):
    """The store did not answer within `store_timeout_ms` or refused the connection."""

    WHAT = "unreachable"


class StoreRefused(StoreTrouble):
    """The store answers but refuses to write (Redis at its `maxmemory` with `noeviction`, a
    read-only replica, a failing snapshot)."""

    WHAT = "refused the write"


def display_url(url: str) -> str:
    """`url` with any password replaced by `***` (it names the store in logs, errors and /readyz)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def reason_of(exc: BaseException, timeout_ms: int) -> str:
    """A short reason for a failed operation: `no answer within <timeout_ms> ms`, `connection
    refused`, or the client's message."""
    if isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__ or "Timeout" in str(exc):
        return f"no answer within {timeout_ms} ms"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError) or getattr(cause, "errno", None) == errno.ECONNREFUSED:
            return "connection refused"
        cause = cause.__cause__ or cause.__context__
    if str(exc).startswith("Error 111 "):
        return "connection refused"
    return str(exc) or type(exc).__name__


class StoreHealth:
    """The reachability of one store, named `name` (a URL without password), each operation
    bounded by `timeout_ms` (ms)."""

    def __init__(self, name: str, timeout_ms: int):
        self.name = name
        self.timeout_ms = timeout_ms
        self.reachable = True
        self.reason: str | None = None
        """Why the store is unreachable, as the last attempt found (None while it is reachable)."""
        self.refusing: str | None = None
        """Why the store refused the last write, until a write is taken again (None: it takes them)."""
        self._failed_at = 0.0

    def before(self) -> StoreUnreachable | None:
        """The error to raise at once instead of trying (the store failed less than `RETRY_S` ago), or None: try."""
        if self.reachable or time.monotonic() - self._failed_at >= RETRY_S:
            return None
        return StoreUnreachable(self.name, self.reason or "unreachable")

    def failed(self, exc: BaseException) -> StoreUnreachable:
        """An operation could not reach the store (`exc`, the client's error): mark it
        unreachable (logged once per outage) and return the error to raise."""
        reason = reason_of(exc, self.timeout_ms)
        self._failed_at = time.monotonic()
        self.reason = reason  # the latest, for /readyz
        if self.reachable:
            self.reachable = False
            log.warning("task state store %s is unreachable: %s", self.name, reason)
        return StoreUnreachable(self.name, reason)

    def refused(self, reason: str) -> StoreRefused:
        """The store answered an operation by refusing to write (`reason`, the store's words): the
        error to raise. Logged once while it goes on (again when the reason changes). The store is
        still reachable and reads still answer, so `/readyz` is not changed by it."""
        self.answered()
        if self.refusing != reason:
            self.refusing = reason
            log.warning("task state store %s refuses writes: %s", self.name, reason)
        return StoreRefused(self.name, reason)

    def answered(self, *, wrote: bool = False) -> None:
        """An operation reached the store (`wrote`: and wrote to it): mark it reachable (logged
        once when it was not), and taking writes when it wrote (logged once when it refused them)."""
        if not self.reachable:
            self.reachable = True
            self.reason = None
            log.warning("task state store %s is reachable again", self.name)
        if wrote and self.refusing is not None:
            self.refusing = None
            log.warning("task state store %s takes writes again", self.name)


def store_not_ready(store: object) -> dict[str, str | None] | None:
    """The 503 body of `/readyz` while a shared store cannot be reached (its `health`: `StoreHealth`;
    docs/decisions.md §76), else None."""
    health = getattr(store, "health", None)
    if health is None or health.reachable:
        return None
    return {"status": "not ready", "store": health.name, "reason": health.reason}
