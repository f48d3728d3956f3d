"""The official v1 client (``mcp==1.30.0``) calling ``greet`` on one session until told to stop,
as a long-lived user of the proxy does while it is restarted.

Run it with the ``mcp-v1`` peer environment's python::

    python mcp1_session_loop.py --url http://127.0.0.1:<port>/mcp --label s0 --stop /path/to/file

Calls ``greet`` with ``{"name": "<label>-<n>"}`` until the file ``--stop`` exists, and prints a JSON
line per call: ``{"ok": n}`` when the answer was ``Hello, <label>-<n>!``, else ``{"failure": ...}``.
The last line is ``{"calls": n, "session": <the session id at the start>, "same_session": bool}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import warnings
from pathlib import Path

warnings.simplefilter("ignore", DeprecationWarning)

from check_lines import texts  # noqa: E402  # beside this file
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamablehttp_client  # noqa: E402


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--stop", required=True, type=Path)
    args = parser.parse_args()
    calls = 0
    async with (
        streamablehttp_client(args.url, timeout=30, sse_read_timeout=60) as (read, write, session_id),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        opened = session_id()
        while not args.stop.exists():
            name = f"{args.label}-{calls}"
            try:
                result = await session.call_tool("greet", {"name": name})
            except Exception as exc:  # noqa: BLE001 - every failure is a line for the test
                print(json.dumps({"failure": f"{type(exc).__name__}: {exc}"}), flush=True)
            else:
                if texts(result.content) == [f"Hello, {name}!"] and not result.isError:
                    print(json.dumps({"ok": calls}), flush=True)
                else:
                    print(json.dumps({"failure": result.model_dump(mode="json")}), flush=True)
            calls += 1
        print(json.dumps({"calls": calls, "session": opened, "same_session": session_id() == opened}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
