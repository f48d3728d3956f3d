"""What a relay forwards and how (`Forward`, `relay.relay`): the request headers it passes on, and
the answers it builds or rewrites itself: an error naming the backend, the final message of an SSE
answer for a client that takes only JSON (docs/decisions.md §36), a message with its ids rewritten.
Split out of `relay.py`, which streams the bytes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import aiohttp
from aiohttp import web

from translators import jsonrpc
from translators.errors import McpError, backend_unavailable, from_backend, legacy_code_renumbered, modern_http_status
from translators.protocol import H_LAST_EVENT_ID, H_METHOD, H_NAME, H_PROTOCOL_VERSION, H_SESSION_ID
from translators.tool_results import Seen

from ..sse import SseParser

REQUEST_HEADERS = ("Authorization", "Accept", "Content-Type", H_PROTOCOL_VERSION, H_METHOD, H_NAME, H_SESSION_ID, H_LAST_EVENT_ID)
"""Request headers a relay forwards (plus every `Mcp-Param-*` and the configured `forward_headers`); hop-by-hop never."""


RESPONSE_HEADERS = ("Content-Type", H_SESSION_ID, H_NAME, H_METHOD, "Cache-Control", "X-Accel-Buffering")


WHOLE_BODY_MAX = 1024 * 1024
"""A non-SSE answer of known length up to this size is read whole and sent in one write."""


Rewrite = Callable[[dict[str, Any]], dict[str, Any]]
"""A whole JSON-RPC message in, the same message with its ids rewritten out."""


class UpstreamSession(NamedTuple):
    """A relayed session as its id names it (`proxy.routing.Router.relayed_session`): the backend's
    own session `id` (None before `initialize` gives one, and for a plain id from before,
    docs/decisions.md §83), and whether its task ids are the backend's own (`plain_task_ids`,
    decision 190) rather than sealed with backend and session."""

    id: str | None
    plain_task_ids: bool


NEW_SESSION = UpstreamSession(None, False)
"""A relayed `initialize`: no session on the backend yet (how the new session's task ids travel is
the relay's to decide: `Relay.plain_task_ids`)."""


@dataclass(slots=True)
class Forward:
    """How `relay` passes one request on and its answer back (each field: see `relay`)."""

    wanted: tuple[str, ...]
    set_headers: Mapping[str, str] | None = None
    session_id: str | None = None
    seal_session: Callable[[str], str] | None = None
    rewrite: Rewrite | None = None
    method: str | None = None
    request_id: Any = None
    v2: bool = False
    modern: bool = False
    parsed: dict[str, Any] | jsonrpc.Message | None = None
    rewrite_every: bool = False
    seen: Seen | None = None
    """Filled by `relay`: what the answer to a `TOOL_METHODS` request says of the tool call."""


def wanted_headers(forward_headers: Iterable[str]) -> tuple[str, ...]:
    """A relay's `Forward.wanted`: the request headers it passes on, `REQUEST_HEADERS` and the
    configured `forward_headers`."""
    return (*REQUEST_HEADERS, *forward_headers)


PARAM_PREFIX = "\nmcp-param-"
"""How an `Mcp-Param-*` header's name begins, lower-cased, after the newline `relay` joins names with."""


def error_answer(error: McpError, request_id: Any) -> web.Response:
    return web.Response(body=jsonrpc.dumps(jsonrpc.error_response(request_id, error)), status=error.http_status or 200,
                        content_type="application/json")


def name_from_result(headers: dict[str, str], message: dict[str, Any]) -> None:
    """`Mcp-Name` of a rewritten answer: the (sealed) `taskId` of its result, if it has one; the
    backend's own never reaches the client."""
    headers.pop(H_NAME, None)
    result = message.get("result")
    if isinstance(result, dict) and isinstance(result.get("taskId"), str):
        headers[H_NAME] = result["taskId"]


async def final_answer(upstream: aiohttp.ClientResponse, headers: dict[str, str], backend: str, forward: Forward) -> web.Response:
    """The backend's SSE answer for a client that accepts only JSON: its final JSON-RPC message
    (the response to `forward.request_id`; notifications before it are dropped) as a JSON body, with the
    HTTP status the modern wire gives that answer (docs/decisions.md §36)."""
    request_id, v2, rewrite = forward.request_id, forward.v2, forward.rewrite
    parser = SseParser()
    try:
        async for chunk in upstream.content.iter_any():
            for event in parser.feed(chunk):
                try:
                    message = jsonrpc.parse(event.data)
                except McpError:
                    continue
                if message.kind != "response" or message.id != request_id:
                    continue
                raw = rewrite(message.raw) if rewrite is not None else message.raw
                if v2:
                    raw = legacy_code_renumbered(raw)
                error = raw.get("error")
                status = modern_http_status(from_backend(error)) if error is not None else 200
                passed = {name: value for name, value in headers.items() if name != "Content-Type"}
                if rewrite is not None:
                    name_from_result(passed, raw)
                return web.Response(body=jsonrpc.dumps(raw), status=status, content_type="application/json", headers=passed)
    except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
        return error_answer(backend_unavailable(backend, f"stream broke: {exc.__class__.__name__}"), request_id)
    return error_answer(backend_unavailable(backend, "closed the response stream without answering"), request_id)


def rewrite_data(raw: bytes, rewrite: Callable[[dict[str, Any]], dict[str, Any]]) -> bytes:
    try:
        message = jsonrpc.parse(raw)
    except McpError:
        return raw
    return jsonrpc.dumps(rewrite(message.raw))
