"""`mcp-tasks-proxy restart` and `SIGUSR2`: a new serving process takes over from the running one
without a refused connection (docs/operations.md "Restart and upgrade", docs/decisions.md §169, §170).

The running process (the old one), on `SIGUSR2`, starts `python -m proxy serve` again with its own
arguments, from the installed code (an upgrade is a restart), and hands it its listening sockets:
they are inherited (`pass_fds`), so both hold each socket and its queue of connections, as nginx's
binary upgrade and HAProxy's `-x` do. The new process reads its configuration and imports the proxy,
then says it is ready on a pipe (or why it cannot serve: `refused <reason>`); only then does the
old one stop: it stops accepting (its copy of the socket closes; the new one's stays open), drains
its connections, finishes its requests in flight, GET streams and held calls within
`shutdown_timeout_ms`, closes its store and exits.

* One process (`Restarter`, `Takeover`): the new process says it is ready first, then waits for the
  old one's locks (`serve.pid`, the SQLite store: one process per state directory, decision 44),
  opens the state, and accepts: connections that arrived meanwhile waited in the socket's queue.
* `serve --workers N` (`WorkersRestarter`, `WorkerSlot`): the supervisor holds the N `SO_REUSEPORT`
  sockets its workers serve on, and hands all N over; the new supervisor starts N workers on them
  (the store is shared: Redis), and says it is ready once every worker serves; then the old
  supervisor tells its workers (`SIGUSR2`) to stop as a one-process restart's old process does.

The new process (the new supervisor) writes the verdict to `<state_dir>/restarts/<old pid>.json`
once it serves and holds `serve.pid`, which `mcp-tasks-proxy restart` waits for; a refusal is
written by the old process, which keeps serving. One restart at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import Settings
from .printable import escaped
from .reload import signal_target, target_arguments, write_json
from .version import version

if TYPE_CHECKING:
    from .app import RunningProxy

log = logging.getLogger(__name__)

TAKEOVER_ENV = "MCP_TASKS_PROXY_TAKEOVER"
"""`<old pid>:<listening fd>[,<listening fd>...]:<ready pipe fd>`, set for the new process of a restart."""
RESTARTS = "restarts"
"""In `state_dir`: `<old pid>.json`, each restart's verdict."""
WAIT_S = 120.0
"""How long `mcp-tasks-proxy restart` waits for the verdict by default (the old process finishes first)."""
HANDOVER_GRACE_S = 1.0
"""How long the old process keeps its open connections after it stopped accepting: each answers its
next request with `Connection: close`, an idle one closes then (`connections.drain_connections`)."""
LOCK_WAIT_MARGIN_S = 60.0
"""The new process waits for the old one's locks `shutdown_timeout_ms` and this much more."""
READY = b"ready\n"
REFUSED = b"refused "


def verdict_path(state_dir: str, old_pid: int) -> Path:
    return Path(state_dir).expanduser() / RESTARTS / f"{old_pid}.json"


def _record(state_dir: str, old_pid: int, verdict: dict[str, Any]) -> None:
    try:
        write_json(verdict_path(state_dir, old_pid), {"old_pid": old_pid, "at_ms": int(time.time() * 1000), **verdict})
    except OSError as exc:
        log.warning("cannot write the restart's verdict (`mcp-tasks-proxy restart` waits for it): %s", exc.strerror)


def _say(fd: int, said: bytes) -> None:
    """One line on a ready pipe (one write under PIPE_BUF: whole for the reader), then closed."""
    with contextlib.suppress(OSError):
        os.write(fd, said[:500].replace(b"\n", b" ").rstrip() + b"\n")
    with contextlib.suppress(OSError):
        os.close(fd)


def _refusal(said: bytes, child: int, status: int | None) -> str:
    """Why a new process did not become ready: what it said (`refused <reason>`), else how it ended."""
    if said.startswith(REFUSED):
        return said[len(REFUSED):].decode(errors="replace").strip()
    ended = f"exited with status {status}" if status is not None else "closed its pipe"
    return f"the new process (pid {child}) {ended} before it could serve; its log says why"


# -- the old process ------------------------------------------------------------------------------


