"""A small v2-modern MCP client on plain aiohttp, for the demo and end-to-end tests.

It speaks the stateless 2026-07-28 wire with the tasks extension (SEP-2663,
``io.modelcontextprotocol/tasks``) and hides nothing: every call returns an :class:`Exchange` holding
the exact request body and headers sent, the HTTP status, the response headers of interest and the
response body. No MCP SDK is used, and on purpose none of the proxy's own modules either (the
``translators`` constants are re-spelled here), so a mistake in the proxy cannot hide behind a
shared definition.

What every request carries (``docs/wire.md`` §3.1, §4.1, §4.3)::

    POST <url>
    Content-Type: application/json
    Accept: application/json, text/event-stream
    MCP-Protocol-Version: 2026-07-28
    Mcp-Method: <method>
    Mcp-Name: <params.name | params.uri | params.taskId>     (only for the methods that have one)
    Authorization: <authorization>                           (only when given)

    {"jsonrpc": "2.0", "id": <n>, "method": <method>, "params": {...,
      "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {...capabilities,
                    "extensions": {"io.modelcontextprotocol/tasks": {}}},   (when declare_tasks)
                "io.modelcontextprotocol/clientInfo": {"name": ..., "version": ...}}}}

Usage::

    async with ModernClient("http://127.0.0.1:8080/mcp") as client:
        created = await client.request("tools/call", {"name": "slow_compute", "arguments": {...}})
        if created.result_type == "task":
            polls = await client.poll(created.result["taskId"])
            print(polls[-1].result["status"])
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .wire_client import H_PROTOCOL_VERSION, TERMINAL_STATUSES, BaseExchange, HttpClient, json_or_none

__all__ = [
    "CLIENT_INFO",
    "Exchange",
    "ModernClient",
    "PROTOCOL_VERSION",
    "TASKS_EXTENSION",
    "TERMINAL_STATUSES",
    "encode_header_value",
]

PROTOCOL_VERSION = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
CLIENT_INFO: dict[str, str] = {"name": "mcp-tasks-proxy-demo-client", "version": "0.1.0"}

H_METHOD = "Mcp-Method"
H_NAME = "Mcp-Name"
#: Response headers an :class:`Exchange` keeps (looked up case-insensitively).
HEADERS_OF_INTEREST: tuple[str, ...] = (H_NAME, "Content-Type")

_SENTINEL_PREFIX = "=?base64?"
_SENTINEL_SUFFIX = "?="


def encode_header_value(value: str) -> str:
    """``value`` as an ``Mcp-Name`` header value (``docs/wire.md`` §3.10).

    Plain header-safe ASCII (visible 0x21–0x7E, space and tab, no leading or trailing whitespace)
    is sent as is; anything else, and a plain value that itself looks like the sentinel, becomes
    ``=?base64?<Base64 of the UTF-8 bytes>?=``.
    """
    safe = (
        all(0x21 <= ord(ch) <= 0x7E or ch in " \t" for ch in value)
        and value == value.strip(" \t")
        and not (value.startswith(_SENTINEL_PREFIX) and value.endswith(_SENTINEL_SUFFIX))
    )
    if safe:
        return value
    return _SENTINEL_PREFIX + base64.b64encode(value.encode("utf-8")).decode("ascii") + _SENTINEL_SUFFIX


def _name_param(method: str, params: Mapping[str, Any]) -> Any:
    """The body value that ``Mcp-Name`` mirrors for ``method``, or ``None`` if it has none."""
    if method in ("tools/call", "prompts/get"):
        return params.get("name")
    if method == "resources/read":
        return params.get("uri")
    if method.startswith("tasks/"):
        return params.get("taskId")
    return None


@dataclass
class Exchange(BaseExchange):
    """One request and its answer, exactly as they crossed the wire.

    Attributes:
        method: the JSON-RPC method.
        request: the JSON body sent, ``{"jsonrpc", "id", "method", "params": {..., "_meta": {...}}}``.
        request_headers: the MCP headers sent (``MCP-Protocol-Version``, ``Mcp-Method``,
            ``Mcp-Name`` when present; ``Authorization`` is never recorded).
        status: the HTTP status.
        headers: the response headers of interest, ``{"Mcp-Name": ..., "Content-Type": ...}``, each
            only when the response had it.
        response: the JSON-RPC response object (``{"jsonrpc", "id", "result"}`` or ``{..., "error"}``);
            for an SSE answer, the response message of the stream. ``None`` when the body was not
            JSON (see ``body``).
        body: the raw response body text.
        elapsed_s: wall time of the HTTP round trip.

    ``result``, ``error`` and ``error_code`` read the JSON-RPC response (``None`` when it has none).
    """

    @property
    def result_type(self) -> str | None:
        """``result.resultType`` (``"complete"``, ``"task"``, ``"input_required"``), or ``None``."""
        result = self.result
        return result.get("resultType") if result else None

    @property
    def task_status(self) -> str | None:
        """``result.status`` of a task answer (``CreateTaskResult`` or ``tasks/get``), or ``None``."""
        result = self.result
        return result.get("status") if result else None


class ModernClient(HttpClient):
    """A v2-modern client for one MCP endpoint.

    Args:
        url: the endpoint, e.g. ``http://127.0.0.1:8080/mcp``.
        declare_tasks: declare ``extensions["io.modelcontextprotocol/tasks"] = {}`` in
            ``clientCapabilities`` on every request.
        capabilities: the other client capabilities declared on every request, e.g.
            ``{"elicitation": {"form": {}}}``; ``None`` means ``{}`` (no optional capabilities).
        authorization: an ``Authorization`` header value sent on every request (the proxy derives
            the caller's principal from it).
        client_info: ``{"name", "version"}`` sent as ``clientInfo`` (default :data:`CLIENT_INFO`).
        timeout_s: upper bound for one HTTP round trip.

    Use it as an async context manager, or call :meth:`close` when done.
    """

    def __init__(
        self,
        url: str,
        *,
        declare_tasks: bool = True,
        capabilities: Mapping[str, Any] | None = None,
        authorization: str | None = None,
        client_info: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        super().__init__(url, capabilities, authorization, client_info or CLIENT_INFO, timeout_s)
        self.declare_tasks = declare_tasks

    async def __aenter__(self) -> ModernClient:
        self._session()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the underlying HTTP session (idempotent)."""
        if self._http is not None:
            await self._http.close()
            self._http = None

    def client_capabilities(self) -> dict[str, Any]:
        """The ``clientCapabilities`` object sent: ``capabilities`` plus the extension when declared."""
        caps = json.loads(json.dumps(self.capabilities))
        if self.declare_tasks:
            caps.setdefault("extensions", {})[TASKS_EXTENSION] = {}
        return caps

    def envelope(self) -> dict[str, Any]:
        """The ``params._meta`` keys of the 2026-07-28 envelope (protocolVersion, clientCapabilities, clientInfo)."""
        return {
            META_PROTOCOL_VERSION: PROTOCOL_VERSION,
            META_CLIENT_CAPABILITIES: self.client_capabilities(),
            META_CLIENT_INFO: dict(self.client_info),
        }

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        headers: Mapping[str, str | None] | None = None,
    ) -> Exchange:
        """POST one JSON-RPC request and return the :class:`Exchange`.

        ``params`` get the envelope merged into their ``_meta`` (other ``_meta`` keys, such as
        ``progressToken``, are kept). ``headers`` are added after the MCP headers; a ``None`` value
        removes a header (e.g. ``{"Mcp-Name": None}`` to omit it).

        Never raises for an HTTP or JSON-RPC error: those are in the exchange. Raises
        ``aiohttp.ClientError`` / ``asyncio.TimeoutError`` when the endpoint cannot be reached.
        """
        body_params: dict[str, Any] = json.loads(json.dumps(dict(params or {})))
        meta = body_params.get("_meta")
        body_params["_meta"] = {**(meta if isinstance(meta, dict) else {}), **self.envelope()}
        message = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": body_params}

        sent: dict[str, str] = {H_PROTOCOL_VERSION: PROTOCOL_VERSION, H_METHOD: method}
        name = _name_param(method, body_params)
        if isinstance(name, str):
            sent[H_NAME] = encode_header_value(name)
        for key, value in (headers or {}).items():
            for existing in [k for k in sent if k.lower() == key.lower()]:
                del sent[existing]
            if value is not None:
                sent[key] = value

        started = time.monotonic()
        async with self._session().post(self.url, data=json.dumps(message), headers=self._wire_headers(sent)) as resp:
            text = await resp.text(encoding="utf-8", errors="replace")
            content_type = resp.headers.get("Content-Type", "")
            kept = {h: resp.headers[h] for h in HEADERS_OF_INTEREST if h in resp.headers}
            status = resp.status
        elapsed = time.monotonic() - started
        if content_type.split(";")[0].strip().lower() == "text/event-stream":
            response = _sse_response(text, message["id"])
        else:
            response = json_or_none(text)
        return Exchange(method, message, sent, status, kept, response, text, elapsed)

    async def poll(
        self,
        task_id: str,
        *,
        until: Collection[str] = TERMINAL_STATUSES,
        timeout_s: float = 30.0,
        max_interval_s: float = 0.5,
        min_interval_s: float = 0.05,
        default_interval_s: float = 0.2,
    ) -> list[Exchange]:
        """Call ``tasks/get`` until the task's status is in ``until`` (default: terminal).

        Between calls it sleeps the answer's ``pollIntervalMs`` (``default_interval_s`` when
        absent), clamped to ``[min_interval_s, max_interval_s]``. It also stops at the first answer
        that is not a task (an error, a non-JSON body).

        Returns:
            Every ``tasks/get`` exchange in order; the last one is the one that ended the loop.

        Raises:
            TimeoutError: the status did not reach ``until`` within ``timeout_s``; the exchanges so
                far are in the exception's ``exchanges`` attribute.
        """
        wanted = set(until)
        deadline = time.monotonic() + timeout_s
        exchanges: list[Exchange] = []
        while True:
            exchange = await self.request("tasks/get", {"taskId": task_id})
            exchanges.append(exchange)
            status = exchange.task_status
            if status is None or status in wanted:
                return exchanges
            interval_ms = exchange.result.get("pollIntervalMs") if exchange.result else None
            interval = interval_ms / 1000 if isinstance(interval_ms, (int, float)) and interval_ms > 0 else default_interval_s
            interval = min(max(interval, min_interval_s), max_interval_s)
            if time.monotonic() + interval > deadline:
                error = TimeoutError(
                    f"task {task_id} still {status!r} after {timeout_s:g} s (waiting for {sorted(wanted)})"
                )
                error.exchanges = exchanges  # type: ignore[attr-defined]
                raise error
            await asyncio.sleep(interval)


def _sse_response(text: str, request_id: Any) -> dict[str, Any] | None:
    """The JSON-RPC response to ``request_id`` in an SSE body (notifications before it are skipped)."""
    data: list[str] = []
    found: dict[str, Any] | None = None

    def flush() -> None:
        nonlocal found
        payload = "\n".join(data).strip()
        data.clear()
        message = json_or_none(payload) if payload else None
        if message is not None and message.get("id") == request_id and ("result" in message or "error" in message):
            found = message

    for raw in text.splitlines():
        if raw == "":
            flush()
        elif not raw.startswith(":"):
            key, _, value = raw.partition(":")
            if key == "data":
                data.append(value[1:] if value.startswith(" ") else value)
    flush()
    return found
