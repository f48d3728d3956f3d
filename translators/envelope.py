"""The 2026-07-28 ("modern") request envelope: `_meta` keys, HTTP header checks, result marks.

Sources: core 2026-07-28 §Transports (headers `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
Base64 sentinel encoding), RequestMetaObject, Result/CacheableResult; SEP-2663 (`Mcp-Name` for
`tasks/*`); docs/behaviour.md §2 rule 1, §4.8, §4.9, §6.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .differences import add_result_type
from .errors import HEADER_MISMATCH, INVALID_PARAMS, McpError, modern_version_supported, unsupported_version
from .protocol import (
    CACHEABLE_METHODS,
    H_METHOD,
    H_NAME,
    H_PROTOCOL_VERSION,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    MODERN_REQUEST_META_KEYS,
    MODERN_VERSION,
    TASKS_EXTENSION,
)
from .streaming import LOG_LEVELS

_SENTINEL_PREFIX = "=?base64?"
_SENTINEL_SUFFIX = "?="


@dataclass(frozen=True, slots=True)
class ModernMeta:
    """The envelope of one modern request (`params._meta`, core 2026-07-28 RequestMetaObject).

    `client_capabilities` is the per-request `ClientCapabilities` object (`{}` = none).
    """

    protocol_version: str
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    client_info: dict[str, Any] | None = None
    log_level: str | None = None

    @property
    def declares_tasks(self) -> bool:
        """Whether this request declared the SEP-2663 tasks extension."""
        extensions = self.client_capabilities.get("extensions")
        return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def is_modern(method: str, params: Mapping[str, Any]) -> bool:
    """docs/behaviour.md §2 rule 1: a modern request has `_meta` protocolVersion or is
    `server/discover` / `subscriptions/listen`."""
    meta = params.get("_meta")
    return (isinstance(meta, dict) and META_PROTOCOL_VERSION in meta) or method in (
        "server/discover",
        "subscriptions/listen",
    )


def read_meta(params: Mapping[str, Any]) -> ModernMeta:
    """Read the envelope of a modern request.

    Raises `McpError(-32602)` (HTTP 400) naming a missing or malformed required key
    (`protocolVersion`, `clientCapabilities`), or a `logLevel` that is not one of the
    `LoggingLevel` values (the session wire's `logging/setLevel` refuses the same).
    """
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        meta = {}
    version = meta.get(META_PROTOCOL_VERSION)
    if not isinstance(version, str):
        raise McpError(INVALID_PARAMS, f"Missing required _meta key {META_PROTOCOL_VERSION!r}")
    capabilities = meta.get(META_CLIENT_CAPABILITIES)
    if not isinstance(capabilities, dict):
        raise McpError(INVALID_PARAMS, f"Missing required _meta key {META_CLIENT_CAPABILITIES!r}")
    info = meta.get(META_CLIENT_INFO)
    level = meta.get(META_LOG_LEVEL)
    if level is not None and level not in LOG_LEVELS:
        raise McpError(INVALID_PARAMS, f"Invalid _meta key {META_LOG_LEVEL!r}: expected one of {', '.join(LOG_LEVELS)}")
    return ModernMeta(
        protocol_version=version,
        client_capabilities=capabilities,
        client_info=info if isinstance(info, dict) else None,
        log_level=level if isinstance(level, str) else None,
    )


def decode_header_value(value: str) -> str:
    """Undo the Base64 sentinel encoding `=?base64?<b64 of UTF-8>?=` of `Mcp-Name`/`Mcp-Param-*`.

    Raises `McpError(-32020)` for a sentinel whose payload is not valid Base64 UTF-8.
    """
    if value.startswith(_SENTINEL_PREFIX) and value.endswith(_SENTINEL_SUFFIX) and len(value) >= 11:
        payload = value[len(_SENTINEL_PREFIX) : -len(_SENTINEL_SUFFIX)]
        try:
            return base64.b64decode(payload, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):  # ValueError covers non-ASCII and bad UTF-8
            raise McpError(HEADER_MISMATCH, f"Malformed Base64 value in {H_NAME} header") from None
    return value


def encode_header_value(value: str) -> str:
    """The header-safe form of `value`: itself when plain visible ASCII (no edge whitespace) and not
    sentinel-shaped, else `=?base64?…?=` (inverse of `decode_header_value`)."""
    # Visible ASCII, space and tab: for ASCII text `isprintable` is exactly 0x20-0x7E (C-level
    # passes, where a loop over the characters cost a relayed call 8,000 to 27,000 instructions).
    plain = value.isascii() and value == value.strip(" \t") and (value.isprintable() or value.replace("\t", "").isprintable())
    looks_encoded = value.startswith(_SENTINEL_PREFIX) and value.endswith(_SENTINEL_SUFFIX)
    if plain and not looks_encoded and value:
        return value
    return _SENTINEL_PREFIX + base64.b64encode(value.encode("utf-8")).decode("ascii") + _SENTINEL_SUFFIX


def name_param(method: str, params: Mapping[str, Any]) -> str | None:
    """The body value `Mcp-Name` must equal: `params.name` (tools/call, prompts/get), `params.uri`
    (resources/read) or `params.taskId` (tasks/*); None for other methods."""
    if method in ("tools/call", "prompts/get"):
        key = "name"
    elif method == "resources/read":
        key = "uri"
    elif method.startswith("tasks/"):
        key = "taskId"
    else:
        return None
    value = params.get(key)
    return value if isinstance(value, str) else None


def check_headers(method: str, params: Mapping[str, Any], meta: ModernMeta, headers: Mapping[str, str]) -> None:
    """Validate a modern request's headers against its body (docs/behaviour.md §2 rule 1, §6).

    `headers` is a case-insensitive mapping. Raises:
    * `-32020` when `MCP-Protocol-Version` is missing or differs from the `_meta` version, when
      `Mcp-Method` differs from the method, or when `Mcp-Name` differs from the body value;
    * `-32022` (with `data.supported`, `data.requested`) for a version other than 2026-07-28.
    Absent `Mcp-Method`/`Mcp-Name` are accepted (real clients omit them).
    """
    header_version = headers.get(H_PROTOCOL_VERSION)
    if header_version is None:
        raise McpError(HEADER_MISMATCH, f"Missing {H_PROTOCOL_VERSION} header")
    if header_version != meta.protocol_version:
        raise McpError(
            HEADER_MISMATCH,
            f"{H_PROTOCOL_VERSION} header {header_version!r} does not match _meta protocolVersion {meta.protocol_version!r}",
        )
    if not modern_version_supported(meta.protocol_version):
        raise unsupported_version(meta.protocol_version)
    header_method = headers.get(H_METHOD)
    if header_method is not None and header_method != method:
        raise McpError(HEADER_MISMATCH, f"{H_METHOD} header does not match the request body's method")
    header_name = headers.get(H_NAME)
    if header_name is not None:
        expected = name_param(method, params)
        if expected is not None and decode_header_value(header_name) != expected:
            raise McpError(HEADER_MISMATCH, f"{H_NAME} header does not match the request body")


def strip_envelope(params: Mapping[str, Any]) -> dict[str, Any]:
    """Params for a session-wire backend: the modern `_meta` protocol keys removed (other `_meta`
    such as `progressToken` kept; an emptied `_meta` dropped). Inverse: `add_envelope`."""
    out = {k: v for k, v in params.items() if k != "_meta"}
    meta = params.get("_meta")
    if isinstance(meta, dict):
        rest = {k: v for k, v in meta.items() if k not in MODERN_REQUEST_META_KEYS}
        if rest:
            out["_meta"] = rest
    return out


def add_envelope(params: Mapping[str, Any], meta: ModernMeta) -> dict[str, Any]:
    """Params for a modern backend: `meta` written into `params._meta` (inverse of `strip_envelope`)."""
    envelope: dict[str, Any] = {
        META_PROTOCOL_VERSION: meta.protocol_version,
        META_CLIENT_CAPABILITIES: meta.client_capabilities,
    }
    if meta.client_info is not None:
        envelope[META_CLIENT_INFO] = meta.client_info
    if meta.log_level is not None:
        envelope[META_LOG_LEVEL] = meta.log_level
    return {**params, "_meta": {**(params.get("_meta") or {}), **envelope}}


def complete_result(method: str, result: Mapping[str, Any], *, cache_ttl_ms: int = 0) -> dict[str, Any]:
    """A session-wire result as the modern face answers it (docs/behaviour.md §4.8): `resultType:
    "complete"`, and for cacheable methods `ttlMs` (milliseconds) and `cacheScope: "private"`."""
    out = add_result_type(dict(result))
    if method in CACHEABLE_METHODS:
        out["ttlMs"] = cache_ttl_ms
        out["cacheScope"] = "private"
    return out


def legacy_result(method: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """A modern result as a 2025-11-25 client gets it (inverse of `complete_result`): without
    `resultType`, and for cacheable methods without `ttlMs`/`cacheScope`; the modern `serverInfo`
    `_meta` key removed."""
    drop = {"resultType", "ttlMs", "cacheScope"} if method in CACHEABLE_METHODS else {"resultType"}
    out = {k: v for k, v in result.items() if k not in drop}
    meta = out.get("_meta")
    if isinstance(meta, dict) and META_SERVER_INFO in meta:
        rest = {k: v for k, v in meta.items() if k != META_SERVER_INFO}
        if rest:
            out["_meta"] = rest
        else:
            del out["_meta"]
    return out


TASK_RESULT_METHODS = frozenset({"tools/call", "tasks/get", "tasks/update", "tasks/cancel"})
"""Methods whose results keep `resultType` on the session wire (SEP-2663 task-related results)."""


def session_v2_result(method: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """A v2 result as a v2-session client gets it: task-related results keep `resultType` (as
    v2-session servers send it); the others lose the modern-only members (`legacy_result`)."""
    return dict(result) if method in TASK_RESULT_METHODS else legacy_result(method, result)


def with_server_info(result: Mapping[str, Any], server_info: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `result` with `_meta["io.modelcontextprotocol/serverInfo"]` set (core 2026-07-28)."""
    meta = dict(result.get("_meta") or {})
    meta[META_SERVER_INFO] = dict(server_info)
    return {**result, "_meta": meta}


def session_meta(
    client_capabilities: Mapping[str, Any], client_info: Mapping[str, Any] | None, log_level: str | None = None
) -> ModernMeta:
    """The modern envelope the proxy sends upstream for a session client (docs/behaviour.md §3,
    §5): the 2026-07-28 version, the client's input capabilities (`upstream_client_capabilities`)
    with the tasks extension, its `clientInfo`, and the level its `logging/setLevel` asked for
    (`io.modelcontextprotocol/logLevel`, §5.1; None: no log messages). `add_envelope` writes it
    into a request, `read_meta` reads it back."""
    capabilities = {**upstream_client_capabilities(client_capabilities), "extensions": {TASKS_EXTENSION: {}}}
    return ModernMeta(MODERN_VERSION, capabilities, dict(client_info) if client_info is not None else None, log_level)


def upstream_client_capabilities(client_capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """The client capabilities that matter to a v1 backend (docs/behaviour.md §4.1): the client's own
    `elicitation`, `sampling` and `roots` objects, nothing else. Used as the upstream session's
    `initialize` capabilities and as part of the session-pool key."""
    out: dict[str, Any] = {}
    for name, members in _INPUT_CAPABILITY_MEMBERS.items():
        declared = client_capabilities.get(name)
        if isinstance(declared, dict):
            # Only the members the protocol defines, so the set of distinct upstream sessions
            # (one per capability set) stays small whatever clients send.
            out[name] = {m: declared[m] for m in members if m in declared and isinstance(declared[m], (dict, bool))}
    return out


_INPUT_CAPABILITY_MEMBERS = {
    "elicitation": ("form", "url"),
    "sampling": ("context", "tools"),
    "roots": ("listChanged",),
}
"""The members of each input capability (core 2025-11-25 / 2026-07-28 `ClientCapabilities`)."""
