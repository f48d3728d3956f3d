"""The official v1 client (``mcp==1.30.0``) making the ``tools/call`` requests it is given, in one
session, and printing one JSON line per call.

Run with the ``mcp-v1`` peer environment's python::

    python mcp1_tool_calls.py --url http://127.0.0.1:<port>/mcp --calls '[{"name": "route", "arguments": {...}}]'

Each call is ``ClientSession.call_tool(name, arguments)`` (no ``tools/list`` before it); its line is
``{"texts": [...], "isError": bool}``, or ``{"error": {"code", "message"}}`` for a JSON-RPC error
(``{"error": {"type", "message"}}`` for anything else). An entry ``{"list": true}`` is
``list_tools()`` instead: ``{"tools": [names]}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import warnings
from typing import Any

warnings.simplefilter("ignore", DeprecationWarning)

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamablehttp_client  # noqa: E402
from mcp.shared.exceptions import McpError  # noqa: E402


async def run(url: str, calls: list[dict[str, Any]]) -> None:
    async with (
        streamablehttp_client(url, timeout=30, sse_read_timeout=60) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for call in calls:
            if call.get("list"):
                print(json.dumps({"tools": [tool.name for tool in (await session.list_tools()).tools]}), flush=True)
                continue
            try:
                result = await session.call_tool(call["name"], call.get("arguments"))
                line: dict[str, Any] = {"texts": [c.text for c in result.content if c.type == "text"], "isError": result.isError}
            except McpError as exc:
                line = {"error": {"code": exc.error.code, "message": exc.error.message}}
            except Exception as exc:  # noqa: BLE001 - reported, not raised: the test reads it
                line = {"error": {"type": type(exc).__name__, "message": str(exc)[:300]}}
            print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--calls", required=True, help="a JSON list of {name, arguments}")
    args = parser.parse_args()
    asyncio.run(run(args.url, json.loads(args.calls)))


if __name__ == "__main__":
    main()
