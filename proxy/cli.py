"""Command line: `mcp-tasks-proxy serve | reload | restart | stdio | check | demo | probe | status | reference-server | bench`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Settings

from .config import ConfigError, load
from .logs import announce
from .printable import escaped


def _overrides(args: argparse.Namespace) -> dict[str, object] | None:
    """The settings the flags of `serve` and `stdio` give (`--upstream URL` or `--upstream-command
    'CMD ARGS'`, split as a shell splits words; no shell runs it); None (and a message) for bad flags."""
    import shlex

    overrides = {"listen": getattr(args, "listen", None), "store": args.store, "workers": getattr(args, "workers", None),
                 "hold_tasks": getattr(args, "hold_tasks", None)}
    if args.upstream and args.upstream_command:
        print("mcp-tasks-proxy: give --upstream or --upstream-command, not both", file=sys.stderr)
        return None
    if args.upstream:
        overrides["upstream"] = [{"name": "main", "url": args.upstream}]
    elif args.upstream_command:
        try:
            argv = shlex.split(args.upstream_command)
        except ValueError as exc:
            print(f"mcp-tasks-proxy: --upstream-command: {exc}", file=sys.stderr)
            return None
        overrides["upstream"] = [{"name": "main", "command": argv}]
    return overrides


def _settings(args: argparse.Namespace, refused: Callable[[str], None] | None = None) -> Settings | None:
    """The settings of `serve` and `stdio`: the file, then the flags (`_overrides`). `refused`: told
    why the file does not load (a restart's new process tells the old one)."""
    overrides = _overrides(args)
    if overrides is None:
        return None
    try:
        return load(args.config, overrides)
    except ConfigError as exc:
        print(escaped(f"mcp-tasks-proxy: configuration error: {exc}"), file=sys.stderr)
        if refused is not None:
            refused(f"configuration error: {exc}")
        return None


def _stdio(args: argparse.Namespace) -> int:
    from .app import start
    from .faces.stdio import serve_stdio
    from .logs import configure
    from .upstream.backend import UnsupportedBackend

    settings = _settings(args)
    if settings is None:
        return 2
    configure(settings.log_level, settings.log_format)  # the log goes to stderr; stdout is the wire
    try:
        return asyncio.run(serve_stdio(settings, start))
    except (UnsupportedBackend, ConfigError) as exc:
        announce(settings.log_format, f"mcp-tasks-proxy: refusing to start: {exc}", sys.stderr, level=logging.ERROR)
        return 2


def _serve(args: argparse.Namespace) -> int:
    from .restart import Takeover

    takeover = Takeover.from_environment()  # the new process of a restart (proxy/restart.py)
    settings = _settings(args, takeover.refuse if takeover is not None else None)
    if settings is None:
        return 2
    from .logs import configure

    configure(settings.log_level, settings.log_format)
    overrides = _overrides(args) or {}
    from .reload import pid_file

    # A SIGHUP before the reload handler is installed (right after the pid file names this process)
    # is ignored rather than the end of the proxy; the handler replaces this (docs/decisions.md §85).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # likewise a restart's (proxy/restart.py) before its handler
    from .check import refusal as refused_at_start

    refusal = told = refused_at_start(settings)  # `check`'s checks, in its words (proxy/check.py)
    if takeover is not None and refusal is None:
        told = takeover.mismatch(settings) or _importable()  # an import error leaves the old process serving
        refusal = f"configuration error: {told}" if told is not None else None
    if refusal is not None:
        announce(settings.log_format, f"mcp-tasks-proxy: {refusal}", sys.stderr, level=logging.ERROR)
        if takeover is not None:
            takeover.refuse(told or refusal)
        return 2
    if takeover is not None:
        from .version import TAKEN_OVER

        TAKEN_OVER.update({"from_pid": takeover.old_pid, "at_ms": takeover.at_ms})

    def reread() -> Settings:
        return load(args.config, overrides)

    if settings.workers > 1:
        return _run_workers(settings, reread, takeover)
    if takeover is not None:
        takeover.ready()
    with pid_file(settings, takeover.lock_wait_s(settings) if takeover is not None else 0.0):
        return _serve_one(settings, reread, takeover)  # `mcp-tasks-proxy reload` signals the process named there


def _importable() -> str | None:
    """Why the proxy's code cannot be imported (a broken install), or None."""
    try:
        from . import app  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any error of the new code is the restart's refusal
        return f"cannot import the proxy: {type(exc).__name__}: {exc}"
    return None


def _run_workers(settings: Settings, reread: Callable[[], Settings], takeover: Any) -> int:
    """`settings.workers` worker processes that each serve on one of the supervisor's `SO_REUSEPORT`
    sockets (`listening.shared_sockets`; a restart's new supervisor was handed them), supervised
    (`proxy/workers.py`: one that dies is replaced, within a bound; SIGHUP is passed on: each worker
    reloads; SIGUSR2 restarts them all: `restart.WorkersRestarter`), named in
    `<state_dir>/serve.workers` for `mcp-tasks-proxy reload`. Returns the worst exit status."""
    import contextlib
    import socket

    from .listening import shared_sockets
    from .reload import WORKERS_FILE, pid_file, remove_own, write_workers
    from .restart import WorkerSlot, WorkersRestarter, ask_handover
    from .workers import Supervisor

    if takeover is None:
        try:
            sockets = shared_sockets(settings.host, settings.port, settings.workers, settings.listen_backlog)
        except OSError as exc:
            from .check import cannot_listen

            announce(settings.log_format, f"mcp-tasks-proxy: {cannot_listen(settings, exc)}", sys.stderr, level=logging.ERROR)
            return 2
    else:
        sockets = [socket.socket(fileno=fd) for fd in takeover.listening_fds]
    ready = list(os.pipe()) if takeover is not None else []  # the first workers of a restart say they serve

    def serve(number: int) -> int:  # in the forked worker
        signal.signal(signal.SIGUSR2, ask_handover)  # its supervisor handed over before its handler was installed
        fd = sockets[number - 1].detach()
        for other in sockets:
            other.close()
        if ready:
            os.close(ready[0])
        return _serve_one(settings, reread, WorkerSlot(fd, ready[1] if ready else None))

    supervisor = Supervisor(settings.workers, serve, lambda pids: write_workers(settings.state_dir, pids))
    restarter = WorkersRestarter(settings, [s.fileno() for s in sockets], lambda: supervisor.end(signal.SIGUSR2))
    with contextlib.ExitStack() as held:
        held.callback(remove_own, Path(settings.state_dir).expanduser() / WORKERS_FILE)
        if takeover is None:
            held.enter_context(pid_file(settings))
        signal.signal(signal.SIGUSR2, restarter.signalled)
        supervisor.start()
        if takeover is not None:
            os.close(ready.pop())
            refusal = WorkerSlot.gather(ready.pop(), settings.workers, takeover.lock_wait_s(settings))
            if refusal is not None:
                log = logging.getLogger(__name__)
                log.error("restart refused: %s; the old proxy keeps serving", refusal)
                takeover.refuse(refusal)
                supervisor.end(signal.SIGTERM)
                supervisor.supervise()
                return 2
            takeover.ready()
            held.enter_context(pid_file(settings, takeover.lock_wait_s(settings)))
            supervisor.named(list(supervisor.workers))
            takeover.serving(settings)
        return supervisor.supervise(restarter.reaped)


def _serve_one(settings: Settings, reread: Callable[[], Settings] | None = None, handed: Any = None) -> int:
    """Serve until SIGINT or SIGTERM; on SIGHUP, `reread()` the configuration and reload it
    (`proxy/reload.py`); on SIGUSR2, hand over to a new process (`proxy/restart.py`). `handed`: the
    socket to serve on, and whom to tell it serves or why not: a restart's new process
    (`restart.Takeover`) or a worker of `serve --workers N` (`restart.WorkerSlot`)."""
    from .app import start
    from .restart import HANDOVER_GRACE_S, Restarter
    from .upstream.backend import UnsupportedBackend

    async def run() -> int:
        # Handlers first: a signal that arrives while starting stops the proxy gracefully too.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        hangup = None
        if reread is not None:
            from .reload import Hangup

            hangup = Hangup(loop, reread, settings.state_dir)  # before start: an early SIGHUP waits instead of ending the proxy
        restarter = Restarter(loop, stop, settings, worker=settings.workers > 1)  # a worker's SIGUSR2 is its supervisor's hand-over
        try:
            running = await start(settings, listening_fd=handed.listening_fd if handed is not None else None,
                                  taking_over=handed is not None and handed.accept_first)
        except (UnsupportedBackend, ConfigError) as exc:
            announce(settings.log_format, f"mcp-tasks-proxy: refusing to start: {exc}", sys.stderr, level=logging.ERROR)
            if handed is not None:
                handed.failed(settings, f"refusing to start: {exc}")
            return 2
        except OSError as exc:
            from .check import cannot_listen, listen_reason

            # "Address already in use", not asyncio's sentence
            announce(settings.log_format, f"mcp-tasks-proxy: {cannot_listen(settings, exc)}", sys.stderr, level=logging.ERROR)
            if handed is not None:
                handed.failed(settings, f"cannot listen: {listen_reason(exc)}")
            return 2
        backends = ", ".join(f"{u.name} {u.address}" for u in settings.upstream)
        if hangup is not None:
            hangup.attach(running)
        restarter.attach(running)
        if handed is not None:
            handed.serving(settings)
        # The banner is stdout's one line (the readiness signal scripts and the benchmark wait for).
        announce(settings.log_format, f"mcp-tasks-proxy listening on {running.url} (backends: {backends})", sys.stdout,
                 url=running.url)
        await stop.wait()
        # Stop listening, let requests in flight finish (up to shutdown_timeout_ms), then exit.
        logging.getLogger(__name__).info("stopping: waiting up to %g s for requests in flight", settings.shutdown_timeout_ms / 1000)
        if restarter.handed_over:  # a restart's new process holds the socket: drain the connections first
            await running.hand_over(HANDOVER_GRACE_S)
        else:
            await running.stop()
        if hangup is not None:
            hangup.close()
        return 0

    from .eventloop import loop_factory
    from .eventloop import run as run_on_event_loop

    try:
        loop_name, factory = loop_factory()
    except (RuntimeError, ValueError) as exc:
        print(f"mcp-tasks-proxy: {exc}", file=sys.stderr)
        return 2
    return run_on_event_loop(run, loop_name, factory)


def _probe(args: argparse.Namespace) -> int:
    import json

    import aiohttp

    from translators.errors import McpError

    from .upstream.endpoint import Endpoint
    from .upstream.probe import probe
    from .upstream.tls import env_proxy

    async def run() -> list[dict[str, object]]:
        rows: list[dict[str, object]] = []
        async with aiohttp.ClientSession() as http:
            for url in args.urls:
                endpoint = Endpoint(url, url, http, request_timeout_ms=10_000)
                endpoint.use_options(env_proxy(url, os.environ))  # HTTPS_PROXY, as `serve` (its system CAs)
                try:
                    profile = await probe(endpoint)
                except McpError as exc:
                    rows.append({"url": url, "error": exc.message})
                    continue
                rows.append({
                    "url": url, "resolved_url": profile.url, "dialect": profile.dialect,
                    "protocol_versions": profile.protocol_versions, "tool_tasks": profile.offers_tool_tasks,
                    "tools": profile.tools, "server_info": profile.server_info,
                })
        return rows

    from .printable import json_text

    rows = asyncio.run(run())
    if args.json:
        print(json_text(json.dumps(rows, indent=2)))
        return 1 if any("error" in row for row in rows) else 0
    for row in rows:  # what the backend says, its control characters escaped (`proxy/printable.py`)
        if "error" in row:
            print(f"{escaped(str(row['url']))}\n  error: {escaped(str(row['error']))}")
            continue
        versions = ", ".join(row["protocol_versions"])  # type: ignore[arg-type]
        print(f"{escaped(str(row['url']))}\n  dialect: {row['dialect']}\n  protocol versions: {escaped(versions)}"
              f"\n  tool tasks: {'yes' if row['tool_tasks'] else 'no'}")
        tools: dict[str, str] = row["tools"]  # type: ignore[assignment]
        for name, support in sorted(tools.items()):
            print(f"  tool {escaped(name)}: task support {escaped(str(support))}")  # not an access denial: execution.taskSupport
    return 1 if any("error" in row for row in rows) else 0


def _reference_server(args: argparse.Namespace) -> int:
    from .demo import processes

    start = {"v1": processes.start_reference_v1_server, "v2": processes.start_reference_v2_server,
             "fastmcp3": processes.start_fastmcp3_server}[args.kind]
    try:
        server = start(args.port)
    except processes.ServerStartError as exc:
        print(f"error: reference {args.kind} server did not start: {exc.reason}", file=sys.stderr)
        return 1
    print(f"reference {args.kind} server listening on {server.url} (this command is pid {os.getpid()}, its server "
          f"pid {server.pid}); Ctrl-C or SIGTERM to pid {os.getpid()} stops both", flush=True)
    stopping = {signal.SIGINT, signal.SIGTERM}
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, stopping)
        while server.is_running() and signal.sigtimedwait(stopping, 0.5) is None:
            pass  # no signal: look at the server again (it may have been stopped or killed by its own pid)
    finally:
        status = server.returncode if not server.is_running() else None
        server.stop()
    if status is not None:
        print(f"error: the reference {args.kind} server (pid {server.pid}) exited with status {status}", file=sys.stderr)
        return 1
    return 0


