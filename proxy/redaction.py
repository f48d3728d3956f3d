"""What a configuration error may repeat of the value given (`proxy.config`): secrets never, a URL
without its password or query."""

from __future__ import annotations

from typing import Any

SECRET_KEYS = frozenset({"status_token", "headers", "probe_headers", "env"})
"""Keys whose values may be secrets (a bearer token, an upstream `Authorization` header, the
probe's credentials, a stdio server's credentials in its environment): an error about one never
repeats the value given."""


def given_value(loc: tuple[int | str, ...], given: Any) -> str:
    """What an error says was given: the value itself, or for a key of `SECRET_KEYS` (at any depth
    of `loc`) only its length (text) or its type: `a string of 9 characters, not shown`. A value
    that holds such keys (a whole `[[upstream]]` table or the list of them, for a check across
    tables) is shown with each of their values, and any password in a URL, replaced by `***`."""
    if not SECRET_KEYS.intersection(str(p) for p in loc):
        return repr(redacted(given))
    if isinstance(given, str):
        return f"a string of {len(given)} characters, not shown"
    return f"a value of type {type(given).__name__}, not shown"


def redacted(value: Any) -> Any:
    """`value` with the values of `SECRET_KEYS`, and passwords in `url`s, replaced by `***`."""
    if isinstance(value, dict):
        return {k: "***" if k in SECRET_KEYS else (shown_url(v) if k == "url" else redacted(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v) for v in value]
    return shown_url(value) if isinstance(value, str) and "://" in value else value


def shown_url(url: Any) -> Any:
    """A URL with its password and its query (which may carry an API key) replaced by `***`."""
    if not isinstance(url, str):
        return url
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    user, at, host = authority.rpartition("@")
    if at:
        authority = (user.split(":", 1)[0] + ":***" if ":" in user else user) + "@" + host
    path, question, _query = tail.partition("?")
    return f"{scheme}://{authority}{slash}{path}{'?***' if question else ''}"
