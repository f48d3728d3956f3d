"""`mcp-tasks-proxy bench`: the subcommand's arguments (the work is in `proxy.bench.run`)."""

from __future__ import annotations

import argparse
import signal
import sys


def _stop_on_sigterm() -> None:
    """SIGTERM (`timeout`'s, a service manager's) ends a process at once by default, and left every
    server the benchmark had started running. As `SystemExit` it unwinds like Ctrl-C does: each
    `finally` stops what it started, by its own handle; the exit status stays 128 + 15."""

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def _run(args: argparse.Namespace) -> int:
    _stop_on_sigterm()
    if args.held:
        from .held import format_held, run_held

        held = run_held(calls=args.held_calls, live=args.held_live, log=lambda m: print(f"[bench] {m}", file=sys.stderr, flush=True))
        print(format_held(held), flush=True)
        if args.json:
            import json
            from pathlib import Path

            Path(args.json).write_text(json.dumps({"held": held}, indent=2) + "\n")
        return 0
    if args.parts and not args.instructions:
        print("mcp-tasks-proxy bench: --parts counts with --instructions", file=sys.stderr)
        return 2
    if args.against_upstream and not args.instructions:
        print("mcp-tasks-proxy bench: --against-upstream counts with --instructions", file=sys.stderr)
        return 2
    if args.calls is not None and (not args.instructions or args.parts):
        print("mcp-tasks-proxy bench: --calls counts whole calls with --instructions (the table runs for --duration; "
              "--parts repeats each part a fixed number of times)", file=sys.stderr)
        return 2
    if args.against_upstream and args.parts:
        print("mcp-tasks-proxy bench: --against-upstream counts whole calls, not --parts", file=sys.stderr)
        return 2
    if args.instructions:
        from .instructions import main as count_instructions

        return count_instructions(args)
    from .run import main

    return main(args)


def add_bench_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `bench` to the CLI's subcommands."""
    bench = commands.add_parser(
        "bench", help="compare the proxy with direct connections, nginx and FastMCP 3's proxy (prints a table)",
        description="Start a fast upstream, the proxy, nginx and FastMCP 3.4.11's proxy on loopback, drive N concurrent "
                    "clients through each in turn for a fixed time, and print requests/s, latency percentiles, errors and "
                    "the CPU seconds of the proxy and the upstream (medians of several runs). See docs/performance.md.")
    bench.add_argument("--quick", action="store_true", help="one short run of every row (a smoke test, about 10 s)")
    bench.add_argument("--duration", type=float, metavar="S", help="seconds each row is driven per run (default 3)")
    bench.add_argument("--concurrency", type=int, default=1, metavar="N", help="concurrent clients (default 1)")
    bench.add_argument("--load-processes", type=int, default=1, metavar="N",
                       help="spread the clients over N load-generating processes (default 1), so that the load generator is not the ceiling")
    bench.add_argument("--upstreams", type=int, default=1, metavar="N",
                       help="N fast upstream processes of each wire, one [[upstream]] each in the proxies (default 1)")
    bench.add_argument("--runs", type=int, metavar="R", help="runs of every row; the table shows medians (default 3)")
    bench.add_argument("--upstream", choices=["fast", "reference"], default="fast",
                       help="fast: the benchmark's own aiohttp upstream (default); reference: the reference v1 server (mcp 1.30)")
    bench.add_argument("--rows", metavar="LIST", help="only these rows, e.g. direct,relay (default: all)")
    bench.add_argument("--scenarios", metavar="LETTERS", help="only these scenarios, e.g. ab (default abc)")
    bench.add_argument("--event-loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                       help="the proxy's event loop (default auto: uvloop where it is installed, as serve chooses)")
    bench.add_argument("--store", choices=["sqlite", "redis"], default="sqlite",
                       help="the proxy rows' state store (default sqlite; redis: a redis-server started on loopback)")
    bench.add_argument("--workers", default="1", metavar="N[,M]",
                       help="the proxy rows through `serve --workers N` (default 1; 2 implies --store redis; "
                            "1,2: each proxy row with 1 and with 2 workers, side by side)")
    bench.add_argument("--no-nginx", action="store_true", help="leave out the nginx row")
    bench.add_argument("--no-fastmcp", action="store_true", help="leave out the FastMCP 3.4.11 proxy row")
    bench.add_argument("--memory", action="store_true",
                       help="also measure proxy memory: live polled tasks, then completed tasks (a few minutes)")
    bench.add_argument("--memory-only", action="store_true", help="measure memory only (no comparison table)")
    bench.add_argument("--live-tasks", type=int, default=10_000, metavar="N", help="live tasks for --memory (default 10000)")
    bench.add_argument("--memory-clients", type=int, default=100, metavar="N", help="clients creating them (default 100)")
    bench.add_argument("--completed", type=int, default=100_000, metavar="N", help="completed tasks for --memory (default 100000)")
    bench.add_argument("--instructions", action="store_true",
                       help="instead of the table: instructions per call of the proxy process under valgrind's callgrind "
                            "(rows relay, relay-modern, translate; scenarios a, b, c), the figure to compare a change by")
    bench.add_argument("--parts", nargs="?", const="all", default=None, metavar="NAMES",
                       help="with --instructions: instead of whole calls, the parts of a relayed call each counted alone "
                            "(all, or some of request-head, json, upstream-head, upstream-answer, answer, request-id)")
    bench.add_argument("--against-upstream", action="store_true",
                       help="with --instructions: count the fast upstream behind each HTTP row too, in the same run, and "
                            "print the proxy's instructions per call ÷ the upstream's")
    bench.add_argument("--calls", type=int, default=None, metavar="N",
                       help="calls counted per row for --instructions (default 300; scenario b: N/5 lifecycles)")
    bench.add_argument("--soak", action="store_true",
                       help="a soak instead of the table: v1 and v2 clients running task lifecycles with a question through "
                            "two replicas on Redis behind round-robin nginx (about --soak-minutes)")
    bench.add_argument("--soak-clients", type=int, default=500, metavar="N", help="concurrent soak clients, half v1 (default 500)")
    bench.add_argument("--soak-minutes", type=float, default=5.0, metavar="M", help="soak duration in minutes (default 5)")
    bench.add_argument("--soak-replicas", type=int, default=2, metavar="N",
                       help="proxy replicas behind nginx: 1 or 2 (default 2); one and enough clients saturate it")
    bench.add_argument("--soak-kill-at", type=float, default=None, metavar="S",
                       help="kill replica b (SIGKILL) S seconds into the soak (two replicas)")
    bench.add_argument("--soak-overload-lag-ms", type=int, default=None, metavar="MS",
                       help="the replicas' overload_lag_ms (admission control; default: the proxy's own)")
    bench.add_argument("--held", action="store_true",
                       help="instead of the table: held tasks (docs/behaviour.md §9): proxy CPU per held lifecycle and per "
                            "sync call, memory per open held task")
    bench.add_argument("--held-calls", type=int, default=200, metavar="N", help="held lifecycles for --held (default 200)")
    bench.add_argument("--held-live", type=int, default=1000, metavar="N", help="held calls left open for --held (default 1000)")
    bench.add_argument("--json", metavar="FILE", help="also write every figure as JSON to FILE")
    bench.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    bench.set_defaults(run=_run)
