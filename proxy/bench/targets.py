"""The processes the benchmark measures, and what the operating system says about them.

Each process is started here and stopped by its own handle (its PID): the fast upstream, the proxy
(`python -m proxy serve`), FastMCP 3.4.11's proxy server (in the `fastmcp3` peer environment) and
nginx (Debian's package, installed here when absent and this runs as root). CPU seconds are the
time on a CPU of every thread of the process (`/proc/<pid>/task/*/schedstat`, nanoseconds; else
`utime + stime` of `/proc/<pid>/stat`); memory is `VmRSS` of `/proc/<pid>/status`. nginx is its
master and its worker processes.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from proxy.demo.processes import ServerProcess, ServerStartError

from .packages import ensure_package, find_program
from .ports import free_port

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
FASTMCP3_PROXY_SCRIPT = Path(__file__).resolve().with_name("fastmcp3_proxy.py")
_PROXY_READY = re.compile(r"^mcp-tasks-proxy listening on (\S+)")


# -- what the operating system reports -------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by process `pid`, all its threads: the nanoseconds on a CPU of each
    live thread (`/proc/<pid>/task/<tid>/schedstat`), or, where the kernel has no schedstat,
    `utime + stime` of `/proc/<pid>/stat` (in clock ticks, 10 ms)."""
    total_ns = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
                    total_ns += int(fh.read().split()[0])
            except FileNotFoundError:
                continue  # the thread ended meanwhile
        return total_ns / 1e9
    except (FileNotFoundError, NotADirectoryError, ValueError, IndexError):
        pass
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    """Resident set size of process `pid` in bytes."""
    with open(f"/proc/{pid}/status", "rb") as fh:
        for line in fh:
            if line.startswith(b"VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def gone(pid: int) -> bool:
    """Whether process `pid` has ended (a zombie or reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except FileNotFoundError:
        return True


SEEN_CLOSED_S = 5.0
"""Longest wait, after the killed replica is gone, for nginx to close its connections to it."""


def connected_to(port: int) -> bool:
    """Whether a TCP connection to loopback port `port` is still open on this host's side that
    did not close it (established, or closed by the peer but not yet by its owner): nginx's
    kept-alive connections to a replica that died, until nginx has seen them end. Until then it
    may still send a request on one, and a POST sent is not retried elsewhere."""
    wanted = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh)
                for line in fh:
                    fields = line.split()
                    if fields[2].endswith(wanted) and fields[3] in ("01", "08"):  # ESTABLISHED, CLOSE_WAIT
                        return True
        except FileNotFoundError:
            continue
    return False


def children(pid: int) -> list[int]:
    """PIDs whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


class Measured:
    """A process (or a master and its workers) whose CPU seconds and RSS can be read."""

    name: str = ""
    url: str = ""

    @property
    def urls(self) -> list[str]:
        """Every URL it serves on (several for `Several`)."""
        return [self.url]

    def pids(self) -> list[int]:
        raise NotImplementedError

    def cpu(self) -> float:
        total = 0.0
        for pid in self.pids():
            try:
                total += cpu_seconds(pid)
            except OSError:
                pass
        return total

    def rss(self) -> int:
        total = 0
        for pid in self.pids():
            try:
                total += rss_bytes(pid)
            except OSError:
                pass
        return total

    def stop(self) -> None:
        raise NotImplementedError


class ChildServer(Measured):
    """A child process that announced its URL on stdout (`proxy.demo.processes.ServerProcess`)."""

    def __init__(self, name: str, process: ServerProcess):
        self.name = name
        self.process = process
        self.url = process.url

    def pids(self) -> list[int]:
        return [self.process.pid]

    def stop(self) -> None:
        self.process.stop()


class AnnouncingProcess(ServerProcess):
    """A `ServerProcess` whose readiness line is `mcp-tasks-proxy listening on <url> ...`, printed
    by each worker process: ready once `announcements` of them have printed it."""

    announcements = 1

    def ready_url(self, line: str) -> str | None:
        match = _PROXY_READY.match(line)
        if match is None:
            return None
        self._announced = getattr(self, "_announced", 0) + 1
        return match.group(1) if self._announced >= self.announcements else None


def child_pids(pids: list[int]) -> list[int]:
    """The children of these processes (`/proc/<pid>/task/*/children`)."""
    found: list[int] = []
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                found += [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                pass
    return found


class ProcessTree(ChildServer):
    """A process and its children: `serve --workers N`, the parent that forked and its N workers."""

    def pids(self) -> list[int]:
        return [self.process.pid, *child_pids([self.process.pid])]


class Several(Measured):
    """Processes measured as one (`--upstreams N`): their CPU and RSS summed, `url` the first's."""

    def __init__(self, name: str, parts: list[Measured]):
        self.name = name
        self.parts = parts
        self.url = parts[0].url

    @property
    def urls(self) -> list[str]:
        return [part.url for part in self.parts]

    def pids(self) -> list[int]:
        return [pid for part in self.parts for pid in part.pids()]

    def stop(self) -> None:
        for part in self.parts:
            part.stop()


def start_fast_upstreams(wire: str, count: int, *, poll_interval_ms: int = 100) -> Measured:
    """`count` fast upstreams of `wire`, each in a process of its own (one `ChildServer` for 1)."""
    parts: list[Measured] = []
    try:
        for _ in range(count):
            parts.append(start_fast_upstream(wire, poll_interval_ms=poll_interval_ms))
    except BaseException:
        for part in parts:
            part.stop()
        raise
    return parts[0] if count == 1 else Several(f"fast upstreams ({wire}) ×{count}", parts)


def start_fast_upstream(wire: str = "v1", *, poll_interval_ms: int = 100, under: Sequence[str] = (),
                        ready_timeout_s: float = 30) -> ChildServer:
    """The fast upstream (`proxy.bench.upstream`) in a process of its own; `under`: a command it
    runs under (`bench --instructions --against-upstream`: valgrind's callgrind)."""
    argv = [*under, sys.executable, "-m", "proxy.bench.upstream", "--wire", wire, "--poll-interval-ms", str(poll_interval_ms)]
    return ChildServer(f"fast upstream ({wire})", ServerProcess.start(argv, ready_timeout_s=ready_timeout_s))


def start_proxy(upstream_url: str, workdir: Path, *, event_loop: str | None = None, key: str | None = None, workers: int = 1,
                tables: str = "", env: dict[str, str] | None = None, **settings: object) -> ChildServer:
    """`python -m proxy serve` in front of `upstream_url`, with `key` (`MCP_TASKS_PROXY_KEY`; a fresh
    one by default) and `settings` (TOML values: str, int) in a config file under `workdir`;
    `event_loop` sets `MCP_TASKS_PROXY_EVENT_LOOP` (auto, uvloop, asyncio) for it. With `workers`
    above 1: `serve --workers N` on a free fixed loopback port (the settings must name a Redis
    store), ready once every worker listens, measured as the parent and all its workers. `tables`:
    TOML `[[upstream]]` tables to serve instead of `upstream_url` alone (the shadow row's two backends);
    `env`: more of its environment."""
    from proxy.eventloop import ENV_EVENT_LOOP
    from proxy.keys import new_key_text

    workdir.mkdir(parents=True, exist_ok=True)
    lines = [f'state_dir = "{workdir / "state"}"']
    for name, value in settings.items():
        lines.append(f'{name} = "{value}"' if isinstance(value, str) else f"{name} = {value}")
    config = workdir / "proxy.toml"
    config.write_text("\n".join(lines) + "\n" + tables)
    listen = "127.0.0.1:0" if workers == 1 else f"127.0.0.1:{free_port()}"
    argv = [sys.executable, "-m", "proxy", "serve", "--config", str(config), "--listen", listen,
            *(() if tables else ("--upstream", upstream_url))]
    environ = {**(env or {}), "MCP_TASKS_PROXY_KEY": key or new_key_text()}
    if event_loop is not None:
        environ[ENV_EVENT_LOOP] = event_loop
    if workers == 1:
        return ChildServer("mcp-tasks-proxy", AnnouncingProcess.start(argv, env=environ, ready_timeout_s=60))
    announcing = type("_Workers", (AnnouncingProcess,), {"announcements": workers})
    process = announcing.start([*argv, "--workers", str(workers)], env=environ, ready_timeout_s=60)
    return ProcessTree(f"mcp-tasks-proxy ({workers} workers)", process)


class ChildrenOf(Measured):
    """The child processes of a measured process (a stdio backend the proxy runs)."""

    def __init__(self, name: str, parent: Measured):
        self.name = name
        self.parent = parent

    def pids(self) -> list[int]:
        return child_pids(self.parent.pids())

    def stop(self) -> None:
        """Stopped by its parent."""


def start_stdio_proxy(workdir: Path, *, event_loop: str | None = None, poll_interval_ms: int = 100) -> ChildServer:
    """`python -m proxy serve --upstream-command` running the fast upstream on stdio."""
    from proxy.eventloop import ENV_EVENT_LOOP
    from proxy.keys import new_key_text

    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "proxy.toml"
    config.write_text(f'state_dir = "{workdir / "state"}"\n')
    command = f"{sys.executable} -m proxy.bench.upstream --wire stdio --poll-interval-ms {poll_interval_ms}"
    argv = [sys.executable, "-m", "proxy", "serve", "--config", str(config), "--listen", "127.0.0.1:0", "--upstream-command", command]
    env = {"MCP_TASKS_PROXY_KEY": new_key_text()}
    if event_loop is not None:
        env[ENV_EVENT_LOOP] = event_loop
    return ChildServer("mcp-tasks-proxy (stdio backend)", AnnouncingProcess.start(argv, env=env, ready_timeout_s=60))


def start_fastmcp3_proxy(upstream_url: str) -> ChildServer:
    """FastMCP 3.4.11's proxy server (`create_proxy(url)`, served as FastMCP serves it) in front
    of `upstream_url`. Builds the `fastmcp3` peer environment first if needed."""
    from proxy.demo.peers import ensure_peer_env

    python = ensure_peer_env("fastmcp3")
    argv = [str(python), str(FASTMCP3_PROXY_SCRIPT), "--upstream", upstream_url]
    env = {"FASTMCP_SHOW_SERVER_BANNER": "false", "FASTMCP_CHECK_FOR_UPDATES": "off", "FASTMCP_LOG_LEVEL": "WARNING"}
    return ChildServer("FastMCP 3.4.11 proxy", ServerProcess.start(argv, env=env, ready_timeout_s=90))


# -- nginx -------------------------------------------------------------------------------------------


def stop_child(popen: subprocess.Popen[bytes], directory: Path) -> None:
    """Stop a server the benchmark started, by its own handle: SIGTERM, SIGKILL after 5 s; then remove its directory."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(timeout=5)
    if popen.stderr:
        popen.stderr.close()
    shutil.rmtree(directory, ignore_errors=True)


class NginxUnavailable(Exception):
    """nginx is not installed and could not be installed; the message says why."""


def ensure_nginx(log: Callable[[str], None] = lambda _m: None) -> str:
    """The nginx executable; installs Debian's `nginx` package with apt-get when it is missing
    (`proxy.bench.packages`). Raises `NginxUnavailable` when it is missing and cannot be installed."""
    if find_program("nginx"):
        return ensure_package("nginx", "nginx", log, NginxUnavailable)
    service_pid = Path("/run/nginx.pid")
    running_before = service_pid.exists()
    try:
        return ensure_package("nginx", "nginx", log, NginxUnavailable)
    finally:
        if not running_before and service_pid.exists():
            # Where no policy forbids it, the package starts its own service on port 80: that one is
            # ours to stop (by the PID it wrote), the benchmark starts its own nginx.
            try:
                os.kill(int(service_pid.read_text().strip()), signal.SIGQUIT)
            except (OSError, ValueError):
                pass


NGINX_CONF = """\
worker_processes 1;
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections {connections}; }}
http {{
    {access_log}
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    client_max_body_size 4m;
    upstream backend {{
{servers}
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host {upstream};
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 3600s;
        }}
    }}
}}
"""


TIMINGS_LOG = "log_format timings '$request_time|$upstream_connect_time|$upstream_header_time';\n    access_log {path} timings;"
"""With `timings`: one line per request, its time at nginx, and its upstream's connect and answer
head (seconds; "-" where there was none), unbuffered, so that the file is whole once the load ends."""


class Nginx(Measured):
    """nginx as a plain reverse proxy on 127.0.0.1:<free port> in front of one upstream, or of
    several (`more`: their URLs) in plain round robin: no hashing, no stickiness. `connections`:
    its `worker_connections` (each proxied request holds two: the client's and the upstream's);
    `timings`: each request's times logged to `self.timings` (`TIMINGS_LOG`)."""

    name = "nginx"

    def __init__(self, executable: str, upstream_url: str, more: list[str] | None = None, connections: int = 4096,
                 timings: bool = False):
        from urllib.parse import urlsplit

        parts = urlsplit(upstream_url)
        self.dir = Path(tempfile.mkdtemp(prefix="mcp-bench-nginx-"))
        os.chmod(self.dir, 0o755)
        port = free_port()
        conf = self.dir / "nginx.conf"
        servers = "\n".join(f"        server {urlsplit(url).netloc} max_fails=0;" for url in [upstream_url, *(more or [])])
        self.timings = self.dir / "timings.log" if timings else None
        access_log = TIMINGS_LOG.format(path=self.timings) if self.timings is not None else "access_log off;"
        conf.write_text(NGINX_CONF.format(dir=self.dir, upstream=parts.netloc, servers=servers, port=port, connections=connections,
                                          access_log=access_log))
        self.url = f"http://127.0.0.1:{port}{parts.path}"
        self.popen = subprocess.Popen([executable, "-p", str(self.dir), "-c", str(conf), "-e", str(self.dir / "error.log")],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            if self.popen.poll() is not None:
                error = (self.popen.stderr.read() if self.popen.stderr else b"").decode(errors="replace")
                raise NginxUnavailable(f"nginx exited with status {self.popen.returncode}: {error.strip()[-300:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise NginxUnavailable("nginx did not accept connections within 10 s") from None
                time.sleep(0.05)
        self._workers = children(self.popen.pid)

    def pids(self) -> list[int]:
        return [self.popen.pid, *self._workers]

    def stop(self) -> None:
        stop_child(self.popen, self.dir)


def start_nginx(upstream_url: str, log: Callable[[str], None] = lambda _m: None, more: list[str] | None = None,
                connections: int = 4096, timings: bool = False) -> Nginx:
    """nginx in front of `upstream_url` (and `more`, round robin). Raises `NginxUnavailable` with the reason."""
    return Nginx(ensure_nginx(log), upstream_url, more, connections, timings)


__all__ = ["ChildServer", "Measured", "Nginx", "NginxUnavailable", "ProcessTree", "ServerStartError", "cpu_seconds", "rss_bytes",
           "start_fast_upstream", "start_fastmcp3_proxy", "start_nginx", "start_proxy"]
