"""`SIGHUP` and `mcp-tasks-proxy reload` (docs/configuration.md "Reload and drain", docs/decisions.md §85).

`serve` writes its process id to `<state_dir>/serve.pid` (the parent of the workers with
`--workers N`, which passes `SIGHUP` on to every worker) once it holds that file's lock, and removes
it when it exits (`pid_file`). On `SIGHUP` each serving process re-reads its configuration file (with
the start's flags on top) and applies its backends (`RunningProxy.reload`, `proxy/fleet_config.py`);
a file that does not validate is logged with its key and changes nothing. `mcp-tasks-proxy reload` checks the file first (printing
what is wrong, key named, and signalling nothing), then sends `SIGHUP` to the process in the pid file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .config import ConfigError, Settings, load
from .printable import escaped

if TYPE_CHECKING:
    from .app import RunningProxy

log = logging.getLogger(__name__)

PID_FILE = "serve.pid"
"""In `state_dir`: the process `mcp-tasks-proxy reload` signals."""


def pid_path(state_dir: str) -> Path:
    return Path(state_dir).expanduser() / PID_FILE


@contextlib.contextmanager
def pid_file(settings: Settings) -> Iterator[None]:
    """`<state_dir>/serve.pid` names the process that holds `<state_dir>/serve.pid.lock` (a POSIX
    record lock, released by the kernel when its process dies, SIGKILL included, before the process
    is reaped): this process takes the lock and, once it holds it, writes its own id there whatever
    the file said (a killed proxy's, even one whose zombie still answers kill(pid, 0)). When another
    live process holds the lock, that one keeps the file, and this is logged. The file is removed at
    the end if it still names this process; the lock goes with the process (or the block's end)."""
    path = pid_path(settings.state_dir)
    mine = str(os.getpid())
    lock: int | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = os.open(path.with_name(PID_FILE + ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(lock)
            lock = None
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            held = path.read_text().strip() if path.exists() else "?"
            log.warning("%s names running process %s, which holds its lock: `mcp-tasks-proxy reload` signals that one", path, held)
        else:
            written = path.with_name(f"{PID_FILE}.{mine}")
            written.write_text(mine + "\n")
            os.replace(written, path)  # whole or not at all, for a reader
    except OSError as exc:
        log.warning("cannot write %s (`mcp-tasks-proxy reload` needs it; SIGHUP works): %s", path, exc.strerror)
        if lock is not None:
            os.close(lock)
            lock = None
    try:
        yield
    finally:
        if lock is not None:
            with contextlib.suppress(OSError):
                if path.read_text().strip() == mine:
                    path.unlink()
            os.close(lock)


class Hangup:
    """The `SIGHUP` handler of one serving process: reloads `running` with `reread()` (one at a
    time; a signal during a reload runs one more after it). Installed before the proxy starts, so an
    early `SIGHUP` does not end it: it waits for `attach`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, reread: Callable[[], Settings]):
        self.reread = reread
        self.running: RunningProxy | None = None
        self.pending = False
        self.done = 0
        """Reloads finished (applied or refused)."""
        self._task: asyncio.Future[None] | None = None
        loop.add_signal_handler(signal.SIGHUP, self.signalled)

    def attach(self, running: RunningProxy) -> None:
        self.running = running
        if self.pending:
            self.signalled()

    def signalled(self) -> None:
        self.pending = True
        if self.running is None or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.ensure_future(self._reload())

    async def _reload(self) -> None:
        assert self.running is not None
        while self.pending:
            self.pending = False
            log.info("SIGHUP: reloading the configuration")
            try:
                await self.running.reload(self.reread())
            except ConfigError as exc:
                log.error("reload refused, the running configuration stays: %s", exc)
            except Exception:  # a proxy bug must not end the serving process
                log.exception("reload failed, the running configuration stays")
            self.done += 1


def _reload_command(args: argparse.Namespace) -> int:
    """`mcp-tasks-proxy reload`: check the file, then signal the serving process."""
    settings: Settings | None = None
    if args.config is not None:
        try:
            settings = load(args.config)
        except ConfigError as exc:
            print(escaped(f"mcp-tasks-proxy: configuration error, nothing reloaded: {exc}"), file=sys.stderr)
            return 2
    pid = args.pid
    if pid is None:
        state_dir = args.state_dir or (settings.state_dir if settings is not None else Settings().state_dir)
        path = pid_path(state_dir)
        try:
            text = path.read_text().strip()
        except OSError:
            print(f"mcp-tasks-proxy: no serving proxy: cannot read {path} (give --pid, or the --state-dir it runs with)", file=sys.stderr)
            return 1
        if not text.isdigit():
            print(f"mcp-tasks-proxy: {path} does not hold a process id", file=sys.stderr)
            return 1
        pid = int(text)
    where = f"{path} names process {pid}" if args.pid is None else f"--pid {pid} is"
    argv = _serving_argv(pid) if pid > 1 else None  # never 0 (a process group), -1 (every process) or init
    if argv is None:
        print(f"mcp-tasks-proxy: {where}, which is not a running `mcp-tasks-proxy serve`"
              f"{' (a stale pid file?)' if args.pid is None else ''}; nothing sent", file=sys.stderr)
        return 1
    served = _config_of(argv)
    if args.config is not None and served is not None and Path(served).resolve() != Path(args.config).resolve():
        print(f"mcp-tasks-proxy: the proxy (pid {pid}) runs with --config {served}, not {args.config}: it re-reads its own "
              "file; nothing sent", file=sys.stderr)
        return 1
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        print(f"mcp-tasks-proxy: no process {pid}", file=sys.stderr)
        return 1
    print(f"sent SIGHUP to mcp-tasks-proxy (pid {pid}); its log says what changed", flush=True)
    return 0


def _serving_argv(pid: int) -> list[str] | None:
    """The command line of process `pid` when it is a `mcp-tasks-proxy serve` (the console script,
    or `python -m proxy serve`), else None (gone, or another program that got the pid since)."""
    try:
        argv = [part.decode("utf-8", "replace") for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part]
    except OSError:
        return None
    names = [Path(part).name for part in argv[:3]]
    is_proxy = "mcp-tasks-proxy" in names or ("-m" in argv[:3] and "proxy" in argv[:4])
    return argv if is_proxy and "serve" in argv else None


def _config_of(argv: list[str]) -> str | None:
    """The `--config FILE` a serving process was started with, or None."""
    for i, part in enumerate(argv):
        if part == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if part.startswith("--config="):
            return part.split("=", 1)[1]
    return None


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `reload` command."""
    reload = commands.add_parser("reload", help="make a running proxy re-read its configuration file (SIGHUP)")
    reload.add_argument("--config", metavar="FILE", help="check this file first (the one the proxy runs with); nothing is sent if it is bad")
    reload.add_argument("--state-dir", metavar="DIR", help="the proxy's state_dir, holding serve.pid (default: the file's, else the default)")
    reload.add_argument("--pid", type=int, metavar="PID", help="signal this process instead of the one in serve.pid")
    reload.set_defaults(run=_reload_command)
