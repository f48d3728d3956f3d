"""The benchmark: what the proxy costs, against direct connections, nginx and FastMCP 3's proxy.

* `upstream`: the fast upstream, a small aiohttp server speaking the session wire with v1 tasks
  (or, with `--wire modern`, the stateless 2026-07-28 wire with the tasks extension).
* `clients`: the two kinds of benchmark client (session wire, modern wire) and the three
  scenarios each runs: (a) a sync echo `tools/call`, (b) the lifecycle of a task with no work
  polled at its interval, (c) a tool streaming 100 progress notifications over SSE.
* `loadgen`: N concurrent clients for a fixed duration; latency percentiles and errors.
* `targets`: the processes measured (fast upstream, the proxy, FastMCP 3's proxy, nginx) and the
  CPU seconds and RSS the operating system reports for their PIDs.
* `run`: the comparison (`mcp-tasks-proxy bench`), rows alternated, medians of several runs.
* `memory`: proxy RSS with 10,000 live polled tasks and after 100,000 completed ones.
"""
