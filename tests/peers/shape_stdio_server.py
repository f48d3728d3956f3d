"""A stdio MCP server (for the bridge's byte-passing tests) that answers `tools/call` of `shape`
with the raw line it received as its text, written in the shape its `form` argument names:
"prefix" (`{"jsonrpc":"2.0","id":N,...}`, as the Python SDK writes), "suffix" (`{...,"id":N}`,
as the TypeScript SDK's `JSON.stringify` writes), "nested" (a second `"id"` inside the result) or
"spaced" (Python's `json.dumps` with its default separators)."""

import json
import sys


def write(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def main():
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue
        if method == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "shapes", "version": "1"},
            }
            write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, separators=(",", ":")))
            continue
        form = message.get("params", {}).get("arguments", {}).get("form")
        content = [{"type": "text", "text": line.rstrip("\n")}]
        note = "\u00e9"  # written escaped (json.dumps's ensure_ascii)
        compact = (",", ":")
        if form == "prefix":
            write(
                json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"content": content, "note": note}}, separators=compact)
            )
        elif form == "suffix":
            write(
                json.dumps({"result": {"content": content, "note": note}, "jsonrpc": "2.0", "id": request_id}, separators=compact)
            )
        elif form == "nested":
            result = {"content": content, "note": note, "structuredContent": {"id": "inner"}}
            write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, separators=compact))
        else:
            write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"content": content, "note": note}}))


if __name__ == "__main__":
    main()
