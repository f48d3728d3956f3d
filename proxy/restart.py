"""`mcp-tasks-proxy restart` and `SIGUSR2`: a new serving process takes over from the running one
without a refused connection (docs/configuration.md "Restart and upgrade", docs/decisions.md §169).

The running process (the old one), on `SIGUSR2`, starts `python -m proxy serve` again with its own
arguments, from the installed code (an upgrade is a restart), and hands it its listening socket:
the socket is inherited (`pass_fds`), so both hold the one socket and its queue of connections,
as nginx's binary upgrade and HAProxy's `-x` do. The new process reads its configuration and
imports the proxy, then says it is ready on a pipe; only then does the old one stop, as on
SIGTERM: it stops accepting (its copy of the socket closes; the new one's stays open), finishes its
requests in flight, GET streams and held calls within `shutdown_timeout_ms`, closes its store and
exits. The new process waits for the old one's locks (`serve.pid`, the SQLite store: one process
per state directory, decision 44), opens the state, and accepts: connections that arrived
meanwhile waited in the socket's queue, none is refused. It writes the verdict to
`<state_dir>/restarts/<old pid>.json`, which `mcp-tasks-proxy restart` waits for.

A new process that cannot start before it is ready (a configuration that does not load, an import
error) exits; the old one reads the pipe's end, keeps serving, and writes the verdict "refused"
with the exit status. One restart at a time. `serve --workers N` refuses it for now (its verdict
says so).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
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
"""`<old pid>:<listening socket fd>:<ready pipe fd>`, set for the new process of a restart."""
RESTARTS = "restarts"
"""In `state_dir`: `<old pid>.json`, each restart's verdict."""
WAIT_S = 120.0
"""How long `mcp-tasks-proxy restart` waits for the verdict by default (the old process finishes first)."""
HANDOVER_GRACE_S = 1.0
"""How long the old process keeps its open connections after it stopped accepting: each answers its
next request with `Connection: close`, an idle one closes then (`connections.drain_connections`)."""
LOCK_WAIT_MARGIN_S = 60.0
"""The new process waits for the old one's locks `shutdown_timeout_ms` and this much more."""


def verdict_path(state_dir: str, old_pid: int) -> Path:
    return Path(state_dir).expanduser() / RESTARTS / f"{old_pid}.json"


def _record(state_dir: str, old_pid: int, verdict: dict[str, Any]) -> None:
    try:
        write_json(verdict_path(state_dir, old_pid), {"old_pid": old_pid, "at_ms": int(time.time() * 1000), **verdict})
    except OSError as exc:
        log.warning("cannot write the restart's verdict (`mcp-tasks-proxy restart` waits for it): %s", exc.strerror)


# -- the old process ------------------------------------------------------------------------------


