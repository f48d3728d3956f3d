"""`serve` on each event loop it may run on (docs/decisions.md §135, §188): uvloop, the default
where it exists, which the proxy processes the suite starts run on, and asyncio's own loop
(`MCP_TASKS_PROXY_EVENT_LOOP=asyncio`), which the in-process proxies of the rest of the suite run
on. The stdio connector reads its child's pipes through the loop's own transports, which differ.
Here the proxy runs as its own process on each (`uvloop` fails without it) in front of the fast
upstream over HTTP and on stdio, and the benchmark's clients check every answer exactly."""

from __future__ import annotations

import sys

import aiohttp
import pytest
from support import fast_upstream_fixture

from proxy.bench.clients import PROGRESS_COUNT, ModernClient, SessionClient
from proxy.bench.targets import AnnouncingProcess
from proxy.eventloop import ENV_EVENT_LOOP
from proxy.keys import new_key_text

pytestmark = pytest.mark.slow  # a proxy process per case, each running lifecycles and streams
UPSTREAM_ON_STDIO = f"{sys.executable} -m proxy.bench.upstream --wire stdio --poll-interval-ms 50"


upstream = fast_upstream_fixture("v1")


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("wire", ["http", "stdio"])
async def test_the_proxy_on_each_loop_relays_and_translates_calls_lifecycles_and_streams(wire, loop, upstream, tmp_path):
    config = tmp_path / "proxy.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n')
    target = ["--upstream", upstream.url] if wire == "http" else ["--upstream-command", UPSTREAM_ON_STDIO]
    argv = [sys.executable, "-m", "proxy", "serve", "--config", str(config), "--listen", "127.0.0.1:0", *target]
    env = {"MCP_TASKS_PROXY_KEY": new_key_text(), ENV_EVENT_LOOP: loop}
    proxy = AnnouncingProcess.start(argv, env=env, ready_timeout_s=60)
    try:
        answered = []
        async with aiohttp.ClientSession() as http:
            for client in (SessionClient(http, proxy.url), ModernClient(http, proxy.url)):
                await client.open()
                try:
                    for _ in range(3):  # each raises BenchError on an answer that is not exactly the expected one
                        answered.append(
                            (type(client).__name__, await client.echo(), await client.lifecycle(), await client.progress())
                        )
                finally:
                    await client.close()
        output = proxy.output_tail()
    finally:
        proxy.stop()
    assert answered == [("SessionClient", 0, 0, PROGRESS_COUNT)] * 3 + [("ModernClient", 0, 0, PROGRESS_COUNT)] * 3
    assert f"event loop: {loop}" in output
    assert "Traceback" not in output
