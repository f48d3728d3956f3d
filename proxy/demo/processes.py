"""Start and stop server subprocesses that announce their address on stdout.

Protocol with the child: once it accepts connections it prints one line ``LISTENING <url>``
(flushed) on stdout. :meth:`ServerProcess.start` waits for that line; afterwards a daemon thread
keeps draining the child's merged stdout/stderr so the child never blocks on a full pipe, and
keeps the last lines for error messages.

Stdlib only: this module runs inside the proxy's own environment.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

__all__ = [
    "LISTENING_PREFIX",
    "ServerProcess",
    "ServerStartError",
    "V1_FASTMCP3_SERVER_SCRIPT",
    "V1_SERVER_SCRIPT",
    "V2_SERVER_SCRIPT",
    "start_fastmcp3_server",
    "start_reference_v1_server",
    "start_reference_v2_server",
]

#: Prefix of the readiness line a child prints, followed by its URL.
LISTENING_PREFIX = "LISTENING "
#: The reference v1 server script (run with the ``mcp-v1`` peer environment's python).
V1_SERVER_SCRIPT = Path(__file__).resolve().parent / "servers" / "v1_server.py"
#: The FastMCP 3 v1 fixture server script (run with the ``fastmcp3`` peer environment's python).
V1_FASTMCP3_SERVER_SCRIPT = Path(__file__).resolve().parent / "servers" / "v1_fastmcp3_server.py"
#: The reference v2 server script (run with the ``fastmcp4`` peer environment's python).
V2_SERVER_SCRIPT = Path(__file__).resolve().parent / "servers" / "v2_server.py"

_TAIL_LINES = 200
_STOP_GRACE_S = 5.0


class ServerStartError(RuntimeError):
    """The child exited or stayed silent before printing ``LISTENING <url>``.

    The message carries the command and the child's output collected so far; ``reason`` is one
    line for an operator: the child's last line of output when it exited (its own error, e.g.
    ``cannot listen on 127.0.0.1:8080: Address already in use``), else the message's first line.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message.splitlines()[0]


