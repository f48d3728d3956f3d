"""The id of a JSON-RPC response read from the two ends of a line too long to keep.

A stdio server's output line over `max_line_bytes` is not kept (docs/behaviour.md §7), but the
request it answers must not wait for ever: it is answered with an error naming the limit
(docs/decisions.md §72). Which request that is, is read from the line's first and last bytes,
the only parts kept: the top-level members of the JSON object found there, forwards from its
opening brace and backwards from its closing one. Serializers put `id` first (Python's `mcp`:
`jsonrpc`, `id`, `result`) or last (the TypeScript SDK: `result`, `jsonrpc`, `id`), so the two
ends show it in practice; a member that is cut by the kept part is not read. JSON text per
RFC 8259; a JSON-RPC response has `result` or `error` and no `method` (JSON-RPC 2.0 §5).
"""

from __future__ import annotations

import json

from .jsonrpc import RequestId

_SPACE = b" \t\r\n"
_ENDS_SCALAR = b',:[]{}"' + _SPACE


def response_id(head: bytes, tail: bytes) -> RequestId | None:
    """The top-level `id` of the JSON-RPC response whose line starts with `head` and ends with
    `tail` (either may be the whole line; they may overlap). None unless one of them shows the
    `id` (a string or an integer) and one shows a `result` or `error` member, and neither shows a
    `method` member (then the line is a request or a notification, which nothing waits on)."""
    members = _trailing_members(tail)
    members.update(_leading_members(head))
    if "method" in members or not ("result" in members or "error" in members):
        return None
    raw = members.get("id")
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def _skip_space(text: bytes, i: int) -> int:
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i


def _skip_space_back(text: bytes, i: int) -> int:
    while i >= 0 and text[i] in _SPACE:
        i -= 1
    return i


def _string_end(text: bytes, i: int) -> int | None:
    """The index after the string whose opening quote is at `i`; None when it is cut."""
    i += 1
    while i < len(text):
        byte = text[i]
        if byte == 0x5C:  # backslash: the next byte is escaped
            i += 2
            continue
        if byte == 0x22:
            return i + 1
        i += 1
    return None


def _value_end(text: bytes, i: int) -> int | None:
    """The index after the JSON value starting at `i`; None when it is cut."""
    if i >= len(text):
        return None
    if text[i] == 0x22:
        return _string_end(text, i)
    if text[i] in b"{[":
        depth = 0
        while i < len(text):
            byte = text[i]
            if byte == 0x22:
                end = _string_end(text, i)
                if end is None:
                    return None
                i = end
                continue
            if byte in b"{[":
                depth += 1
            elif byte in b"}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return None
    start = i
    while i < len(text) and text[i] not in _ENDS_SCALAR:
        i += 1
    return i if i < len(text) and i > start else None


def _key(raw: bytes) -> str | None:
    try:
        key = json.loads(raw)
    except ValueError:
        return None
    return key if isinstance(key, str) else None


def _leading_members(text: bytes) -> dict[str, bytes | None]:
    """Top-level member name → its value's JSON text (None when the value is cut), read forwards
    from the object's opening brace, up to the first member that is cut."""
    members: dict[str, bytes | None] = {}
    i = _skip_space(text, 0)
    if text[i : i + 1] != b"{":
        return members
    i += 1
    while True:
        i = _skip_space(text, i)
        if text[i : i + 1] == b",":
            i += 1
            continue
        if text[i : i + 1] != b'"':
            return members  # the end of the object, or of what is kept
        end = _string_end(text, i)
        if end is None:
            return members
        key = _key(text[i:end])
        i = _skip_space(text, end)
        if key is None or text[i : i + 1] != b":":
            return members
        i = _skip_space(text, i + 1)
        end = _value_end(text, i)
        members.setdefault(key, text[i:end] if end is not None else None)
        if end is None:
            return members
        i = end


def _escaped(text: bytes, quote: int) -> bool | None:
    """Whether the quote at `quote` is escaped (an odd run of backslashes before it); None when
    that run reaches the start of `text` (it cannot be told)."""
    run = 0
    i = quote - 1
    while i >= 0 and text[i] == 0x5C:
        run += 1
        i -= 1
    if i < 0 and run:
        return None
    return run % 2 == 1


def _string_start(text: bytes, quote: int) -> int | None:
    """The index of the opening quote of the string whose closing quote is at `quote`; None when
    it is cut (or cannot be told)."""
    i = quote - 1
    while i >= 0:
        if text[i] == 0x22:
            escaped = _escaped(text, i)
            if escaped is None:
                return None
            if not escaped:
                return i
        i -= 1
    return None


def _value_start(text: bytes, last: int) -> int | None:
    """The index of the first byte of the JSON value whose last byte is at `last`; None when it is cut."""
    if text[last] == 0x22:
        return _string_start(text, last)
    if text[last] in b"}]":
        depth = 0
        i = last
        while i >= 0:
            byte = text[i]
            if byte == 0x22:
                start = _string_start(text, i)
                if start is None:
                    return None
                i = start - 1
                continue
            if byte in b"}]":
                depth += 1
            elif byte in b"{[":
                depth -= 1
                if depth == 0:
                    return i
            i -= 1
        return None
    i = last
    while i >= 0 and text[i] not in _ENDS_SCALAR:
        i -= 1
    return i + 1 if i >= 0 and i < last else None


def _trailing_members(text: bytes) -> dict[str, bytes | None]:
    """Top-level member name → its value's JSON text, read backwards from the object's closing
    brace, up to the first member that is cut."""
    members: dict[str, bytes | None] = {}
    i = _skip_space_back(text, len(text) - 1)
    if i < 0 or text[i] != 0x7D:
        return members
    i -= 1
    while True:
        last = _skip_space_back(text, i)
        if last < 0 or text[last] == 0x7B:
            return members  # cut, or the start of the object
        start = _value_start(text, last)
        if start is None:
            return members
        colon = _skip_space_back(text, start - 1)
        if colon < 0 or text[colon] != 0x3A:
            return members
        quote = _skip_space_back(text, colon - 1)
        if quote < 0 or text[quote] != 0x22:
            return members
        opening = _string_start(text, quote)
        if opening is None:
            return members
        key = _key(text[opening : quote + 1])
        if key is None:
            return members
        members.setdefault(key, text[start : last + 1])
        before = _skip_space_back(text, opening - 1)
        if before < 0 or text[before] != 0x2C:
            return members  # the opening brace, or the start of what is kept
        i = before - 1
