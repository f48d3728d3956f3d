"""Fixed strings of both protocol eras and of the tasks extension.

Source: docs/wire.md "Fixed strings"; MCP core 2025-11-25 and 2026-07-28; SEP-2663.
"""

from __future__ import annotations

from typing import Final, Literal

LEGACY_VERSION: Final = "2025-11-25"
"""Core revision carrying v1 tasks (session wire)."""
MODERN_VERSION: Final = "2026-07-28"
"""Core revision of the stateless ("modern") wire."""
SUPPORTED_MODERN_VERSIONS: Final = (MODERN_VERSION,)

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""SEP-2663 extension identifier."""

# _meta keys
META_RELATED_TASK: Final = "io.modelcontextprotocol/related-task"
META_MODEL_IMMEDIATE_RESPONSE: Final = "io.modelcontextprotocol/model-immediate-response"
META_PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"

MODERN_REQUEST_META_KEYS: Final = frozenset({META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL})
"""Request `_meta` keys that belong to the 2026-07-28 envelope, never to the payload."""

# HTTP headers (names are case-insensitive on the wire)
H_PROTOCOL_VERSION: Final = "MCP-Protocol-Version"
H_METHOD: Final = "Mcp-Method"
H_NAME: Final = "Mcp-Name"
H_SESSION_ID: Final = "Mcp-Session-Id"
H_LAST_EVENT_ID: Final = "Last-Event-ID"

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "cancelled"})
TaskSupport = Literal["required", "optional", "forbidden"]

INPUT_REQUEST_METHODS: Final = frozenset({"elicitation/create", "sampling/createMessage", "roots/list"})
"""Server→client request methods that can become `inputRequests` (SEP-2663, tasks/get)."""

CACHEABLE_METHODS: Final = frozenset(
    {
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "server/discover",
    }
)
"""Methods whose 2026-07-28 results are `CacheableResult` (`ttlMs`, `cacheScope`)."""

MRTR_METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
"""Methods that may answer `resultType: "input_required"` (core 2026-07-28, MRTR)."""

REMOVED_MODERN_METHODS: Final = frozenset({"initialize", "ping", "logging/setLevel"})
"""Core methods removed by 2026-07-28; a modern request naming one gets -32601."""

TASK_METHODS_V2: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
REMOVED_TASK_METHODS_V2: Final = frozenset({"tasks/result", "tasks/list"})
