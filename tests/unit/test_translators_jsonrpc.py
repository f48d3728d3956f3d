"""JSON-RPC framing (`translators.jsonrpc`): docs/behaviour.md §6 "Bad input" (-32700 / -32600) and
the classification of one message as request, notification or response."""

from __future__ import annotations

import json

import pytest

from translators import jsonrpc
from translators.errors import McpError
from translators.jsonrpc import Message, classify, parse


def _error(body: bytes | str) -> McpError:
    with pytest.raises(McpError) as info:
        parse(body)
    return info.value


# --- -32700 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [b"", b"{", b"not json", b'{"jsonrpc":"2.0",', b"{'jsonrpc':'2.0'}", '{"a": }'],
    ids=["empty", "open-brace", "text", "truncated", "single-quotes", "str-missing-value"],
)
def test_malformed_json_is_32700(body):
    assert _error(body).code == -32700


@pytest.mark.parametrize(
    "body",
    [b'{"jsonrpc":"2.0","id":1,"method":"\xff"}', b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\xc3\x28"}}'],
    ids=["0xff", "bad-continuation"],
)
def test_bad_utf8_is_32700(body):
    assert _error(body).code == -32700


def test_deeply_nested_malformed_json_is_32700_not_a_crash():
    # Well under the 4 MiB body limit; must be answered -32700 like any other bad JSON.
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + b"[" * 100_000
    assert _error(body).code == -32700


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_json_number_is_32700(literal):
    # RFC 8259 has no NaN/Infinity; accepting them would forward non-JSON upstream
    # (`jsonrpc.dumps` writes them back out as NaN/Infinity).
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get-sum","arguments":{"a":' + literal + b"}}}"
    assert _error(body).code == -32700


# --- -32600 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj",
    [
        [],
        [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}],
        "tools/list",
        42,
        None,
        True,
    ],
    ids=["empty-list", "batch", "string", "number", "null", "bool"],
)
def test_non_object_is_32600(obj):
    assert _error(json.dumps(obj)).code == -32600


@pytest.mark.parametrize(
    "obj",
    [
        {"id": 1, "method": "tools/list"},
        {"jsonrpc": "1.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": 2.0, "id": 1, "method": "tools/list"},
    ],
    ids=["missing-jsonrpc", "jsonrpc-1.0", "jsonrpc-number"],
)
def test_wrong_jsonrpc_version_is_32600(obj):
    assert _error(json.dumps(obj)).code == -32600


@pytest.mark.parametrize("id_", [True, False, 1.5, None, [1], {"a": 1}], ids=["true", "false", "float", "null", "list", "object"])
def test_request_with_invalid_id_is_32600(id_):
    assert _error(json.dumps({"jsonrpc": "2.0", "id": id_, "method": "tools/list"})).code == -32600


@pytest.mark.parametrize("params", [[], [1, 2], "x", 1, None], ids=["empty-list", "list", "string", "number", "null"])
def test_non_object_params_is_32600(params):
    assert _error(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})).code == -32600


@pytest.mark.parametrize("method", ["", 5, None, ["tools/list"]], ids=["empty", "number", "null", "list"])
def test_bad_method_is_32600(method):
    assert _error(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method})).code == -32600


@pytest.mark.parametrize(
    "obj",
    [
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "greet"}, "result": {}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "error": {"code": -32603, "message": "m"}},
        {"jsonrpc": "2.0", "id": 4, "method": "ping", "result": {}, "error": {"code": -32603, "message": "m"}},
    ],
    ids=["method-and-result", "method-and-error", "method-result-and-error"],
)
def test_a_method_beside_a_result_or_an_error_is_an_invalid_request_naming_its_id(obj):
    """Issue 20 item 16: it was classified as a request (and then answered -32602)."""
    error = _error(json.dumps(obj))
    assert (error.code, error.message, error.request_id) == (
        -32600,
        'Invalid request: a message with "method" has no "result" or "error"',
        4,
    )
    notification = _error(json.dumps({k: v for k, v in obj.items() if k != "id"}))
    assert (notification.code, notification.request_id) == (-32600, None)


