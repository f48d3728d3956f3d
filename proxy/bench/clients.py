"""Benchmark clients and the scenarios they run.

`SessionClient` speaks the session wire (2025-11-25, v1 tasks): it opens a session with
`initialize` and then sends requests with its `Mcp-Session-Id`. `ModernClient` speaks the stateless
2026-07-28 wire and declares the tasks extension (SEP-2663) on every request. Both read JSON and
SSE answers, and raise `BenchError` for anything that is not the expected answer.

Scenarios (one call of each = one operation of the load generator):

* `echo`: a sync `tools/call` of the `echo` tool; the answer must carry the text sent.
* `lifecycle`: a task with no work (`nowork`): created, polled with `tasks/get` at its poll
  interval until terminal, and its result read (v1: `tasks/result`; v2: inlined in `tasks/get`).
* `progress`: the `progress` tool with a `progressToken`; the answer is an SSE stream of
  `count` `notifications/progress` and the result. Returns the notifications received.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from proxy.sse import SseParser

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
TASKS_EXT = "io.modelcontextprotocol/tasks"
ACCEPT = "application/json, text/event-stream"
TERMINAL = ("completed", "failed", "cancelled")
MAX_POLLS = 1000
"""A lifecycle that is still not terminal after this many polls is an error (bounded loops)."""
PROGRESS_COUNT = 100
ECHO_TEXT = "hello from the benchmark"


class BenchError(Exception):
    """An answer that is not what the scenario expects."""


class Refused(BenchError):
    """HTTP 503 with `Retry-After`: the proxy shed the request at once (admission control,
    docs/decisions.md §177); `retry_after_s` is what it asked the client to wait."""

    def __init__(self, retry_after_s: float, message: str):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class GatewayFailed(BenchError):
    """HTTP 502 not in JSON: the balancer in front (nginx) lost the request on its way to a
    replica: reset, closed before its answer, or refused."""


@dataclass(frozen=True)
class Tools:
    """Which upstream tools the scenarios call, with which arguments, and the text they answer."""

    echo: str = "echo"
    echo_args: dict[str, Any] = field(default_factory=lambda: {"text": ECHO_TEXT})
    echo_text: str = ECHO_TEXT
    task: str = "nowork"
    task_args: dict[str, Any] = field(default_factory=dict)
    task_text: str = "done"
    progress: str | None = "progress"


FAST_TOOLS = Tools()
"""The fast upstream's tools (`proxy.bench.upstream`)."""
REFERENCE_TOOLS = Tools(echo="greet", echo_args={"name": "bench"}, echo_text="Hello, bench!", task="slow_compute",
                        task_args={"seconds": 0, "label": "bench"}, task_text="computed bench", progress="report_progress")
"""The reference v1 server's tools (`proxy/demo/servers/v1_server.py`)."""


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


async def _read_answer(response: aiohttp.ClientResponse, request_id: Any) -> tuple[dict[str, Any], int]:
    """The JSON-RPC answer to `request_id` (JSON or SSE) and how many `notifications/progress`
    arrived before it."""
    content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    retry_after = response.headers.get("Retry-After")
    if response.status == 503 and retry_after is not None and retry_after.isdigit():
        raise Refused(float(retry_after), f"HTTP 503, Retry-After {retry_after}: {(await response.read())[:200]!r}")
    if response.status == 502 and content_type != "application/json":
        raise GatewayFailed(f"HTTP 502 from the balancer: {(await response.read())[:120]!r}")
    if content_type == "application/json":
        body = await response.read()
        try:
            return json.loads(body), 0
        except ValueError:
            raise BenchError(f"HTTP {response.status}: body is not JSON: {body[:200]!r}") from None
    if content_type != "text/event-stream":
        raise BenchError(f"HTTP {response.status} with {content_type or 'no content type'}: {(await response.read())[:200]!r}")
    parser = SseParser()
    progress = 0
    async for chunk in response.content.iter_any():
        for event in parser.feed(chunk):
            message = json.loads(event.data)
            if message.get("method") == "notifications/progress":
                progress += 1
            elif "method" not in message and message.get("id") == request_id:
                return message, progress
    raise BenchError(f"HTTP {response.status}: the SSE stream ended without the answer")


def _result(answer: dict[str, Any], status: int, what: str) -> dict[str, Any]:
    if status != 200 or not isinstance(answer.get("result"), dict):
        raise BenchError(f"{what}: HTTP {status}: {json.dumps(answer)[:300]}")
    return answer["result"]


