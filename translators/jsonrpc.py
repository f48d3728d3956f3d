"""JSON-RPC 2.0 framing: parse one message, build requests, responses and errors.

Every MCP wire (session and modern) carries exactly one JSON-RPC message per POST body; batches
were removed in 2025-06-18. Source: JSON-RPC 2.0 §4–§5; MCP core 2025-11-25 "Transports".
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Literal

import orjson

from .errors import INVALID_REQUEST, PARSE_ERROR, McpError

RequestId = str | int
Kind = Literal["request", "notification", "response"]


class Message:
    """One parsed JSON-RPC message.

    `kind` is "request" (method + id), "notification" (method, no id) or "response"
    (id + result or error). `raw` is the decoded object; `id` its id (None when absent),
    `method` its method ("" for a response) and `params` its params (`{}` when absent), read
    from `raw` once: a relayed request consults them several times on its way through.
    Read-only by convention; equal when kind and raw are.
    """

    __slots__ = ("kind", "raw", "id", "method", "params")

    def __init__(self, kind: Kind, raw: dict[str, Any]):
        self.kind: Kind = kind
        self.raw = raw
        self.id: RequestId | None = raw.get("id")
        method = raw.get("method")
        self.method: str = method if isinstance(method, str) else ""
        self.params: dict[str, Any] = raw.get("params") or {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and other.kind == self.kind and other.raw == self.raw

    __hash__ = None  # type: ignore[assignment]  # `raw` is a dict

    def __repr__(self) -> str:
        return f"Message(kind={self.kind!r}, raw={self.raw!r})"


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _readable_id(obj: dict[str, Any]) -> RequestId | None:
    request_id = obj.get("id")
    return request_id if _valid_id(request_id) else None


def classify(obj: Any) -> Message:
    """Classify a decoded JSON value as a JSON-RPC message.

    Raises `McpError(-32600)` when it is not a single JSON-RPC 2.0 request, notification or
    response (arrays, wrong `jsonrpc`, non-string method, non-object params, bad id, a `method`
    beside a `result` or an `error`).
    """
    if isinstance(obj, list):
        raise McpError(INVALID_REQUEST, "Batches are not supported: send one JSON-RPC message per request")
    if not isinstance(obj, dict):
        raise McpError(INVALID_REQUEST, "Not a JSON-RPC message: expected a JSON object")
    if obj.get("jsonrpc") != "2.0":
        raise McpError(INVALID_REQUEST, 'Not a JSON-RPC 2.0 message: "jsonrpc" must be "2.0"')
    if "method" in obj:
        # An invalid request names its id in the answer when the id is readable.
        if not isinstance(obj["method"], str) or not obj["method"]:
            raise McpError(INVALID_REQUEST, 'Invalid request: "method" must be a non-empty string', request_id=_readable_id(obj))
        if "params" in obj and not isinstance(obj["params"], dict):
            raise McpError(INVALID_REQUEST, 'Invalid request: "params" must be an object', request_id=_readable_id(obj))
        if "result" in obj or "error" in obj:
            # A request (or notification) carries no "result" or "error" (JSON-RPC 2.0 §4, §5): such
            # a message is neither, so it is an invalid request, not a request with bad params.
            raise McpError(
                INVALID_REQUEST,
                'Invalid request: a message with "method" has no "result" or "error"',
                request_id=_readable_id(obj),
            )
        if "id" not in obj:
            return Message("notification", obj)
        if not _valid_id(obj["id"]):
            raise McpError(INVALID_REQUEST, 'Invalid request: "id" must be a string or an integer')
        return Message("request", obj)
    if "id" in obj and ("result" in obj) != ("error" in obj):
        if obj["id"] is not None and not _valid_id(obj["id"]):
            raise McpError(INVALID_REQUEST, 'Invalid response: "id" must be a string or an integer')
        if "result" in obj and not isinstance(obj["result"], dict):
            raise McpError(INVALID_REQUEST, 'Invalid response: "result" must be an object')
        if "error" in obj and not isinstance(obj["error"], dict):
            raise McpError(INVALID_REQUEST, 'Invalid response: "error" must be an object')
        return Message("response", obj)
    raise McpError(INVALID_REQUEST, "Not a JSON-RPC message: no method, result or error")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
"""One decoder for every message (`json.loads` with hooks would build a new one per call)."""
_SHAPE = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x7B if byte in b"{[" else 0x20 for byte in range(256))
"""A `bytes.translate` table giving a body's shape: every digit becomes "0", every "{" and "[" a
"{", every other byte a space."""
_LONG_RUN = b"0" * 19
"""19 digits in a row (in a body's `_SHAPE`): a number that may not fit 64 bits, which orjson
would read as a float where the standard decoder keeps it exact, or a string holding such digits.
Either takes the standard decoder. (The translation, this search and `_MOST_OPENED`'s count cost
about 5,500 instructions on a 190-byte body; `re.search(rb"[0-9]{19}")` alone about 29,000.)"""
_MOST_OPENED = 512
"""More objects and arrays than this (a body's "{" and "[", strings' too) take the standard
decoder: it refuses nesting a little below 1,000 levels, less the frames already on the stack,
where orjson reads up to 1,024. Below this count no body nests deep enough for either to refuse."""
_WRITE_OPTIONS = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
"""What orjson would write its own way, refused instead so that the standard encoder writes it as
it always has: a subclass of `str`, `int`, `dict` or `list` (an `OrderedDict` in its own order,
a class's own `items()`), a dataclass, a date or time (which it refuses)."""
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return _LONE_SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def parse_error_message(exc: BaseException) -> str:
    """The message of a -32700 for a body that failed to decode: where it failed, when known.

    `json.JSONDecodeError` gives `Parse error: <what> at line L, column C` (both 1-based, the
    column in characters of the decoded text); `UnicodeDecodeError` gives `Parse error: not
    <encoding> text at byte N` (0-based offset into the body); a body nested too deep gives
    `Parse error: nested too deeply`; any other `ValueError` (a number out of range, `NaN`) its
    own message.
    """
    if isinstance(exc, json.JSONDecodeError):
        return f"Parse error: {exc.msg} at line {exc.lineno}, column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return f"Parse error: not {exc.encoding.upper()} text at byte {exc.start}"
    if isinstance(exc, RecursionError):
        return "Parse error: nested too deeply"
    return f"Parse error: {exc}" if str(exc) else f"Parse error: {exc.__class__.__name__}"


def parse(body: bytes | str) -> Message:
    """Decode and classify one JSON-RPC message.

    Raises `McpError(-32700)` for bytes that are not JSON (or not UTF-8, UTF-16 or UTF-32 text, or
    that hold `NaN`, `Infinity`, out-of-range numbers or unpaired surrogates, as raw code units or
    as `\\uD8xx` escapes) and `McpError(-32600)` for JSON that is not a JSON-RPC message.
    """
    return classify(parse_json(body))


_NOT_READ = object()


def _read_fast(body: bytes) -> Any:
    """The value of a JSON object `body` as orjson reads it, where that is the standard decoder's
    value too (docs/decisions.md §191); `_NOT_READ` for a body that is not an object, that may hold
    a number beyond 64 bits (`_LONG_RUN`), that opens more than `_MOST_OPENED` objects and arrays,
    or that orjson refuses: the standard decoder reads those, and says why it refuses, in the
    words it always has."""
    if body[:1] != b"{":
        return _NOT_READ
    shape = body.translate(_SHAPE)
    if _LONG_RUN in shape or shape.count(b"{") > _MOST_OPENED:
        return _NOT_READ
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return _NOT_READ


def loads(body: bytes) -> Any:
    """`json.loads(body)`: the standard decoder's value, and what it refuses (`ValueError`), for a
    backend's answer read as leniently as it always was (`NaN` taken, for one); read by orjson
    where orjson reads the same value (`_read_fast`)."""
    value = _read_fast(body)
    return json.loads(body) if value is _NOT_READ else value


def parse_json(body: bytes | str) -> Any:
    """Decode one JSON value as `parse` does (the same text encodings and refusals, raising
    `McpError(-32700)`), without classifying it."""
    if isinstance(body, bytes):
        value = _read_fast(body)
        if value is not _NOT_READ:
            return value
    try:
        if isinstance(body, bytes):
            # "{" then a non-zero byte is UTF-8 (no BOM begins with "{"; UTF-16/32 put a zero byte
            # first or second), the usual message: no need to ask `json.detect_encoding`. Strict
            # decoding: a raw surrogate (UTF-8 ED A0 80, a lone UTF-16 code unit) is not text.
            utf8 = body[:1] == b"{" and body[1:2] != b"\0"
            text = body.decode("utf-8" if utf8 else json.detect_encoding(body))
        elif _LONE_SURROGATE.search(body):
            raise McpError(PARSE_ERROR, "Parse error: a string holds an unpaired UTF-16 surrogate")
        else:
            text = body
        obj = _DECODER.decode(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise McpError(PARSE_ERROR, parse_error_message(exc)) from None
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(obj):
        # Valid JSON escapes, but no UTF-8 text can carry them onward (a paired surrogate
        # decodes to one code point and passes).
        request_id = obj.get("id") if isinstance(obj, dict) else None
        clean_id = request_id if _valid_id(request_id) and not _has_lone_surrogate(request_id) else None
        raise McpError(PARSE_ERROR, "Parse error: a string holds an unpaired UTF-16 surrogate", request_id=clean_id)
    return obj


def unaddressed_error(body: bytes | str) -> dict[str, Any] | None:
    """A JSON-RPC error response without an id, decoded: `{"jsonrpc": "2.0", "error": {"code": int,
    "message": str, ...}}`, what a server answers a request it could not place (HTTP 404 for an
    unknown session; the MCP schemas' `JSONRPCErrorResponse`, whose `id` may be omitted). None for
    anything else (`parse` takes the messages with an id). Inverse: `error_response(None, error)`."""
    try:
        obj = parse_json(body)
    except McpError:
        return None
    if not isinstance(obj, dict) or obj.keys() != {"jsonrpc", "error"} or obj["jsonrpc"] != "2.0":
        return None
    error = obj["error"]
    code = error.get("code") if isinstance(error, dict) else None
    if not isinstance(code, int) or isinstance(code, bool) or not isinstance(error.get("message"), str):
        return None
    return obj


def request(id: RequestId, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """`{"jsonrpc": "2.0", "id": id, "method": method, "params"?: params}`."""
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """`{"jsonrpc": "2.0", "method": method, "params"?: params}`."""
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def result_response(id: RequestId | None, result: dict[str, Any]) -> dict[str, Any]:
    """`{"jsonrpc": "2.0", "id": id, "result": result}`."""
    return {"jsonrpc": "2.0", "id": id, "result": result}


def response_carrying(id: RequestId | None, answer: Mapping[str, Any]) -> dict[str, Any]:
    """A response to `id` carrying the `result` or `error` member of `answer` (another
    response, e.g. a client's answer passed on to the backend that asked)."""
    return {"jsonrpc": "2.0", "id": id, **{k: v for k, v in answer.items() if k in ("result", "error")}}


def error_response(id: RequestId | None, error: McpError) -> dict[str, Any]:
    """`{"jsonrpc": "2.0", "id": id, "error": {code, message, data?}}`. When the request's id is
    unknown (unparseable body) `id` is omitted, as the MCP schemas' `JSONRPCErrorResponse` allows
    (they do not admit `null`)."""
    if id is None:
        return {"jsonrpc": "2.0", "error": error.to_dict()}
    return {"jsonrpc": "2.0", "id": id, "error": error.to_dict()}


def dumps(message: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON bytes of a message. Strings holding lone surrogates (JSON allows the
    escape `\\ud800`, UTF-8 cannot carry it) are written as ASCII escapes instead.

    orjson writes what it can (docs/decisions.md §191); what it refuses (an integer beyond 64 bits,
    a lone surrogate, a key that is not a string, nesting beyond its limit, and what
    `_WRITE_OPTIONS` keeps from it) the standard encoder writes, as it always has."""
    try:
        return orjson.dumps(message, option=_WRITE_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError
        pass
    text = _COMPACT.encode(message)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _COMPACT_ASCII.encode(message).encode()


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_COMPACT_ASCII = json.JSONEncoder(separators=(",", ":"))
"""`dumps`'s encoders, made once (`json.dumps` makes one per call when given options)."""
