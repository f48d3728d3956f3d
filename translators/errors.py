"""JSON-RPC error codes, the proxy's error type, and how codes map across faces.

Sources: JSON-RPC 2.0; MCP core 2026-07-28 (HeaderMismatch -32020, MissingRequiredClientCapability
-32021, UnsupportedProtocolVersion -32022, HTTP statuses); SEP-2663 (-32021 for tasks);
docs/behaviour.md §6 "Error codes and HTTP statuses".
"""

from __future__ import annotations

from typing import Any, Final

from .protocol import MODERN_VERSION, SUPPORTED_MODERN_VERSIONS, TASKS_EXTENSION

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
HEADER_MISMATCH: Final = -32020
MISSING_CAPABILITY: Final = -32021
UNSUPPORTED_VERSION: Final = -32022
LEGACY_MISSING_CAPABILITY: Final = -32003
"""Pre-renumbering code for a missing client capability (ext-tasks drafts, docs/wire.md §8 item 4)."""


class McpError(Exception):
    """A JSON-RPC error to answer with: `{code, message, data?}`.

    `http_status` overrides the face's default mapping (used for 413/415/406/502 answers,
    which are transport failures rather than JSON-RPC codes). `by_backend`: the error is the
    backend's own, or stands in for a backend that failed (`from_backend`, `backend_unavailable`,
    `backend_http_error`), not a refusal of the proxy's (`translators.failures.of_error`).
    """

    by_backend = False

    def __init__(self, code: int, message: str, data: Any = None, *, http_status: int | None = None, request_id: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status
        self.request_id = request_id
        """The id of the request refused, when it was read before the refusal (else None)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON-RPC `error` object: `{"code": int, "message": str, "data"?: any}`."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    def __repr__(self) -> str:
        return f"McpError({self.code}, {self.message!r})"


def missing_tasks_extension(message: str) -> McpError:
    """-32021 naming the tasks extension in `data.requiredCapabilities` (SEP-2663 §Errors)."""
    return McpError(
        MISSING_CAPABILITY,
        message,
        {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def unsupported_version(requested: str) -> McpError:
    """-32022 with `data.supported` and `data.requested` (core 2026-07-28)."""
    return McpError(
        UNSUPPORTED_VERSION,
        f"Unsupported protocol version: {requested}. Supported versions: {', '.join(SUPPORTED_MODERN_VERSIONS)}",
        {"supported": list(SUPPORTED_MODERN_VERSIONS), "requested": requested},
    )


UNKNOWN_TASK = "Unknown task"
NOT_ISSUED = "the id does not unseal: it was not issued by this proxy to this caller or session, or it was altered"
"""Why a task id is unknown when it is not one the proxy sealed for this principal: forged,
mangled (a byte changed, cut short), sealed with another key, or another principal's (the same
words for each, on purpose: docs/behaviour.md §6)."""
FORGOTTEN = "the backend no longer knows it: it ended and was forgotten, its ttl passed, or the backend restarted"
"""Why a task id the proxy did seal for this caller is unknown: the backend answered that it does
not know the task, or forgot the session that held it."""
ELSEWHERE = "the id names a task this backend does not hold: one of another backend, or of this backend before its upgrade"
"""Why a sealed id is unknown to the pairing it reached (a task relayed before a rolling upgrade)."""
NOT_OF_SESSION = "the id names no task of this session"
"""Why a task id is unknown on a relayed stdio session (the process's tasks are per session)."""


NO_LONGER_CONFIGURED = "is no longer configured: a reload removed it (or renamed it)"
"""Why a sealed task id is unknown when the backend sealed in it is not in the fleet (`task_of_removed`)."""


def task_of_removed(backend: str) -> McpError:
    """-32602 "Unknown task" for an id sealed with `backend`, which the configuration no longer
    has: named, so that no other backend is blamed for it (the proxy's answer, `backend_removed`)."""
    return McpError(INVALID_PARAMS, f"{UNKNOWN_TASK}: the backend that held it, {backend[:100]!r}, {NO_LONGER_CONFIGURED}")


def unknown_task(why: str | None = None) -> McpError:
    """-32602 "Unknown task: <why>" (`NOT_ISSUED`, `FORGOTTEN`, `ELSEWHERE`, `NOT_OF_SESSION`), or
    plain "Unknown task" without a reason; a reason is cut to 200 characters."""
    return McpError(INVALID_PARAMS, UNKNOWN_TASK if not why else f"{UNKNOWN_TASK}: {why[:200]}")


SESSION_NOT_FOUND: Final = "Session not found"


def session_not_found() -> McpError:
    """-32600 "Session not found" with HTTP 404: a session-wire request naming a session the server
    does not hold for this caller (core 2025-11-25, Session Management)."""
    return McpError(INVALID_REQUEST, SESSION_NOT_FOUND, http_status=404)


def backend_unavailable(backend: str, reason: str) -> McpError:
    """-32603 with HTTP 502: the backend could not be reached or did not speak MCP (docs/behaviour.md §6)."""
    return _backends(McpError(INTERNAL_ERROR, f"Backend {backend!r} unavailable: {reason}", http_status=502))


REMOVED = "removed from the proxy's configuration by a reload while the request was in flight (remove_with_work)"
"""Why a request in flight on a backend a reload removed was answered at once (decision 165)."""


def backend_removed(backend: str) -> McpError:
    """-32603 with HTTP 502 naming `backend` and its removal (`REMOVED`): the proxy's own answer."""
    return McpError(INTERNAL_ERROR, f"Backend {backend!r} {REMOVED}", http_status=502)


def _backends(error: McpError) -> McpError:
    """`error`, marked as the backend's (`McpError.by_backend`)."""
    error.by_backend = True
    return error


def from_backend(error: Any) -> McpError:
    """A backend's JSON-RPC error object as an `McpError`, with legacy codes renumbered.

    `-32003` (drafts) becomes `-32021` (docs/behaviour.md §6). A malformed error object becomes -32603.
    """
    if not isinstance(error, dict) or not isinstance(error.get("code"), int) or isinstance(error.get("code"), bool):
        return _backends(McpError(INTERNAL_ERROR, "Backend answered a malformed JSON-RPC error"))
    message = error.get("message")
    return _backends(McpError(renumbered(error["code"]), message if isinstance(message, str) else "", error.get("data")))


def bridged_unavailable(error: Any, status: int) -> McpError:
    """The JSON-RPC error object the proxy's own bridge to a stdio process answered with the gateway
    status `status` (502: the process is not running, 503: a bound on processes; its words name the
    backend already) as an `McpError` with that status, the backend's: not wrapped again as a
    gateway's answer (`backend_unavailable`)."""
    said = from_backend(error)
    said.http_status = status
    return said


def renumbered(code: int) -> int:
    """A backend's error code as the 2026-07-28 wire numbers it: `-32003` (drafts) → `-32021`;
    every other code unchanged."""
    return MISSING_CAPABILITY if code == LEGACY_MISSING_CAPABILITY else code


LEGACY_CODE_BYTES: Final = b"-32003"
"""A serialized message can carry the legacy code only if it contains these bytes (the cheap
check a relay makes before it parses anything: `may_carry_legacy_code`)."""


def may_carry_legacy_code(raw: bytes) -> bool:
    """Whether the serialized message(s) in `raw` may hold the legacy `-32003` code, so that
    `legacy_code_renumbered` could change something (a bytes search; no parsing)."""
    return raw.find(LEGACY_CODE_BYTES) >= 0  # not `in`: see `fleet_ids.may_carry_ids`


def legacy_code_renumbered(message: dict[str, Any]) -> dict[str, Any]:
    """A v2 backend's JSON-RPC message with a draft-era error code renumbered, as relays pass it on:
    an error response whose `error.code` is `-32003` gets `-32021`, `message` and `data` kept
    (`from_backend` does the same for answers the proxy reads). Any other message is returned as
    it is (the same object). There is no inverse: no face speaks the draft numbering
    (docs/decisions.md §37).
    """
    error = message.get("error")
    if not isinstance(error, dict):
        return message
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool) or renumbered(code) == code:
        return message
    return {**message, "error": {**error, "code": renumbered(code)}}


