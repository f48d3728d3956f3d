"""Workarounds for defects of the official SDK ``mcp==1.30.0`` that the reference v1 server needs.

Imported by ``v1_server.py`` (it runs in the ``mcp-v1`` peer environment, never in the proxy's).

* :func:`unique_task_request_ids`: mcp 1.30 builds the JSON-RPC id of a task's server→client
  request as ``f"task-{taskId}-{id(params)}"`` (``ServerSession._build_elicit_form_request`` and
  its siblings). ``id()`` of a short-lived object is reused, so two questions a task asks at the
  same time (``multi_input``'s ``asyncio.gather``) can get the same id; the SDK then keys both
  pending answers by that id and one question is lost. The fix numbers them from a counter.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

from mcp.server.session import ServerSession

_BUILDERS = ("_build_elicit_form_request", "_build_elicit_url_request", "_build_create_message_request")


def unique_task_request_ids() -> None:
    """Patch the three request builders so task-related request ids are unique (idempotent)."""
    counter = itertools.count(1)
    for name in _BUILDERS:
        original = getattr(ServerSession, name)
        if getattr(original, "_unique_ids", False):
            continue

        @functools.wraps(original)
        def build(self: ServerSession, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            request = __original(self, *args, **kwargs)
            if isinstance(request.id, str) and request.id.startswith("task-"):
                request.id = f"{request.id.rsplit('-', 1)[0]}-{next(counter)}"
            return request

        build._unique_ids = True  # type: ignore[attr-defined]
        setattr(ServerSession, name, build)
