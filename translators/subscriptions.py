"""`subscriptions/listen` between the generations (docs/behaviour.md §4.9, §5.9; core 2026-07-28
"subscriptions/listen", SEP-2663 `taskIds`).

A 2026-07-28 client opts in to notification types with a `SubscriptionFilter`; a 2025-11-25 backend
announces list changes and resource updates on its session's GET stream, for whatever its
`initialize` capabilities declare (`listChanged`, `subscribe`). These functions decide what a
subscription gets, and shape every message of its stream: the acknowledgement first, then each
notification stamped with `_meta["io.modelcontextprotocol/subscriptionId"]` (the listen request's
JSON-RPC id). The other way (a v1 session in front of a 2026-07-28 backend), the proxy listens
itself: `listen_filter_v1` is what it asks for, `acknowledged_filter` reads the backend's
acknowledgement (inverse of `acknowledged`) and `from_subscription` unstamps what the session's GET
stream gets (inverse of `for_subscription`). In front of a v2-session backend the v1 session's own
upstream session announces them on its GET stream, as a 2025-11-25 server does:
`own_stream_notification` is what of it the session's GET stream gets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import INVALID_PARAMS, McpError, legacy_code_renumbered, may_carry_legacy_code
from .streaming import log_level_passes

SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"

LIST_CHANGED: dict[str, tuple[str, str]] = {
    "toolsListChanged": ("tools", "notifications/tools/list_changed"),
    "promptsListChanged": ("prompts", "notifications/prompts/list_changed"),
    "resourcesListChanged": ("resources", "notifications/resources/list_changed"),
}
"""Filter flag → (the capability whose `listChanged` carries it, the notification)."""
_FLAG_OF = {method: flag for flag, (_, method) in LIST_CHANGED.items()}
CARRIED: frozenset[str] = frozenset([*_FLAG_OF, "notifications/resources/updated"])
"""The notifications a subscription filter can carry (list changes, resource updates)."""


def offered_filter(capabilities: Mapping[str, Any], *, offers_tool_tasks: bool) -> dict[str, Any]:
    """What the proxy can deliver from a backend with these 2025-11-25 `initialize` capabilities:
    each list flag whose capability declares `listChanged: true`, `resourceSubscriptions` when
    `resources.subscribe` is true, `taskIds` when the backend runs tool tasks (the value `[]`
    means "any": it is a marker, narrowed against the request)."""
    offered: dict[str, Any] = {}
    for flag, (capability, _) in LIST_CHANGED.items():
        value = capabilities.get(capability)
        if isinstance(value, Mapping) and value.get("listChanged") is True:
            offered[flag] = True
    resources = capabilities.get("resources")
    if isinstance(resources, Mapping) and resources.get("subscribe") is True:
        offered["resourceSubscriptions"] = []
    if offers_tool_tasks:
        offered["taskIds"] = []
    return offered


def narrow_filter(requested: Any, offered: Mapping[str, Any]) -> dict[str, Any]:
    """The acknowledged filter: the requested types the backend offers (flags only when requested
    `true`; URI and task-id lists kept as requested, strings only, duplicates dropped in order)."""
    if not isinstance(requested, Mapping):
        return {}
    agreed: dict[str, Any] = {}
    for flag in LIST_CHANGED:
        if requested.get(flag) is True and offered.get(flag) is True:
            agreed[flag] = True
    for key in ("resourceSubscriptions", "taskIds"):
        values = requested.get(key)
        if key in offered and isinstance(values, list):
            agreed[key] = list(dict.fromkeys(v for v in values if isinstance(v, str)))
    return agreed


def _stamped(meta_id: Any, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    out = {key: value for key, value in (params or {}).items() if key != "_meta"}
    meta = dict(params.get("_meta") or {}) if isinstance(params, Mapping) and isinstance(params.get("_meta"), Mapping) else {}
    meta[SUBSCRIPTION_ID] = meta_id
    out["_meta"] = meta
    return out


def acknowledged(subscription_id: Any, agreed: Mapping[str, Any]) -> dict[str, Any]:
    """`notifications/subscriptions/acknowledged`, the first message of the listen stream."""
    return {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {SUBSCRIPTION_ID: subscription_id}, "notifications": dict(agreed)},
    }


def for_subscription(message: Mapping[str, Any], subscription_id: Any, agreed: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a subscription gets of a notification from the backend's GET stream: a list change the
    filter agreed to, or `notifications/resources/updated` for a subscribed URI, stamped with the
    subscription id; None for anything else (task status goes by `tasks_notification`)."""
    method = message.get("method")
    params = message.get("params") if isinstance(message.get("params"), Mapping) else None
    if not _agreed(method, params, agreed):
        return None
    return {"jsonrpc": "2.0", "method": method, "params": _stamped(subscription_id, params)}


