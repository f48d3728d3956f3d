"""The MCP authorization profile as a reverse proxy in front of a protected server sees it: the
backend's Bearer challenge and its protected-resource metadata, rewritten so that they name the
proxy's public URL (docs/configuration.md "Servers behind OAuth"; docs/decisions.md §80, §81).

Sources: MCP core 2025-11-25 and 2026-07-28 "Authorization" (a 401 carries
`WWW-Authenticate: Bearer … resource_metadata="…"`, a 403 `error="insufficient_scope"`);
RFC 6750 §3 (the Bearer challenge and its auth-params); RFC 9728 §3 (the metadata document,
`resource`, `authorization_servers`, `scopes_supported`) and §3.1 (its well-known URL, the
path-suffixed form); RFC 9111 §5.2.2 (`Cache-Control` directives of a cached answer).

Pure functions: headers and documents in, headers and documents out; each rewrite is its own
inverse when given back the value it replaced.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from .errors import INVALID_REQUEST, McpError

WELL_KNOWN: Final = "/.well-known/oauth-protected-resource"
"""RFC 9728 §3.1: the metadata's well-known path, inserted between a resource's host and path."""
CHALLENGE_STATUSES: Final = frozenset({401, 403})
"""A backend's answers that carry a Bearer challenge the client must see (401: no or a bad
token; 403: `insufficient_scope`)."""

_PARAM = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]*)\s*(?:,|$)')


class AuthChallenge(McpError):
    """A backend's Bearer challenge (HTTP 401 or 403 with `WWW-Authenticate: Bearer …`), passed to
    the client with the same status and the header rewritten (`with_resource_metadata`), never as
    a 502 and never a reason to mark the backend down (docs/decisions.md §80).

    `status`: 401 or 403; `www_authenticate`: the backend's header value, as it sent it. The
    JSON-RPC error is -32600 with that status (`challenge_error`)."""

    def __init__(self, status: int, www_authenticate: str, backend: str):
        error = challenge_error(status, www_authenticate, backend)
        super().__init__(error.code, error.message, http_status=status)
        self.status = status
        self.www_authenticate = www_authenticate
        self.backend = backend


def is_bearer_challenge(status: int, www_authenticate: str | Sequence[str] | None) -> bool:
    """Whether an answer of HTTP `status` with these `WWW-Authenticate` values (one, or all of the
    response's) holds a Bearer challenge the proxy relays (`CHALLENGE_STATUSES`, scheme `Bearer`
    among any challenges, case-insensitive: RFC 9110 §11.1, §11.6.1)."""
    if status not in CHALLENGE_STATUSES or not www_authenticate:
        return False
    return bearer_challenge([www_authenticate] if isinstance(www_authenticate, str) else www_authenticate) is not None


_SCHEME_AFTER_COMMA = re.compile(r"\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+(?:\s+|$)(?!=)")


def challenges(www_authenticate: str) -> list[str]:
    """The challenges of one `WWW-Authenticate` value, each `scheme params` (RFC 9110 §11.6.1: a
    comma separates both the auth-params of a challenge and the challenges; a new challenge starts
    where a comma outside a quoted string is followed by a token and a space that is not a param's
    `=`): `DPoP algs="ES256", Bearer scope="a"` → `['DPoP algs="ES256"', 'Bearer scope="a"']`."""
    found: list[str] = []
    start, quoted, escaped = 0, False, False
    for i, char in enumerate(www_authenticate):
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            ahead = _SCHEME_AFTER_COMMA.match(www_authenticate, i + 1)
            if ahead is not None and not www_authenticate[ahead.end() :].startswith("="):
                found.append(www_authenticate[start:i].strip())
                start = i + 1
    found.append(www_authenticate[start:].strip())
    return [challenge for challenge in found if challenge]


def bearer_challenge(values: Sequence[str]) -> str | None:
    """The Bearer challenge among a response's `WWW-Authenticate` values (several headers, or
    several challenges in one), None when there is none; the scheme is case-insensitive."""
    for value in values:
        for challenge in challenges(value):
            if challenge.split(None, 1)[0].lower() == "bearer":
                return challenge
    return None


def bearer_params(www_authenticate: str) -> list[tuple[str, str]]:
    """The auth-params of a Bearer challenge, in order, values unquoted:
    `Bearer error="invalid_token", scope="a b"` → `[("error", "invalid_token"), ("scope", "a b")]`.
    Raises `ValueError` for a header that is not one Bearer challenge of auth-params (RFC 6750 §3)."""
    scheme, _, rest = www_authenticate.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise ValueError(f"not a Bearer challenge: {www_authenticate[:80]!r}")
    params: list[tuple[str, str]] = []
    at = 0
    rest = rest.strip()
    while at < len(rest):
        match = _PARAM.match(rest, at)
        if match is None or match.end() == at:
            raise ValueError(f"not an auth-param list: {rest[at : at + 80]!r}")
        name, value = match.group(1), match.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params.append((name, value))
        at = match.end()
    return params


def format_bearer(params: list[tuple[str, str]]) -> str:
    """The inverse of `bearer_params`: `Bearer name="value", …`, every value quoted (RFC 6750 §3)."""
    quoted = (f'{name}="{value.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"' for name, value in params)
    return ("Bearer " + ", ".join(quoted)).rstrip()


def with_resource_metadata(www_authenticate: str, metadata_url: str) -> str:
    """The challenge with its `resource_metadata` set to `metadata_url` (added last when the backend
    gave none); every other auth-param kept in order. Its inverse is the same call with the value
    it replaced (`resource_metadata_of`). Raises `ValueError` as `bearer_params`."""
    params = bearer_params(www_authenticate)
    # Auth-param names are case-insensitive (RFC 9110 §11.2): `RESOURCE_METADATA=` is the same
    # parameter, and a backend's own URL under any spelling never reaches the client.
    kept = [(name, value) for name, value in params if name.lower() != "resource_metadata"]
    at = next((i for i, (name, _) in enumerate(params) if name.lower() == "resource_metadata"), len(kept))
    return format_bearer([*kept[:at], ("resource_metadata", metadata_url), *kept[at:]])


def resource_metadata_of(www_authenticate: str) -> str | None:
    """The challenge's `resource_metadata` URL, None when it has none or is no Bearer challenge."""
    try:
        return next((value for name, value in bearer_params(www_authenticate) if name.lower() == "resource_metadata"), None)
    except ValueError:
        return None


