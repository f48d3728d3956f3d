"""`SIGHUP` and `mcp-tasks-proxy reload` (docs/operations.md "Reload and drain", docs/decisions.md §85).

`serve` writes its process id to `<state_dir>/serve.pid` (the parent of the workers with
`--workers N`, which passes `SIGHUP` on to every worker) once it holds that file's lock, and removes
it when it exits (`pid_file`). On `SIGHUP` each serving process re-reads its configuration file (with
the start's flags on top) and applies its backends (`RunningProxy.reload`, `proxy/fleet_config.py`);
a file that does not validate is logged with its key and changes nothing. `mcp-tasks-proxy reload` checks the file first (printing
what is wrong, key named, and signalling nothing), then sends `SIGHUP` to the process in the pid file.

Each serving process writes its verdict on every reload (applied with what changed, or refused and
why) to `<state_dir>/reloads/<pid>.json`, and `serve --workers N` names its workers in
`<state_dir>/serve.workers`; `mcp-tasks-proxy reload` waits for the verdict of every serving
process and prints it (exit 0 applied, 1 refused, 2 no proxy, a bad file or no verdict in time:
docs/decisions.md §163). The status page lists the last reloads (`Fleet.reloads`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import os
import signal
import sys
import time
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
WORKERS_FILE = "serve.workers"
"""In `state_dir`: `{"supervisor": pid, "workers": [pid, ...]}` while `serve --workers N` runs."""
VERDICTS = "reloads"
"""In `state_dir`: one `<pid>.json` per serving process, its last reloads' verdicts."""
KEPT = 10
"""Verdicts a process keeps (in its file and on the status page)."""
WAIT_S = 60.0
"""How long `mcp-tasks-proxy reload` waits for the verdicts by default (a reload may probe new backends)."""


def verdict_path(state_dir: str, pid: int) -> Path:
    return Path(state_dir).expanduser() / VERDICTS / f"{pid}.json"


def write_json(path: Path, data: object) -> None:
    """`data` as JSON in `path`, whole or not at all for a reader."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    written = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    written.write_text(json.dumps(data) + "\n")
    os.replace(written, path)


def write_workers(state_dir: str, workers: list[int]) -> None:
    """Name the workers of this supervisor (`serve --workers N`) for `mcp-tasks-proxy reload`."""
    try:
        write_json(Path(state_dir).expanduser() / WORKERS_FILE, {"supervisor": os.getpid(), "workers": sorted(workers)})
    except OSError as exc:
        log.warning("cannot write %s (`mcp-tasks-proxy reload` then waits for the supervisor only): %s", WORKERS_FILE, exc.strerror)


def remove_own(path: Path, owner: str = "supervisor") -> None:
    """Remove `path` when it still names this process (as `owner`, or as the `pid` of a verdict file)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if json.loads(path.read_text()).get(owner) == os.getpid():
            path.unlink()


def pid_path(state_dir: str) -> Path:
    return Path(state_dir).expanduser() / PID_FILE


