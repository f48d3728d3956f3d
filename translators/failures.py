"""Why a request failed, and what the proxy repaired for the client that sent it: the two closed
sets of codes the status page and `/metrics` count by (docs/operations.md "Status page").

A failure is a pair (`reason`, `by`): `reason` one of `REASONS`, `by` whether the proxy made the
answer itself (`PROXY`: a refusal, never the backend's error) or passed on, or stood in for, the
backend's (`BACKEND`). `of_error` classifies a JSON-RPC error the proxy answered with (its own or
the backend's, read from the message the proxy already holds); `of_status` a relayed answer whose
body the relay did not read (its HTTP status only). `missing_headers` names the 2026-07-28 routing
headers a modern request lacks and the proxy adds upstream (core 2026-07-28 §Transports; SEP-2663
for `Mcp-Name` on `tasks/*`); `accept_repaired` a POST `Accept` that does not list both media types
(core 2026-07-28 §Transports: a client MUST), which the proxy makes good (docs/decisions.md §36).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .envelope import name_param
from .errors import FORGOTTEN, INTERNAL_ERROR, INVALID_PARAMS, NO_LONGER_CONFIGURED, REMOVED, SESSION_NOT_FOUND, UNKNOWN_TASK
from .protocol import H_METHOD, H_NAME

SESSION_LOST: Final = "session_lost"
TASK_UNKNOWN: Final = "task_unknown"
BACKEND_REFUSED: Final = "backend_refused"
BACKEND_UNREACHABLE: Final = "backend_unreachable"
AUTH_REQUIRED: Final = "auth_required"
PROXY_REFUSED: Final = "proxy_refused"
STORE_UNREACHABLE: Final = "store_unreachable"
PROXY_ERROR: Final = "proxy_error"
BACKEND_REMOVED: Final = "backend_removed"

REASONS: Final[dict[str, str]] = {
    SESSION_LOST: "the session the request names is gone (the backend forgot it: restarted or upgraded; or the proxy's own "
    "session expired or is held by a replica without a shared store): the client must open a new one",
    TASK_UNKNOWN: "the task is unknown: the backend forgot it (restart, ttl) or the id names a task of another backend, of "
    "this backend before its upgrade, or no task issued to this caller",
    BACKEND_REFUSED: "the backend answered with an error (its own JSON-RPC error or HTTP status)",
    BACKEND_UNREACHABLE: "the backend could not be reached, broke off, or did not answer in MCP (HTTP 502)",
    AUTH_REQUIRED: "the backend asked for credentials (HTTP 401/403 with a Bearer challenge)",
    PROXY_REFUSED: "the proxy refused the request itself: malformed, headers not matching the body, unsupported version, "
    "too large, not acceptable, or a bound of its own reached (a stdio backend's processes, HTTP 503); never sent to the "
    "backend",
    STORE_UNREACHABLE: "the proxy's task state store did not answer (HTTP 503)",
    PROXY_ERROR: "an internal error in mcp-tasks-proxy (logged with its traceback)",
    BACKEND_REMOVED: "the request was in flight on a backend a reload removed with remove_with_work: answered at once (HTTP "
    '502); or it names a task of a backend a reload removed (-32602 "Unknown task", naming that backend)',
}
"""Every reason code, with what it means for an operator. The set is closed: nothing else is counted."""

PROXY: Final = "proxy"
BACKEND: Final = "backend"

Failure = tuple[str, str]
"""(reason, by): a code of `REASONS`, and `PROXY` or `BACKEND`."""

MISSING_METHOD: Final = "mcp-method"
MISSING_NAME: Final = "mcp-name"
ACCEPT: Final = "accept"

REPAIRS: Final[dict[str, str]] = {
    MISSING_METHOD: "the request had no Mcp-Method header (required on every 2026-07-28 request); the proxy sends it upstream",
    MISSING_NAME: "the request had no Mcp-Name header (required on tools/call, prompts/get, resources/read and tasks/*); the "
    "proxy sends it upstream",
    ACCEPT: "the POST's Accept did not list both application/json and text/event-stream; the proxy asks the backend with both "
    "and answers the client as JSON",
}
"""Every repair code: what a client lacked that the proxy made good. Pointed straight at a v2
backend, such a client fails (a missing header: -32020, HTTP 400)."""


def of_error(code: int, message: str, http_status: int | None, *, by_backend: bool, method: str | None = None) -> Failure:
    """The failure of an error answer `{code, message}` with the HTTP status it was answered with
    (None: the face's default). `by_backend`: the error is the backend's own (or stands in for a
    backend that failed), not a refusal the proxy made. `method`: the request's method (a backend's
    -32602 on `tasks/*` means the task is unknown to it)."""
    if http_status in (401, 403):
        return AUTH_REQUIRED, BACKEND
    if not by_backend and (message.endswith(REMOVED) or (code == INVALID_PARAMS and message.endswith(NO_LONGER_CONFIGURED))):
        return BACKEND_REMOVED, PROXY
    if http_status == 503 and message.startswith("task state store "):
        return STORE_UNREACHABLE, PROXY
    if http_status == 503 and not by_backend:
        return PROXY_REFUSED, PROXY  # a bound of the proxy's own: a stdio backend's processes (docs/decisions.md §148)
    if http_status in (502, 503, 504):
        return BACKEND_UNREACHABLE, BACKEND
    if message == SESSION_NOT_FOUND:
        return SESSION_LOST, BACKEND if by_backend else PROXY
    if code == INVALID_PARAMS and (message.startswith(UNKNOWN_TASK) or (by_backend and (method or "").startswith("tasks/"))):
        return TASK_UNKNOWN, BACKEND if by_backend or FORGOTTEN in message else PROXY
    if by_backend:
        return BACKEND_REFUSED, BACKEND
    if code == INTERNAL_ERROR and message.startswith("Internal error in mcp-tasks-proxy"):
        return PROXY_ERROR, PROXY
    return PROXY_REFUSED, PROXY


def of_status(status: int, *, session_wire: bool) -> Failure:
    """The failure of a relayed answer with HTTP `status` (≥ 300) whose body was not read: on the
    session wire a 404 is the backend's "session not found" (2025-11-25 Streamable HTTP)."""
    if status in (401, 403):
        return AUTH_REQUIRED, BACKEND
    if status in (502, 503, 504):
        return BACKEND_UNREACHABLE, BACKEND
    if status == 404 and session_wire:
        return SESSION_LOST, BACKEND
    return BACKEND_REFUSED, BACKEND


