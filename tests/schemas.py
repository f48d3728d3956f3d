"""Schema checks of the tests: the MCP project's official zod schemas on every layout, and the MCP
JSON Schemas as an extra check where a checkout has them beside it.

    from schemas import EXT_TASKS, MCP_2025_11_25, MCP_2026_07_28, validate, validate_official
    validate(result, EXT_TASKS, "CreateTaskResult")        # a definition of one MCP schema
    validate_official(result, "GetTaskResultV2Schema")     # one official zod schema, by name

`validate(message, schema, definition)` names a definition of one of three MCP schemas: the
tasks extension (SEP-2663, :data:`EXT_TASKS`), MCP 2025-11-25 (:data:`MCP_2025_11_25`) and MCP
2026-07-28 (:data:`MCP_2026_07_28`). It checks, in this order:

1. the official zod schemas that stand for that definition (:data:`OFFICIAL`): those of npm
   ``@modelcontextprotocol/ext-tasks`` (``/core/v2``, ``/core/v1``) and ``@modelcontextprotocol/core``,
   which the project installs into the cache itself (``proxy/demo/node_packages.py``) and runs with
   ``tests/node/validate.mjs``; some apply to a part of the message (each tool, each input request);
2. the rules of the definition that those zod schemas leave open, written out here (:data:`RULES`;
   e.g. core 2.4.0 shares its result schemas with 2025-11-25, so the 2026-07-28 ``resultType``,
   ``cacheScope`` and ``ttlMs`` are checked by a rule);
3. the JSON Schema file of that MCP schema, in a ``shared/schemas/`` directory beside the checkout
   (or named by ``MCP_TASKS_PROXY_SHARED``). The repository does not carry these files, so a plain
   clone has no such directory: there the step cannot run, and each call says so out loud, a
   :class:`SchemaStepNotRun` warning naming the message's definition, what it was validated against
   and where the file was looked for (pytest lists each in its warnings summary, under the test
   that made the call); steps 1 and 2 still decide. Where the directory is there but lacks the
   file, or the file lacks the definition, the call fails.

`validate` returns what it validated against (one line per check run), so a test can assert it.

Each JSON Schema file is loaded once and registered as a ``referencing`` resource, so the
``#/$defs/...`` refs inside a file resolve within that file.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

EXT_TASKS = "ext-tasks"
"""The tasks extension, SEP-2663 (``io.modelcontextprotocol/tasks``), on the 2026-07-28 wire."""
MCP_2025_11_25 = "mcp-2025-11-25"
"""MCP 2025-11-25, whose core carries the v1 tasks."""
MCP_2026_07_28 = "mcp-2026-07-28"
"""MCP 2026-07-28, the stateless wire."""

SHARED_ENV = "MCP_TASKS_PROXY_SHARED"
"""Environment variable naming a ``shared`` directory whose ``schemas/`` holds the JSON Schemas."""

JSON_SCHEMA_FILES = {
    EXT_TASKS: "ext-tasks-draft.schema.json",
    MCP_2025_11_25: "mcp-2025-11-25.schema.json",
    MCP_2026_07_28: "mcp-2026-07-28.schema.json",
}
"""The JSON Schema file of each MCP schema, inside ``shared/schemas/`` (the extra check)."""

_ANY = "*"
"""In a path: every value of an object, every item of a list."""


@dataclass(frozen=True)
class Zod:
    """The official zod schema `name` (see :func:`check_official`) applied to the part of the
    message at `at`: a path of keys, :data:`_ANY` for every value or item; a missing part is
    optional and not checked."""

    name: str
    at: tuple[str, ...] = ()


MODULE_CORE = "@modelcontextprotocol/core"
_SUBSCRIPTION_ID = ("params", "_meta", "io.modelcontextprotocol/subscriptionId")
"""Where a notification of a `subscriptions/listen` stream names its subscription (a RequestId)."""

OFFICIAL: dict[tuple[str, str], tuple[Zod, ...]] = {
    (EXT_TASKS, "CreateTaskResult"): (Zod("CreateTaskResultV2Schema"),),
    (EXT_TASKS, "GetTaskResult"): (Zod("GetTaskResultV2Schema"), Zod("ServerRequestSchema", ("inputRequests", _ANY))),
    (EXT_TASKS, "UpdateTaskResult"): (Zod("UpdateTaskResultV2Schema"),),
    (EXT_TASKS, "CancelTaskResult"): (Zod("CancelTaskResultV2Schema"),),
    (EXT_TASKS, "TaskStatusNotification"): (
        Zod("TaskStatusNotificationV2Schema"),
        Zod("JSONRPCNotificationSchema"),
        Zod("RequestIdSchema", _SUBSCRIPTION_ID),
    ),
    (MCP_2025_11_25, "CallToolResult"): (Zod("CallToolResultV1Schema"), Zod("CallToolResultSchema")),
    (MCP_2025_11_25, "CancelTaskResult"): (Zod("CancelTaskResultV1Schema"), Zod(f"{MODULE_CORE}:CancelTaskResultSchema")),
    (MCP_2025_11_25, "CreateTaskResult"): (Zod("CreateTaskResultV1Schema"), Zod(f"{MODULE_CORE}:CreateTaskResultSchema")),
    (MCP_2025_11_25, "ElicitRequest"): (Zod("ElicitRequestSchema"), Zod("JSONRPCRequestSchema")),
    (MCP_2025_11_25, "GetTaskResult"): (Zod("GetTaskResultV1Schema"), Zod(f"{MODULE_CORE}:GetTaskResultSchema")),
    (MCP_2025_11_25, "InitializeResult"): (Zod("InitializeResultSchema"),),
    (MCP_2025_11_25, "JSONRPCErrorResponse"): (Zod("JSONRPCErrorResponseSchema"),),
    (MCP_2025_11_25, "JSONRPCResultResponse"): (Zod("JSONRPCResultResponseSchema"),),
    (MCP_2025_11_25, "ListTasksResult"): (Zod("ListTasksResultV1Schema"), Zod("ListTasksResultSchema")),
    (MCP_2025_11_25, "ListToolsResult"): (Zod("ListToolsResultSchema"), Zod("ToolV1Schema", ("tools", _ANY))),
    (MCP_2025_11_25, "Task"): (Zod("TaskV1Schema"), Zod(f"{MODULE_CORE}:TaskSchema")),
    (MCP_2025_11_25, "TaskStatusNotificationParams"): (Zod(f"{MODULE_CORE}:TaskStatusNotificationParamsSchema"),),
    (MCP_2026_07_28, "CallToolResult"): (Zod("CallToolResultSchema"), Zod("CallToolResultV2Schema")),
    (MCP_2026_07_28, "DiscoverResult"): (
        Zod("DiscoverResultSchema"),
        Zod("ImplementationSchema", ("_meta", "io.modelcontextprotocol/serverInfo")),
    ),
    (MCP_2026_07_28, "InputRequiredResult"): (
        Zod("InputRequiredCallToolResultV2Schema"),
        Zod("ServerRequestSchema", ("inputRequests", _ANY)),
    ),
    (MCP_2026_07_28, "JSONRPCErrorResponse"): (Zod("JSONRPCErrorResponseSchema"),),
    (MCP_2026_07_28, "ListToolsResult"): (Zod("ListToolsResultSchema"), Zod("ToolV2Schema", ("tools", _ANY))),
    (MCP_2026_07_28, "SubscriptionsAcknowledgedNotification"): (
        Zod("SubscriptionsAcknowledgedNotificationSchema"),
        Zod("JSONRPCNotificationSchema"),
        Zod("RequestIdSchema", _SUBSCRIPTION_ID),
    ),
}
"""The official zod schemas that stand for each definition the tests use, all of which must pass."""


# --- the rules the official zod schemas leave open -----------------------------------------------


def _cacheable_result(message: Any) -> Iterator[str]:
    """MCP 2026-07-28 ``CacheableResult``: ``resultType`` a string, ``cacheScope`` "private" or
    "public", ``ttlMs`` an integer >= 0, all three required (core 2.4.0 leaves them open)."""
    if not isinstance(message, dict):
        return
    if not isinstance(message.get("resultType"), str):
        yield f"resultType: a string is required, got {message.get('resultType', '<missing>')!r}"
    if message.get("cacheScope") not in ("private", "public"):
        yield f'cacheScope: "private" or "public" is required, got {message.get("cacheScope", "<missing>")!r}'
    ttl = message.get("ttlMs")
    if not (isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0):
        yield f"ttlMs: an integer >= 0 is required, got {message.get('ttlMs', '<missing>')!r}"


def _tool_schemas_2025(message: Any) -> Iterator[str]:
    """MCP 2025-11-25 ``Tool.inputSchema`` / ``outputSchema``: ``properties`` maps names to objects,
    ``required`` lists strings (the official zod schemas check neither)."""
    tools = message.get("tools") if isinstance(message, dict) else None
    for index, tool in enumerate(tools if isinstance(tools, list) else []):
        for key in ("inputSchema", "outputSchema"):
            schema = tool.get(key) if isinstance(tool, dict) else None
            if not isinstance(schema, dict):
                continue
            properties = schema.get("properties", {})
            if not isinstance(properties, dict) or not all(isinstance(p, dict) for p in properties.values()):
                yield f"tools.{index}.{key}.properties: an object of objects is required, got {properties!r}"
            required = schema.get("required", [])
            if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
                yield f"tools.{index}.{key}.required: a list of strings is required, got {required!r}"


RULES: dict[tuple[str, str], tuple[Callable[[Any], Iterator[str]], ...]] = {
    (MCP_2025_11_25, "ListToolsResult"): (_tool_schemas_2025,),
    (MCP_2026_07_28, "DiscoverResult"): (_cacheable_result,),
    (MCP_2026_07_28, "ListToolsResult"): (_cacheable_result,),
}
"""Rules of a definition that its official zod schemas leave open; each yields its problems."""


def _parts(message: Any, at: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """The parts of `message` at path `at` (see :class:`Zod`), each with its dotted location."""
    if not at:
        yield "", message
        return
    head, rest = at[0], at[1:]
    if head == _ANY:
        items = message.items() if isinstance(message, dict) else enumerate(message) if isinstance(message, list) else ()
    else:
        items = [(head, message[head])] if isinstance(message, dict) and head in message else []
    for key, value in items:
        for where, part in _parts(value, rest):
            yield f"{key}.{where}" if where else str(key), part


def official_problems(message: Any, schema: str, definition: str) -> list[str]:
    """What the official zod schemas (:data:`OFFICIAL`) and the rules (:data:`RULES`) find wrong with
    `message` as `definition` of `schema`; empty when it passes. Raises ``KeyError`` for a
    definition without official schemas (add it to :data:`OFFICIAL`)."""
    checks = OFFICIAL.get((schema, definition))
    if checks is None:
        raise KeyError(f"no official zod schema stands for {schema} {definition}: add it to schemas.OFFICIAL")
    problems = []
    for check in checks:
        for where, part in _parts(message, check.at):
            error = check_official(part, check.name)
            if error is not None:
                problems.append(f"{check.name}{' at ' + where if where else ''}: {error}")
    for rule in RULES.get((schema, definition), ()):
        problems.extend(rule(message))
    return problems


class SchemaStepNotRun(UserWarning):
    """A step of :func:`validate` could not run (the JSON Schema step on a checkout without
    ``shared/schemas/``): the message was validated by the other steps alone."""


def validate(message: Any, schema: str, definition: str) -> list[str]:
    """Assert that `message` is a valid `definition` of `schema` (:data:`EXT_TASKS`,
    :data:`MCP_2025_11_25` or :data:`MCP_2026_07_28`): official zod schemas and rules first, then the
    JSON Schema from ``shared/schemas/`` (see the module docstring). Returns what it validated
    against: ``zod <schema>[ at <part>]``, ``rule <name>``, ``JSON Schema <file>#/$defs/<definition>``.

    Raises ``AssertionError`` naming each problem (zod's issues, a rule's, or the JSON Schema
    validator's best error with its path) or a ``shared/schemas/`` without the file, and ``KeyError``
    for a definition not in :data:`OFFICIAL` or not in the JSON Schema file. Warns
    :class:`SchemaStepNotRun` when there is no ``shared/schemas/`` for the JSON Schema step.
    """
    problems = official_problems(message, schema, definition)
    if problems:
        raise AssertionError(f"{schema} {definition}: " + "; ".join(problems) + f"\nmessage: {json.dumps(message)}")
    checked = [f"zod {check.name}{' at ' + '.'.join(check.at) if check.at else ''}" for check in OFFICIAL[(schema, definition)]]
    checked += [f"rule {rule.__name__.lstrip('_')}" for rule in RULES.get((schema, definition), ())]
    schema_file = JSON_SCHEMA_FILES[schema]
    directory = schemas_dir()
    if not directory.is_dir():
        warnings.warn(
            SchemaStepNotRun(
                f"{schema} {definition} validated against {', '.join(checked)} only: the JSON Schema step did not run, "
                f"no {directory} for {schema_file} (the repository does not carry it; {SHARED_ENV} names a directory "
                "holding schemas/)"
            ),
            stacklevel=2,
        )
        return checked
    if not (directory / schema_file).is_file():
        raise AssertionError(f"the JSON Schema step cannot run: {directory} has no {schema_file}")
    error = best_match(_validator(schema_file, definition).iter_errors(message))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "<root>"
        raise AssertionError(f"{schema_file}#/$defs/{definition}: at {where}: {error.message}")
    return [*checked, f"JSON Schema {schema_file}#/$defs/{definition}"]


# --- the JSON Schemas (the third step, where shared/schemas/ is there) -----------------------------


def schemas_dir() -> Path:
    """``$MCP_TASKS_PROXY_SHARED/schemas``, else ``shared/schemas`` beside the checkout (it may not exist)."""
    shared = os.environ.get(SHARED_ENV)
    base = Path(shared) if shared else Path(__file__).resolve().parents[2] / "shared"
    return base / "schemas"


@cache
def _load(schema_file: str) -> tuple[str, dict[str, Any], Registry]:
    """The base URI, the parsed document and a registry holding it, once per file."""
    contents = json.loads((schemas_dir() / schema_file).read_text(encoding="utf-8"))
    uri = contents.get("$id") or f"urn:mcp-tasks-proxy:schemas:{schema_file}"
    resource = Resource.from_contents(contents, default_specification=DRAFT202012)
    return uri, contents, Registry().with_resource(uri, resource)


@cache
def _validator(schema_file: str, definition: str) -> Draft202012Validator:
    uri, contents, registry = _load(schema_file)
    if definition not in contents.get("$defs", {}):
        raise KeyError(f"{schema_file} has no $defs/{definition}")
    return Draft202012Validator({"$ref": f"{uri}#/$defs/{definition}"}, registry=registry)


# --- the official zod schemas (npm @modelcontextprotocol/ext-tasks and @modelcontextprotocol/core) ---

_VALIDATOR_SCRIPT = Path(__file__).resolve().parent / "node" / "validate.mjs"
_node_lock = threading.Lock()
_node_process: subprocess.Popen[str] | None = None


def _official_validator() -> subprocess.Popen[str]:
    """The one long-lived ``node tests/node/validate.mjs <prefix>`` of this test run, started on
    first use (the pinned packages are installed into the cache first if needed)."""
    global _node_process
    if _node_process is None or _node_process.poll() is not None:
        from proxy.demo.node_packages import OFFICIAL_SCHEMAS, ensure_npm_packages, node_binary

        prefix = ensure_npm_packages("official-schemas", OFFICIAL_SCHEMAS)
        _node_process = subprocess.Popen(
            [node_binary(), str(_VALIDATOR_SCRIPT), str(prefix)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        atexit.register(_stop_official_validator, _node_process)
    return _node_process


def _stop_official_validator(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        assert process.stdin is not None
        process.stdin.close()  # the script ends at end of input
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def check_official(message: Any, schema: str) -> str | None:
    """`None` when `message` passes the official zod schema `schema`, else zod's issues as one line.

    `schema` is an export of ``@modelcontextprotocol/ext-tasks/core/v2`` or ``/core/v1`` or of
    ``@modelcontextprotocol/core`` (e.g. ``GetTaskResultV2Schema``, ``DiscoverResultSchema``),
    qualified as ``<module>:<name>`` where two of them export the name (tests/node/validate.mjs).
    """
    with _node_lock:
        process = _official_validator()
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps({"schema": schema, "message": message}) + "\n")
        process.stdin.flush()
        line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"the official schema validator exited (status {process.poll()})")
    answer = json.loads(line)
    return None if answer["ok"] else str(answer["error"])


def validate_official(message: Any, schema: str) -> None:
    """Assert that `message` passes the official zod schema `schema` (see `check_official`).

    Raises ``AssertionError`` carrying zod's issues and the message.
    """
    error = check_official(message, schema)
    if error is not None:
        raise AssertionError(f"official {schema}: {error}\nmessage: {json.dumps(message)}")
