"""A backend that is down when the proxy starts is probed again on use (docs/behaviour.md §2), and
its dialect, once known, decides relay or translation."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from support import TEST_KEY, Caller, free_port, running_proxy

from proxy.demo.peers import ensure_peer_env
from proxy.demo.processes import V2_SERVER_SCRIPT, ServerProcess
from translators.sealing import ANONYMOUS, Keyring

pytestmark = pytest.mark.peers


async def test_a_v2_backend_that_comes_up_after_the_proxy_is_relayed_not_translated(tmp_path):
    port = free_port()
    async with running_proxy(f"http://127.0.0.1:{port}/mcp", tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        down = await caller.call("tools/list")
        assert (down.status, down.error["code"]) == (502, -32603)
        assert (await http.get(proxy.base_url + "/readyz")).status == 503
        argv = [str(ensure_peer_env("fastmcp4")), str(V2_SERVER_SCRIPT), "--host", "127.0.0.1", "--port", str(port)]
        server = ServerProcess.start(argv, env={"FASTMCP_SHOW_SERVER_BANNER": "false", "FASTMCP_CHECK_FOR_UPDATES": "off"})
        try:
            await asyncio.sleep(1.1)  # on-demand probes are at least a second apart
            created = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "late"}})
            assert created.status == 200
            assert created.result["resultType"] == "task"
            relayed = created.result["taskId"]
            # FastMCP 4's own id, relayed as it gave it (decision 192)
            assert (len(relayed), Keyring(TEST_KEY).opened_task_id(relayed, ANONYMOUS)) == (43, None)
            assert (await http.get(proxy.base_url + "/readyz")).status == 200
        finally:
            server.stop()
