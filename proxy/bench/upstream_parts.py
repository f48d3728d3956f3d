"""The fast upstream's pieces (`proxy.bench.upstream`): its tools, its task and session records and
the small helpers of its wire. Stdlib and aiohttp only.

The `ask` tool (session wire only) is a task that asks one question: created `working`, then
`input_required` until its `elicitation/create` (sent on a `tasks/result` stream, with related-task
`_meta`, "confirm <text>") is answered; the result is then ``<text> -> <reply>``, where `reply` is
the answer's `content.reply` (or ``declined`` for any other action).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

from aiohttp import web

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
TASKS_EXT = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
SERVER_INFO = {"name": "mcp-tasks-proxy-bench-upstream", "version": "0.1.0"}
MAX_TASKS = 200_000
MAX_SESSIONS = 50_000
MAX_QUESTIONS = 1_000
"""Unanswered questions kept per session (oldest forgotten first)."""
KEEPALIVE_S = 15.0
DEFAULT_PROGRESS_COUNT = 100

_SCHEMA = {"type": "object"}
_TEXT = {"type": "object", "properties": {"text": {"type": "string"}}}
TOOLS_V1: list[dict[str, Any]] = [
    {"name": "echo", "description": "Answer the text at once.", "inputSchema": _TEXT},
    {"name": "nowork", "description": "A task with no work.", "inputSchema": _SCHEMA,
     "execution": {"taskSupport": "required"}},
    {"name": "sleep", "description": "A task that stays working for `seconds`.",
     "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
     "execution": {"taskSupport": "required"}},
    {"name": "progress", "description": "Stream `count` progress notifications, then answer.",
     "inputSchema": {"type": "object", "properties": {"count": {"type": "integer"}}}},
    {"name": "ask", "description": "A task that asks one question (confirm `text`) and answers `text -> reply`.",
     "inputSchema": _TEXT, "execution": {"taskSupport": "required"}},
    {"name": "wait", "description": "A plain call (no task support) answered `waited` after `ms` milliseconds.",
     "inputSchema": {"type": "object", "properties": {"ms": {"type": "number"}}}},
]
TOOLS_MODERN = [{k: v for k, v in tool.items() if k != "execution"} for tool in TOOLS_V1 if tool["name"] not in ("ask", "wait")]
TASK_TOOLS = frozenset({"nowork", "sleep"})
DONE = {"content": [{"type": "text", "text": "done"}], "isError": False}
REPLY_SCHEMA = {"type": "object", "properties": {"reply": {"type": "string"}}, "required": ["reply"]}
_question_ids = itertools.count(1)


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


_iso_cache: list[Any] = [0, ""]


def now_iso() -> str:
    second = int(time.time())
    if _iso_cache[0] != second:
        _iso_cache[0] = second
        _iso_cache[1] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))
    return _iso_cache[1]


class RpcError(Exception):
    def __init__(self, code: int, message: str, status: int = 200, data: Any = None):
        super().__init__(message)
        self.code, self.message, self.status, self.data = code, message, status, data

    def body(self, request_id: Any) -> bytes:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


class Question:
    """The one question of an `ask` task: its request id, its text, and the reply once answered."""

    __slots__ = ("id", "text", "reply", "answered")

    def __init__(self, text: str):
        self.id = next(_question_ids)
        self.text = text
        self.reply: str | None = None
        self.answered = asyncio.Event()

    def request(self, task_id: str) -> dict[str, Any]:
        """The `elicitation/create` request, with related-task `_meta`."""
        return {"jsonrpc": "2.0", "id": self.id, "method": "elicitation/create",
                "params": {"mode": "form", "message": f"confirm {self.text}", "requestedSchema": REPLY_SCHEMA,
                           "_meta": {RELATED_TASK: {"taskId": task_id}}}}

    def answer(self, message: dict[str, Any]) -> None:
        """Take the client's JSON-RPC response (the first one counts)."""
        if self.reply is not None:
            return
        result = message.get("result") if isinstance(message.get("result"), dict) else {}
        content = result.get("content") if isinstance(result.get("content"), dict) else {}
        reply = content.get("reply")
        self.reply = reply if result.get("action") == "accept" and isinstance(reply, str) else "declined"
        self.answered.set()

    def result(self, task_id: str) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": f"{self.text} -> {self.reply}"}], "isError": False,
                "_meta": {RELATED_TASK: {"taskId": task_id}}}


class Task:
    __slots__ = ("id", "owner", "created", "done_at", "ttl", "cancelled", "question")

    def __init__(self, task_id: str, owner: str, done_at: float, ttl: int | None, question: Question | None = None):
        self.id = task_id
        self.owner = owner
        self.created = now_iso()
        self.done_at = done_at
        self.ttl = ttl
        self.cancelled = False
        self.question = question

    def status(self, now: float) -> str:
        if self.cancelled:
            return "cancelled"
        if self.question is not None:
            return "completed" if self.question.reply is not None else "input_required"
        return "completed" if now >= self.done_at else "working"

    def v1(self, poll_ms: int, now: float, status: str | None = None) -> dict[str, Any]:
        status = status or self.status(now)
        updated = self.created if status == "working" else now_iso()
        return {"taskId": self.id, "status": status, "createdAt": self.created, "lastUpdatedAt": updated,
                "ttl": self.ttl, "pollInterval": poll_ms}

    def modern(self, poll_ms: int, now: float) -> dict[str, Any]:
        status = self.status(now)
        updated = self.created if status == "working" else now_iso()
        return {"taskId": self.id, "status": status, "createdAt": self.created, "lastUpdatedAt": updated,
                "ttlMs": self.ttl, "pollIntervalMs": poll_ms}


class Session:
    __slots__ = ("id", "stream", "questions")

    def __init__(self, session_id: str):
        self.id = session_id
        self.stream: web.StreamResponse | None = None
        self.questions: dict[Any, Question] = {}
        """Questions asked on this session and not answered yet, by request id."""

    def asked(self, question: Question) -> None:
        self.questions[question.id] = question
        while len(self.questions) > MAX_QUESTIONS:
            del self.questions[next(iter(self.questions))]

    def answered(self, message: dict[str, Any]) -> None:
        """A JSON-RPC response the client POSTed: the answer to one of this session's questions."""
        question = self.questions.pop(message.get("id"), None)
        if question is not None:
            question.answer(message)


def count_of(params: dict[str, Any]) -> int:
    count = (params.get("arguments") or {}).get("count", DEFAULT_PROGRESS_COUNT)
    return max(0, min(int(count), 100_000)) if isinstance(count, int) and not isinstance(count, bool) else DEFAULT_PROGRESS_COUNT


async def read_message(request: web.Request) -> dict[str, Any] | web.Response:
    """The POSTed JSON-RPC object, or the 400 answer for a body that is not one."""
    try:
        message = json.loads(await request.read())
    except ValueError:
        return json_response(RpcError(-32700, "Parse error", 400).body(None), 400)
    if not isinstance(message, dict):
        return json_response(RpcError(-32600, "Invalid request", 400).body(None), 400)
    return message


def json_response(body: bytes, status: int) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")