class ServerProcess:
    """A running server subprocess that has announced its URL.

    Create it with :meth:`start`. Attributes: ``url`` (what followed ``LISTENING``), ``pid``,
    ``argv``. :meth:`stop` is idempotent; the object is also a context manager that stops the
    child on exit.
    """

    def __init__(self, popen: subprocess.Popen[str], argv: list[str]) -> None:
        """Wrap an already started child; use :meth:`start` rather than calling this directly."""
        self._popen = popen
        self.argv = list(argv)
        self.pid: int = popen.pid
        self.url: str = ""
        self._lines: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self._lines_lock = threading.Lock()
        self._ready = threading.Event()
        self._stop_lock = threading.Lock()
        self._stopped = False
        self._reader = threading.Thread(
            target=self._drain, args=(popen.stdout,), name=f"server-output-{popen.pid}", daemon=True
        )
        self._reader.start()

    @classmethod
    def start(
        cls,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        ready_timeout_s: float = 60,
    ) -> ServerProcess:
        """Launch ``argv`` and wait until it prints ``LISTENING <url>``.

        Args:
            argv: the command line.
            env: variables added to (and overriding) the current environment for the child.
            ready_timeout_s: how long to wait for the readiness line.

        Returns:
            The running :class:`ServerProcess`, with ``url`` set.

        Raises:
            ServerStartError: the child exited before the line, or the timeout passed (the child
                is then stopped); the message includes the output collected.
            OSError: the command could not be launched at all.
        """
        child_env = dict(os.environ)
        child_env["PYTHONUNBUFFERED"] = "1"
        if env:
            child_env.update(env)
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            env=child_env,
        )
        proc = cls(popen, argv)
        try:
            proc._wait_ready(ready_timeout_s)
        except BaseException:
            proc.stop()
            raise
        return proc

    def ready_url(self, line: str) -> str | None:
        """The URL a line of the child's output announces it serves, or None (this class:
        ``LISTENING <url>``; subclasses read other announcements)."""
        return line[len(LISTENING_PREFIX) :].strip() if line.startswith(LISTENING_PREFIX) else None

    def _drain(self, stream: IO[str] | None) -> None:
        if stream is None:
            return
        try:
            for raw in stream:
                line = raw.rstrip("\r\n")
                with self._lines_lock:
                    self._lines.append(line)
                url = None if self._ready.is_set() else self.ready_url(line)
                if url is not None:
                    self.url = url
                    self._ready.set()
        except (OSError, ValueError):
            pass  # the pipe was closed under us during stop()
        finally:
            try:
                stream.close()
            except OSError:
                pass

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if self._popen.poll() is not None:
                self._reader.join(timeout=2.0)  # collect what the child printed before dying
                if self._ready.is_set():
                    break
                last = [line for line in self.output_tail().splitlines() if line.strip()][-1:]
                raise ServerStartError(
                    f"server exited with status {self._popen.returncode} before announcing its URL\n"
                    f"command: {self.argv}\noutput:\n{self.output_tail()}",
                    last[0].strip() if last else None,
                )
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"server did not print '{LISTENING_PREFIX}<url>' within {timeout_s:g} s\n"
                    f"command: {self.argv}\noutput:\n{self.output_tail()}"
                )
        if self._popen.poll() is not None:
            raise ServerStartError(
                f"server announced {self.url} but exited with status {self._popen.returncode}\n"
                f"command: {self.argv}\noutput:\n{self.output_tail()}"
            )

    @property
    def returncode(self) -> int | None:
        """The child's exit status, or ``None`` while it runs."""
        return self._popen.poll()

    def is_running(self) -> bool:
        """Whether the child is still alive."""
        return self._popen.poll() is None

    def output_tail(self, lines: int = _TAIL_LINES) -> str:
        """Return the last ``lines`` lines (at most 200 are kept) of the child's stdout+stderr."""
        with self._lines_lock:
            kept = list(self._lines)[-lines:] if lines > 0 else []
        return "\n".join(kept)

    def stop(self) -> int | None:
        """Stop the child by its own PID: SIGTERM, up to 5 s grace, then SIGKILL.

        Idempotent and safe to call from several threads. Returns the exit status (``None`` only
        if the child could not be reaped, which should not happen).
        """
        with self._stop_lock:
            if not self._stopped:
                self._stopped = True
                if self._popen.poll() is None:
                    try:
                        self._popen.send_signal(signal.SIGTERM)
                        self._popen.wait(timeout=_STOP_GRACE_S)
                    except subprocess.TimeoutExpired:
                        self._popen.kill()
                        self._popen.wait(timeout=_STOP_GRACE_S)
                    except ProcessLookupError:
                        pass
                self._reader.join(timeout=2.0)
        return self._popen.poll()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else f"exited({self._popen.poll()})"
        return f"<ServerProcess pid={self.pid} url={self.url!r} {state}>"


def _refuse_busy_port(port: int) -> None:
    """Raise `ServerStartError` at once when 127.0.0.1:`port` (not 0) already has a listener: a
    FastMCP 4 server imports for many seconds before it binds, and only then says so. The same
    bind the server makes (`SO_REUSEADDR`, as uvicorn sets it) is tried and released; a port that
    is merely in TIME_WAIT passes, as it would for the server."""
    import errno
    import socket

    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            reason = f"cannot listen on 127.0.0.1:{port}: {os.strerror(exc.errno or errno.EADDRINUSE)}"
            raise ServerStartError(reason, reason) from None


def _start_peer(env_name: str, script: Path, port: int, *, fastmcp: bool, **kw: Any) -> ServerProcess:
    """`script` on 127.0.0.1:`port` in the peer environment `env_name` (built first if needed);
    for FastMCP servers their banner and update check are off unless `env` says otherwise."""
    from proxy.demo.peers import ensure_peer_env

    _refuse_busy_port(port)
    argv = [str(ensure_peer_env(env_name)), str(script), "--host", "127.0.0.1", "--port", str(port)]
    if fastmcp:
        kw["env"] = {"FASTMCP_SHOW_SERVER_BANNER": "false", "FASTMCP_CHECK_FOR_UPDATES": "off", **(kw.pop("env", None) or {})}
    return ServerProcess.start(argv, **kw)