def _agreed(method: Any, params: Mapping[str, Any] | None, agreed: Mapping[str, Any]) -> bool:
    """Whether a notification is one a subscription with filter `agreed` carries: a list change it
    agreed to, or `notifications/resources/updated` for one of its `resourceSubscriptions`."""
    flag = _FLAG_OF.get(method) if isinstance(method, str) else None
    if flag is not None:
        return agreed.get(flag) is True
    return (
        method == "notifications/resources/updated"
        and params is not None
        and params.get("uri") in (agreed.get("resourceSubscriptions") or ())
    )


def tasks_notification(subscription_id: Any, detailed_task: Mapping[str, Any]) -> dict[str, Any]:
    """`notifications/tasks` for an acknowledged task id: `detailed_task` is what `tasks/get` answers
    then (a `DetailedTask`; its `resultType` and `_meta` are not part of the notification)."""
    params = {key: value for key, value in detailed_task.items() if key not in ("resultType", "_meta")}
    return {"jsonrpc": "2.0", "method": TASK_STATUS, "params": _stamped(subscription_id, params)}


TASK_STATUS = "notifications/tasks"
"""A task's status on a `subscriptions/listen` stream (SEP-2663 TaskStatusNotification)."""
TASK_STATUS_V1 = "notifications/tasks/status"
"""v1's name for it (core 2025-11-25), which servers on the C# SDK send for the extension's too."""
TASK_STATUS_NAMES = frozenset({TASK_STATUS, TASK_STATUS_V1})
"""The methods a v2 backend's task status notification comes under: the proxy accepts both."""


def task_status_named_v2(message: dict[str, Any]) -> dict[str, Any]:
    """A message of a v2 backend with its task status notification under the extension's name:
    `notifications/tasks/status` (what servers on the C# SDK send) becomes `notifications/tasks`,
    params unchanged; any other message is `message` itself. (No inverse: on a v2 wire the v1 name
    is only ever a misnaming of this one.)"""
    if message.get("method") != TASK_STATUS_V1:
        return message
    return {**message, "method": TASK_STATUS}


def may_need_v2_repair(raw: bytes) -> bool:
    """Whether a v2 backend's serialized message(s) in `raw` may need `v2_repaired` (bytes searches,
    no parsing): they hold the legacy code's bytes, or both `notifications` and `status`, as the v1
    name of the task status notification does however its slashes are escaped."""
    return may_carry_legacy_code(raw) or (raw.find(b"notifications") >= 0 and raw.find(b"status") >= 0)


def v2_repaired(message: dict[str, Any]) -> dict[str, Any]:
    """A v2 backend's message as the extension has it: the draft-era code renumbered
    (`errors.legacy_code_renumbered`) and a task status notification under its v2 name
    (`task_status_named_v2`); `message` itself when neither applies. (No inverse: both repair a
    misnaming that no v2 client expects back.)"""
    return task_status_named_v2(legacy_code_renumbered(message))


def listen_ended(subscription_id: Any) -> dict[str, Any]:
    """The `subscriptions/listen` result sent when the proxy ends a subscription gracefully."""
    return {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: subscription_id}}


def advertised(capabilities: Mapping[str, Any], shown: dict[str, Any]) -> dict[str, Any]:
    """`shown` (capabilities as v2 shows them) with `listChanged` and `subscribe` put back where the
    backend declares them: the proxy delivers them through `subscriptions/listen`."""
    out = dict(shown)
    for name in ("tools", "prompts", "resources"):
        declared = capabilities.get(name)
        if not isinstance(declared, Mapping) or not isinstance(out.get(name), Mapping):
            continue
        keys = ("listChanged", "subscribe") if name == "resources" else ("listChanged",)
        extra = {key: True for key in keys if declared.get(key) is True}
        if extra:
            out[name] = {**out[name], **extra}
    return out


def listen_filter_v1(capabilities: Mapping[str, Any], resource_uris: Any) -> dict[str, Any]:
    """The `SubscriptionFilter` the proxy asks a 2026-07-28 backend with these capabilities for, on
    behalf of a v1 session holding its GET stream (docs/behaviour.md §5.9): each list flag whose
    capability declares `listChanged: true`, and `resourceSubscriptions` = the session's subscribed
    URIs (strings, duplicates dropped, in order) when `resources.subscribe` is true and it has any.
    `{}`: nothing to listen for."""
    offered = offered_filter(capabilities, offers_tool_tasks=False)
    wanted: dict[str, Any] = {flag: True for flag in LIST_CHANGED if offered.get(flag) is True}
    uris = list(dict.fromkeys(uri for uri in resource_uris if isinstance(uri, str))) if isinstance(resource_uris, list) else []
    if "resourceSubscriptions" in offered and uris:
        wanted["resourceSubscriptions"] = uris
    return wanted


