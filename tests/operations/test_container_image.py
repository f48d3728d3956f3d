"""The container image (issue 43; README "Deploy", `Containerfile`): built here from the project's
`Containerfile` on a local Debian base with nothing pulled (`tests/container_support.py`), run
with podman in front of a real task-less server on the official `mcp` 1.30 SDK on the host
(`tests/peers/untasked_mcp1_server.py`), with the documented mounts: the configuration at
/etc/mcp-tasks-proxy/config.toml and the state directory at /var/lib/mcp-tasks-proxy.

Through the container: a 2026-07-28 call answered, and a slow call held as a task; `podman stop`
while that held call runs ends the proxy gracefully (exit 0) after the call finished, and the
container started again answers the task with its result: the key and the store were kept in
the state mount. The proxy runs as uid 10001, never root, and the CA bundle given to the build is
not in the image.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator

import aiohttp
import pytest
from container_support import LIMITS, PODMAN, build_image
from held_support import start_untasked_server
from peer_checks import serving
from support import Caller, free_port

from proxy.demo.processes import ServerProcess

pytestmark = pytest.mark.peers


@pytest.fixture(scope="module")
def image() -> str:
    return build_image()


@pytest.fixture(scope="module")
def untasked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(lambda: start_untasked_server(tmp_path_factory.mktemp("events") / "events.jsonl"))


async def _podman(*args: str, timeout_s: float = 120) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *PODMAN, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout_s)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def _healthy(http: aiohttp.ClientSession, base: str, name: str) -> None:
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        with contextlib.suppress(aiohttp.ClientError):
            async with http.get(base + "/healthz") as response:
                if response.status == 200:
                    return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError((await _podman("logs", name))[1][-3000:])
        await asyncio.sleep(0.1)


def text(value: str) -> dict[str, object]:
    return {"content": [{"type": "text", "text": value}], "isError": False, "resultType": "complete"}


async def test_the_image_serves_a_call_and_a_held_task_keeps_its_state_runs_as_non_root_and_stops_gracefully(
    image, untasked, tmp_path
):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    etc = tmp_path / "etc"
    etc.mkdir()
    config = etc / "config.toml"
    config.write_text(
        f'listen = "127.0.0.1:{port}"\nshutdown_timeout_ms = 20000\nprobe_interval_ms = 300\n'
        f'[[upstream]]\nname = "main"\nurl = "{untasked.url}"\nhold_after_ms = 300\n'
    )
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, 10001, 10001)  # the image's user owns its state mount
    name = f"mcp-tasks-proxy-test-{port}"
    run = [
        "run",
        "-d",
        "--name",
        name,
        "--network",
        "host",
        *LIMITS,
        "-v",
        f"{etc}:/etc/mcp-tasks-proxy:ro",
        "-v",
        f"{state}:/var/lib/mcp-tasks-proxy",
        image,
    ]
    code, out = await _podman(*run)
    assert code == 0, out
    try:
        async with aiohttp.ClientSession() as http:
            await _healthy(http, base, name)
            caller = Caller(http, base + "/mcp")
            greeted = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})
            assert greeted.result == text("Hello, Ada!")
            held = await caller.call(
                "tools/call", {"name": "slow_compute", "arguments": {"seconds": 4, "label": "through a stop"}}
            )
            assert (held.result["status"], held.result["resultType"]) == ("working", "task"), held.result
            task_id = held.result["taskId"]
            assert (await _podman("exec", name, "id"))[
                1
            ].strip() == "uid=10001(mcp-tasks-proxy) gid=10001(mcp-tasks-proxy) groups=10001(mcp-tasks-proxy)"
            assert (await _podman("exec", name, "sh", "-c", "test -e /run/secrets/ca_bundle || echo absent"))[
                1
            ].strip() == "absent"
            # A graceful stop: SIGTERM, the held call finishes, the process exits 0 well before the runtime's kill.
            code, out = await _podman("stop", "-t", "60", name, timeout_s=90)
            assert code == 0, out
            assert (await _podman("inspect", "--format", "{{.State.ExitCode}}", name))[1].strip() == "0"
            assert sorted(path.name for path in state.iterdir() if not path.name.startswith("tasks.sqlite3-")) == [
                "key",
                "serve.pid.lock",
                "tasks.sqlite3",
                "tasks.sqlite3.lock",
            ]
            assert {path.stat().st_uid for path in state.iterdir()} == {10001}
            code, out = await _podman("start", name)
            assert code == 0, out
            await _healthy(http, base, name)
            final = await Caller(http, base + "/mcp").poll(task_id, timeout=10)
            assert (final["status"], final["result"]) == ("completed", text("computed through a stop"))
    finally:
        await _podman("rm", "-f", "-t", "0", name)