def start_reference_v1_server(port: int = 0, **kw: Any) -> ServerProcess:
    """Start the reference v1 server (``v1_server.py`` on ``mcp==1.30.0``) on 127.0.0.1:``port``
    (0: an ephemeral port).

    Builds the ``mcp-v1`` peer environment first if needed (see :func:`proxy.demo.peers.ensure_peer_env`).
    Keyword arguments go to :meth:`ServerProcess.start` (``env``, ``ready_timeout_s``).

    Returns:
        The running server; its ``url`` is ``http://127.0.0.1:<port>/mcp``.

    Raises:
        RuntimeError: the peer environment could not be built.
        ServerStartError: the server did not come up.
    """
    return _start_peer("mcp-v1", V1_SERVER_SCRIPT, port, fastmcp=False, **kw)


def start_fastmcp3_server(port: int = 0, **kw: Any) -> ServerProcess:
    """Start the FastMCP 3 v1 fixture server (``v1_fastmcp3_server.py``) on 127.0.0.1:``port``
    (0: an ephemeral port).

    Builds the ``fastmcp3`` peer environment (``fastmcp[tasks]==3.4.11``) first if needed (see
    :func:`proxy.demo.peers.ensure_peer_env`). Keyword arguments go to :meth:`ServerProcess.start`
    (``env``, ``ready_timeout_s``). FastMCP's own banner and update check are switched off in the
    child's environment unless ``env`` says otherwise.

    Returns:
        The running server; its ``url`` is ``http://127.0.0.1:<port>/mcp``.

    Raises:
        RuntimeError: the peer environment could not be built.
        ServerStartError: the server did not come up.
    """
    return _start_peer("fastmcp3", V1_FASTMCP3_SERVER_SCRIPT, port, fastmcp=True, **kw)


def start_reference_v2_server(port: int = 0, **kw: Any) -> ServerProcess:
    """Start the reference v2 server (``v2_server.py`` on FastMCP 4.1.4 + fastmcp-tasks) on
    127.0.0.1:``port`` (0: an ephemeral port).

    Builds the ``fastmcp4`` peer environment (``fastmcp==4.1.4``, ``fastmcp-tasks==4.1.4``) first
    if needed (see :func:`proxy.demo.peers.ensure_peer_env`). Keyword arguments go to
    :meth:`ServerProcess.start` (``env``, ``ready_timeout_s``). FastMCP's own banner and update
    check are switched off in the child's environment unless ``env`` says otherwise.

    Returns:
        The running server; its ``url`` is ``http://127.0.0.1:<port>/mcp`` (served directly, no
        307). It speaks v2-modern (stateless 2026-07-28 with the tasks extension).

    Raises:
        RuntimeError: the peer environment could not be built.
        ServerStartError: the server did not come up.
    """
    return _start_peer("fastmcp4", V2_SERVER_SCRIPT, port, fastmcp=True, **kw)


def stdio_commands() -> dict[str, list[str]]:
    """The argv of each stdio server the tests and the demo run behind the proxy, their
    environments and npm packages installed first if needed (``peers.py``, ``node_packages.py``):
    ``v1`` the reference v1 server, ``fastmcp3`` the FastMCP 3 fixture server, ``everything`` and
    ``memory`` the npm reference servers (2025-11-25, the first with v1 tasks, the second without).

    Raises:
        RuntimeError: an environment or package set could not be installed.
    """
    from proxy.demo.node_packages import STDIO_SERVERS, ensure_npm_packages, node_binary
    from proxy.demo.peers import ensure_peer_env

    node = node_binary()
    modules = ensure_npm_packages("stdio-servers", STDIO_SERVERS) / "node_modules" / "@modelcontextprotocol"
    return {
        "v1": [str(ensure_peer_env("mcp-v1")), str(V1_SERVER_SCRIPT), "--stdio"],
        "fastmcp3": [str(ensure_peer_env("fastmcp3")), str(V1_FASTMCP3_SERVER_SCRIPT), "--stdio"],
        "everything": [node, str(modules / "server-everything" / "dist" / "index.js"), "stdio"],
        "memory": [node, str(modules / "server-memory" / "dist" / "index.js")],
    }
