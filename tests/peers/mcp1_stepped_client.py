"""The official v1 client (``mcp==1.30.0``) driven step by step over stdin, for tests that change
the backend between steps and must know exactly what the client saw (tests/backends/test_upgrade_failures.py).

Run it with the ``mcp-v1`` peer environment's python::

    python mcp1_stepped_client.py --url http://127.0.0.1:<port>/mcp --name NAME --version VERSION

One command per stdin line, one JSON line on stdout for each:

* ``open``: a new ``ClientSession`` (``initialize``; the one before is closed first, the SDK's
  DELETE) → ``{"ok": true, "server": <serverInfo.name>}``;
* ``task LABEL SECONDS``: ``call_tool_as_task("slow_compute", ...)`` → ``{"ok": true}``;
* ``get LABEL``: ``tasks/get`` → ``{"ok": true, "status": ...}``;
* ``result LABEL``: ``tasks/result`` → ``{"ok": true, "texts": [...]}``;
* ``close``: the session closed → ``{"ok": true}``; ``quit`` ends the script.

A step that fails answers ``{"ok": false, "error": {"type", "code"?, "message"}}`` and the session
stays as it is (the test decides what the client does next).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import warnings
from typing import Any

warnings.simplefilter("ignore", DeprecationWarning)  # the experimental tasks API warns on every use

import mcp.types as types  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamablehttp_client  # noqa: E402
from mcp.shared.exceptions import McpError  # noqa: E402


def _error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, McpError):
        return {"type": "McpError", "code": exc.error.code, "message": exc.error.message}
    return {"type": type(exc).__name__, "message": str(exc)[:300]}


class Client:
    def __init__(self, url: str, info: types.Implementation):
        self.url = url
        self.info = info
        self.stack: contextlib.AsyncExitStack | None = None
        self.session: ClientSession | None = None
        self.tasks: dict[str, str] = {}

    async def close(self) -> None:
        if self.stack is not None:
            stack, self.stack, self.session = self.stack, None, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(stack.aclose(), 10)

    async def step(self, words: list[str]) -> dict[str, Any]:
        command = words[0]
        if command == "open":
            await self.close()
            stack = contextlib.AsyncExitStack()
            read, write, _ = await stack.enter_async_context(streamablehttp_client(self.url, timeout=30, sse_read_timeout=60))
            session = await stack.enter_async_context(ClientSession(read, write, client_info=self.info))
            self.stack, self.session = stack, session
            initialized = await asyncio.wait_for(session.initialize(), 30)
            return {"ok": True, "server": initialized.serverInfo.name}
        if command == "close":
            await self.close()
            return {"ok": True}
        assert self.session is not None, "no session open"
        experimental = self.session.experimental
        if command == "task":
            label, seconds = words[1], float(words[2])
            created = await experimental.call_tool_as_task("slow_compute", {"seconds": seconds, "label": label}, ttl=120_000)
            self.tasks[label] = created.task.taskId
            return {"ok": True}
        if command == "get":
            task = await experimental.get_task(self.tasks[words[1]])
            return {"ok": True, "status": task.status}
        if command == "result":
            result = await experimental.get_task_result(self.tasks[words[1]], types.CallToolResult)
            return {"ok": True, "texts": [block.text for block in result.content if getattr(block, "type", None) == "text"]}
        raise ValueError(f"unknown command {command!r}")


async def _run(url: str, name: str, version: str) -> int:
    client = Client(url, types.Implementation(name=name, version=version))
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().strip():
        if line == "quit":
            break
        try:
            answer = await asyncio.wait_for(client.step(line.split()), 60)
        except Exception as exc:  # noqa: BLE001 - every failure is reported to the test
            answer = {"ok": False, "error": _error(exc)}
        print(json.dumps(answer), flush=True)
    await client.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--version", required=True)
    args = parser.parse_args(argv)
    return asyncio.run(_run(args.url, args.name, args.version))


if __name__ == "__main__":
    sys.exit(main())
