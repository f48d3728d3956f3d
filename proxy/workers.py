"""`serve --workers N`: the supervisor of N forked worker processes sharing one port
(`SO_REUSEPORT`; docs/decisions.md §52).

A worker that exits while the proxy is not stopping (killed, crashed, refused to start) is
replaced by a new one at once, and both are logged (WARNING: `worker <n> (pid <pid>) <how>;
started again as pid <new>`). At most `MAX_RESTARTS` replacements within `RESTART_WINDOW_S`: one
more means the workers cannot run (a worker that fails at start fails again), so the supervisor
logs an ERROR, stops the other workers (SIGTERM) and exits 1 rather than fork for ever. SIGINT and
SIGTERM are passed on to every worker, and then nothing is replaced.
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


def _fork(serve: Callable[[], int]) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):  # the supervisor's handlers are not the worker's
                signal.signal(sig, signal.SIG_DFL)
            # A reload that reaches a worker before its own handler is installed is ignored, never its end.
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # the supervisor's handler is not the worker's: no restart of one worker
            code = serve()
        finally:
            os._exit(code)
    return pid


def run_workers(count: int, serve: Callable[[], int], named: Callable[[list[int]], None] = lambda pids: None) -> int:
    """Fork `count` processes that each `serve()` (returning an exit status), replace those that
    die, pass SIGHUP on to them (each reloads), and return when all have ended after SIGINT/SIGTERM (the worst exit status of those
    last workers, a signal's number as status & 0xFF), or 1 when
    workers had to be replaced more than `MAX_RESTARTS` times within `RESTART_WINDOW_S` s.
    `named(pids)` is told the workers' process ids each time they change."""
    workers: dict[int, int] = {}  # pid -> worker number (1..count)
    for number in range(1, count + 1):
        workers[_fork(serve)] = number
    named(list(workers))
    stopping = False

    def stop_all(sig: int) -> None:
        for pid in list(workers):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def forward(sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        stop_all(sig)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    # A reload (docs/decisions.md §85): every worker re-reads the file itself; nothing stops.
    signal.signal(signal.SIGHUP, lambda _sig, _frame: stop_all(signal.SIGHUP))
    restarts: deque[float] = deque()
    worst = 0
    while workers:
        pid, status = os.wait()
        number = workers.pop(pid, None)
        if number is None:
            continue
        if stopping:  # a replaced worker's status does not count: only how the workers stopped
            worst = max(worst, os.waitstatus_to_exitcode(status) & 0xFF)
            continue
        now = time.monotonic()
        while restarts and now - restarts[0] > RESTART_WINDOW_S:
            restarts.popleft()
        if len(restarts) >= MAX_RESTARTS:
            log.error("worker %d (pid %d) %s; workers were replaced %d times within %g s: stopping the proxy",
                      number, pid, _how(status), len(restarts), RESTART_WINDOW_S)
            stopping = True
            stop_all(signal.SIGTERM)
            for _ in range(len(workers)):
                os.wait()
            return 1
        restarts.append(now)
        new = _fork(serve)
        workers[new] = number
        named(list(workers))
        if stopping:  # SIGINT/SIGTERM arrived while it was being forked
            stop_all(signal.SIGTERM)
        log.warning("worker %d (pid %d) %s; started again as pid %d", number, pid, _how(status), new)
    return worst
