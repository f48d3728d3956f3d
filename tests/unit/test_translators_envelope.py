"""The 2026-07-28 envelope (`translators.envelope`): docs/behaviour.md §2 rule 1, §4.8, §4.9, §6;
docs/wire.md §3.10 (`Mcp-Name`, Base64 sentinel) and §4.1–§4.3 (request `_meta`, headers)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from translators.envelope import (
    ModernMeta,
    add_envelope,
    check_headers,
    complete_result,
    decode_header_value,
    encode_header_value,
    is_modern,
    name_param,
    read_meta,
    session_meta,
    strip_envelope,
    upstream_client_capabilities,
    with_server_info,
)
from translators.errors import McpError
from translators.protocol import CACHEABLE_METHODS, META_CLIENT_CAPABILITIES, META_LOG_LEVEL, META_PROTOCOL_VERSION

PV = "io.modelcontextprotocol/protocolVersion"
CC = "io.modelcontextprotocol/clientCapabilities"
CI = "io.modelcontextprotocol/clientInfo"
LL = "io.modelcontextprotocol/logLevel"
TASKS = "io.modelcontextprotocol/tasks"
# fastmcp.Client (FastMCP 4) per docs/wire.md §7
FASTMCP4_CAPS = {"elicitation": {"form": {}, "url": {}}, "extensions": {TASKS: {}}}
META = {PV: "2026-07-28", CC: FASTMCP4_CAPS, CI: {"name": "c", "version": "1"}, LL: "info"}
MODERN = ModernMeta(
    protocol_version="2026-07-28", client_capabilities=FASTMCP4_CAPS, client_info={"name": "c", "version": "1"}, log_level="info"
)
TASK_ID = "qwslkIHlk0JDE8S98aDrOSv_Vc4CqECM"


def _raises(code: int, fn, *args) -> McpError:
    with pytest.raises(McpError) as info:
        fn(*args)
    assert info.value.code == code, info.value
    return info.value


# --- is_modern -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        ("tools/call", {"name": "greet", "_meta": META}, True),
        ("tasks/get", {"taskId": "T", "_meta": {PV: "2025-11-25"}}, True),
        ("server/discover", {}, True),
        ("subscriptions/listen", {}, True),
        ("tools/call", {"name": "greet"}, False),
        ("tools/call", {"name": "greet", "_meta": {"progressToken": "p1"}}, False),
        ("tools/call", {"name": "greet", "_meta": "2026-07-28"}, False),
        ("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}}, False),
    ],
)
def test_modern_request_has_meta_protocol_version_or_is_discover_or_listen(method, params, expected):
    assert is_modern(method, params) is expected


# --- read_meta -----------------------------------------------------------------------------------


def test_read_meta_reads_all_four_keys():
    meta = read_meta({"name": "greet", "_meta": META})
    assert meta == MODERN
    assert meta.declares_tasks is True


def test_read_meta_with_empty_capabilities_declares_nothing():
    meta = read_meta({"_meta": {PV: "2026-07-28", CC: {}}})
    assert meta == ModernMeta(protocol_version="2026-07-28", client_capabilities={}, client_info=None, log_level=None)
    assert meta.declares_tasks is False


def test_legacy_tasks_capability_is_not_a_declaration():
    assert read_meta({"_meta": {PV: "2026-07-28", CC: {"tasks": {"list": {}}}}}).declares_tasks is False


@pytest.mark.parametrize(
    "params",
    [{}, {"_meta": {}}, {"_meta": {CC: {}}}, {"_meta": {PV: 20260728, CC: {}}}, {"_meta": None}],
    ids=["no-meta", "empty-meta", "only-capabilities", "non-string-version", "meta-null"],
)
def test_missing_protocol_version_is_32602_naming_the_key(params):
    error = _raises(-32602, read_meta, params)
    assert error.message == f"Missing required _meta key {PV!r}"


@pytest.mark.parametrize("caps", [None, "all", [], 1], ids=["null", "string", "list", "int"])
def test_missing_client_capabilities_is_32602_naming_the_key(caps):
    params: dict[str, Any] = {"_meta": {PV: "2026-07-28"}}
    if caps is not None:
        params["_meta"][CC] = caps
    error = _raises(-32602, read_meta, params)
    assert error.message == f"Missing required _meta key {CC!r}"


# --- check_headers -------------------------------------------------------------------------------


def headers(**values: str) -> CIMultiDict[str]:
    """Lower-case header names, as a case-insensitive mapping (what aiohttp hands over)."""
    names = {"version": "mcp-protocol-version", "method": "mcp-method", "name": "mcp-name"}
    return CIMultiDict({names[k]: v for k, v in values.items()})


def test_matching_headers_are_accepted():
    assert (
        check_headers("tools/call", {"name": "greet"}, MODERN, headers(version="2026-07-28", method="tools/call", name="greet"))
        is None
    )


def test_absent_mcp_method_and_mcp_name_are_accepted():
    assert check_headers("tools/call", {"name": "greet"}, MODERN, headers(version="2026-07-28")) is None
    assert check_headers("tasks/get", {"taskId": TASK_ID}, MODERN, headers(version="2026-07-28")) is None


def test_missing_protocol_version_header_is_32020():
    _raises(-32020, check_headers, "tools/list", {}, MODERN, headers(method="tools/list"))


def test_protocol_version_header_different_from_meta_is_32020():
    other = ModernMeta(protocol_version="2026-07-28")
    _raises(-32020, check_headers, "tools/list", {}, other, headers(version="2025-11-25"))
    _raises(-32020, check_headers, "tools/list", {}, ModernMeta(protocol_version="2025-11-25"), headers(version="2026-07-28"))


@pytest.mark.parametrize("version", ["2025-11-25", "2026-06-30", "2099-01-01"])
def test_unsupported_version_is_32022_with_supported_and_requested(version):
    error = _raises(-32022, check_headers, "tools/list", {}, ModernMeta(protocol_version=version), headers(version=version))
    assert error.data == {"supported": ["2026-07-28"], "requested": version}


def test_mcp_method_different_from_body_is_32020():
    _raises(-32020, check_headers, "tools/call", {"name": "greet"}, MODERN, headers(version="2026-07-28", method="tools/list"))


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tools/call", {"name": "greet"}),
        ("prompts/get", {"name": "summary"}),
        ("resources/read", {"uri": "file:///a.txt"}),
        ("tasks/get", {"taskId": TASK_ID}),
        ("tasks/update", {"taskId": TASK_ID, "inputResponses": {}}),
        ("tasks/cancel", {"taskId": TASK_ID}),
    ],
)
def test_mcp_name_different_from_body_is_32020(method, params):
    _raises(-32020, check_headers, method, params, MODERN, headers(version="2026-07-28", method=method, name="something-else"))


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        ("tools/call", {"name": "greet"}, "greet"),
        ("prompts/get", {"name": "summary"}, "summary"),
        ("resources/read", {"uri": "file:///a.txt"}, "file:///a.txt"),
        ("tasks/get", {"taskId": TASK_ID}, TASK_ID),
        ("tasks/update", {"taskId": TASK_ID}, TASK_ID),
        ("tasks/cancel", {"taskId": TASK_ID}, TASK_ID),
        ("tools/list", {"name": "x"}, None),
        ("tools/call", {"name": 5}, None),
    ],
)
def test_mcp_name_is_compared_with_name_uri_or_task_id(method, params, expected):
    assert name_param(method, params) == expected
    if expected is not None:
        assert check_headers(method, params, MODERN, headers(version="2026-07-28", method=method, name=expected)) is None


def test_mcp_name_sentinel_is_decoded_before_comparing():
    # docs/wire.md §3.10 examples
    assert (
        check_headers(
            "tools/call", {"name": "Hello, 世界"}, MODERN, headers(version="2026-07-28", name="=?base64?SGVsbG8sIOS4lueVjA==?=")
        )
        is None
    )
    literal = "=?base64?literal?="
    assert (
        check_headers(
            "tools/call", {"name": literal}, MODERN, headers(version="2026-07-28", name="=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=")
        )
        is None
    )


def test_sentinel_shaped_value_sent_unencoded_is_32020():
    _raises(
        -32020,
        check_headers,
        "tools/call",
        {"name": "=?base64?literal?="},
        MODERN,
        headers(version="2026-07-28", name="=?base64?literal?="),
    )


def test_sentinel_of_a_different_value_is_32020():
    _raises(
        -32020,
        check_headers,
        "tools/call",
        {"name": "Hello, world"},
        MODERN,
        headers(version="2026-07-28", name="=?base64?SGVsbG8sIOS4lueVjA==?="),
    )


# --- Base64 sentinel ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plain", "encoded"),
    [
        ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
        (
            "8d6f1c0b2e6a4f8d9b3c1a2e5f7d9c0b:0b8e6a52-3f7c-4d2a-9a8e-1c2d3e4f5a6b",
            "8d6f1c0b2e6a4f8d9b3c1a2e5f7d9c0b:0b8e6a52-3f7c-4d2a-9a8e-1c2d3e4f5a6b",
        ),
        ("get weather", "get weather"),
        (" padded", "=?base64?IHBhZGRlZA==?="),
        ("line\nbreak", "=?base64?bGluZQpicmVhaw==?="),
    ],
)
def test_header_value_encoding_examples(plain, encoded):
    assert encode_header_value(plain) == encoded
    assert decode_header_value(encoded) == plain


@pytest.mark.parametrize(
    "bad", ["=?base64?***?=", "=?base64?SGVsbG8?=", "=?base64?/w==?="], ids=["not-base64", "unpadded", "not-utf8"]
)
def test_malformed_sentinel_is_32020(bad):
    _raises(-32020, decode_header_value, bad)


@pytest.mark.parametrize(
    "bad",
    ["=?base64?é?=", "=?base64?SGVsbG8\udcff?=", "=?base64?ＳＧＶｓｂＧ８=?="],
    ids=["non-ascii", "surrogate-escaped-byte", "fullwidth"],
)
def test_sentinel_with_non_ascii_payload_is_32020(bad):
    # aiohttp decodes header bytes as UTF-8 (surrogateescape), so a client can put any of
    # these in Mcp-Name; the answer must be HTTP 400 -32020, not an unhandled exception.
    _raises(-32020, decode_header_value, bad)


def test_mcp_name_sentinel_with_non_ascii_payload_is_32020():
    _raises(-32020, check_headers, "tools/call", {"name": "greet"}, MODERN, headers(version="2026-07-28", name="=?base64?é?="))


def _header_safe(value: str) -> bool:
    return value == value.strip(" \t") and all(c == "\t" or 0x20 <= ord(c) <= 0x7E for c in value) and value != ""


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_header_value_encoding_round_trips_and_is_header_safe(value):
    encoded = encode_header_value(value)
    assert _header_safe(encoded)
    assert decode_header_value(encoded) == value


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1))
def test_plain_header_safe_values_are_sent_as_is(value):
    if not (value.startswith("=?base64?") and value.endswith("?=")):
        assert encode_header_value(value) == value


@settings(max_examples=500, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(["\t", " ", "\x00", "\x1f", "\x7f", "\x80", "é", "\u2028", "a", "=", "?", "~", "!"]))
    | st.text()
)
def test_a_value_goes_as_it_is_exactly_when_it_is_header_safe_and_not_sentinel_shaped(value):
    # `_header_safe` spells the rule out character by character; `encode_header_value` checks it in C-level passes.
    sentinel_shaped = value.startswith("=?base64?") and value.endswith("?=")
    assert (encode_header_value(value) == value) is (_header_safe(value) and not sentinel_shaped)


# --- strip / add envelope ----------------------------------------------------------------------


def test_strip_envelope_removes_protocol_keys_and_keeps_progress_token():
    params = {"name": "slow_compute", "arguments": {"seconds": 1}, "_meta": {**META, "progressToken": "p1"}}
    assert strip_envelope(params) == {"name": "slow_compute", "arguments": {"seconds": 1}, "_meta": {"progressToken": "p1"}}


def test_strip_envelope_drops_an_emptied_meta():
    assert strip_envelope({"name": "greet", "_meta": META}) == {"name": "greet"}
    assert strip_envelope({"name": "greet"}) == {"name": "greet"}


def test_add_then_strip_envelope_is_identity():
    for params in [{"name": "greet"}, {"name": "greet", "_meta": {"progressToken": 7}}, {}]:
        assert strip_envelope(add_envelope(params, MODERN)) == params


def test_strip_then_add_envelope_restores_the_modern_request():
    params = {"name": "slow_compute", "arguments": {"seconds": 1}, "_meta": {**META, "progressToken": "p1"}}
    assert add_envelope(strip_envelope(params), read_meta(params)) == params


def test_add_envelope_writes_only_known_keys():
    assert add_envelope({"taskId": "T"}, ModernMeta(protocol_version="2026-07-28")) == {
        "taskId": "T",
        "_meta": {PV: "2026-07-28", CC: {}},
    }


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["progressToken", "x-trace", "com.example/k"]), st.integers() | st.text(max_size=5), max_size=3
    ),
    st.dictionaries(st.sampled_from(["name", "arguments", "cursor", "taskId"]), st.text(max_size=5), max_size=3),
)
def test_envelope_round_trip_keeps_every_other_meta_key(other_meta, body):
    params = {**body, "_meta": {**META, **other_meta}}
    stripped = strip_envelope(params)
    assert stripped == ({**body, "_meta": other_meta} if other_meta else body)
    assert add_envelope(stripped, read_meta(params)) == params


# --- results ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", sorted(CACHEABLE_METHODS))
def test_cacheable_results_get_ttlMs_and_private_cache_scope(method):
    assert complete_result(method, {"tools": []}) == {"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
    assert complete_result(method, {"tools": []}, cache_ttl_ms=30000) == {
        "tools": [],
        "resultType": "complete",
        "ttlMs": 30000,
        "cacheScope": "private",
    }


@pytest.mark.parametrize("method", ["tools/call", "prompts/get", "completion/complete", "tasks/get"])
def test_other_results_get_only_result_type_complete(method):
    result = {"content": [{"type": "text", "text": "Hello, World!"}], "isError": False}
    assert complete_result(method, result, cache_ttl_ms=30000) == {**result, "resultType": "complete"}


def test_cacheable_methods_are_the_list_results_read_and_discover():
    assert CACHEABLE_METHODS == {
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "server/discover",
    }


def test_with_server_info_keeps_other_meta():
    result = {"resultType": "complete", "_meta": {"fastmcp": {"wrap_result": True}}}
    assert with_server_info(result, {"name": "mcp-tasks-proxy", "version": "0.1.0"}) == {
        "resultType": "complete",
        "_meta": {
            "fastmcp": {"wrap_result": True},
            "io.modelcontextprotocol/serverInfo": {"name": "mcp-tasks-proxy", "version": "0.1.0"},
        },
    }


# --- upstream client capabilities (§4.1) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("caps", "expected"),
    [
        (FASTMCP4_CAPS, {"elicitation": {"form": {}, "url": {}}}),
        ({"elicitation": {}, "sampling": {}, "extensions": {TASKS: {}}}, {"elicitation": {}, "sampling": {}}),
        ({}, {}),
        ({"roots": {"listChanged": True}, "experimental": {"x": {}}, "tasks": {"list": {}}}, {"roots": {"listChanged": True}}),
        ({"elicitation": True, "sampling": None, "roots": {}}, {"roots": {}}),
    ],
    ids=["fastmcp4", "conformance", "none", "roots-only", "non-objects-dropped"],
)
def test_upstream_session_declares_only_elicitation_sampling_and_roots(caps, expected):
    assert upstream_client_capabilities(caps) == expected


def test_session_meta_carries_the_sessions_log_level_upstream_and_read_meta_reads_it_back():
    meta = session_meta({"elicitation": {"form": {}}, "experimental": {}}, {"name": "c", "version": "1"}, "warning")
    assert meta.log_level == "warning"
    params = add_envelope({"name": "greet"}, meta)
    assert params["_meta"]["io.modelcontextprotocol/logLevel"] == "warning"
    assert read_meta(params) == meta
    quiet = session_meta({}, None)
    assert quiet.log_level is None
    assert "io.modelcontextprotocol/logLevel" not in add_envelope({}, quiet)["_meta"]
    assert read_meta(add_envelope({}, quiet)) == quiet


@pytest.mark.parametrize("level", ["bogus", "DEBUG", "", 5, ["debug"]], ids=["word", "upper", "empty", "number", "list"])
def test_a_log_level_that_is_no_logging_level_is_32602(level):
    meta = {META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {}, META_LOG_LEVEL: level}
    with pytest.raises(McpError) as raised:
        read_meta({"_meta": meta})
    assert (raised.value.code, raised.value.message) == (
        -32602,
        "Invalid _meta key 'io.modelcontextprotocol/logLevel': expected one of debug, info, notice, warning, error, critical, alert, emergency",
    )


def test_a_log_level_of_null_or_absent_asks_for_no_log_messages():
    meta = {META_PROTOCOL_VERSION: "2026-07-28", META_CLIENT_CAPABILITIES: {}}
    assert read_meta({"_meta": meta}).log_level is None
    assert read_meta({"_meta": {**meta, META_LOG_LEVEL: None}}).log_level is None
    assert read_meta({"_meta": {**meta, META_LOG_LEVEL: "notice"}}).log_level == "notice"
