"""Opt-in list changes, resource subscriptions and logging of the minimal v2-session peer
(``v2_session_server.start(lists=True)``, in-process only), as a 2025-11-25 session-wire server has them.

* ``initialize`` declares ``tools``/``prompts``/``resources`` with ``listChanged: true``,
  ``resources.subscribe: true`` and ``logging {}``. ``prompts/list`` is empty; ``resources/list``
  and ``resources/read`` serve ``reference://notes`` (text ``notes``).
* Session state, as the session wire has it: ``logging/setLevel`` (one of the eight levels, else
  -32602) sets the session's level; ``resources/subscribe`` / ``unsubscribe`` its URIs. Before any
  ``logging/setLevel`` the session gets every log message (2025-11-25 leaves that to the server).
* Notifications on the session's GET stream (dropped while none is open, like a server without an
  event store): ``add_tool(name)`` adds a tool ``name`` (answers ``{name} added``) and sends
  ``notifications/tools/list_changed`` to *the calling session only* (as the mcp SDK's
  ``ctx.session`` does), answering ``added {name}``; ``touch_resource(uri)`` sends
  ``notifications/resources/updated {uri}`` to every session subscribed to ``uri`` and answers
  ``touched {uri}``; ``log_to_session()`` sends one session-wide ``notifications/message`` per level
  debug, info, warning, error (logger ``session``, data ``session log at <level>``) to the calling
  session, at or above its level, and answers ``logged``.
* On the POST's stream: ``report_progress(count)`` sends ``count`` ``notifications/progress`` (when
  the request's ``_meta`` has a ``progressToken``) and one log message per level debug, info,
  warning, error at or above the session's level (logger ``report_progress``, the reference v2
  server's shapes), and answers ``progress done``.

``Lists.levels`` and ``Lists.subscriptions`` (by upstream session id) let tests see the session
state the peer holds.
"""

from __future__ import annotations

from typing import Any

from peers.v2_session_server import STRING, TASKS_EXTENSION, Json, McpError, PostReply, Session, _arg, _text, _tool

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
REPORTED = ("debug", "info", "warning", "error")
NOTES = "reference://notes"
CAPABILITIES: Json = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
    "logging": {},
    "extensions": {TASKS_EXTENSION: {}},
}
TOOLS: list[Json] = [
    _tool("add_tool", "Adds a tool `name`; announces tools/list_changed to this session.", {"name": STRING}),
    _tool("touch_resource", "Announces resources/updated for `uri` to its subscribers.", {"uri": STRING}),
    _tool("log_to_session", "Sends one session-wide log message per level on this session's GET stream.", {}),
    _tool("report_progress", "Progress and log messages on this request's stream.", {"count": {"type": "integer"}}),
]


def _passes(level: str, threshold: str | None) -> bool:
    return threshold is None or LEVELS.index(level) >= LEVELS.index(threshold)


def _notification(method: str, params: Json | None = None) -> Json:
    return {"jsonrpc": "2.0", "method": method, **({} if params is None else {"params": params})}


class Lists:
    """The opt-in features for every session of one peer app."""

    def __init__(self, sessions: dict[str, Session]):
        self.sessions = sessions
        self.added: list[Json] = []
        self.levels: dict[str, str] = {}
        self.subscriptions: dict[str, set[str]] = {}

    def capabilities(self) -> Json:
        return {name: dict(value) for name, value in CAPABILITIES.items()}

    def tools(self) -> list[Json]:
        return TOOLS + self.added

    async def dispatch(self, session: Session, method: Any, params: Json, reply: PostReply) -> Json | None:
        """The answer to a method the opt-in serves; None for the others."""
        if method == "logging/setLevel":
            level = params.get("level")
            if level not in LEVELS:
                raise McpError(-32602, f"Invalid log level: {level}")
            self.levels[session.session_id] = level
            return {}
        if method in ("resources/subscribe", "resources/unsubscribe"):
            uris = self.subscriptions.setdefault(session.session_id, set())
            uri = _arg(params, "uri", str)
            if method == "resources/subscribe":
                uris.add(uri)
            else:
                uris.discard(uri)
            return {}
        if method == "prompts/list":
            return {"prompts": []}
        if method == "resources/list":
            return {"resources": [{"uri": NOTES, "name": "notes", "mimeType": "text/plain"}]}
        if method == "resources/read":
            if params.get("uri") != NOTES:
                raise McpError(-32002, f"Resource not found: {params.get('uri')}")
            return {"contents": [{"uri": NOTES, "mimeType": "text/plain", "text": "notes"}]}
        if method == "tools/call" and isinstance(params.get("name"), str):
            return await self._call(session, params["name"], params.get("arguments") or {}, params, reply)
        return None

    async def _call(self, session: Session, name: str, arguments: Json, params: Json, reply: PostReply) -> Json | None:
        complete = {"resultType": "complete"} if session.declares_tasks else {}
        level = self.levels.get(session.session_id)
        if name == "add_tool":
            added = _arg(arguments, "name", str)
            self.added.append(_tool(added, f"Added by add_tool({added!r}).", {}))
            session.push(_notification("notifications/tools/list_changed"))
            return {**_text(f"added {added}"), **complete}
        if name == "touch_resource":
            uri = _arg(arguments, "uri", str)
            for other in self.sessions.values():
                if uri in self.subscriptions.get(other.session_id, ()):
                    other.push(_notification("notifications/resources/updated", {"uri": uri}))
            return {**_text(f"touched {uri}"), **complete}
        if name == "log_to_session":
            for at in REPORTED:
                if _passes(at, level):
                    session.push(
                        _notification("notifications/message", {"level": at, "logger": "session", "data": f"session log at {at}"})
                    )
            return {**_text("logged"), **complete}
        if name == "report_progress":
            count = _arg(arguments, "count", int)
            meta = params.get("_meta")
            token = meta.get("progressToken") if isinstance(meta, dict) else None
            for step in range(1, count + 1):
                if token is not None:
                    progress = {"progressToken": token, "progress": float(step), "total": float(count), "message": f"step {step}"}
                    await reply.send(_notification("notifications/progress", progress))
            for at in REPORTED:
                if _passes(at, level):
                    data = {"msg": f"report_progress at {at}", "extra": None}
                    await reply.send(
                        _notification("notifications/message", {"level": at, "logger": "report_progress", "data": data})
                    )
            return {**_text("progress done"), **complete}
        if any(tool["name"] == name for tool in self.added):
            return {**_text(f"{name} added"), **complete}
        return None