def spawn_successor(listening: list[int]) -> tuple[subprocess.Popen[bytes], int]:
    """Start `python -P -m proxy <this process's arguments>` with the sockets `listening` and the
    write end of a ready pipe inherited (`TAKEOVER_ENV`); returns it and the pipe's read end.
    Raises `OSError` when it cannot be started."""
    ready_read, ready_write = os.pipe()
    # -P: the installed code, never a `proxy` directory in the working directory (Python 3.11+)
    argv = [sys.executable, "-P", "-m", "proxy", *sys.argv[1:]]
    env = {**os.environ, TAKEOVER_ENV: f"{os.getpid()}:{','.join(map(str, listening))}:{ready_write}"}
    try:
        child = subprocess.Popen(argv, env=env, pass_fds=(*listening, ready_write))
    except OSError:
        os.close(ready_read)
        raise
    finally:
        os.close(ready_write)
    log.info("SIGUSR2: restarting: new process %d (%s) takes over the listening socket%s once it is ready",
             child.pid, " ".join(argv), "s" if len(listening) > 1 else "")
    return child, ready_read


class Restarter:
    """The `SIGUSR2` handler of a serving process (module docstring). `stop` is the event that ends
    the process gracefully (as SIGTERM does). In a worker of `serve --workers N` (`worker`), the
    signal comes from its supervisor, which has handed over: the worker stops as an old process does."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event, settings: Settings, *, worker: bool = False):
        self.loop = loop
        self.stop = stop
        self.settings = settings
        self.worker = worker
        self.running: RunningProxy | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.handed_over = False
        self._waiting: asyncio.Future[None] | None = None
        loop.add_signal_handler(signal.SIGUSR2, self.signalled)
        if worker and HANDOVER_ASKED.is_set():  # the supervisor asked before this handler was installed
            self.signalled()

    def attach(self, running: RunningProxy) -> None:
        self.running = running

    def signalled(self) -> None:
        if self.worker:
            log.info("SIGUSR2 from the supervisor: a new generation of workers serves; this worker (%d) stops accepting", os.getpid())
            self.handed_over = True
            self.stop.set()
            return
        if self.running is None or self.handed_over:
            log.warning("SIGUSR2: %s; no restart", "not serving yet" if self.running is None else "already handed over")
            return
        if self.child is not None:
            log.warning("SIGUSR2: a restart is under way (new process %d); no other", self.child.pid)
            return
        try:
            self.child, ready_read = spawn_successor([self.running.listening_fd()])
        except OSError as exc:
            _record(self.settings.state_dir, os.getpid(), {"outcome": "refused", "reason": f"cannot start {sys.executable}: {exc.strerror}"})
            return
        os.set_blocking(ready_read, False)
        self.loop.add_reader(ready_read, self._heard, ready_read)

    def _heard(self, fd: int) -> None:
        try:
            said = os.read(fd, 4096)
        except BlockingIOError:
            return
        self.loop.remove_reader(fd)
        os.close(fd)
        child = self.child
        assert child is not None
        if said == READY:
            self.handed_over = True
            log.info("restart: new process %d is ready; this one (%d) stops accepting and finishes its work", child.pid, os.getpid())
            self.stop.set()
            return
        self._waiting = asyncio.ensure_future(self._refused(child, said))

    async def _refused(self, child: subprocess.Popen[bytes], said: bytes) -> None:
        status = await asyncio.to_thread(child.wait)
        self.child = None
        reason = _refusal(said, child.pid, status)
        log.error("restart refused, this process (%d) keeps serving: %s", os.getpid(), reason)
        _record(self.settings.state_dir, os.getpid(), {"outcome": "refused", "reason": reason})


HANDOVER_ASKED = threading.Event()
"""Set by a worker's first `SIGUSR2` handler (`ask_handover`), before its `Restarter` is installed."""


def ask_handover(_sig: int, _frame: object) -> None:
    HANDOVER_ASKED.set()


