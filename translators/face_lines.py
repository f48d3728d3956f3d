"""What the stdio face (`mcp-tasks-proxy stdio`) says to its host beyond the proxy's own answers.

The face bridges a host's stdin/stdout to the proxy on a loopback port (docs/decisions.md §60);
these are the messages it builds itself, and the one rewrite it makes of an answer, as pure
functions (docs/decisions.md §74, §75):

* `id_at_start`: the request id read from the first bytes of a line too long to parse;
* `answering`: an error answer given the id of the request it answers (the proxy's 413 has none,
  a session-wire server's "Session not found" has `"server-error"`);
* `line_too_long`, `no_answer`, `session_lost`: the errors the face answers itself;
* `reinitialize`: the host's `initialize` replayed to open a new upstream session, and
  `session_renewed_notices`: how the host is told that one was opened.

Sources: JSON-RPC 2.0 §5 (a response carries the id of the request it answers; an error whose
request id could not be read has none), MCP core 2025-11-25 "Lifecycle", "Logging"
(`notifications/message`), and the `listChanged` notifications of "Tools", "Resources", "Prompts".
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from . import jsonrpc
from .errors import INTERNAL_ERROR, INVALID_REQUEST, McpError
from .jsonrpc import RequestId

ID_PREFIX_BYTES = 65536
"""How much of an over-long line's start `id_at_start` is given (bytes)."""

LOGGER = "mcp-tasks-proxy"
"""The `logger` of the face's own `notifications/message`."""

REINITIALIZE_ID = "mcp-tasks-proxy/reinitialize"
"""The id of a replayed `initialize` (a string no host's integer ids collide with; suffixed with
the count of sessions opened so far)."""

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _skip_container(text: str, i: int) -> int | None:
    """The index just past the object or array that starts at `text[i]`, or None when `text`
    ends inside it."""
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            if i >= n:
                return None
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def id_at_start(prefix: bytes) -> RequestId | None:
    """The top-level `"id"` of the JSON object whose first bytes are `prefix`, when its member
    `"id"` and its whole value lie in `prefix` (members before it are skipped, nested ones are
    not looked at) and it is a valid JSON-RPC id (a string or an integer); else None.

    For a line too long to be parsed in full (docs/decisions.md §74): the error that refuses it
    then answers its id when the id comes early, as senders write it. Never raises.
    """
    text = prefix.decode("utf-8", "ignore")
    i = _WS.match(text, 0).end()  # type: ignore[union-attr]  # `*` always matches
    if text[i : i + 1] != "{":
        return None
    i += 1
    try:
        while True:
            i = _WS.match(text, i).end()  # type: ignore[union-attr]
            if text[i : i + 1] != '"':
                return None
            key, i = _DECODER.raw_decode(text, i)
            i = _WS.match(text, i).end()  # type: ignore[union-attr]
            if text[i : i + 1] != ":":
                return None
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
            if text[i : i + 1] in ("{", "["):
                if key == "id":
                    return None
                end = _skip_container(text, i)
                if end is None:
                    return None
                i = end
            else:
                value, end = _DECODER.raw_decode(text, i)
                if end >= len(text):
                    return None  # a number may go on past the prefix
                if key == "id":
                    valid = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
                    return value if valid else None
                i = end
            i = _WS.match(text, i).end()  # type: ignore[union-attr]
            if text[i : i + 1] != ",":
                return None
            i += 1
    except (ValueError, RecursionError):
        return None


def answering(answer: Mapping[str, Any], request_id: RequestId) -> dict[str, Any]:
    """`answer`, an error response relayed on the answer of the request `request_id`, with that
    id (JSON-RPC 2.0 §5: the proxy's refusal of a body it could not read has no id, a
    session-wire server's "Session not found" has `"server-error"`). Any other member is kept;
    a result response is returned unchanged (it names its request already)."""
    if "error" not in answer:
        return dict(answer)
    return {**answer, "id": request_id}