def _text(result: dict[str, Any]) -> str:
    content = result.get("content")
    if not isinstance(content, list) or not content or not isinstance(content[0], dict):
        raise BenchError(f"no text content in {json.dumps(result)[:200]}")
    return str(content[0].get("text"))


class SessionClient:
    """A session-wire (2025-11-25) client on its own keep-alive connection."""

    wire = "v1"

    def __init__(self, http: aiohttp.ClientSession, url: str, *, authorization: str | None = None, tools: Tools = FAST_TOOLS,
                 capabilities: dict[str, Any] | None = None):
        self.http = http
        self.url = url
        self.tools = tools
        self.capabilities = capabilities or {}
        """Declared in `initialize` (e.g. `{"elicitation": {}}` for a client that answers questions)."""
        self.session_id: str | None = None
        self.authorization = authorization
        self._ids = itertools.count(1)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": ACCEPT, "Content-Type": "application/json", "MCP-Protocol-Version": LEGACY}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.authorization:
            headers["Authorization"] = self.authorization
        return headers

    async def open(self) -> None:
        """`initialize` and `notifications/initialized`."""
        params = {"protocolVersion": LEGACY, "capabilities": self.capabilities,
                  "clientInfo": {"name": "mcp-tasks-proxy-bench", "version": "1"}}
        headers = self._headers()
        del headers["MCP-Protocol-Version"]
        async with self.http.post(self.url, data=_dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}),
                                  headers=headers) as response:
            answer, _ = await _read_answer(response, 0)
            _result(answer, response.status, "initialize")
            self.session_id = response.headers.get("Mcp-Session-Id")
        async with self.http.post(self.url, data=_dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                                  headers=self._headers()) as response:
            await response.read()
            if response.status != 202:
                raise BenchError(f"notifications/initialized: HTTP {response.status}")

    async def request(self, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], int]:
        request_id = next(self._ids)
        body = _dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        async with self.http.post(self.url, data=body, headers=self._headers()) as response:
            answer, progress = await _read_answer(response, request_id)
            return _result(answer, response.status, method), progress

    async def close(self) -> None:
        if self.session_id:
            try:
                async with self.http.delete(self.url, headers=self._headers()) as response:
                    await response.read()
            except aiohttp.ClientError:
                pass

    # -- scenarios ---------------------------------------------------------------------------------

    async def echo(self) -> int:
        tools = self.tools
        result, _ = await self.request("tools/call", {"name": tools.echo, "arguments": tools.echo_args})
        if _text(result) != tools.echo_text or result.get("isError"):
            raise BenchError(f"echo answered {json.dumps(result)[:200]}")
        return 0

    async def lifecycle(self) -> int:
        tools = self.tools
        task_id, status, interval = await self.start_task(tools.task, tools.task_args)
        status = await self.poll(task_id, status, interval, lambda s: s not in TERMINAL)
        if status != "completed":
            raise BenchError(f"task ended {status!r}")
        result, _ = await self.request("tasks/result", {"taskId": task_id})
        if _text(result) != tools.task_text:
            raise BenchError(f"tasks/result answered {json.dumps(result)[:200]}")
        return 0

    async def start_task(self, name: str, arguments: dict[str, Any], ttl_ms: int = 60_000) -> tuple[str, Any, float]:
        """`tools/call` as a task: (its taskId, its status, seconds until the first poll). Raises
        `BenchError` without a CreateTaskResult."""
        created, _ = await self.request("tools/call", {"name": name, "arguments": arguments, "task": {"ttl": ttl_ms}})
        task = created.get("task")
        if not isinstance(task, dict) or not isinstance(task.get("taskId"), str):
            raise BenchError(f"tools/call answered no CreateTaskResult: {json.dumps(created)[:200]}")
        return task["taskId"], task.get("status"), (task.get("pollInterval") or 100) / 1000

    async def poll(self, task_id: str, status: Any, interval: float, going_on: Callable[[Any], bool]) -> Any:
        """`tasks/get` at the task's interval while `going_on(status)` (at most `MAX_POLLS` times);
        the last status."""
        for _ in range(MAX_POLLS):
            if not going_on(status):
                break
            await asyncio.sleep(interval)
            got, _ = await self.request("tasks/get", {"taskId": task_id})
            status = got.get("status")
            interval = (got.get("pollInterval") or interval * 1000) / 1000
        return status

    async def create_sleeping(self, seconds: float) -> str:
        return (await self.start_task("sleep", {"seconds": seconds}, 600_000))[0]

    async def progress(self) -> int:
        if self.tools.progress is None:
            raise BenchError("this upstream has no progress tool")
        params = {"name": self.tools.progress, "arguments": {"count": PROGRESS_COUNT}, "_meta": {"progressToken": "bench"}}
        result, received = await self.request("tools/call", params)
        if _text(result) != "progress done":
            raise BenchError(f"progress answered {json.dumps(result)[:200]}")
        return received


