"""A minimal stdio MCP server that misbehaves on purpose (for the supervision tests).

Before answering `initialize` it writes a line that is not JSON, a JSON line that is not an
object, and one line longer than 2048 bytes; then it answers like a task-less 2025-11-25 server
with one tool, `echo`. With `--stubborn` it ignores SIGTERM and EOF on stdin (only SIGKILL ends it).
"""

import json
import signal
import sys
import time


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main():
    stubborn = "--stubborn" in sys.argv
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("starting up", file=sys.stderr, flush=True)
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            sys.stdout.write("this is not json\n[1, 2]\n" + "x" * 3000 + "\n")
            send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "noisy", "version": "1"},
                    },
                }
            )
        elif method == "tools/list":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "result": {
                        "tools": [{"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]
                    },
                }
            )
        elif method == "tools/call":
            text = message["params"]["arguments"]["text"]
            send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}})
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})
    while stubborn:
        time.sleep(1)


if __name__ == "__main__":
    main()