def line_too_long(limit: int, request_id: RequestId | None) -> dict[str, Any]:
    """The error (-32600) refusing a stdin line over `limit` bytes (its newline not counted),
    answering `request_id` (`id_at_start` of the line; none when not found)."""
    error = McpError(INVALID_REQUEST, f"Request line longer than {limit} bytes (the stdio face's limit): skipped")
    return jsonrpc.error_response(request_id, error)


def not_initialized(request_id: RequestId) -> dict[str, Any]:
    """The error (-32600) for a request sent before a session was opened by `initialize` (core
    2025-11-25 "Lifecycle": only pings may come before it), in the words of a stdio server."""
    error = McpError(INVALID_REQUEST, "Invalid request: the session is not initialized (send initialize first)")
    return jsonrpc.error_response(request_id, error)


def no_answer(request_id: RequestId, reason: str) -> dict[str, Any]:
    """The error (-32603) for a request whose answer ended without its response (`reason`, e.g.
    the backend went away while the request ran: it may or may not have run)."""
    return jsonrpc.error_response(request_id, McpError(INTERNAL_ERROR, f"No answer from the backend: {reason}"))


def session_lost(request_id: RequestId, reason: str) -> dict[str, Any]:
    """The error (-32603) for a request sent on an upstream session the backend had forgotten
    when no new one could be opened (`reason`: why not)."""
    message = f"The upstream session was lost and no new one could be opened: {reason}"
    return jsonrpc.error_response(request_id, McpError(INTERNAL_ERROR, message))


def reinitialize(host_initialize: Mapping[str, Any], count: int) -> dict[str, Any]:
    """The host's `initialize` request (`host_initialize`, the message as it sent it) again,
    with the id `"mcp-tasks-proxy/reinitialize/<count>"`: the same protocol version, capabilities
    and clientInfo open the new upstream session, so the session the host negotiated holds."""
    params = host_initialize.get("params")
    return jsonrpc.request(f"{REINITIALIZE_ID}/{count}", "initialize", dict(params) if isinstance(params, Mapping) else {})


def replayed_requests(count: int, log_level: Mapping[str, Any] | None, subscribed: list[str]) -> list[dict[str, Any]]:
    """What the host had set on the lost session, asked again on the new one after `reinitialize`
    (`count` as there): its last `logging/setLevel` params (`log_level`, None when it sent none)
    and a `resources/subscribe` for each URI of `subscribed` (in order). Ids
    `"mcp-tasks-proxy/reinitialize/<count>/<n>"`, n from 1."""
    requests: list[dict[str, Any]] = []
    if log_level is not None:
        requests.append(jsonrpc.request(f"{REINITIALIZE_ID}/{count}/1", "logging/setLevel", dict(log_level)))
    for uri in subscribed:
        requests.append(jsonrpc.request(f"{REINITIALIZE_ID}/{count}/{len(requests) + 1}", "resources/subscribe", {"uri": uri}))
    return requests


def ping(count: int) -> dict[str, Any]:
    """A `ping` (id `"mcp-tasks-proxy/ping/<count>"`): whether a session whose GET stream was
    answered 404 is really lost (a server without a GET route may answer 404 for a live one)."""
    return jsonrpc.request(f"mcp-tasks-proxy/ping/{count}", "ping")


def session_renewed_notices(reason: str, capabilities: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """What the host is told when the face opened a new upstream session (docs/decisions.md §75):
    a `notifications/message` at level `warning` from logger `mcp-tasks-proxy`, with `data`
    `{"event": "upstream session renewed", "reason": reason, "lost": [...]}`, then
    `notifications/{tools,resources,prompts}/list_changed` for each of those the server's
    `capabilities` (its `initialize` result's) declares `listChanged: true` for."""
    data = {
        "event": "upstream session renewed",
        "reason": reason,
        "lost": ["requests in flight", "tasks"],
    }
    notices = [jsonrpc.notification("notifications/message", {"level": "warning", "logger": LOGGER, "data": data})]
    for kind in ("tools", "resources", "prompts"):
        declared = (capabilities or {}).get(kind)
        if isinstance(declared, Mapping) and declared.get("listChanged") is True:
            notices.append(jsonrpc.notification(f"notifications/{kind}/list_changed"))
    return notices
