"""Helpers for tests that drive the proxy over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.app import RunningProxy, start
from proxy.bench import ports
from proxy.bench.targets import start_fast_upstream
from proxy.config import load
from proxy.demo.processes import ServerProcess
from translators.sealing import KEY_BYTES, Keyring

MODERN = "2026-07-28"
TASKS_EXT = "io.modelcontextprotocol/tasks"
TEST_KEY = bytes(range(KEY_BYTES))
PLAIN_MCP1_SERVER = Path(__file__).resolve().parent / "peers" / "plain_mcp1_server.py"


def start_plain_mcp1_server(port: int = 0) -> ServerProcess:
    """The plain mcp 1.30 server (`tests/peers/plain_mcp1_server.py`, none of the reference
    server's SDK workarounds) on 127.0.0.1:`port` (0: ephemeral), in the `mcp-v1` peer
    environment; its `url` is `http://127.0.0.1:<port>/mcp`. Stop it with `.stop()`."""
    from proxy.demo.peers import ensure_peer_env

    argv = [str(ensure_peer_env("mcp-v1")), str(PLAIN_MCP1_SERVER), "--host", "127.0.0.1", "--port", str(port)]
    return ServerProcess.start(argv)


def meta(*, declare: bool = True, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    caps = dict(capabilities if capabilities is not None else {"elicitation": {"form": {}}})
    if declare:
        caps["extensions"] = {TASKS_EXT: {}}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
    }


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str]

    @property
    def result(self) -> dict[str, Any]:
        assert "result" in self.body, self.body
        return self.body["result"]

    @property
    def error(self) -> dict[str, Any]:
        assert "error" in self.body, self.body
        return self.body["error"]


class Caller:
    """A raw modern-wire caller: builds envelope and headers, returns status, JSON and headers."""

    def __init__(self, http: aiohttp.ClientSession, url: str, *, declare: bool = True, authorization: str | None = None):
        self.http = http
        self.url = url
        self.declare = declare
        self.authorization = authorization
        self._id = 0

    def body(self, method: str, params: dict[str, Any] | None = None, *, declare: bool | None = None) -> dict[str, Any]:
        self._id += 1
        p = dict(params or {})
        p["_meta"] = meta(declare=self.declare if declare is None else declare)
        return {"jsonrpc": "2.0", "id": self._id, "method": method, "params": p}

    def headers(self, method: str) -> dict[str, str]:
        h = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method, "Accept": "application/json, text/event-stream"}
        if self.authorization:
            h["Authorization"] = self.authorization
        return h

    async def raw(self, data: bytes | str, headers: dict[str, str], *, method: str = "POST") -> Answer:
        async with self.http.request(method, self.url, data=data, headers=headers) as response:
            text = await response.read()
            try:
                body = json.loads(text) if text else None
            except ValueError:
                body = text
            return Answer(response.status, body, {k: v for k, v in response.headers.items()})

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        declare: bool | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        body = self.body(method, params, declare=declare)
        h = {**self.headers(method), "Content-Type": "application/json", **(headers or {})}
        return await self.raw(json.dumps(body), h)

    async def poll(
        self, task_id: str, *, until: tuple[str, ...] = ("completed", "failed", "cancelled"), timeout: float = 20
    ) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            answer = await self.call("tasks/get", {"taskId": task_id})
            result = answer.result
            if result["status"] in until:
                return result
            assert asyncio.get_running_loop().time() < deadline, f"task stayed {result['status']}"
            await asyncio.sleep(0.1)


class NamedCaller(Caller):
    """A modern caller that names itself `info` in every request's `_meta`."""

    def __init__(self, http: aiohttp.ClientSession, url: str, info: dict[str, str]):
        super().__init__(http, url)
        self.info = info

    def body(self, method: str, params: dict[str, Any] | None = None, *, declare: bool | None = None) -> dict[str, Any]:
        body = super().body(method, params, declare=declare)
        body["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = self.info
        return body


def proxy_port(proxy: RunningProxy) -> int:
    """The TCP port a running proxy listens on."""
    return int(proxy.base_url.rsplit(":", 1)[1])


async def until(predicate: Any, what: str = "the condition", timeout_s: float = 10, interval_s: float = 0.02) -> Any:
    """Poll `predicate` every `interval_s` until it returns something true, and return that; fail
    naming `what` after `timeout_s`. Waits for an event, never for a time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not (value := predicate()):
        assert loop.time() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        await asyncio.sleep(interval_s)
    return value


def free_port() -> int:
    """A loopback port for a server told its port (one that must come back on the same port, `serve
    --workers`): free now, and never one the kernel hands another test's connection or server in
    the meantime (`proxy.bench.ports`)."""
    return ports.free_port()


@contextlib.asynccontextmanager
async def running_proxy(
    upstream_url: str, state_dir: Path, *, main_keys: dict[str, Any] | None = None, **overrides: Any
) -> AsyncIterator[RunningProxy]:
    """The proxy on 127.0.0.1:<ephemeral> in front of `upstream_url`, with a fixed test key
    (`main_keys`: more keys of that backend's `[[upstream]]`; an `upstream` override replaces the
    whole list)."""
    main = {"name": "main", "url": upstream_url, **(main_keys or {})}
    settings = load(None, {"listen": "127.0.0.1:0", "upstream": [main], "state_dir": str(state_dir), **overrides})
    running = await start(settings, keyring=Keyring(TEST_KEY))
    try:
        yield running
    finally:
        await running.stop()


REFERENCE_V1_TOOLS = [
    "greet",
    "slow_compute",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "report_progress",
    "test_tool_with_task",
]
"""The reference v1 server's tools (`proxy/demo/servers/v1_server.py`), in the order it lists them."""


async def eventually(
    fetch: Any, accept: Any = bool, what: Any = "the condition", timeout_s: float = 10, interval_s: float = 0.1
) -> Any:
    """`fetch()` (a plain or a coroutine function) every `interval_s` until `accept(value)` holds,
    and return that value; fail after `timeout_s` naming `what` (a string, or a function giving one
    at the failure) and the last value. `until` for a condition that needs a request to read."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = fetch()
        if asyncio.iscoroutine(value):
            value = await value
        if accept(value):
            return value
        if loop.time() >= deadline:
            raise AssertionError(
                f"timed out after {timeout_s:g} s waiting for {what() if callable(what) else what}; last: {value!r}"
            )
        await asyncio.sleep(interval_s)


async def wait_for_input(caller: Caller, task_id: str, count: int = 1, timeout_s: float = 10) -> dict[str, Any]:
    """`tasks/get` of `task_id` through `caller` every 50 ms until the task is `input_required`
    with at least `count` input requests; that answer's result. Fails after `timeout_s` with the
    last result."""

    async def task() -> dict[str, Any]:
        return (await caller.call("tasks/get", {"taskId": task_id})).result

    def asking(result: dict[str, Any]) -> bool:
        return result["status"] == "input_required" and len(result.get("inputRequests") or {}) >= count

    return await eventually(task, asking, f"task {task_id} to ask for {count} input(s)", timeout_s, 0.05)


def read_by_aiohttp(data: bytes) -> Any:
    """`data` as one read of a fresh connection, parsed by aiohttp's request parser as a proxy
    connection's is (`proxy/connections.py`): what `proxy.lean_face.whole_post` is asked about.
    Raises aiohttp's `HttpProcessingError` for what the parser refuses (the connection answers 400)."""
    from aiohttp.base_protocol import BaseProtocol
    from aiohttp.http_parser import HttpRequestParser
    from aiohttp.web_protocol import RequestPayloadError

    loop = asyncio.new_event_loop()
    try:
        parser = HttpRequestParser(
            BaseProtocol(loop),
            loop,
            2**16,
            max_line_size=8190,
            max_field_size=8190,
            max_headers=128,
            payload_exception=RequestPayloadError,
            auto_decompress=True,
        )
        return parser.feed_data(data)
    finally:
        loop.close()


def shadow_row(method: str, tool: str = "", **counts: int) -> dict[str, Any]:
    """One row of a shadow comparison as `status.json` shows it (`Shadowing.snapshot`): `counts`
    given, every other outcome 0, and `match_rate` match / (match + differ), None before any."""
    row: dict[str, Any] = {
        "method": method,
        "tool": tool,
        "match": 0,
        "differ": 0,
        "candidate_error": 0,
        "primary_error": 0,
        "timeout": 0,
        "dropped": 0,
        "too_large": 0,
        **counts,
    }
    compared = row["match"] + row["differ"]
    return {**row, "match_rate": round(row["match"] / compared, 4) if compared else None}


def fast_upstream_fixture(wire: str) -> Callable[[], Iterator[ServerProcess]]:
    """A module-scoped fixture: the benchmark's fast upstream on `wire` (a process, 50 ms poll interval)."""

    @pytest.fixture(scope="module")
    def upstream() -> Iterator[ServerProcess]:
        server = start_fast_upstream(wire, poll_interval_ms=50)
        try:
            yield server
        finally:
            server.stop()

    return upstream  # type: ignore[no-any-return]
