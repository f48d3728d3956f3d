"""The tests' schema helper (`tests/schemas.py`) decides on its own, with no JSON Schema beside the
checkout: the official zod schemas, applied to the parts of a message too, and the rules of a
definition that those leave open (`schemas.RULES`)."""

from __future__ import annotations

import pytest
import schemas
from schemas import MCP_2025_11_25, MCP_2026_07_28, official_problems, validate

DISCOVER = {
    "resultType": "complete",
    "cacheScope": "public",
    "ttlMs": 0,
    "supportedVersions": ["2026-07-28"],
    "capabilities": {},
    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "p", "version": "1"}},
}
QUESTION = {
    "resultType": "input_required",
    "requestState": "s",
    "inputRequests": {
        "q1": {
            "method": "elicitation/create",
            "params": {"message": "m", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
        }
    },
}


@pytest.fixture
def no_json_schemas(monkeypatch, tmp_path):
    """A layout with no `shared/schemas/` anywhere: only the official checks can decide."""
    monkeypatch.setenv(schemas.SHARED_ENV, str(tmp_path))
    assert not schemas.schemas_dir().exists()


def test_a_valid_message_passes_without_json_schemas(no_json_schemas):
    validate(DISCOVER, MCP_2026_07_28, "DiscoverResult")
    validate(QUESTION, MCP_2026_07_28, "InputRequiredResult")


def test_the_cacheable_result_rule_requires_result_type_cache_scope_and_ttl(no_json_schemas):
    bare = {k: v for k, v in DISCOVER.items() if k not in ("resultType", "cacheScope", "ttlMs")}
    assert official_problems(bare, MCP_2026_07_28, "DiscoverResult") == [
        "resultType: a string is required, got '<missing>'",
        'cacheScope: "private" or "public" is required, got \'<missing>\'',
        "ttlMs: an integer >= 0 is required, got '<missing>'",
    ]
    wrong = {**DISCOVER, "resultType": 3, "cacheScope": "shared", "ttlMs": -1}
    assert official_problems(wrong, MCP_2026_07_28, "DiscoverResult") == [
        "resultType: a string is required, got 3",
        'cacheScope: "private" or "public" is required, got \'shared\'',
        "ttlMs: an integer >= 0 is required, got -1",
    ]
    with pytest.raises(AssertionError, match="ttlMs: an integer >= 0 is required"):
        validate({**DISCOVER, "ttlMs": 1.5}, MCP_2026_07_28, "DiscoverResult")
    with pytest.raises(AssertionError, match="cacheScope"):
        validate({k: v for k, v in DISCOVER.items() if k != "cacheScope"} | {"tools": []}, MCP_2026_07_28, "ListToolsResult")


def test_a_zod_schema_applies_to_the_part_of_the_message_it_names(no_json_schemas):
    no_version = {**DISCOVER, "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "p"}}}
    assert official_problems(no_version, MCP_2026_07_28, "DiscoverResult") == [
        "ImplementationSchema at _meta.io.modelcontextprotocol/serverInfo: version: "
        "Invalid input: expected string, received undefined",
    ]
    tools = {"tools": [{"name": "t", "inputSchema": {"type": "object"}, "outputSchema": {"type": "bogus"}}]}
    assert official_problems(tools, MCP_2025_11_25, "ListToolsResult") == [
        'ToolV1Schema at tools.0: outputSchema.type: Invalid input: expected "object"',
    ]
    bad_form = {
        **QUESTION,
        "inputRequests": {
            "q1": {
                "method": "elicitation/create",
                "params": {"message": "m", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "bogus"}}}},
            }
        },
    }
    [problem] = official_problems(bad_form, MCP_2026_07_28, "InputRequiredResult")
    assert problem.startswith("ServerRequestSchema at inputRequests.q1: <root>: Invalid input")
    assert '[params.requestedSchema.properties.ok.type: Invalid input: expected "boolean"]' in problem


def test_the_2025_tool_schema_rule_requires_object_properties_and_string_required(no_json_schemas):
    tools = {
        "tools": [
            {
                "name": "t",
                "inputSchema": {"type": "object", "properties": {"a": "string"}, "required": ["a"]},
                "outputSchema": {"type": "object", "properties": {"r": {"type": "string"}}, "required": "r"},
            }
        ]
    }
    assert official_problems(tools, MCP_2025_11_25, "ListToolsResult") == [
        "tools.0.inputSchema.properties: an object of objects is required, got {'a': 'string'}",
        "tools.0.outputSchema.required: a list of strings is required, got 'r'",
    ]


def test_an_elicitation_request_to_a_v1_client_needs_its_json_rpc_envelope(no_json_schemas):
    request = {
        "method": "elicitation/create",
        "params": {"message": "m", "requestedSchema": {"type": "object", "properties": {}}},
    }
    assert official_problems(request, MCP_2025_11_25, "ElicitRequest") == [
        'JSONRPCRequestSchema: jsonrpc: Invalid input: expected "2.0"; id: Invalid input '
        "([id: Invalid input: expected string, received undefined] or [id: Invalid input: expected number, received undefined])",
    ]
    validate({"jsonrpc": "2.0", "id": 4, **request}, MCP_2025_11_25, "ElicitRequest")


def test_a_definition_without_official_schemas_is_an_error_not_a_pass():
    with pytest.raises(KeyError, match="no official zod schema stands for mcp-2026-07-28 ReadResourceResult"):
        validate({"contents": []}, MCP_2026_07_28, "ReadResourceResult")


def test_a_json_schema_beside_the_checkout_is_checked_as_well(monkeypatch, tmp_path):
    # A stand-in shared/schemas/ whose DiscoverResult also requires "instructions": the official
    # checks pass, and the JSON Schema's verdict is the one raised.
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "mcp-2026-07-28.schema.json").write_text(
        '{"$defs": {"DiscoverResult": {"type": "object", "required": ["instructions"]}}}', encoding="utf-8"
    )
    monkeypatch.setenv(schemas.SHARED_ENV, str(tmp_path))
    schemas._load.cache_clear()
    schemas._validator.cache_clear()
    try:
        assert official_problems(DISCOVER, MCP_2026_07_28, "DiscoverResult") == []
        with pytest.raises(AssertionError) as raised:
            validate(DISCOVER, MCP_2026_07_28, "DiscoverResult")
        assert (
            str(raised.value)
            == "mcp-2026-07-28.schema.json#/$defs/DiscoverResult: at <root>: 'instructions' is a required property"
        )
        validate({**DISCOVER, "instructions": "hello"}, MCP_2026_07_28, "DiscoverResult")
    finally:
        schemas._load.cache_clear()
        schemas._validator.cache_clear()


def test_a_listen_stream_notification_names_its_subscription_with_a_request_id(no_json_schemas):
    ack = {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": 4}, "notifications": {"taskIds": ["t"]}},
    }
    validate(ack, MCP_2026_07_28, "SubscriptionsAcknowledgedNotification")
    ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] = None
    [problem] = official_problems(ack, MCP_2026_07_28, "SubscriptionsAcknowledgedNotification")
    assert problem.startswith("RequestIdSchema at params._meta.io.modelcontextprotocol/subscriptionId: <root>: Invalid input")