def listen_params(notifications: Mapping[str, Any]) -> dict[str, Any]:
    """The params of a `subscriptions/listen` request for this filter (inverse: `requested_filter`)."""
    return {"notifications": dict(notifications)}


def requested_filter(params: Mapping[str, Any]) -> dict[str, Any]:
    """The filter a `subscriptions/listen` request asks for (`{}` when it has none; inverse of `listen_params`)."""
    requested = params.get("notifications")
    return dict(requested) if isinstance(requested, Mapping) else {}


def acknowledged_filter(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """The filter a backend's `notifications/subscriptions/acknowledged` agreed to (`{}` when it
    names none); None for any other message. Inverse of `acknowledged`."""
    if message.get("method") != "notifications/subscriptions/acknowledged":
        return None
    params = message.get("params")
    agreed = params.get("notifications") if isinstance(params, Mapping) else None
    return dict(agreed) if isinstance(agreed, Mapping) else {}


def _unstamped(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if params is None:
        return None
    out = {key: value for key, value in params.items() if key != "_meta"}
    meta = params.get("_meta")
    rest = {key: value for key, value in meta.items() if key != SUBSCRIPTION_ID} if isinstance(meta, Mapping) else {}
    if rest:
        out["_meta"] = rest
    return out


def from_subscription(message: Mapping[str, Any], agreed: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a v1 session's GET stream gets of a notification from a 2026-07-28 backend's
    `subscriptions/listen` stream (docs/behaviour.md §5.9; inverse of `for_subscription`): a list
    change `agreed` asked for, or `notifications/resources/updated` for a URI in its
    `resourceSubscriptions`, without the subscription-id stamp (an `_meta` left empty goes, and
    `params` with it when nothing else is left); None for the acknowledgement, `notifications/tasks`
    and anything else. A v1 backend's GET-stream notification (never stamped) comes out the same way
    for a v2-session client's GET stream (§3)."""
    method = message.get("method")
    params = message.get("params") if isinstance(message.get("params"), Mapping) else None
    if not _agreed(method, params, agreed):
        return None
    out: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    rest = _unstamped(params)
    if rest:
        out["params"] = rest
    return out


def own_stream_notification(
    message: Mapping[str, Any], agreed: Mapping[str, Any], log_level: str | None
) -> dict[str, Any] | None:
    """What a v1 session's GET stream gets of a notification on the GET stream of its own upstream
    session of a v2-session backend (docs/behaviour.md §5.9): a list change `agreed` covers, or
    `notifications/resources/updated` for a URI in its `resourceSubscriptions` (`agreed` is
    `listen_filter_v1` of the backend's capabilities and the session's URIs), and a
    `notifications/message` at or above `log_level` (`streaming.log_level_passes`: none before the
    session set a level), each unchanged (the session wire has no stamp to take off); None for
    anything else (task status, progress, a server's own notifications)."""
    method = message.get("method")
    params = message.get("params") if isinstance(message.get("params"), Mapping) else None
    if method == "notifications/message":
        passes = params is not None and log_level_passes(params.get("level"), log_level)
    else:
        passes = _agreed(method, params, agreed)
    return dict(message) if passes else None


MAX_SUBSCRIPTIONS = 100
"""Resource subscriptions one session may hold (`resources/subscribe` beyond: -32602)."""
MAX_URI_CHARS = 8192
"""Longest `params.uri` a session may subscribe to, in characters (docs/decisions.md §65)."""


def subscriptions_after(held: Any, method: str, params: Mapping[str, Any]) -> list[str]:
    """A session's subscribed URIs (`held`, a list or None) after `resources/subscribe` (appended;
    at most `MAX_SUBSCRIPTIONS`, each at most `MAX_URI_CHARS` characters) or
    `resources/unsubscribe` (removed) of `params.uri` (docs/behaviour.md §5.9). Raises
    `McpError(-32602)` for a missing or non-string URI, a longer one, or one too many."""
    uri = params.get("uri")
    if not isinstance(uri, str):
        raise McpError(INVALID_PARAMS, f"{method} needs params.uri (a string)")
    uris = [kept for kept in held or () if kept != uri]
    if method == "resources/subscribe":
        if len(uri) > MAX_URI_CHARS:
            raise McpError(INVALID_PARAMS, f"resources/subscribe: params.uri is longer than {MAX_URI_CHARS} characters")
        if len(uris) >= MAX_SUBSCRIPTIONS:
            raise McpError(INVALID_PARAMS, f"At most {MAX_SUBSCRIPTIONS} resource subscriptions per session")
        uris.append(uri)
    return uris
