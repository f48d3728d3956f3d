"""A real client through the proxy to an npm reference server the proxy runs on stdio.

Run with the python of a peer environment::

    python stdio_npm_clients.py --client fastmcp4|mcp1 --server everything|memory --url URL

``fastmcp4``: FastMCP 4 with fastmcp-tasks (the 2026-07-28 wire, v2 tasks); ``mcp1``: the
official ``mcp`` 1.30 SDK (the 2025-11-25 session wire, v1 tasks through ``session.experimental``).
``everything``: ``echo`` and the task tool ``simulate-research-query`` (ambiguous: one
elicitation, answered with the schema's first ``const``); ``memory``: ``create_entities`` then
``read_graph``. Prints one JSON line per check: ``{"check": name, "ok": bool, "detail": ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import warnings
from typing import Any

warnings.simplefilter("ignore")


def _emit(check: str, ok: bool, detail: Any) -> None:
    print(json.dumps({"check": check, "ok": ok, "detail": detail}), flush=True)


def _first_choice(schema: dict[str, Any]) -> str:
    return schema["properties"]["interpretation"]["oneOf"][0]["const"]


async def fastmcp4(server: str, url: str) -> None:
    import fastmcp_tasks  # noqa: F401  (registers the tasks extension on every client)
    from fastmcp import Client

    questions: list[str] = []

    async def elicit(message: str, response_type: Any, params: Any, context: Any) -> dict[str, Any]:
        questions.append(message)
        return {"interpretation": _first_choice(params.requested_schema)}

    async with Client(url, name="stdio-npm-fastmcp4", elicitation_handler=elicit) as client:
        if server == "everything":
            echo = await client.call_tool("echo", {"message": "hi"}, timeout=30)
            texts = [c.text for c in echo.content]
            _emit("echo", texts == ["Echo: hi"], texts)
            research = await client.call_tool("simulate-research-query", {"topic": "tides", "ambiguous": True}, timeout=60)
            text = research.content[0].text
            _emit(
                "research_with_question",
                text.startswith("# Research Report: tides (technical)") and len(questions) == 1,
                {"first_line": text.splitlines()[0], "questions": len(questions)},
            )
        else:
            created = await client.call_tool(
                "create_entities",
                {"entities": [{"name": "ada", "entityType": "person", "observations": ["wrote notes"]}]},
                timeout=30,
            )
            graph = await client.call_tool("read_graph", {}, timeout=30)
            names = [e["name"] for e in json.loads(graph.content[0].text)["entities"]]
            _emit("create_and_read", not created.is_error and names == ["ada"], names)


async def mcp1(server: str, url: str) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client
    from mcp.types import CallToolResult, ElicitResult

    questions: list[str] = []

    async def elicit(context: Any, params: Any) -> ElicitResult:
        questions.append(params.message)
        return ElicitResult(action="accept", content={"interpretation": _first_choice(params.requestedSchema)})

    async with streamablehttp_client(url) as (read, write, _), ClientSession(read, write, elicitation_callback=elicit) as session:
        await session.initialize()
        if server == "everything":
            echo = await session.call_tool("echo", {"message": "hi"})
            texts = [c.text for c in echo.content]
            _emit("echo", texts == ["Echo: hi"], texts)
            created = await session.experimental.call_tool_as_task(
                "simulate-research-query", {"topic": "tides", "ambiguous": True}, ttl=60_000
            )
            task_id = created.task.taskId
            result = await asyncio.wait_for(session.experimental.get_task_result(task_id, CallToolResult), 60)
            status = (await session.experimental.get_task(task_id)).status
            text = result.content[0].text
            listed = [t.taskId for t in (await session.experimental.list_tasks()).tasks]
            _emit(
                "research_with_question",
                text.startswith("# Research Report: tides (technical)")
                and len(questions) == 1
                and status == "completed"
                and listed == [task_id],
                {"first_line": text.splitlines()[0], "questions": len(questions), "status": status, "listed": len(listed)},
            )
        else:
            await session.call_tool(
                "create_entities", {"entities": [{"name": "ada", "entityType": "person", "observations": ["x"]}]}
            )
            graph = await session.call_tool("read_graph", {})
            names = [e["name"] for e in json.loads(graph.content[0].text)["entities"]]
            _emit("create_and_read", names == ["ada"], names)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=["fastmcp4", "mcp1"], required=True)
    parser.add_argument("--server", choices=["everything", "memory"], required=True)
    parser.add_argument("--url", required=True)
    args = parser.parse_args()
    run = fastmcp4 if args.client == "fastmcp4" else mcp1
    try:
        asyncio.run(run(args.server, args.url))
    except Exception as exc:  # reported as a failed check with its cause
        _emit("error", False, f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