@contextlib.contextmanager
def pid_file(settings: Settings, wait_s: float = 0.0) -> Iterator[None]:
    """`<state_dir>/serve.pid` names the process that holds `<state_dir>/serve.pid.lock` (a POSIX
    record lock, released by the kernel when its process dies, SIGKILL included, before the process
    is reaped): this process takes the lock and, once it holds it, writes its own id there whatever
    the file said (a killed proxy's, even one whose zombie still answers kill(pid, 0)). When another
    live process holds the lock, that one keeps the file, and this is logged. The file is removed at
    the end if it still names this process; the lock goes with the process (or the block's end).
    `wait_s`: wait that long for the lock (a restart's new process, while the old one finishes)."""
    path = pid_path(settings.state_dir)
    mine = str(os.getpid())
    lock: int | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = os.open(path.with_name(PID_FILE + ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            _lock(lock, wait_s)
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


def _lock(fd: int, wait_s: float) -> None:
    """Take the POSIX lock on `fd`, trying for `wait_s` seconds (ten times a second); raises the
    last `OSError` (EAGAIN, EACCES) when another process still holds it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN) or time.monotonic() >= deadline:
                raise
        time.sleep(0.1)


class Hangup:
    """The `SIGHUP` handler of one serving process: reloads `running` with `reread()` (one at a
    time; a signal during a reload runs one more after it), and writes each verdict to
    `<state_dir>/reloads/<pid>.json`. Installed before the proxy starts, so an early `SIGHUP` does
    not end it: it waits for `attach`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, reread: Callable[[], Settings], state_dir: str):
        self.reread = reread
        self.running: RunningProxy | None = None
        self.pending = False
        self.done = 0
        """Reloads finished (applied or refused)."""
        self.verdicts: list[dict[str, object]] = []
        """The last `KEPT` verdicts, oldest first."""
        self.path = verdict_path(state_dir, os.getpid())
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
            changes: list[str] = []
            reason = None
            try:
                changes = await self.running.reload(self.reread())
            except ConfigError as exc:
                log.error("reload refused, the running configuration stays: %s", exc)
                reason = str(exc)
            except Exception as exc:  # a proxy bug must not end the serving process
                log.exception("reload failed, the running configuration stays")
                reason = f"internal error in mcp-tasks-proxy ({type(exc).__name__}); its log has the traceback"
            self.done += 1
            self._record({"reload": self.done, "at_ms": int(time.time() * 1000), "pid": os.getpid(), "applied": reason is None,
                          "changes": changes, "reason": reason})

    def _record(self, verdict: dict[str, object]) -> None:
        """Keep `verdict` (the status page shows it: `RunningProxy.reloaded`) and write it for `mcp-tasks-proxy reload`."""
        self.verdicts = [*self.verdicts, verdict][-KEPT:]
        if self.running is not None:
            self.running.reloaded(verdict)
        try:
            write_json(self.path, {"pid": os.getpid(), "reloads": self.verdicts})
        except OSError as exc:
            log.warning("cannot write %s (`mcp-tasks-proxy reload` waits for it): %s", self.path, exc.strerror)

    def close(self) -> None:
        """The process is stopping: its verdicts go with it."""
        remove_own(self.path, "pid")


def _reload_command(args: argparse.Namespace) -> int:
    """`mcp-tasks-proxy reload`: check the file, signal the serving process, and print the verdict of
    every serving process (exit 0: applied everywhere; 1: refused by one; 2: nothing was signalled,
    or a verdict did not come within `--wait` seconds)."""
    target = signal_target(args, "reloaded")
    if target is None:
        return 2
    state_dir, pid = target
    processes = _serving_processes(state_dir, pid)
    before = {process: _last_reload(state_dir, process) for process in processes}
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        print(f"mcp-tasks-proxy: no process {pid}", file=sys.stderr)
        return 2
    print(f"sent SIGHUP to mcp-tasks-proxy (pid {pid})", flush=True)
    verdicts = _verdicts(state_dir, before, args.wait)
    status = 0
    for process in processes:
        verdict = verdicts.get(process)
        if verdict is None:
            print(f"mcp-tasks-proxy: no verdict from pid {process} within {args.wait:g} s (its log says what happened)", file=sys.stderr)
            status = 2
        elif verdict.get("applied"):
            for line in verdict.get("changes") or ["no backend changed"]:
                print(escaped(f"pid {process}: applied: {line}"))
        else:
            print(escaped(f"pid {process}: refused, the running configuration stays: {verdict.get('reason')}"))
            status = max(status, 1)
    return status


def signal_target(args: argparse.Namespace, undone: str) -> tuple[str, int] | None:
    """(state_dir, pid) of the `serve` process a command (`reload`, `restart`) signals: `--config`
    checked first, then `serving_pid`; None, the reason printed ("nothing `undone`"), when there is
    nothing to signal."""
    settings: Settings | None = None
    if args.config is not None:
        try:
            settings = load(args.config)
        except ConfigError as exc:
            print(escaped(f"mcp-tasks-proxy: configuration error, nothing {undone}: {exc}"), file=sys.stderr)
            return None
    state_dir = args.state_dir or (settings.state_dir if settings is not None else Settings().state_dir)
    pid = serving_pid(args, state_dir)
    return None if pid is None else (state_dir, pid)


def target_arguments(parser: argparse.ArgumentParser, wait_s: float, waited_for: str) -> None:
    """The arguments of a command that signals a serving proxy (`signal_target`) and waits for `waited_for`."""
    parser.add_argument("--config", metavar="FILE", help="check this file first (the one the proxy runs with); nothing is sent if it is bad")
    parser.add_argument("--state-dir", metavar="DIR", help="the proxy's state_dir, holding serve.pid (default: the file's, else the default)")
    parser.add_argument("--pid", type=int, metavar="PID", help="signal this process instead of the one in serve.pid")
    parser.add_argument("--wait", type=float, default=wait_s, metavar="S", help=f"seconds to wait for {waited_for} (default {wait_s:g})")


def serving_pid(args: argparse.Namespace, state_dir: str) -> int | None:
    """The `mcp-tasks-proxy serve` process a command signals: `--pid`, else the one `serve.pid`
    names in `state_dir`; None (the reason printed) when it is not a running proxy, or runs with
    another `--config` than the one given (it re-reads its own file)."""
    pid = args.pid
    path = pid_path(state_dir)
    if pid is None:
        try:
            text = path.read_text().strip()
        except OSError:
            print(f"mcp-tasks-proxy: no serving proxy: cannot read {path} (give --pid, or the --state-dir it runs with)", file=sys.stderr)
            return None
        if not text.isdigit():
            print(f"mcp-tasks-proxy: {path} does not hold a process id", file=sys.stderr)
            return None
        pid = int(text)
    where = f"{path} names process {pid}" if args.pid is None else f"--pid {pid} names process {pid}"
    argv = serving_argv(pid) if pid > 1 else None  # never 0 (a process group), -1 (every process) or init
    if argv is None:
        print(f"mcp-tasks-proxy: {where}, which is not a running `mcp-tasks-proxy serve`"
              f"{' (a stale pid file?)' if args.pid is None else ''}; nothing sent", file=sys.stderr)
        return None
    served = config_of(argv)
    if served is not None and not Path(served).is_absolute():  # relative to the proxy's working directory, not ours
        with contextlib.suppress(OSError):
            served = str(Path(os.readlink(f"/proc/{pid}/cwd")) / served)
    if args.config is not None and served is not None and Path(served).resolve() != Path(args.config).resolve():
        print(f"mcp-tasks-proxy: the proxy (pid {pid}) runs with --config {served}, not {args.config}: it re-reads its own "
              "file; nothing sent", file=sys.stderr)
        return None
    return pid


def _serving_processes(state_dir: str, pid: int) -> list[int]:
    """The processes that reload when `pid` gets SIGHUP: the workers `serve.workers` names when `pid`
    is their supervisor, else `pid` itself."""
    try:
        named = json.loads((Path(state_dir).expanduser() / WORKERS_FILE).read_text())
    except (OSError, ValueError):
        return [pid]
    workers = named.get("workers") if isinstance(named, dict) and named.get("supervisor") == pid else None
    if not isinstance(workers, list) or not workers or not all(isinstance(w, int) for w in workers):
        return [pid]
    return workers


def _last_reload(state_dir: str, pid: int) -> int:
    """The number of the last reload `pid` wrote a verdict for (0: none)."""
    verdicts = _read_verdicts(state_dir, pid)
    return int(verdicts[-1].get("reload", 0)) if verdicts else 0


def _read_verdicts(state_dir: str, pid: int) -> list[dict[str, object]]:
    try:
        data = json.loads(verdict_path(state_dir, pid).read_text())
    except (OSError, ValueError):
        return []
    verdicts = data.get("reloads") if isinstance(data, dict) and data.get("pid") == pid else None
    return [v for v in verdicts if isinstance(v, dict)] if isinstance(verdicts, list) else []


def _verdicts(state_dir: str, before: dict[int, int], wait_s: float) -> dict[int, dict[str, object]]:
    """Each process's first verdict after `before` (its last reload's number then), as they come
    within `wait_s` seconds (the files are read ten times a second)."""
    found: dict[int, dict[str, object]] = {}
    deadline = time.monotonic() + wait_s
    while True:
        for process, last in before.items():
            if process not in found:
                newer = [v for v in _read_verdicts(state_dir, process) if int(v.get("reload", 0)) > last]  # type: ignore[call-overload]
                if newer:
                    found[process] = newer[0]
        if len(found) == len(before) or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


def serving_argv(pid: int) -> list[str] | None:
    """The command line of process `pid` when it is a `mcp-tasks-proxy serve` (the console script,
    or `python -m proxy serve`), else None (gone, or another program that got the pid since)."""
    try:
        argv = [part.decode("utf-8", "replace") for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part]
    except OSError:
        return None
    names = [Path(part).name for part in argv[:3]]
    is_proxy = "mcp-tasks-proxy" in names or ("-m" in argv[:3] and "proxy" in argv[:4])
    return argv if is_proxy and "serve" in argv else None


def config_of(argv: list[str]) -> str | None:
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
    target_arguments(reload, WAIT_S, "every serving process's verdict")
    reload.set_defaults(run=_reload_command)
