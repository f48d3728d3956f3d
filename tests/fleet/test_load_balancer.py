"""The HAProxy configuration of docs/load-balancing.md, run for real in front of two replicas
(docs/behaviour.md §6; issue: replicas behind an existing load balancer).

HAProxy comes from Debian's package (installed here when missing, as root with apt-get); it is
started on a loopback port with the documented configuration and stopped by its own PID.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path

import aiohttp
import pytest
from session_support import SessionCaller
from support import Caller, free_port, running_proxy

from proxy.app import STATE

pytestmark = pytest.mark.peers
ROOT = Path(__file__).resolve().parents[2]
EXT = "io.modelcontextprotocol/tasks"


def _haproxy() -> str:
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if found:
        return found
    for command in (
        ["apt-get", "install", "-y", "-q", "haproxy"],
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "haproxy"],
    ):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if command[1] == "install" and done.returncode == 0:
            break
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    assert found, "HAProxy could not be installed with apt-get"
    return found


def _documented_config(front: int, a: int, b: int) -> str:
    doc = (ROOT / "docs" / "load-balancing.md").read_text()
    config = doc.split("```haproxy\n", 1)[1].split("```", 1)[0]
    config = config.replace("127.0.0.1:8080", f"127.0.0.1:{front}")
    config = config.replace("127.0.0.1:8081", f"127.0.0.1:{a}").replace("127.0.0.1:8082", f"127.0.0.1:{b}")
    assert re.search(rf"bind 127\.0\.0\.1:{front}\b", config)
    return config


async def test_two_replicas_behind_the_documented_haproxy_configuration(reference_v1_server, tmp_path):
    haproxy = _haproxy()
    port_a, port_b, front = free_port(), free_port(), free_port()
    async with (
        running_proxy(reference_v1_server.url, tmp_path / "a", listen=f"127.0.0.1:{port_a}") as a,
        running_proxy(reference_v1_server.url, tmp_path / "b", listen=f"127.0.0.1:{port_b}") as b,
    ):
        config = tmp_path / "haproxy.cfg"
        config.write_text(_documented_config(front, port_a, port_b))
        process = subprocess.Popen([haproxy, "-f", str(config), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # noqa: ASYNC220 - started once, stopped by its handle
        try:
            url = f"http://127.0.0.1:{front}/mcp"
            async with aiohttp.ClientSession() as http:
                for _ in range(50):  # until HAProxy listens
                    try:
                        async with http.get(f"http://127.0.0.1:{front}/healthz") as ready:
                            if ready.status == 200:
                                break
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.1)
                modern = Caller(http, url)
                created = [
                    (
                        await modern.call(
                            "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": f"lb{i}"}}
                        )
                    ).result
                    for i in range(4)
                ]
                finals = [await modern.poll(task["taskId"]) for task in created]
                assert [f["result"]["content"][0]["text"] for f in finals] == [f"computed lb{i}" for i in range(4)]

                # Proxy-owned sessions (v2-session clients) live in one replica: the stick table
                # learned from the initialize answer must bring every later request back to it.
                for n in range(3):
                    client = SessionCaller(http, url, capabilities={"elicitation": {}, "extensions": {EXT: {}}})
                    await client.initialize()
                    task = (
                        await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": f"s{n}"}})
                    )["result"]
                    for _ in range(5):
                        answer = await client.call("tasks/get", {"taskId": task["taskId"]})
                        assert answer["_status"] == 200, answer
            held = [len(proxy.runner.app[STATE].session_face.sessions) for proxy in (a, b)]
            print(f"sessions held by the replicas: {held}")
            assert sum(held) == 3  # each initialize made one session, in whichever replica answered it
        finally:
            process.terminate()
            process.wait(timeout=10)
