"""Shadow comparison (docs/behaviour.md §8 "Shadow"): which requests a candidate backend is asked
too, the canonical form of an answer, and the comparison of two canonical answers.

A candidate backend (`shadow_of` on its `[[upstream]]`) is asked what its primary was asked, and the
two answers are compared once both are put into one canonical form, so that the dialects' own
differences (v1 or v2 task shapes, `ttl`/`ttlMs`, `resultType`, `_meta`, ids, the order of listed
items) never count as a difference. Everything here is pure: dicts in, dicts out.

Canonical form of an outcome (the answer, a task followed to its end):

    {"result": <canonical result>}     a result (a completed task's result too)
    {"error": {"code": int}}           a JSON-RPC error, or a task that ended failed
    {"cancelled": true}                a task that ended cancelled
    {"asks": [method, ...]}            a request for input from the user (sorted methods), never answered

The message of an error is left out: SDKs word the same refusal differently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from .differences import task_from_get_result_v2
from .protocol import TERMINAL_STATUSES

LISTINGS: Final = frozenset({"tools/list", "resources/list", "prompts/list", "resources/templates/list"})
"""The listings a candidate is asked too (their first page only: a cursor is the primary's own)."""
MIRRORED: Final = LISTINGS | {"resources/read", "prompts/get", "tools/call"}
"""Every method a candidate may ever be asked; `tools/call` only for tools `mirrored_tool` allows."""

LIST_KEYS: Final = {
    "tools/list": ("tools", "name"),
    "resources/list": ("resources", "uri"),
    "prompts/list": ("prompts", "name"),
    "resources/templates/list": ("resourceTemplates", "uriTemplate"),
}
"""Each listing's list and the key its items are sorted by (the spec gives their order no meaning)."""
DROPPED_KEYS: Final = frozenset({"_meta", "resultType", "nextCursor", "ttl", "ttlMs", "pollInterval", "pollIntervalMs"})
"""Keys removed at any depth: envelope, discriminator, paging and task-retention fields of either dialect."""
UNORDERED_LISTS: Final = frozenset({"required"})
"""Lists of strings whose order means nothing (JSON Schema `required` is a set)."""


def mirrorable(method: str, params: Mapping[str, Any]) -> bool:
    """Whether a request of `method` with `params` may be mirrored at all: one of `MIRRORED`, and,
    for a listing, its first page (no `cursor`)."""
    if method not in MIRRORED:
        return False
    return not (method in LISTINGS and params.get("cursor") is not None)


def tool_name(method: str, params: Mapping[str, Any]) -> str | None:
    """The tool a `tools/call` names (None for other methods, or a call without a string name)."""
    if method != "tools/call":
        return None
    name = params.get("name")
    return name if isinstance(name, str) else None


def read_only_tools(tools_list_result: Mapping[str, Any]) -> frozenset[str]:
    """The names of the tools a `tools/list` result annotates `readOnlyHint: true` (either dialect)."""
    names = set()
    for tool in tools_list_result.get("tools") or ():
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        annotations = tool.get("annotations")
        if isinstance(annotations, dict) and annotations.get("readOnlyHint") is True:
            names.add(tool["name"])
    return frozenset(names)


def listed_tools(tools_list_result: Mapping[str, Any]) -> frozenset[str]:
    """The names of every tool a `tools/list` result lists."""
    return frozenset(
        t["name"] for t in tools_list_result.get("tools") or () if isinstance(t, dict) and isinstance(t.get("name"), str)
    )


def mirrored_tool(name: str | None, read_only: frozenset[str], listed: Iterable[str]) -> bool:
    """Whether a `tools/call` of `name` may go to a candidate: the primary annotates it read-only
    (`read_only`), or the operator listed it (`shadow_tools`, `listed`). Nothing else, ever."""
    return name is not None and (name in read_only or name in listed)


def mirror_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The params a candidate is asked with (its own envelope is added by the connector): the
    client's, without its envelope (`_meta`) and a v1 task augmentation (`task`)."""
    return {k: v for k, v in params.items() if k not in ("_meta", "task")}


def result_kind(result: Mapping[str, Any]) -> str:
    """ "task" for a created task (v2 `resultType: "task"`, or a v1 `{"task": {...}}`), "input" for
    a request for input (`resultType: "input_required"`), else "final"."""
    if result.get("resultType") == "task" or (isinstance(result.get("task"), dict) and "taskId" in result["task"]):
        return "task"
    if result.get("resultType") == "input_required":
        return "input"
    return "final"


def created_task_id(result: Mapping[str, Any]) -> str | None:
    """The task id of a created task (v2 flat, v1 nested), None when there is none."""
    task = result.get("task") if isinstance(result.get("task"), dict) else result
    value = task.get("taskId") if isinstance(task, Mapping) else None
    return value if isinstance(value, str) else None


def _scrubbed(value: Any, key: str | None = None) -> Any:
    if isinstance(value, dict):
        return {k: _scrubbed(v, k) for k, v in value.items() if k not in DROPPED_KEYS}
    if isinstance(value, list):
        items = [_scrubbed(v) for v in value]
        if key in UNORDERED_LISTS and all(isinstance(v, str) for v in items):
            return sorted(items)
        return items
    return value


def _sort_key(item: Any, field: str) -> str:
    if isinstance(item, dict) and isinstance(item.get(field), str):
        return "0" + str(item[field])
    return "1" + json.dumps(item, sort_keys=True)


def canonical_result(method: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """A result without what differs between dialects and SDKs alone: `DROPPED_KEYS` at any depth,
    a tool's `execution` (v1 task support), listed items sorted by their key (`LIST_KEYS`), a
    `CallToolResult`'s `isError` always present (absent means false) and an empty
    `structuredContent` absent."""
    out: dict[str, Any] = _scrubbed(dict(result))
    listing = LIST_KEYS.get(method)
    if listing is not None and isinstance(out.get(listing[0]), list):
        items = out[listing[0]]
        if method == "tools/list":
            items = [{k: v for k, v in t.items() if k != "execution"} if isinstance(t, dict) else t for t in items]
        out[listing[0]] = sorted(items, key=lambda item: _sort_key(item, listing[1]))
    if method == "tools/call":
        out["isError"] = out.get("isError") is True
        if out.get("structuredContent") in ({}, None):
            out.pop("structuredContent", None)
    return out


def canonical_error(error: Mapping[str, Any]) -> dict[str, Any]:
    """`{"error": {"code": int}}` of a JSON-RPC error object (code -32603 when it has none)."""
    code = error.get("code")
    return {"error": {"code": code if isinstance(code, int) else -32603}}


def canonical_asks(input_requests: Mapping[str, Any]) -> dict[str, Any]:
    """`{"asks": [...]}`: the sorted methods of the input requests (`{key: {method, params}}`)."""
    methods = sorted(req.get("method", "") for req in input_requests.values() if isinstance(req, dict))
    return {"asks": [m for m in methods if isinstance(m, str)]}


def canonical_answer(method: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical outcome of a result that is not a created task: a request for input
    (`canonical_asks`), or `{"result": canonical_result(...)}`."""
    if result_kind(result) == "input":
        requests = result.get("inputRequests")
        return canonical_asks(requests if isinstance(requests, dict) else {})
    return {"result": canonical_result(method, result)}


def task_ended(get_result: Mapping[str, Any]) -> bool:
    """Whether a v2 `GetTaskResult` shows the task terminal or asking for input (where a shadow
    stops following it: a candidate's question is never put to anyone)."""
    status = get_result.get("status")
    return status in TERMINAL_STATUSES or status == "input_required"


def canonical_task_end(method: str, get_result: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical outcome of a task from its last v2 `GetTaskResult` (`task_ended` true).
    Raises `McpError(-32603)` for a malformed task."""
    task = task_from_get_result_v2(dict(get_result))
    if task.status == "completed":
        return {"result": canonical_result(method, task.result or {})}
    if task.status == "failed":
        return canonical_error(task.error.to_wire() if task.error is not None else {})
    if task.status == "cancelled":
        return {"cancelled": True}
    return canonical_asks({key: req.to_wire() for key, req in task.input_requests.items()})


# --- ignored paths and the comparison --------------------------------------------------------------


ABSENT: Final = "(absent)"
"""How `differences` shows a key one side does not have."""


def parse_path(path: str) -> tuple[str, ...]:
    """A `shadow_ignore` entry: dot-separated segments from the canonical outcome's top
    (`result.content.*.text`, `result.tools.*.description`, `error.code`); `*` matches any one key
    or list index, a number a list index. Raises `ValueError` naming what is wrong."""
    segments = tuple(path.split("."))
    if not path or any(not s for s in segments):
        raise ValueError(f"{path!r} is not a path: dot-separated keys, '*' for any one key or index (result.content.*.text)")
    if segments[0] not in ("result", "error", "asks", "*"):
        raise ValueError(f"{path!r} must start at the outcome: result., error. or asks. (result.structuredContent.time)")
    return segments


def _ignored(path: tuple[str, ...], patterns: Sequence[tuple[str, ...]]) -> bool:
    return any(len(p) == len(path) and all(s in ("*", q) for s, q in zip(p, path, strict=True)) for p in patterns)


def differences(
    primary: Any, candidate: Any, ignore: Sequence[tuple[str, ...]] = (), *, path: tuple[str, ...] = ()
) -> list[tuple[str, Any, Any]]:
    """Where two canonical outcomes differ: `(dotted path, primary's value, candidate's value)` in
    document order, a missing side as the string `"(absent)"`; paths matching an `ignore` pattern
    (`parse_path`) and everything below them are skipped. Empty: the answers match."""
    if path and _ignored(path, ignore):
        return []
    if isinstance(primary, dict) and isinstance(candidate, dict):
        found: list[tuple[str, Any, Any]] = []
        for key in [*primary, *(k for k in candidate if k not in primary)]:
            here = (*path, str(key))
            if key not in candidate or key not in primary:
                if not _ignored(here, ignore):
                    found.append((".".join(here), primary.get(key, ABSENT), candidate.get(key, ABSENT)))
                continue
            found.extend(differences(primary[key], candidate[key], ignore, path=here))
        return found
    if isinstance(primary, list) and isinstance(candidate, list) and len(primary) == len(candidate):
        return [
            d
            for i, (p, c) in enumerate(zip(primary, candidate, strict=True))
            for d in differences(p, c, ignore, path=(*path, str(i)))
        ]
    if primary == candidate and type(primary) is type(candidate):
        return []
    return [(".".join(path) or "(answer)", primary, candidate)]


DIFF_LINES: Final = 5
VALUE_CHARS: Final = 60


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")) if value is not ABSENT else ABSENT
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def compact_diff(found: Sequence[tuple[str, Any, Any]], lines: int = DIFF_LINES) -> str:
    """The differences as at most `lines` lines `path: primary → candidate` (values as compact
    JSON, each cut at `VALUE_CHARS`), and `(+N more)` for the rest; "" for none."""
    shown = [f"{where}: {_short(p)} → {_short(c)}" for where, p, c in found[:lines]]
    if len(found) > lines:
        shown.append(f"(+{len(found) - lines} more)")
    return "\n".join(shown)