@pytest.mark.parametrize(
    "obj",
    [
        {"jsonrpc": "2.0"},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "result": {}},
        {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "m"}},
        {"jsonrpc": "2.0", "id": 1, "result": []},
        {"jsonrpc": "2.0", "id": 1, "result": "ok"},
        {"jsonrpc": "2.0", "id": 1, "error": "boom"},
        {"jsonrpc": "2.0", "id": True, "result": {}},
        {"jsonrpc": "2.0", "id": 1.5, "result": {}},
    ],
    ids=[
        "nothing",
        "id-only",
        "result-without-id",
        "result-and-error",
        "result-list",
        "result-string",
        "error-string",
        "bool-id",
        "float-id",
    ],
)
def test_message_without_method_result_or_error_or_malformed_response_is_32600(obj):
    assert _error(json.dumps(obj)).code == -32600


# --- classification ------------------------------------------------------------------------------


def test_request_is_classified_with_its_id_method_and_params():
    raw = {"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": "T"}}
    message = parse(json.dumps(raw).encode())
    assert message == Message("request", raw)
    assert (message.id, message.method, message.params) == (3, "tasks/get", {"taskId": "T"})


def test_request_with_string_id_and_no_params_has_empty_params():
    raw = {"jsonrpc": "2.0", "id": "task-abc-1", "method": "tools/list"}
    message = parse(json.dumps(raw))
    assert message == Message("request", raw)
    assert message.params == {}


def test_notification_has_no_id():
    raw = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    message = parse(json.dumps(raw))
    assert message == Message("notification", raw)
    assert message.id is None


def test_status_notification_with_envelope_meta_is_a_notification():
    # FastMCP 3 puts related-task _meta at the envelope level.
    raw = {
        "method": "notifications/tasks/status",
        "params": {"taskId": "T", "status": "working", "createdAt": "a", "lastUpdatedAt": "b", "ttl": 60000},
        "jsonrpc": "2.0",
        "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "T"}},
    }
    assert parse(json.dumps(raw)) == Message("notification", raw)


@pytest.mark.parametrize(
    "raw",
    [
        {"jsonrpc": "2.0", "id": 4, "result": {"content": [], "isError": False}},
        {"jsonrpc": "2.0", "id": "task-abc-1", "result": {"action": "accept", "content": {"name": "Ada"}}},
        {"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "Task not found: no-such-task"}},
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "Bad Request: Server not initialized"}},
        {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, "message": "Bad Request: Missing session ID"}},
    ],
    ids=["result", "elicit-answer", "error", "error-null-id", "mcp1-missing-session"],
)
def test_response_is_classified_as_response(raw):
    assert classify(raw) == Message("response", raw)


def test_server_request_with_string_id_is_a_request():
    # mcp 1.30 elicitation on the tasks/result stream
    raw = {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": "Name?"},
        "jsonrpc": "2.0",
        "id": "task-T-139963683430608",
    }
    assert classify(raw) == Message("request", raw)


# --- builders ---------------------------------------------------------------------------------


def test_builders_write_jsonrpc_2_0_messages():
    assert jsonrpc.request(1, "tasks/get", {"taskId": "T"}) == {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tasks/get",
        "params": {"taskId": "T"},
    }
    assert jsonrpc.request("a", "tools/list") == {"jsonrpc": "2.0", "id": "a", "method": "tools/list"}
    assert jsonrpc.notification("notifications/initialized") == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert jsonrpc.result_response(7, {"resultType": "complete"}) == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"resultType": "complete"},
    }
    assert jsonrpc.error_response(3, McpError(-32602, "Unknown task")) == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32602, "message": "Unknown task"},
    }


def test_error_response_without_a_request_id_omits_id():
    # Both MCP schemas make JSONRPCErrorResponse.id optional and type it string | integer (no null).
    assert jsonrpc.error_response(None, McpError(-32700, "Parse error: JSONDecodeError")) == {
        "jsonrpc": "2.0",
        "error": {"code": -32700, "message": "Parse error: JSONDecodeError"},
    }


def test_dumps_is_compact_utf8_and_parses_back():
    message = jsonrpc.result_response(1, {"content": [{"type": "text", "text": "Hello, 世界"}]})
    body = jsonrpc.dumps(message)
    assert body == '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Hello, 世界"}]}}'.encode()
    assert parse(body) == Message("response", message)


