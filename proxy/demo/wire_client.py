"""What the demo's two plain-aiohttp MCP clients share.

:mod:`proxy.demo.client` (the v2-modern wire) and :mod:`proxy.demo.session_client` (the v1 session
wire) both record every call as an exchange and hold one HTTP session with the same request
headers. This module has those parts: :class:`BaseExchange` (what crossed the wire, and its
JSON-RPC ``result``/``error``), :class:`HttpClient` (configuration, the HTTP session, the headers
every POST carries) and :func:`json_or_none`. Like the clients, it uses none of the proxy's own
modules, so a mistake in the proxy cannot hide behind a shared definition.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

#: The ``Accept`` header of a POST: a JSON body or an event stream.
ACCEPT = "application/json, text/event-stream"
H_PROTOCOL_VERSION = "MCP-Protocol-Version"
#: Task statuses after which a task never changes again.
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


@dataclass
class BaseExchange:
    """One request and its answer, exactly as they crossed the wire (the fields both clients
    record; each client's ``Exchange`` documents them for its wire)."""

    method: str
    request: dict[str, Any]
    request_headers: dict[str, str]
    status: int
    headers: dict[str, str]
    response: dict[str, Any] | None
    body: str = ""
    elapsed_s: float = 0.0

    @property
    def result(self) -> dict[str, Any] | None:
        """The JSON-RPC ``result`` object, or ``None`` for an error or no JSON-RPC response."""
        if isinstance(self.response, dict) and isinstance(self.response.get("result"), dict):
            return self.response["result"]
        return None

    @property
    def error(self) -> dict[str, Any] | None:
        """The JSON-RPC ``error`` object ``{code, message, data?}``, or ``None``."""
        if isinstance(self.response, dict) and isinstance(self.response.get("error"), dict):
            return self.response["error"]
        return None

    @property
    def error_code(self) -> int | None:
        """``error.code``, or ``None`` when the answer is not a JSON-RPC error."""
        error = self.error
        return error.get("code") if error else None


class HttpClient:
    """A client of one MCP endpoint over one ``aiohttp`` session (created on first use).

    Args:
        url: the endpoint, e.g. ``http://127.0.0.1:8080/mcp``.
        capabilities: the client capabilities to declare (copied; ``None`` means ``{}``).
        authorization: an ``Authorization`` header value sent on every request.
        client_info: ``{"name", "version"}`` (copied).
        timeout_s: upper bound for one request.
    """

    def __init__(
        self,
        url: str,
        capabilities: Mapping[str, Any] | None,
        authorization: str | None,
        client_info: Mapping[str, str],
        timeout_s: float,
    ) -> None:
        self.url = url
        self.capabilities: dict[str, Any] = json.loads(json.dumps(dict(capabilities or {})))
        self.authorization = authorization
        self.client_info = dict(client_info)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._ids = itertools.count(1)
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=self._timeout)
        return self._http

    def _wire_headers(self, sent: Mapping[str, str], accept: str = ACCEPT) -> dict[str, str]:
        """The headers of a request: JSON content, ``accept``, the MCP headers ``sent`` and the
        ``Authorization`` when there is one."""
        headers = {"Content-Type": "application/json", "Accept": accept, **sent}
        if self.authorization is not None:
            headers["Authorization"] = self.authorization
        return headers


def json_or_none(text: str) -> dict[str, Any] | None:
    """``text`` parsed as a JSON object, or ``None`` when it is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
