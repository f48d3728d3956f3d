"""A minimal stdio MCP server whose state lives in its process (for the isolation tests).

A task-less 2025-11-25 server with three tools: `remember {text}` keeps a note in the process's
memory, `recall` answers every note kept so far, joined by ", " ("" when none), so a test sees
whose process a session reached; `hang` is never answered (a request that stays in flight). With `--slow-start SECONDS` it sleeps that long before it
answers `initialize` (a server still being fetched or built, as `npx` does on first use).
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


def main():
    slow_start = float(sys.argv[sys.argv.index("--slow-start") + 1]) if "--slow-start" in sys.argv else 0.0
    notes = []
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            time.sleep(slow_start)
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "notes", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        elif method == "tools/call" and message["params"]["name"] == "remember":
            notes.append(message["params"]["arguments"]["text"])
            send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": "kept"}]}})
        elif method == "tools/call" and message["params"]["name"] == "recall":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": ", ".join(notes)}]}})
        elif method == "tools/call" and message["params"]["name"] == "hang":
            pass  # stays in flight until the client or the proxy gives up on it
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
