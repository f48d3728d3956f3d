"""Which tasks dialect a client speaks, worked out once per request (docs/behaviour.md §2).

A request of the stateless 2026-07-28 wire (`is_modern`) is a v2-modern client's. A session-wire
client is v2-session when its `initialize` declares the tasks extension, else v1; later requests
of a session carry the dialect the session was opened with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from .envelope import is_modern
from .protocol import TASKS_EXTENSION

ClientDialect = Literal["v2-modern", "v1", "v2-session"]
SessionDialect = Literal["v1", "v2-session"]


def session_dialect(initialize_params: Mapping[str, Any]) -> SessionDialect:
    """The dialect of a session-wire client from its `initialize` params: "v2-session" when
    `capabilities.extensions` names io.modelcontextprotocol/tasks (SEP-2663), else "v1"."""
    capabilities = initialize_params.get("capabilities")
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return "v2-session" if isinstance(extensions, dict) and TASKS_EXTENSION in extensions else "v1"


__all__ = ["ClientDialect", "SessionDialect", "is_modern", "session_dialect"]