class WorkersRestarter:
    """The `SIGUSR2` handler of the supervisor of `serve --workers N`: starts the new supervisor with
    the workers' sockets (`listening`), and once it says its workers serve, `hand_over()` (the
    supervisor's: each worker gets `SIGUSR2`, none is replaced). The new supervisor is a child of
    this one: the supervisor's wait loop gives it to `reaped` when it ends before it was ready."""

    def __init__(self, settings: Settings, listening: list[int], hand_over: Callable[[], None]):
        self.settings = settings
        self.listening = listening
        self.hand_over = hand_over
        self.child: subprocess.Popen[bytes] | None = None
        self.handed_over = False
        self._reader: threading.Thread | None = None
        self._said = b""

    def signalled(self, _sig: int, _frame: object) -> None:
        if self.handed_over or self.child is not None:
            log.warning("SIGUSR2: %s; no other", "already handed over" if self.handed_over else "a restart is under way")
            return
        try:
            self.child, ready_read = spawn_successor(self.listening)
        except OSError as exc:
            _record(self.settings.state_dir, os.getpid(), {"outcome": "refused", "reason": f"cannot start {sys.executable}: {exc.strerror}"})
            return
        self._reader = threading.Thread(target=self._listen, args=(ready_read, self.child.pid), daemon=True)
        self._reader.start()

    def _listen(self, fd: int, child: int) -> None:
        with contextlib.closing(os.fdopen(fd, "rb", buffering=0)) as pipe:
            self._said = pipe.read(4096) or b""
        if self._said == READY:
            self.handed_over = True
            log.info("restart: new supervisor %d serves; this one (%d) hands over: its workers stop accepting and finish",
                     child, os.getpid())
            self.hand_over()

    def reaped(self, pid: int, status: int) -> None:
        """A child that is not a worker ended: the new supervisor, before it was ready (refused)."""
        if self.child is None or pid != self.child.pid:
            return
        if self._reader is not None:
            self._reader.join(5)  # its pipe is at its end: the child has exited
        reason = _refusal(self._said, pid, os.waitstatus_to_exitcode(status))
        self.child = None
        log.error("restart refused, this supervisor (%d) and its workers keep serving: %s", os.getpid(), reason)
        _record(self.settings.state_dir, os.getpid(), {"outcome": "refused", "reason": reason})


# -- the new process ------------------------------------------------------------------------------


class Takeover:
    """What the new process of a restart was handed (`TAKEOVER_ENV`): the old process's id, the
    listening sockets' descriptors (one per worker), and the pipe to say it is ready on."""

    def __init__(self, old_pid: int, listening_fds: list[int], ready_fd: int):
        self.old_pid = old_pid
        self.listening_fds = listening_fds
        self.ready_fd = ready_fd
        self.at_ms = int(time.time() * 1000)
        self.accept_first = True
        """Accept before the first probes (`app.start(taking_over=…)`): the old process has stopped."""

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Takeover | None:
        """The takeover this process was started for (the variable is then removed, so that a later
        restart of this process is not mistaken for it); None for an ordinary start."""
        value = environ.get(TAKEOVER_ENV)
        if value is None:
            return None
        os.environ.pop(TAKEOVER_ENV, None)
        try:
            old, listening, ready = value.split(":")
            return cls(int(old), [int(fd) for fd in listening.split(",")], int(ready))
        except ValueError:
            return None

    @property
    def listening_fd(self) -> int:
        return self.listening_fds[0]

    def mismatch(self, settings: Settings) -> str | None:
        """Why these settings cannot serve on the sockets handed over: a changed number of workers."""
        if len(self.listening_fds) == settings.workers:
            return None
        return (f"workers = {settings.workers}, but the running proxy has {len(self.listening_fds)} worker(s): a restart keeps "
                "their number (their sockets are handed over); stop and start the proxy to change it")

    def ready(self) -> None:
        """Tell the old process to stop accepting and finish (it then releases the locks)."""
        _say(self.ready_fd, READY)

    def refuse(self, reason: str) -> None:
        """Tell the old process why this one cannot serve (it keeps serving and says so)."""
        _say(self.ready_fd, REFUSED + reason.encode(errors="replace"))

    def lock_wait_s(self, settings: Settings) -> float:
        """How long to wait for the old process's locks: its stop (requests in flight, then held
        calls, each up to `shutdown_timeout_ms`) and a margin."""
        return 2 * settings.shutdown_timeout_ms / 1000 + LOCK_WAIT_MARGIN_S

    def serving(self, settings: Settings) -> None:
        _record(settings.state_dir, self.old_pid, {"outcome": "serving", "new_pid": os.getpid(), "version": version()})

    def failed(self, settings: Settings, reason: str) -> None:
        _record(settings.state_dir, self.old_pid, {"outcome": "failed", "new_pid": os.getpid(), "reason": reason})


