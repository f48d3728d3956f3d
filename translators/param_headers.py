"""`Mcp-Param-{Name}` headers: tool arguments a 2026-07-28 `tools/call` mirrors into HTTP headers.

Sources: core 2026-07-28 §Transports "Custom headers from tool parameters" (docs/wire.md §4.3,
§3.10). A tool's `inputSchema` may mark a property with `"x-mcp-header": "<Name>"`; a client calling
that tool over Streamable HTTP sends the argument's value as `Mcp-Param-<Name>`, Base64-sentinel
encoded when it is not plain header-safe ASCII, and leaves the header out when the argument is
absent or null. A server that reads the body refuses a missing or mismatched header with `-32020`.

An annotation counts only on a property reached from the schema's root through `properties` keys
alone, naming an RFC 9110 token, on a `string`, `integer` or `boolean` property, unique (case
folded) in the schema. A schema with any annotation that breaks these rules is invalid as a whole:
clients drop such a tool and servers enforce none of its headers, so it yields no headers here.

The proxy learns the annotations from a backend's `tools/list` (`tool_bindings`) and adds the
headers to the `tools/call` it translates for a client of another dialect (`param_headers`);
`read_param_headers` is the inverse, what a server reads back from the headers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .envelope import decode_header_value, encode_header_value

ANNOTATION = "x-mcp-header"
PREFIX = "Mcp-Param-"
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TYPES = frozenset({"string", "integer", "boolean"})


@dataclass(frozen=True, slots=True)
class ParamHeader:
    """One valid annotation: the header `Mcp-Param-{name}` carries the argument at `path` (the
    chain of `properties` keys from the root), a property of JSON Schema `type`."""

    name: str
    path: tuple[str, ...]
    type: str

    @property
    def header(self) -> str:
        return PREFIX + self.name


def _positions(node: Any, path: tuple[str, ...] | None) -> Iterator[tuple[tuple[str, ...] | None, Mapping[str, Any]]]:
    """Every schema object under `node` with its `properties` path (None once off a pure chain)."""
    if isinstance(node, list):
        for item in node:
            yield from _positions(item, None)
        return
    if not isinstance(node, Mapping):
        return
    yield path, node
    for key, value in node.items():
        if key == "properties" and isinstance(value, Mapping):
            for name, sub in value.items():
                yield from _positions(sub, None if path is None else (*path, str(name)))
        elif isinstance(value, (Mapping, list)) and key not in ("enum", "const", "default", "examples"):
            yield from _positions(value, None)


def header_bindings(input_schema: Any) -> tuple[ParamHeader, ...]:
    """The `x-mcp-header` annotations of a tool's `inputSchema`; none when the schema has no
    annotation or any invalid one (see the module docstring)."""
    found: list[ParamHeader] = []
    seen: set[str] = set()
    for path, schema in _positions(input_schema, ()):
        if ANNOTATION not in schema:
            continue
        name, kind = schema[ANNOTATION], schema.get("type")
        if (
            not path
            or not isinstance(name, str)
            or not _TOKEN.fullmatch(name)
            or not isinstance(kind, str)
            or kind not in _TYPES
            or name.lower() in seen
        ):
            return ()
        seen.add(name.lower())
        found.append(ParamHeader(name, path, kind))
    return tuple(found)


def tool_bindings(tools: Any) -> dict[str, tuple[ParamHeader, ...]]:
    """Tool name → its annotations, for each well-formed tool of a `tools/list` result's `tools`."""
    out: dict[str, tuple[ParamHeader, ...]] = {}
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
            out[tool["name"]] = header_bindings(tool.get("inputSchema"))
    return out


def _value_at(arguments: Any, path: tuple[str, ...]) -> Any:
    node = arguments
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _rendered(value: Any) -> str | None:
    """An argument as its header carries it before encoding: booleans `true`/`false`, numbers in
    decimal, strings as they are; None for anything else (no header)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    return None


def param_headers(bindings: tuple[ParamHeader, ...], arguments: Any) -> dict[str, str]:
    """The `Mcp-Param-*` headers of a `tools/call` with these `arguments` to a tool with these
    annotations: one per annotated argument present and not null, its value header-encoded
    (`envelope.encode_header_value`). Inverse: `read_param_headers`."""
    out: dict[str, str] = {}
    for binding in bindings:
        rendered = _rendered(_value_at(arguments, binding.path))
        if rendered is not None:
            out[binding.header] = encode_header_value(rendered)
    return out


def read_param_headers(bindings: tuple[ParamHeader, ...], headers: Mapping[str, str]) -> dict[tuple[str, ...], str]:
    """What the `Mcp-Param-*` headers among `headers` (names in any case) say, decoded: argument
    path → the value as rendered (inverse of `param_headers`). Raises `McpError(-32020)` for a
    malformed Base64 value."""
    folded = {name.lower(): value for name, value in headers.items()}
    out: dict[tuple[str, ...], str] = {}
    for binding in bindings:
        raw = folded.get(binding.header.lower())
        if raw is not None:
            out[binding.path] = decode_header_value(raw)
    return out