def backend_http_error(backend: str, status: int) -> McpError:
    """The error a client gets for a backend's HTTP error status whose body is not a JSON-RPC
    message (an empty 406, a gateway's HTML 503): 4xx → `-32600` with that status; 5xx → `-32603`
    with HTTP 502 (the backend did not answer in MCP; docs/decisions.md §36). The message names
    the backend and its status."""
    if status >= 500:
        return backend_unavailable(backend, f"answered HTTP {status} without a JSON-RPC body")
    return _backends(
        McpError(
            INVALID_REQUEST, f"Backend {backend!r} refused the request: HTTP {status} without a JSON-RPC body", http_status=status
        )
    )


_MODERN_400: Final = frozenset(
    {PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS, HEADER_MISMATCH, MISSING_CAPABILITY, UNSUPPORTED_VERSION}
)


def modern_http_status(error: McpError) -> int:
    """HTTP status of an error answer on the modern wire (core 2026-07-28 §HTTP; docs/behaviour.md §6).

    -32700/-32600/-32602/-32020/-32021/-32022 → 400; -32601 → 404; an explicit transport status
    (413, 415, 406, 502) wins; everything else → 200 with the error in the body.
    """
    if error.http_status is not None:
        return error.http_status
    if error.code == METHOD_NOT_FOUND:
        return 404
    if error.code in _MODERN_400:
        return 400
    return 200


def for_v1_client(error: McpError) -> McpError:
    """The same error as a 2025-11-25 client understands it (docs/behaviour.md §6).

    -32021 → -32601; -32020 and -32022 → -32603; the message is kept. Inverse direction of
    `from_backend` for the v1 face.
    """
    if error.code == MISSING_CAPABILITY:
        return McpError(METHOD_NOT_FOUND, error.message, error.data)
    if error.code in (HEADER_MISMATCH, UNSUPPORTED_VERSION):
        return McpError(INTERNAL_ERROR, error.message, error.data)
    return error


def modern_version_supported(version: str) -> bool:
    """Whether the proxy's modern face speaks `version` (only `2026-07-28`)."""
    return version == MODERN_VERSION
