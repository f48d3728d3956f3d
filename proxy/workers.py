"""`serve --workers N`: the supervisor of N forked worker processes sharing one port
(`SO_REUSEPORT` sockets the supervisor holds, one per worker; docs/decisions.md §52, §170).

A worker that exits while the proxy is not stopping (killed, crashed, refused to start) is
replaced by a new one at once, and both are logged (WARNING: `worker <n> (pid <pid>) <how>;
started again as pid <new>`). At most `MAX_RESTARTS` replacements within `RESTART_WINDOW_S`: one
more means the workers cannot run (a worker that fails at start fails again), so the supervisor
logs an ERROR, stops the other workers (SIGTERM) and exits 1 rather than fork for ever. SIGINT and
SIGTERM are passed on to every worker, and then nothing is replaced. A restart's new supervisor,
once its workers serve, has the old one's workers stop (SIGUSR2) in the same way (`proxy/restart.py`).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

MAX_RESTARTS = 5
"""Most workers replaced within `RESTART_WINDOW_S`..."""
RESTART_WINDOW_S = 60.0
"""...seconds; one more stops the proxy (exit status 1)."""


def _how(status: int) -> str:
    """How a worker ended, from its wait status: `was killed by SIGKILL`, `exited with status 2`."""
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"


def _fork(serve: Callable[[int], int], number: int) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):  # the supervisor's handlers are not the worker's
                signal.signal(sig, signal.SIG_DFL)
            # A reload that reaches a worker before its own handler is installed is ignored, never its end.
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # the supervisor's restart handler is not the worker's
            code = serve(number)
        finally:
            os._exit(code)
    return pid


class Supervisor:
    """`count` forked processes that each `serve(number)` (returning an exit status; `number` is
    1..count), replaced when they die (within a bound), passed SIGHUP (each reloads), SIGINT and
    SIGTERM (each stops). `named(pids)` is told the workers' process ids each time they change."""

    def __init__(self, count: int, serve: Callable[[int], int], named: Callable[[list[int]], None] = lambda pids: None):
        self.count = count
        self.serve = serve
        self.named = named
        self.workers: dict[int, int] = {}  # pid -> worker number (1..count)
        self.stopping = False

    def start(self) -> None:
        """Fork the workers and install the supervisor's handlers."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda sig, _frame: self.end(sig))
        # A reload (docs/decisions.md §85): every worker re-reads the file itself; nothing stops.
        signal.signal(signal.SIGHUP, lambda _sig, _frame: self.send(signal.SIGHUP))
        for number in range(1, self.count + 1):
            self.workers[_fork(self.serve, number)] = number
        self.named(list(self.workers))

    def send(self, sig: int) -> None:
        for pid in list(self.workers):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def end(self, sig: int) -> None:
        """Stop every worker with `sig` and replace none: SIGTERM, or SIGUSR2 when a restart's new
        supervisor serves (each worker then hands over: `proxy/restart.py`)."""
        self.stopping = True
        self.send(sig)

    def supervise(self, other: Callable[[int, int], None] = lambda pid, status: None) -> int:
        """Reap and replace workers until all have ended after `end` (the worst exit status of those
        last workers, a signal's number as status & 0xFF), or 1 when workers had to be replaced more
        than `MAX_RESTARTS` times within `RESTART_WINDOW_S` s. A child that is not a worker (a
        restart's new supervisor) is given to `other(pid, wait status)`."""
        restarts: deque[float] = deque()
        worst = 0
        while self.workers:
            pid, status = os.wait()
            number = self.workers.pop(pid, None)
            if number is None:
                other(pid, status)
                continue
            if self.stopping:  # a replaced worker's status does not count: only how the workers stopped
                worst = max(worst, os.waitstatus_to_exitcode(status) & 0xFF)
                continue
            now = time.monotonic()
            while restarts and now - restarts[0] > RESTART_WINDOW_S:
                restarts.popleft()
            if len(restarts) >= MAX_RESTARTS:
                log.error("worker %d (pid %d) %s; workers were replaced %d times within %g s: stopping the proxy",
                          number, pid, _how(status), len(restarts), RESTART_WINDOW_S)
                self.end(signal.SIGTERM)
                while self.workers:
                    self.workers.pop(os.wait()[0], None)
                return 1
            restarts.append(now)
            new = _fork(self.serve, number)
            self.workers[new] = number
            self.named(list(self.workers))
            if self.stopping:  # SIGINT/SIGTERM arrived while it was being forked
                self.send(signal.SIGTERM)
            log.warning("worker %d (pid %d) %s; started again as pid %d", number, pid, _how(status), new)
        return worst
