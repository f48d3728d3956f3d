"""A Redis server for the tests and the benchmark: Debian's `redis-server` package (installed with
apt-get when missing, as the benchmark installs nginx), started on a loopback port with nothing
persisted (`--save '' --appendonly no`) and stopped by its own PID. Never a runtime dependency of a
proxy: only `store = "redis://…"` needs Redis (docs/configuration.md)."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .packages import ensure_package
from .targets import _free_port, stop_child


class RedisUnavailable(RuntimeError):
    """redis-server is missing and cannot be installed, or did not start."""


def ensure_redis(log: Callable[[str], None] = lambda _m: None) -> str:
    """The redis-server executable; installs Debian's `redis-server` package when it is missing
    (`proxy.bench.packages`). Raises `RedisUnavailable` when that is not possible."""
    return ensure_package("redis-server", "redis-server", log, RedisUnavailable)


class RedisServer:
    """`redis-server` on 127.0.0.1:<free port>; `url` is `redis://127.0.0.1:<port>/0`."""

    def __init__(self, executable: str):
        self.dir = Path(tempfile.mkdtemp(prefix="mcp-tasks-proxy-redis-"))
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.popen = subprocess.Popen([executable, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
                                       "--dir", str(self.dir), "--daemonize", "no", "--protected-mode", "yes"],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            if self.popen.poll() is not None:
                raise RedisUnavailable(f"redis-server exited with status {self.popen.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RedisUnavailable("redis-server did not answer PING within 10 s")
            time.sleep(0.05)

    def pids(self) -> list[int]:
        return [self.popen.pid]

    def stop(self) -> None:
        stop_child(self.popen, self.dir)


def start_redis(log: Callable[[str], None] = lambda _m: None) -> RedisServer:
    """A fresh Redis server (installed first when missing). Raises `RedisUnavailable`."""
    return RedisServer(ensure_redis(log))
