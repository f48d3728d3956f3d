"""JSON-RPC bodies read and written by orjson where it reads and writes what the standard library
does, and by the standard library everywhere else (`translators.jsonrpc`, docs/decisions.md §191).
The proxy's answers must not depend on which of the two read or wrote a message: the same values,
the same refusals in the same words."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from translators import jsonrpc
from translators.errors import McpError

_STANDARD = json.JSONDecoder()


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types all the way down (1 is not 1.0, -0.0 is not 0.0, key order counts)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return bool(a == b)


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
_NUMBERS = st.one_of(
    st.integers(),  # small and beyond 64 bits alike
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), _NUMBERS, _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)),
    max_leaves=20,
)
_OBJECTS = st.dictionaries(_TEXT, _VALUES, max_size=5)


@settings(max_examples=600, deadline=None)
@given(_OBJECTS, st.booleans())
def test_a_body_reads_as_the_standard_decoder_reads_it(value, ascii_only):
    body = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert _same(jsonrpc.parse_json(body), _STANDARD.decode(body.decode()))


@settings(max_examples=600, deadline=None)
@given(_OBJECTS)
def test_a_written_message_reads_back_as_the_same_values(value):
    assert _same(_STANDARD.decode(jsonrpc.dumps(value).decode()), value)


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), _TEXT),
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_TEXT, inner, max_size=4)),
        max_leaves=20,
    )
)
def test_without_floats_a_message_is_written_byte_for_byte_as_the_standard_encoder_writes_it(value):
    message = {"jsonrpc": "2.0", "id": 1, "result": {"value": value}}
    assert jsonrpc.dumps(message) == json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize(
    ("body", "value"),
    [
        (b'{"n":123456789012345678901234567890}', 123456789012345678901234567890),
        (b'{"n":-9223372036854775809}', -9223372036854775809),
        (b'{"n":18446744073709551616}', 18446744073709551616),
        (b'{"n":1.0000000000000000000001}', 1.0),
    ],
    ids=["beyond-64-bits", "below-int64", "beyond-uint64", "long-mantissa"],
)
def test_a_number_of_many_digits_reads_exactly(body, value):
    read = jsonrpc.parse_json(body)
    assert _same(read, {"n": value})


@pytest.mark.parametrize(
    ("value", "body"),
    [
        (2**70, b'{"n":1180591620717411303424}'),
        (-(2**64), b'{"n":-18446744073709551616}'),
        ("\ud800", b'{"n":"\\ud800"}'),
    ],
    ids=["beyond-64-bits", "below-int64", "lone-surrogate"],
)
def test_what_orjson_refuses_to_write_is_written_by_the_standard_encoder(value, body):
    assert jsonrpc.dumps({"n": value}) == body


def test_a_key_that_is_not_a_string_is_written_as_the_standard_encoder_writes_it():
    assert jsonrpc.dumps({"n": {1: "one", None: "none"}}) == b'{"n":{"1":"one","null":"none"}}'


def test_nesting_deeper_than_orjson_writes_is_written_by_the_standard_encoder():
    value: Any = "leaf"
    for _ in range(300):
        value = [value]
    assert jsonrpc.dumps({"n": value}) == b'{"n":' + b"[" * 300 + b'"leaf"' + b"]" * 300 + b"}"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"a":[1,]}', "Parse error: Expecting value at line 1, column 9"),
        (b'{"a":01}', "Parse error: Expecting ',' delimiter at line 1, column 7"),
        (b'{"a":1e400}', "Parse error: number out of range"),
        (b'{"a":"x\x01y"}', "Parse error: Invalid control character at at line 1, column 8"),
        (b'{"a":1} x', "Parse error: Extra data at line 1, column 9"),
    ],
    ids=["trailing-comma", "leading-zero", "infinite", "control-character", "extra-data"],
)
def test_a_refused_body_is_refused_in_the_standard_decoders_words(body, message):
    with pytest.raises(McpError) as raised:
        jsonrpc.parse_json(body)
    assert (raised.value.code, raised.value.message) == (-32700, message)


@settings(max_examples=300, deadline=None)
@given(_OBJECTS, st.booleans())
def test_a_backends_answer_reads_as_json_loads_reads_it(value, ascii_only):
    body = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert _same(jsonrpc.loads(body), json.loads(body))


@pytest.mark.parametrize(
    ("body", "value"),
    [
        (b'{"n":"\\ud800"}', "\ud800"),
        (b'{"n":123456789012345678901234567890}', 123456789012345678901234567890),
    ],
    ids=["lone-surrogate", "beyond-64-bits"],
)
def test_a_backends_answer_that_orjson_would_refuse_or_misread_reads_as_json_loads_reads_it(body, value):
    assert _same(jsonrpc.loads(body), {"n": value})


def test_a_backends_nan_is_taken_as_json_loads_takes_it():
    read = jsonrpc.loads(b'{"n":NaN}')["n"]
    assert (type(read), math.isnan(read)) == (float, True)


def test_a_backends_answer_that_is_not_json_raises_what_json_loads_raises():
    with pytest.raises(json.JSONDecodeError) as raised:
        jsonrpc.loads(b'{"n":}')
    assert (raised.value.msg, raised.value.pos) == ("Expecting value", 5)


def _nested_body(depth: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"a":' + b"[" * depth + b"1" + b"]" * depth + b"}}"


def test_a_body_nested_500_deep_reads_as_the_standard_decoder_reads_it():
    body = _nested_body(500)
    expected = _STANDARD.decode(body.decode())
    assert jsonrpc.parse_json(body) == expected  # (a recursive `_same` would itself nest too deeply here)
    assert jsonrpc.loads(body) == expected


@pytest.mark.parametrize("depth", [1000, 1024])
def test_a_body_nested_beyond_the_standard_decoders_reach_is_refused_as_it_always_was(depth):
    # orjson reads up to 1,024 levels; the standard decoder refuses below 1,000 (less the stack).
    body = _nested_body(depth)
    with pytest.raises(McpError) as raised:
        jsonrpc.parse_json(body)
    assert (raised.value.code, raised.value.message) == (-32700, "Parse error: nested too deeply")
    with pytest.raises(RecursionError):
        jsonrpc.loads(body)


def test_an_ordered_dict_is_written_in_its_own_order():
    from collections import OrderedDict

    ordered = OrderedDict(a=1, b=2, c=3)
    ordered.move_to_end("a")
    assert jsonrpc.dumps({"n": ordered}) == b'{"n":{"b":2,"c":3,"a":1}}'


def test_a_value_the_standard_encoder_refuses_is_still_refused():
    import dataclasses
    import datetime

    @dataclasses.dataclass
    class Point:
        x: int

    for value in (datetime.datetime(2026, 12, 7), Point(1)):
        with pytest.raises(TypeError):
            jsonrpc.dumps({"n": value})