class Restarter:
    """The `SIGUSR2` handler of a serving process (module docstring). `stop` is the event that ends
    the process gracefully (as SIGTERM does)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event, settings: Settings):
        self.loop = loop
        self.stop = stop
        self.settings = settings
        self.running: RunningProxy | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.handed_over = False
        self._waiting: asyncio.Future[None] | None = None
        loop.add_signal_handler(signal.SIGUSR2, self.signalled)

    def attach(self, running: RunningProxy) -> None:
        self.running = running

    def signalled(self) -> None:
        if self.running is None or self.handed_over:
            log.warning("SIGUSR2: %s; no restart", "not serving yet" if self.running is None else "already handed over")
            return
        if self.child is not None:
            log.warning("SIGUSR2: a restart is under way (new process %d); no other", self.child.pid)
            return
        listening = self.running.listening_fd()
        ready_read, ready_write = os.pipe()
        # -P: the installed code, never a `proxy` directory in the working directory (Python 3.11+)
        argv = [sys.executable, "-P", "-m", "proxy", *sys.argv[1:]]
        env = {**os.environ, TAKEOVER_ENV: f"{os.getpid()}:{listening}:{ready_write}"}
        try:
            self.child = subprocess.Popen(argv, env=env, pass_fds=(listening, ready_write))
        except OSError as exc:
            os.close(ready_read)
            _record(self.settings.state_dir, os.getpid(), {"outcome": "refused", "reason": f"cannot start {argv[0]}: {exc.strerror}"})
            return
        finally:
            os.close(ready_write)
        log.info("SIGUSR2: restarting: new process %d (%s) takes over the listening socket once it is ready",
                 self.child.pid, " ".join(argv))
        os.set_blocking(ready_read, False)
        self.loop.add_reader(ready_read, self._heard, ready_read)

    def _heard(self, fd: int) -> None:
        try:
            said = os.read(fd, 64)
        except BlockingIOError:
            return
        self.loop.remove_reader(fd)
        os.close(fd)
        child = self.child
        assert child is not None
        if said.startswith(b"ready"):
            self.handed_over = True
            log.info("restart: new process %d is ready; this one (%d) stops accepting and finishes its work", child.pid, os.getpid())
            self.stop.set()
            return
        self._waiting = asyncio.ensure_future(self._refused(child))

    async def _refused(self, child: subprocess.Popen[bytes]) -> None:
        status = await asyncio.to_thread(child.wait)
        self.child = None
        reason = f"the new process (pid {child.pid}) exited with status {status} before it could serve; its log says why"
        log.error("restart refused, this process (%d) keeps serving: %s", os.getpid(), reason)
        _record(self.settings.state_dir, os.getpid(), {"outcome": "refused", "reason": reason})


def refuse_under_workers(state_dir: str) -> None:
    """`SIGUSR2` to the supervisor of `serve --workers N`: not done yet (decision 169), said in the verdict."""
    reason = ("serve --workers N is not restarted in place yet: restart its replicas one by one behind the load balancer, "
              "or stop and start it")
    log.warning("SIGUSR2: restart refused: %s", reason)
    _record(state_dir, os.getpid(), {"outcome": "refused", "reason": reason})


# -- the new process ------------------------------------------------------------------------------


class Takeover:
    """What the new process of a restart was handed (`TAKEOVER_ENV`): the old process's id, the
    listening socket's descriptor, and the pipe to say it is ready on."""

    def __init__(self, old_pid: int, listening_fd: int, ready_fd: int):
        self.old_pid = old_pid
        self.listening_fd = listening_fd
        self.ready_fd = ready_fd
        self.at_ms = int(time.time() * 1000)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Takeover | None:
        """The takeover this process was started for (the variable is then removed, so that a later
        restart of this process is not mistaken for it); None for an ordinary start."""
        value = environ.get(TAKEOVER_ENV)
        if value is None:
            return None
        os.environ.pop(TAKEOVER_ENV, None)
        try:
            old, listening, ready = (int(part) for part in value.split(":"))
        except ValueError:
            return None
        return cls(old, listening, ready)

    def ready(self) -> None:
        """Tell the old process to stop accepting and finish (it then releases the locks)."""
        with contextlib.suppress(OSError):
            os.write(self.ready_fd, b"ready\n")
        with contextlib.suppress(OSError):
            os.close(self.ready_fd)

    def lock_wait_s(self, settings: Settings) -> float:
        """How long to wait for the old process's locks: its stop (requests in flight, then held
        calls, each up to `shutdown_timeout_ms`) and a margin."""
        return 2 * settings.shutdown_timeout_ms / 1000 + LOCK_WAIT_MARGIN_S

    def serving(self, settings: Settings) -> None:
        _record(settings.state_dir, self.old_pid, {"outcome": "serving", "new_pid": os.getpid(), "version": version()})

    def failed(self, settings: Settings, reason: str) -> None:
        _record(settings.state_dir, self.old_pid, {"outcome": "failed", "new_pid": os.getpid(), "reason": reason})


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
