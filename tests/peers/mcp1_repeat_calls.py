"""The official v1 client (``mcp==1.30.0``) calling one tool ``--times`` times on one session, then
closing it as the SDK does; prints one JSON line: the texts of each answer, in order.

Run it with the ``mcp-v1`` peer environment's python::

    python mcp1_repeat_calls.py --url http://127.0.0.1:<port>/mcp --times 6
"""

from __future__ import annotations

import argparse
import asyncio
import json

from check_lines import texts  # beside this file
from mcp1_session import open_session


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--times", type=int, default=6)
    args = parser.parse_args()
    answers: list[list[str]] = []
    async with open_session(args.url) as (session, _):
        for index in range(args.times):
            result = await session.call_tool("greet", {"name": f"call {index}"})
            answers.append(texts(result.content))
    print(json.dumps({"answers": answers}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
