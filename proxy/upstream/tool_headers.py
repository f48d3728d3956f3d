"""The `x-mcp-header` annotations of a v2-modern backend's tools, for the `tools/call` the proxy
translates to it (docs/behaviour.md §6 "Headers upstream"; docs/wire.md §4.3).

A 2026-07-28 server refuses (400, `-32020`) a `tools/call` that lacks the `Mcp-Param-{Name}` header
of an argument its tool marks with `x-mcp-header`. A client of another dialect knows nothing of
them, so the proxy adds them (`translators.param_headers`) from the backend's own `tools/list`:
learnt from each `tools/list` answer it passes on to such a client, and, for a tool not known yet,
read upstream once with that caller's headers (every page; at most once a second per backend).
What was learnt is kept until the backend's next probe (a new profile, every `probe_interval_ms`),
so a changed tool is read again within that time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from translators.envelope import ModernMeta
from translators.errors import McpError
from translators.param_headers import ParamHeader, param_headers, tool_bindings

log = logging.getLogger(__name__)

RELEARN_MIN_INTERVAL_S = 1.0
"""A tool missing from what was learnt is read upstream at most this often (per backend)."""
MAX_PAGES = 100
"""Pages of one `tools/list` followed while learning."""

Ask = Callable[[str, dict[str, Any], ModernMeta, Mapping[str, str]], Awaitable[dict[str, Any]]]
"""One modern request upstream: method, params, envelope, headers → result."""


class ToolHeaders:
    """One backend's tools' annotations. `profile` gives the backend's current profile, whose
    replacement by a probe forgets what was learnt."""

    def __init__(self, profile: Callable[[], object]):
        self._profile = profile
        self._learnt_under: object = None
        self._tools: dict[str, tuple[ParamHeader, ...]] = {}
        self._read_at = -RELEARN_MIN_INTERVAL_S
        self._lock = asyncio.Lock()

    def _current(self) -> dict[str, tuple[ParamHeader, ...]]:
        profile = self._profile()
        if profile is not self._learnt_under:
            self._learnt_under, self._tools = profile, {}
        return self._tools

    def knows(self, name: str) -> bool:
        """Whether a `tools/list` answer learnt since the last probe named the tool `name`."""
        return name in self._current()

    def heard(self, result: Mapping[str, Any]) -> None:
        """A `tools/list` result (one page) of the backend, as the proxy passes it on."""
        self._current().update(tool_bindings(result.get("tools")))

    async def for_call(self, params: Mapping[str, Any], meta: ModernMeta, headers: Mapping[str, str], ask: Ask) -> dict[str, str]:
        """The `Mcp-Param-*` headers of a `tools/call` with `params` (none when it has no arguments)."""
        arguments = params.get("arguments")
        name = params.get("name")
        if not isinstance(arguments, dict) or not arguments or not isinstance(name, str):
            return {}
        known = self._current().get(name)
        if known is None:
            known = await self._learn(name, meta, headers, ask)
        return param_headers(known, arguments) if known else {}

    async def _learn(self, name: str, meta: ModernMeta, headers: Mapping[str, str], ask: Ask) -> tuple[ParamHeader, ...]:
        """Read the backend's whole `tools/list` (with the caller's headers) unless another call just
        did; `name`'s annotations then, none when it is still unknown or the list failed."""
        async with self._lock:
            tools = self._current()
            if name in tools or time.monotonic() - self._read_at < RELEARN_MIN_INTERVAL_S:
                return tools.get(name, ())
            self._read_at = time.monotonic()
            cursor: Any = None
            try:
                for _ in range(MAX_PAGES):
                    result = await ask("tools/list", {"cursor": cursor} if cursor else {}, meta, headers)
                    tools.update(tool_bindings(result.get("tools")))
                    cursor = result.get("nextCursor")
                    if not isinstance(cursor, str) or not cursor:
                        break
            except McpError as exc:
                log.debug("tools/list for the x-mcp-header annotations failed: %s", exc.message)
            return tools.get(name, ())
