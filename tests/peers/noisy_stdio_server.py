"""A minimal stdio MCP server that misbehaves on purpose (for the supervision tests).

Before answering `initialize` it writes a line that is not JSON, a JSON line that is not an
object, and one line longer than 2048 bytes; then it answers like a task-less 2025-11-25 server
with two tools: `echo` (the `text` back) and `big` (a text of `size` bytes, in a response with its
`id` last, as the TypeScript SDK writes it). With `--stubborn` it ignores SIGTERM and EOF on
stdin (only SIGKILL ends it). With `--gate DIR` each start is counted in `DIR/starts`, and every
start after the first answers `initialize` only once `DIR/open` exists.
"""

import json
import os
import signal
import sys
import time


def gate(directory):
    with open(os.path.join(directory, "starts"), "a+") as starts:
        starts.write("started\n")
        starts.seek(0)
        count = len(starts.readlines())
    while count > 1 and not os.path.exists(os.path.join(directory, "open")):
        time.sleep(0.02)


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main():
    stubborn = "--stubborn" in sys.argv
    gated = sys.argv[sys.argv.index("--gate") + 1] if "--gate" in sys.argv else None
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("starting up", file=sys.stderr, flush=True)
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            if gated:
                gate(gated)
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
                        "tools": [
                            {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
                            {"name": "big", "inputSchema": {"type": "object", "properties": {"size": {"type": "integer"}}}},
                        ]
                    },
                }
            )
        elif method == "tools/call" and message["params"]["name"] == "big":
            text = "y" * message["params"]["arguments"]["size"]
            send({"jsonrpc": "2.0", "result": {"content": [{"type": "text", "text": text}]}, "id": request_id})
        elif method == "tools/call":
            text = message["params"]["arguments"]["text"]
            send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}})
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})
    while stubborn:
        time.sleep(1)


if __name__ == "__main__":
    main()
