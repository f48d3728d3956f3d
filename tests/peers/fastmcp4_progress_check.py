"""Call a progress-reporting tool with the real v2 client (FastMCP 4.1.4) and print what its
handlers were given.

Run it with the ``fastmcp4`` peer environment's python (see ``proxy/demo/peers.py``)::

    python fastmcp4_progress_check.py --url http://127.0.0.1:<port>/mcp [--count N]

The endpoint is normally the proxy in front of the reference v1 server, whose ``report_progress``
tool sends ``count`` ``notifications/progress`` and four log messages before it answers. Prints one
JSON line: ``{"progress": [[progress, total, message], ...], "logs": [[level, data], ...],
"texts": [...]}``; exit status 0 once the call answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from fastmcp import Client


async def run(url: str, count: int) -> dict[str, Any]:
    progress: list[list[Any]] = []
    logs: list[list[Any]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append([value, total, message])

    async def on_log(message: Any) -> None:
        logs.append([message.level, message.data])

    async with Client(url, name="fastmcp4-progress-check", log_handler=on_log) as client:
        result = await client.call_tool("report_progress", {"count": count}, progress_handler=on_progress, timeout=30)
    return {"progress": progress, "logs": logs, "texts": [getattr(c, "text", None) for c in result.content]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--count", type=int, default=25)
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(run(args.url, args.count))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