class WorkerSlot:
    """What a worker of `serve --workers N` serves on: its socket (held by the supervisor), and, in
    the first workers of a restart's new supervisor, the pipe on which it says it serves or why it
    cannot (`gather`)."""

    accept_first = False

    def __init__(self, listening_fd: int, ready_fd: int | None):
        self.listening_fd = listening_fd
        self.ready_fd = ready_fd

    def serving(self, _settings: Settings) -> None:
        if self.ready_fd is not None:
            _say(self.ready_fd, READY)

    def failed(self, _settings: Settings, reason: str) -> None:
        if self.ready_fd is not None:
            _say(self.ready_fd, REFUSED + f"a worker cannot serve: {reason}".encode(errors="replace"))

    @staticmethod
    def gather(fd: int, count: int, timeout_s: float) -> str | None:
        """Wait until `count` workers said they serve on the pipe `fd`: None, or why not (one
        refused, all ended, or `timeout_s` passed). Closes `fd`."""
        deadline = time.monotonic() + timeout_s
        said = b""
        with contextlib.closing(os.fdopen(fd, "rb", buffering=0)) as pipe:
            while said.count(READY) < count:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([pipe], [], [], left)[0]:
                    return f"the new workers did not all serve within {timeout_s:g} s"
                chunk = pipe.read(4096)
                refused = next((line for line in (said + chunk).split(b"\n") if line.startswith(REFUSED)), None)
                if refused is not None:
                    return refused[len(REFUSED):].decode(errors="replace")
                if not chunk:
                    return f"{count - said.count(READY)} new worker(s) ended before they served; the log says why"
                said += chunk
        return None


# -- the command ----------------------------------------------------------------------------------


def _restart_command(args: argparse.Namespace) -> int:
    """`mcp-tasks-proxy restart`: check the file, send `SIGUSR2`, and print the verdict (exit 0: a
    new process serves; 1: refused, the old one still serves, or the new one failed after taking
    over; 2: nothing sent, or no verdict within `--wait`)."""
    target = signal_target(args, "restarted")
    if target is None:
        return 2
    state_dir, pid = target
    path = verdict_path(state_dir, pid)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    try:
        os.kill(pid, signal.SIGUSR2)
    except ProcessLookupError:
        print(f"mcp-tasks-proxy: no process {pid}", file=sys.stderr)
        return 2
    print(f"sent SIGUSR2 to mcp-tasks-proxy (pid {pid})", flush=True)
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        try:
            verdict = json.loads(path.read_text())
        except (OSError, ValueError):
            time.sleep(0.1)
            continue
        with contextlib.suppress(OSError):
            path.unlink()  # read: the command's own (the state directory keeps no pile of them)
        outcome = verdict.get("outcome")
        if outcome == "serving":
            print(escaped(f"restarted: pid {verdict.get('new_pid')} serves (version {verdict.get('version')}); pid {pid} has stopped"))
            return 0
        print(escaped(f"mcp-tasks-proxy: restart {outcome}: {verdict.get('reason')}"
                      f"{'; the old process still serves' if outcome == 'refused' else ''}"), file=sys.stderr)
        return 1
    print(f"mcp-tasks-proxy: no verdict within {args.wait:g} s (the proxy's log says what happened)", file=sys.stderr)
    return 2


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `restart` command."""
    restart = commands.add_parser("restart", help="replace a running proxy by a new process of the installed code, "
                                                  "without refusing a connection (SIGUSR2)")
    target_arguments(restart, WAIT_S, "the new process to serve")
    restart.set_defaults(run=_restart_command)
