"""A minimal v1 stdio server whose task asks its question before the call creating it is answered.

`ask` (taskSupport required): on a task-augmented `tools/call` it writes an `elicitation/create`
(id "q1", with no related-task `_meta`, as FastMCP 3's task workers do) and only then the
`CreateTaskResult`, followed by a `notifications/tasks/status` saying `input_required`. The task is
`input_required` until the answer arrives, then `completed` with
the text `answer: <content.word>`. With `--after` the question comes only after the
`CreateTaskResult` and the status notification, with the related-task `_meta` (as the `mcp` SDK's
task workers send it), while nothing of its client is in flight. With `--during-get` the task asks
while its client's first `tasks/get` is in flight: the `input_required` status notification, then
the question, then that `tasks/get`'s answer, which says `working` (as FastMCP 3's does, whose
`tasks/get` never says `input_required`, and whose `tasks/result` on a running task answers
-32602 at once); with `--keyed` too, the question carries the
related-task `_meta`.
"""

import json
import sys

TASK = {
    "taskId": "t1",
    "createdAt": "2026-01-01T00:00:00Z",
    "lastUpdatedAt": "2026-01-01T00:00:00Z",
    "ttl": 60000,
    "pollInterval": 100,
}


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def result(request_id, answer):
    send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {
                "content": [{"type": "text", "text": f"answer: {answer}"}],
                "isError": False,
                "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "t1"}},
            },
        }
    )


def main():
    after = "--after" in sys.argv
    during_get = "--during-get" in sys.argv
    keyed = "--keyed" in sys.argv
    schema = {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}
    params = {"mode": "form", "message": "Which word?", "requestedSchema": schema}
    if after or keyed:
        params["_meta"] = {"io.modelcontextprotocol/related-task": {"taskId": "t1"}}
    question = {"jsonrpc": "2.0", "id": "q1", "method": "elicitation/create", "params": params}
    asked = False
    answer = None
    waiting = []  # tasks/result requests held until the task is done
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method is None:
            if request_id == "q1":
                answer = message["result"]["content"]["word"]
                for held in waiting:
                    result(held, answer)
                waiting.clear()
            continue
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "result": {
                        "protocolVersion": "2025-11-25",
                        "serverInfo": {"name": "racing", "version": "1"},
                        "capabilities": {"tools": {}, "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}},
                    },
                }
            )
        elif method == "tools/list":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "result": {
                        "tools": [{"name": "ask", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}]
                    },
                }
            )
        elif method == "tools/call":
            if during_get:
                send({"jsonrpc": "2.0", "id": request_id, "result": {"task": {**TASK, "status": "working"}}})
                continue
            if not after:
                send(question)
            send({"jsonrpc": "2.0", "id": request_id, "result": {"task": {**TASK, "status": "working"}}})
            send({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": {**TASK, "status": "input_required"}})
            if after:
                send(question)
        elif method == "tasks/get" and during_get and answer is None:
            if not asked:
                asked = True
                send({"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": {**TASK, "status": "input_required"}})
                send(question)
            send({"jsonrpc": "2.0", "id": request_id, "result": {**TASK, "status": "working"}})
        elif method == "tasks/get":
            status = "completed" if answer is not None else "input_required"
            send({"jsonrpc": "2.0", "id": request_id, "result": {**TASK, "status": status}})
        elif method == "tasks/result" and during_get and answer is None:
            error = {"code": -32602, "message": "Task not completed yet (current state: working)"}
            send({"jsonrpc": "2.0", "id": request_id, "error": error})
        elif method == "tasks/result":
            if answer is None:
                waiting.append(request_id)
            else:
                result(request_id, answer)
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
