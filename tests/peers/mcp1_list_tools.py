"""The official v1 client (``mcp==1.30.0``) opening ``--sessions`` sessions one after the other and
listing the tools once on each, as a client does at its start; prints one JSON line: the number of
tools each listing had.

Run it with the ``mcp-v1`` peer environment's python::

    python mcp1_list_tools.py --url http://127.0.0.1:<port>/mcp --sessions 4
"""

from __future__ import annotations

import argparse
import asyncio
import json

from mcp1_session import open_session  # beside this file


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--sessions", type=int, default=4)
    args = parser.parse_args()
    counts: list[int] = []
    for _ in range(args.sessions):
        async with open_session(args.url) as (session, _):
            counts.append(len((await session.list_tools()).tools))
    print(json.dumps({"tools": counts}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
