"""The connector of a configured backend, chosen by the transport its URL names.

A backend with a URL is reached over HTTP (`http`, `https`: `Endpoint`, MCP Streamable HTTP; with
`transport = "sse"`, the 2024-11-05 HTTP+SSE transport: `http_sse.SseEndpoint`); a backend with a
`command` is a stdio server the proxy runs (`stdio.StdioEndpoint`, an `Endpoint` too). A transport
without a connector is refused here, once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final
from urllib.parse import urlsplit

import aiohttp

from ..config import ConfigError, Upstream
from .endpoint import Endpoint

Connector = Callable[..., Endpoint]

CONNECTORS: Final[dict[str, Connector]] = {"http": Endpoint, "https": Endpoint}
"""URL scheme → the connector class that reaches a backend over that transport."""


def connect(config: Upstream, http: aiohttp.ClientSession, *, request_timeout_ms: int, session_idle_ms: int = 3_600_000) -> Endpoint:
    """The connector for the backend `config` (its name, URL and extra headers); `session_idle_ms`:
    how long a stdio backend's unused session lives (decision 140). Raises `ConfigError` for a URL
    whose transport has no connector."""
    if config.command is not None:
        from .stdio import StdioEndpoint

        return StdioEndpoint(config, http, request_timeout_ms=request_timeout_ms, session_idle_ms=session_idle_ms)
    if config.transport == "sse":
        return connect_sse(config, http, request_timeout_ms=request_timeout_ms, session_idle_ms=session_idle_ms)
    scheme = urlsplit(config.url).scheme.lower()
    connector = CONNECTORS.get(scheme)
    if connector is None:
        raise ConfigError(f"upstream {config.name}: no connector for the transport {scheme or '(none)'!r} of {config.url}")
    return connector(config.name, config.url, http, extra_headers=config.headers, request_timeout_ms=request_timeout_ms)


def connect_sse(config: Upstream, http: aiohttp.ClientSession, *, request_timeout_ms: int, session_idle_ms: int) -> Endpoint:
    """The connector for a backend on the 2024-11-05 HTTP+SSE transport (`transport = "sse"`, or
    found by the probe under `auto`: decision 171)."""
    from .http_sse import SseEndpoint

    return SseEndpoint(config, http, request_timeout_ms=request_timeout_ms, session_idle_ms=session_idle_ms)
