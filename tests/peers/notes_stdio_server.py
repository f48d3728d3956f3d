"""A minimal stdio MCP server whose state lives in its process (for the isolation tests).

A task-less 2025-11-25 server with three tools: `remember {text}` keeps a note in the process's
memory, `recall` answers every note kept so far, joined by ", " ("" when none), so a test sees
whose process a session reached; `hang` is never answered (a request that stays in flight). With `--slow-start SECONDS` it sleeps that long before it
answers `initialize` (a server still being fetched or built, as `npx` does on first use). With
`--tasks` it declares v1 tasks for `tools/call` and a fourth tool, `work` (task support
optional): called with `params.task`, it creates a task that is `completed` at once, its result
the notes so far (`tasks/get`, `tasks/result`; "Unknown task" for any other id).
"""

import json
import sys
import time

TOOLS = [
    {"name": "remember", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "recall", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "hang", "inputSchema": {"type": "object", "properties": {}}},
]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


WORK = {"name": "work", "inputSchema": {"type": "object", "properties": {}}, "execution": {"taskSupport": "optional"}}
TASKS = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
NOW = "2026-01-01T00:00:00Z"


def main():
    slow_start = float(sys.argv[sys.argv.index("--slow-start") + 1]) if "--slow-start" in sys.argv else 0.0
    with_tasks = "--tasks" in sys.argv
    tools = [*TOOLS, WORK] if with_tasks else TOOLS
    notes = []
    tasks = {}  # task id -> (task, result)
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            time.sleep(slow_start)
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}, **({"tasks": TASKS} if with_tasks else {})},
                "serverInfo": {"name": "notes", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
        elif method == "tools/call" and message["params"]["name"] == "remember":
            notes.append(message["params"]["arguments"]["text"])
            send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": "kept"}]}})
        elif method == "tools/call" and message["params"]["name"] == "recall":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": ", ".join(notes)}]}})
        elif method == "tools/call" and message["params"]["name"] == "work" and with_tasks:
            result = {"content": [{"type": "text", "text": ", ".join(notes)}]}
            if "task" not in message["params"]:
                send({"jsonrpc": "2.0", "id": request_id, "result": result})
                continue
            task_id = f"task-{len(tasks) + 1}"
            ttl = message["params"]["task"].get("ttl", 60_000)
            task = {
                "taskId": task_id,
                "status": "completed",
                "createdAt": NOW,
                "lastUpdatedAt": NOW,
                "ttl": ttl,
                "pollInterval": 100,
            }
            tasks[task_id] = (task, result)
            send({"jsonrpc": "2.0", "id": request_id, "result": {"task": task}})
        elif method in ("tasks/get", "tasks/result") and with_tasks:
            task_id = (message.get("params") or {}).get("taskId")
            if task_id not in tasks:
                send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": "Unknown task"}})
                continue
            task, result = tasks[task_id]
            if method == "tasks/get":
                send({"jsonrpc": "2.0", "id": request_id, "result": task})
            else:
                related = {"io.modelcontextprotocol/related-task": {"taskId": task_id}}
                send({"jsonrpc": "2.0", "id": request_id, "result": {**result, "_meta": related}})
        elif method == "tools/call" and message["params"]["name"] == "hang":
            pass  # stays in flight until the client or the proxy gives up on it
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
