"""The connector of a configured backend, chosen by the transport its URL names.

Today every backend is reached over HTTP (`http`, `https`: `Endpoint`, MCP Streamable HTTP); a
transport without a connector is refused here, once, so that another (e.g. stdio) is one entry
in `CONNECTORS` and one module beside `endpoint.py`.
"""

from __future__ import annotations

from typing import Callable, Final
from urllib.parse import urlsplit

import aiohttp

from ..config import ConfigError, Upstream
from ..metrics import Metrics
from .endpoint import Endpoint

Connector = Callable[..., Endpoint]

CONNECTORS: Final[dict[str, Connector]] = {"http": Endpoint, "https": Endpoint}
"""URL scheme → the connector class that reaches a backend over that transport."""


def connect(config: Upstream, http: aiohttp.ClientSession, *, request_timeout_ms: int, metrics: Metrics | None = None) -> Endpoint:
    """The connector for the backend `config` (its name, URL and extra headers). Raises
    `ConfigError` for a URL whose transport has no connector."""
    scheme = urlsplit(config.url).scheme.lower()
    connector = CONNECTORS.get(scheme)
    if connector is None:
        raise ConfigError(f"upstream {config.name}: no connector for the transport {scheme or '(none)'!r} of {config.url}")
    return connector(config.name, config.url, http, extra_headers=config.headers, request_timeout_ms=request_timeout_ms, metrics=metrics)
