"""Validate a message against one definition of the shared MCP JSON Schemas, or against the
official packages' zod schemas.

    from schemas import validate, validate_official
    validate(result, "ext-tasks-draft.schema.json", "CreateTaskResult")
    validate_official(result, "GetTaskResultV2Schema")

The schema files live in ``shared/schemas/`` beside the repository (``/work/shared/schemas`` for
``/work/main``); set ``MCP_TASKS_PROXY_SHARED`` to another ``shared`` directory to use that one.
Each file is loaded once and registered as a ``referencing`` resource, so the ``#/$defs/...`` refs
inside a file resolve within that file (the ext-tasks schema carries its own ``$defs``).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SHARED_ENV = "MCP_TASKS_PROXY_SHARED"
"""Environment variable naming the ``shared`` directory that holds ``schemas/``."""


def schemas_dir() -> Path:
    """``$MCP_TASKS_PROXY_SHARED/schemas``, else ``shared/schemas`` two levels above ``tests/``."""
    shared = os.environ.get(SHARED_ENV)
    base = Path(shared) if shared else Path(__file__).resolve().parents[2] / "shared"
    return base / "schemas"


@lru_cache(maxsize=None)
def _load(schema_file: str) -> tuple[str, dict[str, Any], Registry]:
    """The base URI, the parsed document and a registry holding it, once per file."""
    path = schemas_dir() / schema_file
    if not path.is_file():
        raise FileNotFoundError(
            f"JSON Schema {path} not found. The tests validate against the MCP project's schemas, kept in "
            f"shared/schemas/ beside the checkout (as CI lays it out); set {SHARED_ENV} to a directory holding schemas/."
        )
    contents = json.loads(path.read_text(encoding="utf-8"))
    uri = contents.get("$id") or f"urn:mcp-tasks-proxy:schemas:{schema_file}"
    resource = Resource.from_contents(contents, default_specification=DRAFT202012)
    return uri, contents, Registry().with_resource(uri, resource)


@lru_cache(maxsize=None)
def _validator(schema_file: str, definition: str) -> Draft202012Validator:
    uri, contents, registry = _load(schema_file)
    if definition not in contents.get("$defs", {}):
        raise KeyError(f"{schema_file} has no $defs/{definition}")
    return Draft202012Validator({"$ref": f"{uri}#/$defs/{definition}"}, registry=registry)


def validate(message: dict[str, Any], schema_file: str, definition: str) -> None:
    """Assert that `message` is valid against ``$defs[definition]`` of `schema_file`.

    Raises ``AssertionError`` carrying the validator's best error (message and JSON path).
    """
    error = best_match(_validator(schema_file, definition).iter_errors(message))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "<root>"
        raise AssertionError(f"{schema_file}#/$defs/{definition}: at {where}: {error.message}")


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
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8", bufsize=1,
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
