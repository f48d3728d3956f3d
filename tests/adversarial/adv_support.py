"""Helpers of the adversarial suite (imported by its tests; fixtures live in conftest.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support import meta  # noqa: E402
from support import wait_for_input as wait_for_input  # noqa: E402 - the shared helper, which the adversarial tests import from here
from tap import RecordingTap  # noqa: E402

from proxy.demo.peers import ensure_peer_env  # noqa: E402
from proxy.demo.processes import V1_SERVER_SCRIPT, ServerProcess, start_reference_v1_server  # noqa: E402

MODERN_HEADERS = {
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2026-07-28",
    "Accept": "application/json, text/event-stream",
}


def modern_body(
    method: str = "tools/list", params: dict[str, Any] | None = None, *, id: Any = 7, **meta_kwargs: Any
) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": {**(params or {}), "_meta": meta(**meta_kwargs)}}


class FlakyTap(RecordingTap):
    """A recording tap whose new POSTs are cut (connection closed, nothing forwarded) while `down`
    is set: a transient upstream failure. Streams already open (GET, a held tasks/result) go on."""

    down = False
    dropped = 0

    async def _forward(self, request):  # type: ignore[override]
        if self.down and request.method == "POST":
            await request.read()
            self.dropped += 1
            assert request.transport is not None
            request.transport.close()
            raise ConnectionResetError("flaky tap: dropped")
        return await super()._forward(request)


class RestartableBackend:
    """A private reference v1 server that can be killed and started again on the same port."""

    def __init__(self) -> None:
        self.process: ServerProcess = start_reference_v1_server()
        self.url = self.process.url
        self.port = int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def kill(self) -> None:
        self.process.stop()

    def restart(self) -> None:
        python = ensure_peer_env("mcp-v1")
        self.process = ServerProcess.start([str(python), str(V1_SERVER_SCRIPT), "--host", "127.0.0.1", "--port", str(self.port)])

    def stop(self) -> None:
        self.process.stop()


async def healthz_ok(http: aiohttp.ClientSession, base_url: str) -> bool:
    async with http.get(base_url + "/healthz") as response:
        return response.status == 200 and await response.json() == {"status": "ok"}


def dumps(obj: Any) -> bytes:
    """JSON with non-ASCII escaped, so lone surrogates travel as valid `\\udXXX` escapes."""
    return json.dumps(obj).encode("ascii")