def test_an_invalid_request_names_its_id_when_the_id_is_readable():
    with pytest.raises(McpError) as raised:
        parse(b'{"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":["debug"]}')
    assert (raised.value.code, raised.value.message, raised.value.request_id) == (
        -32600,
        'Invalid request: "params" must be an object',
        3,
    )
    with pytest.raises(McpError) as raised:
        classify({"jsonrpc": "2.0", "id": True, "method": 5})
    assert (raised.value.code, raised.value.request_id) == (-32600, None)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet\xed\xa0\x80"}}',
            "Parse error: not UTF-8 text at byte 69",
        ),
        (
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet\ud800"}}'.encode("utf-16-le", "surrogatepass"),
            "Parse error: not UTF-16-LE text at byte 138",
        ),
        (
            '\ufeff{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet\ud800"}}'.encode(
                "utf-16-be", "surrogatepass"
            ),
            "Parse error: not UTF-16-BE text at byte 140",
        ),
    ],
    ids=["utf-8 raw surrogate", "utf-16 lone code unit", "utf-16 bom lone code unit"],
)
def test_raw_unpaired_surrogates_are_not_text(body, message):
    with pytest.raises(McpError) as raised:
        parse(body)
    assert (raised.value.code, raised.value.message) == (-32700, message)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "Parse error: Expecting property name enclosed in double quotes at line 1, column 2"),
        (b'{"jsonrpc":"2.0",\n "id": 1\n "method":"ping"}', "Parse error: Expecting ',' delimiter at line 3, column 2"),
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":[1,2,}}', "Parse error: Expecting value at line 1, column 60"),
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":NaN}}', "Parse error: NaN is not JSON"),
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":1e999}}', "Parse error: number out of range"),
        (b"[" * 100_000 + b"]" * 100_000, "Parse error: nested too deeply"),
    ],
    ids=["not json", "missing comma on line 3", "trailing comma", "NaN", "out of range", "too deep"],
)
def test_a_parse_error_says_where_the_body_failed(body, message):
    with pytest.raises(McpError) as raised:
        parse(body)
    assert (raised.value.code, raised.value.message) == (-32700, message)


def test_an_escaped_lone_surrogate_in_a_utf16_body_is_refused_like_in_utf8():
    body = '{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":"\\ud800"}}'
    for encoded in (body.encode(), body.encode("utf-16")):
        with pytest.raises(McpError) as raised:
            parse(encoded)
        assert (raised.value.code, raised.value.message, raised.value.request_id) == (
            -32700,
            "Parse error: a string holds an unpaired UTF-16 surrogate",
            1,
        )


def test_a_paired_surrogate_in_a_utf16_body_is_one_code_point():
    body = '{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":"\\ud83d\\ude00 \U0001f600"}}'
    assert parse(body.encode("utf-16-le")).params == {"a": "\U0001f600 \U0001f600"}


def test_a_str_holding_a_lone_surrogate_is_refused():
    with pytest.raises(McpError) as raised:
        parse('{"jsonrpc":"2.0","id":1,"method":"x\ud800"}')
    assert (raised.value.code, raised.value.message) == (-32700, "Parse error: a string holds an unpaired UTF-16 surrogate")


def test_an_error_response_without_an_id_is_read_back_by_unaddressed_error():
    written = jsonrpc.dumps(jsonrpc.error_response(None, McpError(-32600, "Session not found")))
    assert jsonrpc.unaddressed_error(written) == {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Session not found"}}
    with pytest.raises(McpError) as refused:
        parse(written)  # `parse` takes only messages with an id
    assert refused.value.code == -32600


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"x"}}',  # addressed: parse's
        b'{"jsonrpc":"1.0","error":{"code":-32600,"message":"x"}}',
        b'{"jsonrpc":"2.0","error":{"code":"-32600","message":"x"}}',
        b'{"jsonrpc":"2.0","error":{"code":true,"message":"x"}}',
        b'{"jsonrpc":"2.0","error":{"code":-32600}}',
        b'{"jsonrpc":"2.0","error":"Session not found"}',
        b'{"jsonrpc":"2.0","error":{"code":-32600,"message":"x"},"result":{}}',
        b"[]",
        b"<html>Not Found</html>",
        b"",
    ],
)
def test_unaddressed_error_takes_nothing_else(body):
    assert jsonrpc.unaddressed_error(body) is None
