"""One slow call through the FastMCP 4 client with fastmcp-tasks (for the held-task tests,
docs/behaviour.md §9). Run with the ``fastmcp4`` peer environment's python::

    python fastmcp4_held_call.py --url http://127.0.0.1:<port>/mcp --seconds 10

``fastmcp_tasks.call_tool_task(client, "slow_compute", {"seconds": S, "label": "held"})``, then
``status()``, ``wait()`` and ``result()``. Prints one JSON line: ``created_s`` (seconds until the
task was created), ``created`` (its resultType and status), ``first`` and ``final`` (statuses),
``texts`` and ``is_error`` of the result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import fastmcp_tasks  # registers the tasks extension on every fastmcp.Client
from fastmcp import Client


async def main(url: str, seconds: float) -> None:
    async with Client(url, name="fastmcp4-held-call") as client:
        started = time.monotonic()
        handle = await fastmcp_tasks.call_tool_task(client, "slow_compute", {"seconds": seconds, "label": "held"})
        created_s = time.monotonic() - started
        wire = handle.create_result.model_dump(mode="json", by_alias=True, exclude_none=True)
        first = await handle.status()
        final = await handle.wait(timeout=seconds + 30)
        result = await handle.result()
    print(
        json.dumps(
            {
                "created_s": round(created_s, 3),
                "created": {key: wire.get(key) for key in ("resultType", "status")},
                "first": first.status,
                "final": final.status,
                "texts": [getattr(block, "text", None) for block in result.content],
                "is_error": bool(result.is_error),
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.seconds))