def _demo(args: argparse.Namespace) -> int:
    if args.reverse:
        from .demo.reverse_walkthrough import main as demo_main
    else:
        from .demo.walkthrough import main as demo_main

    if args.stdio:
        if args.reverse:
            print("mcp-tasks-proxy: demo --stdio walks the v2 client to a stdio v1 server; leave out --reverse", file=sys.stderr)
            return 2
        return demo_main(verbose=not args.quiet, stdio=True)  # type: ignore[call-arg]
    return demo_main(verbose=not args.quiet)


def _check(args: argparse.Namespace) -> int:
    from .check import check

    overrides: dict[str, object] = {"store": args.store}
    if args.upstream:
        overrides["upstream"] = [{"name": "main", "url": args.upstream}]
    lines, held = check(args.config, overrides, probe=args.probe)
    for line in lines:
        print(escaped(line), file=sys.stdout if held else sys.stderr)
    return 0 if held else 1


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mcp-tasks-proxy")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `mcp-tasks-proxy` console script; returns the exit status."""
    parser = argparse.ArgumentParser(prog="mcp-tasks-proxy", description="MCP Tasks v1 <-> v2 translating reverse proxy")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the proxy in front of a backend")
    serve.add_argument("--upstream", metavar="URL", help="the backend's MCP endpoint, e.g. http://127.0.0.1:3000/mcp")
    serve.add_argument("--listen", metavar="HOST:PORT", help="where to listen (default 127.0.0.1:8080)")
    serve.add_argument("--config", metavar="FILE", help="TOML configuration file (see config.example.toml)")
    serve.add_argument("--store", metavar="STORE",
                       help="where task state lives: sqlite (default; <state_dir>/tasks.sqlite3, survives restarts), memory, "
                            "or a Redis URL redis://host:port/db shared by replicas and workers")
    serve.add_argument("--workers", type=int, metavar="N", help="worker processes sharing the port (SO_REUSEPORT; needs a Redis store)")
    serve.add_argument("--upstream-command", metavar="'CMD ARGS'",
                       help="a stdio backend: the server command the proxy runs (split like shell words, no shell)")
    serve.add_argument("--hold-tasks", choices=["auto", "off"],
                       help="held tasks for tools without task support (default auto; a backend's own hold_tasks wins)")
    serve.set_defaults(run=_serve)
    stdio = commands.add_parser("stdio", help="be a stdio MCP server (for desktop clients) in front of a backend")
    stdio.add_argument("--upstream", metavar="URL", help="the backend's MCP endpoint")
    stdio.add_argument("--upstream-command", metavar="'CMD ARGS'", help="a stdio backend's command (split like shell words)")
    stdio.add_argument("--config", metavar="FILE", help="TOML configuration file (see config.example.toml)")
    stdio.add_argument("--store", choices=["sqlite", "memory"], default="memory",
                       help="where task state lives (default here: memory)")
    stdio.add_argument("--hold-tasks", choices=["auto", "off"],
                       help="held tasks for tools without task support (default auto; a backend's own hold_tasks wins)")
    stdio.set_defaults(run=_stdio)
    demo = commands.add_parser("demo", help="walk a v2 client through the proxy in front of the reference v1 server")
    demo.add_argument("--quiet", action="store_true", help="print only the step titles and the summary (and any check that failed)")
    demo.add_argument("--reverse", action="store_true",
                      help="walk a v1 client through the proxy in front of the reference v2 server instead")
    demo.add_argument("--stdio", action="store_true",
                      help="run the reference v1 server as a stdio server the proxy starts (a stdio backend)")
    demo.set_defaults(run=_demo)
    probe = commands.add_parser("probe", help="show each backend's dialect, protocol versions and tools' task support")
    probe.add_argument("urls", nargs="+", metavar="URL", help="a backend's MCP endpoint")
    probe.add_argument("--json", action="store_true", help="print JSON instead of a table")
    probe.set_defaults(run=_probe)
    reference = commands.add_parser(
        "reference-server", help="run one of the reference servers (in its own cached environment) for trying the proxy"
    )
    reference.add_argument("kind", choices=["v1", "v2", "fastmcp3"],
                           help="v1: official mcp 1.30 SDK; v2: FastMCP 4 + fastmcp-tasks; fastmcp3: FastMCP 3 (v1)")
    reference.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    reference.set_defaults(run=_reference_server)
    checking = commands.add_parser("check", help="check a configuration file without starting the proxy (exits 1 naming the problem)")
    checking.add_argument("--config", metavar="FILE", help="the TOML configuration file to check")
    checking.add_argument("--upstream", metavar="URL", help="as for serve")
    checking.add_argument("--store", metavar="STORE", help="as for serve")
    checking.add_argument("--probe", action="store_true",
                          help="then ask what serve meets when it starts now: the state directory's lock, the backends "
                               "(stdio commands started, HTTP backends probed), the address (for a first start, not beside "
                               "the running proxy)")
    checking.set_defaults(run=_check)
    from .restart import add_parser as add_restart_parser

    add_restart_parser(commands)
    from .reload import add_parser as add_reload_parser

    add_reload_parser(commands)
    from .observe.terminal import add_parser as add_status_parser

    add_status_parser(commands)
    from .rollout.control import add_parser as add_rollout_parser

    add_rollout_parser(commands)
    from .bench.cli import add_bench_parser

    add_bench_parser(commands)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