def of_answer(error: Any, status: int, *, method: str | None, session_wire: bool) -> Failure:
    """The failure of a backend's answer with HTTP `status` whose JSON-RPC `error` object the proxy
    holds (None or malformed: by its status alone, `of_status`)."""
    if isinstance(error, dict) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str):
        if status == 404 and session_wire:
            return SESSION_LOST, BACKEND
        return of_error(
            error["code"], error["message"], status if status >= 401 and status != 404 else None, by_backend=True, method=method
        )
    return of_status(status, session_wire=session_wire)


def missing_headers(method: str, params: Mapping[str, Any], headers: Mapping[str, str]) -> tuple[str, ...]:
    """The repairs a modern request needs for its routing headers: `MISSING_METHOD` without
    `Mcp-Method`, `MISSING_NAME` without `Mcp-Name` where the method has a name (`name_param`).
    `headers` is case-insensitive. Two header lookups, and the name only when `Mcp-Name` is absent."""
    lacks_method = H_METHOD not in headers
    lacks_name = H_NAME not in headers and name_param(method, params) is not None
    if not lacks_method and not lacks_name:
        return ()
    return (MISSING_METHOD,) * lacks_method + (MISSING_NAME,) * lacks_name


def accept_repaired(accept: str | None) -> bool:
    """Whether a POST's `Accept` fails to list both `application/json` and `text/event-stream`
    (wildcards count; no header lists neither)."""
    if not accept:
        return True
    json = sse = False
    for part in accept.split(","):
        media = part.split(";")[0].strip().lower()
        if media == "*/*":
            return False
        json = json or media in ("application/json", "application/*")
        sse = sse or media in ("text/event-stream", "text/*")
    return not (json and sse)
