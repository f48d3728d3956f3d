"""Upstream sessions of v2-session backends: SEP-2663 requests carried on the session wire.

The per-request envelope of the modern wire becomes session state: each upstream session is
opened (`initialize`) declaring the caller's input capabilities and, when the caller declared it,
the tasks extension (`session_capabilities`). A v2-modern client's requests go on the principal's
pooled session for those capabilities (`pairings/carriage.py`); a v1 session has one of its own
(`pairings/v1_own_session.py`). Either way a task stays on the session that created it
(v2-session servers bind tasks to sessions, like v1 servers). Requests for input during a call
arrive as server→client requests (the session wire allows them), not as MRTR rounds.
"""

from __future__ import annotations

from typing import Any

from translators.capabilities import with_tasks_extension
from translators.envelope import ModernMeta, upstream_client_capabilities


def session_capabilities(meta: ModernMeta) -> dict[str, Any]:
    """What an upstream v2-session declares in `initialize` for a caller with this envelope."""
    capabilities = upstream_client_capabilities(meta.client_capabilities)
    return with_tasks_extension(capabilities) if meta.declares_tasks else capabilities