class ModernClient:
    """A 2026-07-28 (stateless) client declaring the tasks extension, on its own connection."""

    wire = "modern"

    def __init__(self, http: aiohttp.ClientSession, url: str, *, authorization: str | None = None, tools: Tools = FAST_TOOLS,
                 capabilities: dict[str, Any] | None = None):
        self.http = http
        self.url = url
        self.tools = tools
        self.authorization = authorization
        self._ids = itertools.count(1)
        self.meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {**(capabilities or {}), "extensions": {TASKS_EXT: {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "mcp-tasks-proxy-bench", "version": "1"},
        }

    async def open(self) -> None:
        """Nothing to open on a stateless wire."""

    async def close(self) -> None:
        """Nothing to close on a stateless wire."""

    async def request(self, method: str, params: dict[str, Any], *, name: str | None = None,
                      extra_meta: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
        request_id = next(self._ids)
        body = _dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                       "params": {**params, "_meta": {**self.meta, **(extra_meta or {})}}})
        headers = {"Accept": ACCEPT, "Content-Type": "application/json", "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if name is not None:
            headers["Mcp-Name"] = name
        if self.authorization:
            headers["Authorization"] = self.authorization
        async with self.http.post(self.url, data=body, headers=headers) as response:
            answer, progress = await _read_answer(response, request_id)
            return _result(answer, response.status, method), progress

    # -- scenarios ---------------------------------------------------------------------------------

    async def echo(self) -> int:
        tools = self.tools
        result, _ = await self.request("tools/call", {"name": tools.echo, "arguments": tools.echo_args}, name=tools.echo)
        if _text(result) != tools.echo_text or result.get("resultType") != "complete":
            raise BenchError(f"echo answered {json.dumps(result)[:200]}")
        return 0

    async def lifecycle(self) -> int:
        tools = self.tools
        task, _ = await self.request("tools/call", {"name": tools.task, "arguments": tools.task_args}, name=tools.task)
        if task.get("resultType") != "task" or not isinstance(task.get("taskId"), str):
            raise BenchError(f"tools/call answered no task: {json.dumps(task)[:200]}")
        task_id, status = task["taskId"], task.get("status")
        interval = (task.get("pollIntervalMs") or 100) / 1000
        for _ in range(MAX_POLLS):
            if status in TERMINAL:
                break
            await asyncio.sleep(interval)
            task, _ = await self.request("tasks/get", {"taskId": task_id}, name=task_id)
            status = task.get("status")
            interval = (task.get("pollIntervalMs") or interval * 1000) / 1000
        if status != "completed" or _text(task.get("result") or {}) != tools.task_text:
            raise BenchError(f"task ended {status!r}: {json.dumps(task)[:200]}")
        return 0

    async def create_sleeping(self, seconds: float) -> str:
        task, _ = await self.request("tools/call", {"name": "sleep", "arguments": {"seconds": seconds}}, name="sleep")
        if task.get("resultType") != "task":
            raise BenchError(f"tools/call answered no task: {json.dumps(task)[:200]}")
        return str(task["taskId"])

    async def get_task(self, task_id: str) -> str:
        task, _ = await self.request("tasks/get", {"taskId": task_id}, name=task_id)
        return str(task.get("status"))

    async def progress(self) -> int:
        if self.tools.progress is None:
            raise BenchError("this upstream has no progress tool")
        result, received = await self.request("tools/call", {"name": self.tools.progress, "arguments": {"count": PROGRESS_COUNT}},
                                               name=self.tools.progress, extra_meta={"progressToken": "bench"})
        if _text(result) != "progress done":
            raise BenchError(f"progress answered {json.dumps(result)[:200]}")
        return received


Client = SessionClient | ModernClient
