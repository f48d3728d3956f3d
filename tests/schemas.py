"""Validate a message against one definition of the shared MCP JSON Schemas.

    from schemas import validate
    validate(result, "ext-tasks-draft.schema.json", "CreateTaskResult")

The schema files live in ``shared/schemas/`` beside the repository (``/work/shared/schemas`` for
``/work/main``); set ``MCP_TASKS_PROXY_SHARED`` to another ``shared`` directory to use that one.
Each file is loaded once and registered as a ``referencing`` resource, so the ``#/$defs/...`` refs
inside a file resolve within that file (the ext-tasks schema carries its own ``$defs``).
"""

from __future__ import annotations

import json
import os
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
