"""Task lifecycles with a question, on the fast upstream's `ask` tool (`proxy.bench.upstream_parts`),
as a v1 client and as a v2 client run them (`mcp-tasks-proxy bench --soak`).

Every lifecycle has its own text, so a question or a result that belongs to another lifecycle is
told apart from its own: the question must read ``confirm <text>``, the answer is
``{"action": "accept", "content": {"reply": "yes <text>"}}`` and the result must be
``<text> -> yes <text>``. Anything else is `WrongAnswer`; a failed request is `BenchError`.

* v1 (session wire, `SessionClient`): `tools/call` with `params.task`, `tasks/get` at the task's
  `pollInterval` until it leaves `working`, then `tasks/result`: its SSE stream carries the
  `elicitation/create`, answered with a JSON-RPC response POSTed on the session (HTTP 202), then
  the result. The client needs two connections (the stream holds one).
* v2 (`ModernClient`): `tools/call`, `tasks/get` at `pollIntervalMs`; when it shows
  `input_required`, each request of `inputRequests` not answered yet is answered with one
  `tasks/update`; then `tasks/get` until `completed` with the result inlined.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from proxy.sse import SseParser

from .clients import MAX_POLLS, TERMINAL, BenchError, GatewayFailed, ModernClient, SessionClient, _dumps, _result, _text

TASK_TTL_MS = 60_000
"""The ttl a v1 client asks for its task."""


class WrongAnswer(BenchError):
    """A question or a result that is not this lifecycle's."""


def reply_for(text: str) -> str:
    return f"yes {text}"


def expected_result(text: str) -> str:
    return f"{text} -> {reply_for(text)}"


def _check_question(request: dict[str, Any], text: str) -> None:
    params = request.get("params") if isinstance(request.get("params"), dict) else {}
    if request.get("method") != "elicitation/create" or params.get("message") != f"confirm {text}":
        raise WrongAnswer(f"asked {json.dumps(request)[:200]} instead of confirm {text!r}")


def _answer(text: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"reply": reply_for(text)}}


async def v1_ask(client: SessionClient, text: str) -> None:
    """One lifecycle with a question as a v1 client (the session must be open)."""
    task_id, status, interval = await client.start_task("ask", {"text": text}, TASK_TTL_MS)
    status = await client.poll(task_id, status, interval, lambda s: s == "working")
    if status != "input_required":
        raise BenchError(f"task is {status!r}, not input_required")
    result = await _v1_result(client, task_id, text)
    if _text(result) != expected_result(text):
        raise WrongAnswer(f"tasks/result answered {json.dumps(result)[:200]}, not {expected_result(text)!r}")


async def _v1_result(client: SessionClient, task_id: str, text: str) -> dict[str, Any]:
    """`tasks/result`, answering the question its stream carries; the result."""
    request_id = next(client._ids)
    body = _dumps({"jsonrpc": "2.0", "id": request_id, "method": "tasks/result", "params": {"taskId": task_id}})
    async with client.http.post(client.url, data=body, headers=client._headers()) as response:
        content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type == "application/json":
            return _result(json.loads(await response.read()), response.status, "tasks/result")
        if content_type != "text/event-stream":
            failed = GatewayFailed if response.status == 502 else BenchError
            raise failed(f"tasks/result: HTTP {response.status} with {content_type or 'no content type'}")
        parser = SseParser()
        async for chunk in response.content.iter_any():
            for event in parser.feed(chunk):
                message = json.loads(event.data)
                if "method" in message and "id" in message:
                    _check_question(message, text)
                    reply = _dumps({"jsonrpc": "2.0", "id": message["id"], "result": _answer(text)})
                    async with client.http.post(client.url, data=reply, headers=client._headers()) as posted:
                        await posted.read()
                        if posted.status != 202:
                            failed = GatewayFailed if posted.status == 502 else BenchError
                            raise failed(f"the answer to the question: HTTP {posted.status}")
                elif "method" not in message and message.get("id") == request_id:
                    return _result(message, response.status, "tasks/result")
    raise BenchError(f"tasks/result: HTTP {response.status}: the SSE stream ended without the answer")


async def v2_ask(client: ModernClient, text: str) -> None:
    """One lifecycle with a question as a v2 client."""
    task, _ = await client.request("tools/call", {"name": "ask", "arguments": {"text": text}}, name="ask")
    if task.get("resultType") != "task" or not isinstance(task.get("taskId"), str):
        raise BenchError(f"tools/call answered no task: {json.dumps(task)[:200]}")
    task_id, status = task["taskId"], task.get("status")
    interval = (task.get("pollIntervalMs") or 100) / 1000
    answered: set[str] = set()
    for _ in range(MAX_POLLS):
        if status in TERMINAL:
            break
        requests = task.get("inputRequests") if status == "input_required" else None
        pending = {k: v for k, v in requests.items() if k not in answered} if isinstance(requests, dict) else {}
        if pending:
            for request in pending.values():
                _check_question(request if isinstance(request, dict) else {}, text)
            await client.request("tasks/update", {"taskId": task_id, "inputResponses": {k: _answer(text) for k in pending}},
                                 name=task_id)
            answered |= pending.keys()
        await asyncio.sleep(interval)
        task, _ = await client.request("tasks/get", {"taskId": task_id}, name=task_id)
        status = task.get("status")
        interval = (task.get("pollIntervalMs") or interval * 1000) / 1000
    if status != "completed":
        raise BenchError(f"task ended {status!r}: {json.dumps(task)[:200]}")
    if _text(task.get("result") or {}) != expected_result(text):
        raise WrongAnswer(f"the result is {json.dumps(task.get('result'))[:200]}, not {expected_result(text)!r}")
