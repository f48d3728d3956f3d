"""Notifications that belong to one request, as the other dialect's client gets them
(docs/behaviour.md §4.10 "Streamed answers"; core 2026-07-28 Streamable HTTP, logging and
progress; core 2025-11-25 logging and progress).

A backend sends `notifications/progress` and `notifications/message` about a request on that
request's own response stream. Their shapes are the same on both generations' wires; what
differs is who may get a log message: on the 2026-07-28 wire a request gets log messages only
when its `_meta` carries `io.modelcontextprotocol/logLevel`, and only at or above that level
(the session wire sets one level per session with `logging/setLevel` instead).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import INVALID_PARAMS, McpError

LOG_LEVELS: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""The syslog severities of `LoggingLevel` (RFC 5424), least severe first."""

_SEVERITY = {level: rank for rank, level in enumerate(LOG_LEVELS)}

REQUEST_NOTIFICATIONS = frozenset({"notifications/progress", "notifications/message"})
"""The notifications a request's answer stream may carry before its answer."""


def log_level_passes(level: Any, threshold: str | None) -> bool:
    """Whether a log message at `level` goes to a request that asked for `threshold` (None: the
    request asked for no log messages, so none pass). An unknown `level` is treated as the most
    severe (never hidden); an unknown `threshold` as `debug`."""
    if threshold is None:
        return False
    rank = _SEVERITY.get(level, len(LOG_LEVELS)) if isinstance(level, str) else len(LOG_LEVELS)
    return rank >= _SEVERITY.get(threshold, 0)


def set_level_params(level: str) -> dict[str, Any]:
    """The params of a 2025-11-25 `logging/setLevel` request (inverse: `requested_log_level`)."""
    return {"level": level}


def requested_log_level(params: Mapping[str, Any]) -> str:
    """The level a `logging/setLevel` request asks for; the proxy keeps it for the session and sends it
    upstream as each request's `io.modelcontextprotocol/logLevel` (docs/behaviour.md §5.1). Raises
    `McpError(-32602)` for a level that is not one of `LOG_LEVELS`. Inverse of `set_level_params`."""
    level = params.get("level")
    if not isinstance(level, str) or level not in _SEVERITY:
        raise McpError(INVALID_PARAMS, f"Invalid log level: expected one of {', '.join(LOG_LEVELS)}")
    return level


def request_notification(message: Mapping[str, Any], log_level: str | None) -> dict[str, Any] | None:
    """What a client gets of a notification a backend sent on the stream of one of its requests,
    in either direction: `notifications/progress` unchanged; `notifications/message` unchanged when
    `log_level_passes(params.level, log_level)`; anything else None (list changes and task status
    belong to subscription and GET streams, not to one request's answer)."""
    method = message.get("method")
    if method == "notifications/progress":
        return dict(message)
    if method == "notifications/message":
        params = message.get("params")
        level = params.get("level") if isinstance(params, Mapping) else None
        return dict(message) if log_level_passes(level, log_level) else None
    return None
