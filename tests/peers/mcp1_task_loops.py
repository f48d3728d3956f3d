"""Run task lifecycles with a question continuously on the real v1 client (official SDK
``mcp==1.30.0``), for tests that change the fleet under it (tests/fleet/test_migration_by_reload.py).

Run it with the ``mcp-v1`` peer environment's python::

    python mcp1_task_loops.py --url http://127.0.0.1:<port>/mcp --clients 25

Each client loops until the script gets ``SIGUSR1``: open a ``ClientSession`` (``initialize``), run two
``confirm_delete`` tasks on it (``call_tool_as_task``, then ``tasks/result``, during which the
``elicitation_callback`` answers ``confirm: true``; the result must be ``deleted <file>``), then
close the session (the SDK sends its DELETE). A lifecycle in progress at the signal is finished.
Output: one JSON line per client on stdout, ``{"client": n, "tasks": done, "errors": [...]}``,
the first error ending that client. Exit status 0 iff no client saw an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import warnings
from typing import Any

warnings.simplefilter("ignore", DeprecationWarning)  # the experimental tasks API warns on every use

from mcp1_session import create_task, exc_detail, open_session, task_result  # noqa: E402  (beside this file)


async def _client(url: str, stop: asyncio.Event, n: int) -> dict[str, Any]:
    done = 0
    errors: list[Any] = []
    round_ = 0
    while not stop.is_set() and not errors:
        try:
            async with open_session(url) as (session, recorder):
                for _ in range(2):
                    round_ += 1
                    name = f"sdk{n}-{round_}.txt"
                    task = await create_task(session, "confirm_delete", {"filename": name})
                    result = await asyncio.wait_for(task_result(session, recorder, task.taskId), 60)
                    texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
                    if result.isError or texts != [f"deleted {name}"]:
                        errors.append({"task": task.taskId, "texts": texts, "is_error": bool(result.isError)})
                        break
                    done += 1
        except Exception as exc:  # noqa: BLE001 - every failure is reported, none ends the others
            errors.append(exc_detail(exc))
    return {"client": n, "tasks": done, "errors": errors}


async def _run(url: str, clients: int) -> int:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, stop.set)
    results = await asyncio.gather(*(_client(url, stop, n) for n in range(clients)))
    for line in results:
        print(json.dumps(line), flush=True)
    return 0 if all(not line["errors"] for line in results) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--clients", type=int, default=25)
    args = parser.parse_args(argv)
    return asyncio.run(_run(args.url, args.clients))


if __name__ == "__main__":
    sys.exit(main())
