"""A protected backend's Bearer challenge as the client of any face gets it (docs/decisions.md §80):
the backend's status (401, or 403 `insufficient_scope`), its `WWW-Authenticate` with
`resource_metadata` pointing at the proxy's own protected-resource metadata
(`translators.oauth.with_resource_metadata`), and a JSON-RPC error body (-32600). Source: MCP
core 2025-11-25 and 2026-07-28 "Authorization"; RFC 6750 §3; RFC 9728 §3.1, §5.1.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from translators import jsonrpc
from translators.oauth import AuthChallenge, format_bearer, metadata_url, with_resource_metadata

from ..config import Settings
from .checks import json_response

log = logging.getLogger(__name__)


def public_url(settings: Settings, request: web.Request) -> str:
    """The URL clients reach the MCP endpoint at: `public_url` when configured, else the address the
    proxy listens on (the socket `request` came in on) with `path`: `http://127.0.0.1:8080/mcp`
    (`https://` when it serves HTTPS: `tls_cert`)."""
    if settings.public_url:
        return settings.public_url
    sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        host, port = str(sockname[0]), int(sockname[1])
    else:
        host, port = settings.host, settings.port
    host = f"[{host}]" if ":" in host else host
    return f"{request.scheme}://{host}:{port}{settings.path}"


def challenge_header(challenge: AuthChallenge, settings: Settings, request: web.Request) -> str:
    """The backend's `WWW-Authenticate` with `resource_metadata` set to the proxy's metadata URL
    (RFC 9728 §3.1 of `public_url`); a header the proxy cannot parse is replaced by a bare
    `Bearer resource_metadata="…"` (logged once per answer)."""
    url = metadata_url(public_url(settings, request))
    try:
        return with_resource_metadata(challenge.www_authenticate, url)
    except ValueError:
        log.warning("backend %s sent a WWW-Authenticate that is not one Bearer challenge; answering a bare one", challenge.backend)
        return format_bearer([("resource_metadata", url)])


def challenge_answer(challenge: AuthChallenge, request_id: Any, settings: Settings, request: web.Request,
                     error: Any = None) -> web.Response:
    """The HTTP answer to a request the backend challenged: `challenge.status`, the rewritten
    `WWW-Authenticate` (`challenge_header`) and the JSON-RPC error response to `request_id`
    (`error`: the face's form of the challenge's error, by default the challenge itself)."""
    body = jsonrpc.error_response(request_id, error if error is not None else challenge)
    return json_response(body, challenge.status, {"WWW-Authenticate": challenge_header(challenge, settings, request)})
