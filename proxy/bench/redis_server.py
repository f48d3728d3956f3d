"""A Redis server for the tests and the benchmark: Debian's `redis-server` package (installed with
apt-get when missing, as the benchmark installs nginx), started on a loopback port with nothing
persisted (`--save '' --appendonly no`, or an AOF for a test that needs one) and stopped by its own PID. Never a runtime dependency of a
proxy: only `store = "redis://…"` needs Redis (docs/configuration.md)."""

from __future__ import annotations

import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .packages import ensure_package
from .ports import free_port
from .targets import stop_child


class RedisUnavailable(RuntimeError):
    """redis-server is missing and cannot be installed, or did not start."""


def ensure_redis(log: Callable[[str], None] = lambda _m: None) -> str:
    """The redis-server executable; installs Debian's `redis-server` package when it is missing
    (`proxy.bench.packages`). Raises `RedisUnavailable` when that is not possible."""
    return ensure_package("redis-server", "redis-server", log, RedisUnavailable)


class RedisServer:
    """`redis-server` on 127.0.0.1:<free port>; `url` is `redis://127.0.0.1:<port>/0`. Nothing is
    persisted unless `appendonly` (then an AOF, `appendfsync always`, in its own directory, kept
    across `restart`). Tests may `pause` it (SIGSTOP), `resume` it (SIGCONT), `restart` it on the
    same port, and `stop` it; every signal goes to its own PID only."""

    def __init__(self, executable: str, *, appendonly: bool = False):
        self.executable = executable
        self.appendonly = appendonly
        self.dir = Path(tempfile.mkdtemp(prefix="mcp-tasks-proxy-redis-"))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.popen = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.appendonly else ["--appendonly", "no"]
        popen = subprocess.Popen([self.executable, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", *persistence,
                                  "--dir", str(self.dir), "--daemonize", "no", "--protected-mode", "yes"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            if popen.poll() is not None:
                raise RedisUnavailable(f"redis-server exited with status {popen.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return popen
            except OSError:
                pass
            if time.monotonic() > deadline:
                stop_child(popen, self.dir)
                raise RedisUnavailable("redis-server did not answer PING within 10 s")
            time.sleep(0.05)

    def pids(self) -> list[int]:
        return [self.popen.pid]

    def pause(self) -> None:
        """SIGSTOP: the server keeps its connections and answers nothing until `resume`."""
        self.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        self.popen.send_signal(signal.SIGCONT)

    def halt(self) -> None:
        """Stop the server (SIGTERM, by its PID), keeping its directory for `start_again`."""
        self.popen.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
        self.popen.terminate()
        self.popen.wait(timeout=10)
        if self.popen.stderr:
            self.popen.stderr.close()

    def start_again(self) -> None:
        """Start the server again on the same port (after `halt`): empty unless `appendonly`."""
        self.popen = self._start()

    def restart(self) -> None:
        """`halt`, then `start_again`."""
        self.halt()
        self.start_again()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGCONT)
        stop_child(self.popen, self.dir)


def start_redis(log: Callable[[str], None] = lambda _m: None, *, appendonly: bool = False) -> RedisServer:
    """A fresh Redis server (installed first when missing), persisting to an AOF when `appendonly`.
    Raises `RedisUnavailable`."""
    return RedisServer(ensure_redis(log), appendonly=appendonly)