def challenge_error(status: int, www_authenticate: str, backend: str) -> McpError:
    """The JSON-RPC error of a relayed challenge: -32600 with HTTP `status`, its message
    `Unauthorized: <error_description>` (401) or `Forbidden: <error_description>` (403), naming
    the backend when the challenge describes nothing."""
    try:
        params = dict(bearer_params(www_authenticate))
    except ValueError:
        params = {}
    what = "Unauthorized" if status == 401 else "Forbidden"
    detail = params.get("error_description") or params.get("error") or f"backend {backend!r} asks for authorization"
    return McpError(INVALID_REQUEST, f"{what}: {detail}", http_status=status)


def origin_and_path(url: str) -> tuple[str, str]:
    """An http(s) URL as its origin and its path (query and fragment dropped):
    `https://h:8443/a/b?q` → `("https://h:8443", "/a/b")`. Raises `ValueError` for a URL
    without `scheme://`."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme:
        raise ValueError(f"not an absolute URL: {url[:120]!r}")
    rest = rest.split("#", 1)[0].split("?", 1)[0]
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host}", slash + path


def metadata_url(resource: str) -> str:
    """RFC 9728 §3.1: the metadata URL of the resource `resource` (an http(s) URL):
    `https://h/mcp` → `https://h/.well-known/oauth-protected-resource/mcp`; a resource without a
    path (or `/`) → `https://h/.well-known/oauth-protected-resource`. Query and fragment dropped."""
    origin, path = origin_and_path(resource)
    return origin + WELL_KNOWN + path.rstrip("/")


def resource_of_metadata_url(url: str) -> str:
    """The inverse of `metadata_url`: the resource whose metadata lives at `url`. Raises
    `ValueError` for a URL not under the well-known path."""
    origin, path = origin_and_path(url)
    if not path.startswith(WELL_KNOWN):
        raise ValueError(f"not a protected-resource metadata URL: {url[:120]!r}")
    return origin + path[len(WELL_KNOWN) :]


def metadata_for_resource(document: Any, resource: str) -> dict[str, Any]:
    """A protected-resource metadata document (RFC 9728 §2) with `resource` set to `resource` (the
    proxy's public URL), every other member kept. Its inverse is the same call with the backend's
    `resource`. Raises `ValueError` for a document that is not an object with a string `resource`
    and a non-empty list of string `authorization_servers`."""
    if not isinstance(document, dict) or not isinstance(document.get("resource"), str):
        raise ValueError("protected-resource metadata must be a JSON object with a string resource")
    servers = document.get("authorization_servers")
    if not isinstance(servers, list) or not servers or not all(isinstance(s, str) for s in servers):
        raise ValueError("protected-resource metadata must list its authorization_servers")
    return {**document, "resource": resource}


def authorization_servers(document: dict[str, Any]) -> frozenset[str]:
    """The document's authorization servers as a set of issuer URLs, a trailing slash aside: what
    several backends behind one public URL must agree on (docs/decisions.md §81)."""
    return frozenset(str(s).rstrip("/") for s in document.get("authorization_servers") or ())


def cache_lifetime_ms(cache_control: str | None) -> int:
    """How long the proxy may keep and reuse an answer with this `Cache-Control` (RFC 9111 §5.2.2),
    in ms: `max-age=N` (or `s-maxage`, which wins for a shared cache) → N·1000; `no-store`,
    `no-cache`, `private`, no header or no max-age → 0 (fetched again for every request)."""
    if not cache_control:
        return 0
    directives: dict[str, str] = {}
    for part in cache_control.split(","):
        name, _, value = part.strip().partition("=")
        directives[name.strip().lower()] = value.strip().strip('"')
    if {"no-store", "no-cache", "private"} & directives.keys():
        return 0
    for key in ("s-maxage", "max-age"):
        value = directives.get(key, "")
        if value.isdigit():
            return int(value) * 1000
    return 0
