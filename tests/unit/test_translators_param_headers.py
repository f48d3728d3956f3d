"""`translators.param_headers`: the `Mcp-Param-{Name}` headers of a 2026-07-28 `tools/call`
(docs/wire.md §4.3, §3.10), built from a tool's `x-mcp-header` annotations."""

from __future__ import annotations

from typing import Any

import pytest

from translators.errors import McpError
from translators.param_headers import ParamHeader, header_bindings, param_headers, read_param_headers, tool_bindings

ROUTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "shard": {"type": "integer", "x-mcp-header": "Shard"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"},
        "target": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
        "note": {"type": "string"},
    },
    "required": ["region"],
}
ROUTE = (
    ParamHeader("Region", ("region",), "string"),
    ParamHeader("Shard", ("shard",), "integer"),
    ParamHeader("Dry-Run", ("dry",), "boolean"),
    ParamHeader("Zone", ("target", "zone"), "string"),
)


def test_annotations_on_properties_chains_are_found_in_order() -> None:
    assert header_bindings(ROUTE_SCHEMA) == ROUTE


def test_a_schema_without_annotations_has_none() -> None:
    assert header_bindings({"type": "object", "properties": {"a": {"type": "string"}}}) == ()
    assert header_bindings(None) == ()
    assert header_bindings({"type": "object"}) == ()


@pytest.mark.parametrize(
    "schema",
    [
        # not a token
        {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "A B"}}},
        {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": ""}}},
        {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": 3}}},
        # a type that may not carry one
        {"type": "object", "properties": {"a": {"type": "number", "x-mcp-header": "A"}}},
        {"type": "object", "properties": {"a": {"type": ["string", "null"], "x-mcp-header": "A"}}},
        # the same name twice, case folded
        {
            "type": "object",
            "properties": {"a": {"type": "string", "x-mcp-header": "Name"}, "b": {"type": "string", "x-mcp-header": "name"}},
        },
        # off a pure properties chain: under items, a composition keyword, $defs, the root
        {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}},
        {"type": "object", "anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]},
        {"type": "object", "$defs": {"d": {"type": "string", "x-mcp-header": "A"}}},
        {"type": "object", "x-mcp-header": "Root"},
    ],
)
def test_a_schema_with_any_invalid_annotation_yields_no_header(schema: dict[str, Any]) -> None:
    valid = {"type": "string", "x-mcp-header": "Other"}
    with_valid = {**schema, "properties": {**schema.get("properties", {}), "other": valid}}
    assert header_bindings(schema) == ()
    assert header_bindings(with_valid) == ()


def test_tool_bindings_names_each_tool_of_a_list() -> None:
    tools = [
        {"name": "route", "inputSchema": ROUTE_SCHEMA},
        {"name": "plain", "inputSchema": {"type": "object"}},
        {"inputSchema": ROUTE_SCHEMA},
        "junk",
    ]
    assert tool_bindings(tools) == {"route": ROUTE, "plain": ()}
    assert tool_bindings(None) == {}


def test_headers_of_present_arguments_rendered_and_encoded() -> None:
    arguments = {"region": "us-west1", "shard": 42, "dry": False, "target": {"zone": "b"}, "note": "x"}
    assert param_headers(ROUTE, arguments) == {
        "Mcp-Param-Region": "us-west1",
        "Mcp-Param-Shard": "42",
        "Mcp-Param-Dry-Run": "false",
        "Mcp-Param-Zone": "b",
    }


def test_absent_null_and_unrenderable_arguments_get_no_header() -> None:
    assert param_headers(ROUTE, {"region": None, "target": "not an object", "shard": {"n": 1}}) == {}
    assert param_headers(ROUTE, {}) == {}
    assert param_headers(ROUTE, None) == {}


@pytest.mark.parametrize(
    ("value", "header"),
    [
        ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
        (" padded", "=?base64?IHBhZGRlZA==?="),
        ("Zürich", "=?base64?WsO8cmljaA==?="),
        ("with space", "with space"),
    ],
)
def test_values_that_are_not_plain_ascii_travel_base64(value: str, header: str) -> None:
    assert param_headers(ROUTE, {"region": value}) == {"Mcp-Param-Region": header}
    assert read_param_headers(ROUTE, {"mcp-param-region": header}) == {("region",): value}


def test_read_param_headers_is_the_inverse() -> None:
    arguments = {"region": "Zürich", "shard": 7, "dry": True, "target": {"zone": "a"}}
    assert read_param_headers(ROUTE, param_headers(ROUTE, arguments)) == {
        ("region",): "Zürich",
        ("shard",): "7",
        ("dry",): "true",
        ("target", "zone"): "a",
    }


def test_a_malformed_base64_header_is_a_header_mismatch() -> None:
    with pytest.raises(McpError) as caught:
        read_param_headers(ROUTE, {"Mcp-Param-Region": "=?base64?***?="})
    assert caught.value.code == -32020
