"""HTTP-level checks and answers of the modern face (docs/behaviour.md §2 rule 1–5, §6 "Bad input"):
body size and media type, Accept, conflicting duplicate routing headers, what a POST that is not a
modern request gets, and JSON answers; and the session face's outcome label and `MCP-Protocol-Version` check.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from multidict import istr

from translators import jsonrpc
from translators.errors import HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, McpError
from translators.protocol import H_NAME, H_PROTOCOL_VERSION, H_SESSION_ID, MODERN_VERSION

JSON = "application/json"


def json_response(message: dict[str, Any], status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=jsonrpc.dumps(message), status=status, content_type=JSON, headers=headers)


ANSWERED = web.RequestKey("mcp_tasks_proxy_answered", bool)
"""Set by a relay when its client left (the handler cancelled) after the answer had been written to
it whole, before the backend's stream ended: counted as answered, not "cancelled" (issue 37)."""


STREAMING = web.RequestKey("mcp_tasks_proxy_streaming", web.StreamResponse)
"""The SSE answer whose headers were sent (`stream_to`): from then on the request is answered on
it (the entry's answer to a request whose backend was removed is its last event, decision 165)."""


async def stream_to(request: web.Request, response: web.StreamResponse) -> None:
    """Send `response`'s headers: from now on the request is answered by this stream."""
    request[STREAMING] = response
    await response.prepare(request)


JSON_RANGES = frozenset({JSON, "application/*", "*/*"})
SSE_RANGES = frozenset({"text/event-stream", "text/*", "*/*"})

ACCEPT_MEMO_ENTRIES = 256
ACCEPT_MEMO_MAX_CHARS = 256
"""`Accept` values whose answers are remembered (a client sends the same one every time), and the
longest one remembered: at most 64 KiB, emptied when full."""
_accept_memo: dict[str, tuple[bool, bool]] = {}


def _allows(accept: str, ranges: frozenset[str]) -> bool:
    for part in accept.split(","):
        if part.split(";")[0].strip().lower() in ranges:
            return True
    return False


def _accepted(accept: str) -> tuple[bool, bool]:
    """Whether `accept` allows JSON, and SSE: each read once per distinct value (6,000 to 10,000
    instructions for both, against about 1,000 for a lookup; every modern request asks both)."""
    known = _accept_memo.get(accept)
    if known is None:
        known = (_allows(accept, JSON_RANGES), _allows(accept, SSE_RANGES))
        if len(accept) <= ACCEPT_MEMO_MAX_CHARS:
            if len(_accept_memo) >= ACCEPT_MEMO_ENTRIES:
                _accept_memo.clear()
            _accept_memo[accept] = known
    return known


def accepts_json(accept: str | None) -> bool:
    """Whether a client's `Accept` allows `application/json` (no header: anything)."""
    return not accept or _accepted(accept)[0]


def takes_sse(accept: str | None) -> bool:
    """Whether a client's `Accept` allows `text/event-stream` (no header: anything)."""
    return not accept or _accepted(accept)[1]


_ROUTING_HEADERS = tuple(istr(name) for name in (H_PROTOCOL_VERSION, "Mcp-Method", H_NAME))


def refuse_conflicting_duplicates(request: web.Request) -> None:
    """A routing header sent twice with different values cannot be checked against the body."""
    getall = request.headers.getall
    for name in _ROUTING_HEADERS:
        values = getall(name, ())
        if len(values) > 1 and len(set(values)) > 1:
            raise McpError(HEADER_MISMATCH, f"{name} header sent more than once with different values")


def caller_headers(identity_header: str) -> tuple[istr, ...]:
    """The names `refuse_ambiguous_caller` checks: `Authorization`, `identity_header` (once) and
    `Mcp-Session-Id`, case-folded once (a lookup by `istr` is the cheapest on aiohttp's headers)."""
    return tuple(istr(name) for name in dict.fromkeys(("Authorization", identity_header, H_SESSION_ID)))


def refuse_ambiguous_caller(request: web.Request, names: tuple[istr, ...]) -> None:
    """The caller's credentials or session (`names`: `Authorization`, the identity header,
    `Mcp-Session-Id`) sent twice with different values: which line counts would depend on who
    reads it (RFC 9110 §5.3), so whose session or task a request reaches would too. Raises
    `McpError(-32600)` with HTTP 400 (docs/decisions.md §138)."""
    headers = request.headers
    for name in names:
        if name in headers and len(values := headers.getall(name)) > 1 and len(set(values)) > 1:
            raise McpError(INVALID_REQUEST, f"{name} header sent more than once with different values", http_status=400)


def whole_body(request: web.Request, limit: int) -> bytes | None:
    """`read_body`'s checks, and the body when it arrived whole with the headers (the common case:
    no coroutine, no reading to time); None when more is to be read (`read_body`)."""
    if request.content_length is not None and request.content_length > limit:
        raise McpError(INVALID_REQUEST, f"Request body larger than {limit} bytes", http_status=413)
    content_type = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if content_type != JSON:
        raise McpError(INVALID_REQUEST, "Unsupported Media Type: Content-Type must be application/json", http_status=415)
    content = request.content
    if not content.is_eof():
        return None
    body = content.read_nowait()
    if len(body) > limit:
        raise McpError(INVALID_REQUEST, f"Request body larger than {limit} bytes", http_status=413)
    return body


async def read_body(request: web.Request, limit: int, timeout_s: float = 30.0) -> bytes:
    """The request body, at most `limit` bytes, of Content-Type application/json, received within
    `timeout_s` seconds (a client that trickles its body cannot hold a connection for ever).

    Raises `McpError` with HTTP 413 (too large), 415 (another media type) or 408 (too slow).
    """
    body = whole_body(request, limit)
    if body is not None:
        return body
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.content.iter_chunked(65536):
                size += len(chunk)
                if size > limit:
                    raise McpError(INVALID_REQUEST, f"Request body larger than {limit} bytes", http_status=413)
                chunks.append(chunk)
    except TimeoutError:
        raise McpError(INVALID_REQUEST, f"Request body not received within {timeout_s:g} s", http_status=408) from None
    return b"".join(chunks)


def not_modern_error(message: jsonrpc.Message, request: web.Request) -> McpError:
    """docs/behaviour.md §2 rules 2–5 for a POST that is not a modern request."""
    if request.headers.get(H_PROTOCOL_VERSION) == MODERN_VERSION:
        return McpError(INVALID_PARAMS, "Missing required _meta key 'io.modelcontextprotocol/protocolVersion'")
    if message.method == "initialize" or H_SESSION_ID in request.headers:
        return McpError(
            INVALID_REQUEST,
            "Session-wire clients (initialize, Mcp-Session-Id) are not served by this endpoint; "
            f"use the {MODERN_VERSION} wire (supported versions: {MODERN_VERSION})",
        )
    return McpError(
        INVALID_REQUEST,
        "Bad Request: Missing session ID (session-wire clients start with initialize; 2026-07-28 clients send "
        "the MCP-Protocol-Version header and params._meta)",
    )


def session_outcome(outcome: str | None, response: web.StreamResponse) -> str:
    """The outcome label of a session-wire answer: `outcome` when `SessionReply.finish` left one,
    else read from the small JSON body every other answer is (an error, an `InitializeResult`, or 202)."""
    if outcome is not None:
        return outcome
    if response.status == 202 or not isinstance(response, web.Response) or not isinstance(response.body, bytes):
        return "ok" if response.status < 300 else f"http_{response.status}"
    try:
        error = json.loads(response.body).get("error")
    except (ValueError, AttributeError):
        error = None
    return str(error.get("code")) if isinstance(error, dict) else "ok"


def version_refusal(request: web.Request, negotiated: str, request_id: Any) -> web.Response | None:
    """HTTP 400 for a request of an initialized session whose `MCP-Protocol-Version` header is
    not `negotiated`, the version of its `initialize` (MCP 2025-11-25, Streamable HTTP: "invalid or
    unsupported MCP-Protocol-Version" → 400 Bad Request); None when it is, or when the header is
    absent (the negotiated version is assumed: docs/decisions.md §42). The header's value is
    neither logged nor echoed."""
    versions = request.headers.getall(H_PROTOCOL_VERSION, ())
    if all(version == negotiated for version in versions):
        return None
    error = McpError(INVALID_REQUEST, f"Bad Request: Unsupported protocol version in the MCP-Protocol-Version header "
                                      f"(this session uses {negotiated})")
    return json_response(jsonrpc.error_response(request_id, error), 400)
