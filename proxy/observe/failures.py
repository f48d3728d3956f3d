"""Which failure an answer was, as the status page and `/metrics` count it (docs/operations.md
"Status page"), from what the proxy already holds: the `McpError` it answered with, the small
body of an error answer already read whole, or the HTTP status of a relayed answer it did not
read. The classification itself is `translators.failures`; this module only finds its inputs, and
runs only for answers that are not ok (never on the path of an ok answer).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from aiohttp import web

from translators.errors import McpError
from translators.failures import ACCEPT, Failure, accept_repaired, missing_headers, of_answer, of_error

WHOLE_BODY_MAX = 65_536
"""An error answer's body is read for its error object only up to this size (they are small)."""


def of_refusal(error: McpError, method: str | None) -> Failure:
    """The failure of an error the proxy answered with (its own refusal, or a backend's error it
    raised again: `McpError.by_backend`)."""
    return of_error(error.code, error.message, error.http_status, by_backend=error.by_backend, method=method)


def shown_detail(refusal: McpError | None) -> str | None:
    """The message of a refusal the status page may show: the proxy's own (a backend's is not shown:
    it may quote what the client sent)."""
    return refusal.message if refusal is not None and not refusal.by_backend else None


def answer_error(response: web.StreamResponse) -> Any:
    """The JSON-RPC `error` object of an answer whose body is held whole (a `web.Response` with
    bytes, as the relay and the faces build error answers), else None."""
    if not isinstance(response, web.Response) or not isinstance(response.body, bytes) or len(response.body) > WHOLE_BODY_MAX:
        return None
    try:
        message = json.loads(response.body)
    except ValueError:
        return None
    return message.get("error") if isinstance(message, dict) else None


def of_relayed(response: web.StreamResponse, method: str | None, *, session_wire: bool) -> Failure:
    """The failure of a relayed answer that was not ok (HTTP status ≥ 300): by its error object
    when the relay holds its body (an error status), else by its status."""
    return of_answer(answer_error(response), response.status, method=method, session_wire=session_wire)


def of_session_answer(error: McpError | None, response: web.StreamResponse, method: str | None) -> Failure:
    """The failure of a proxy session's answer that was not ok: `error` when the session's rules
    raised one, else the proxy's own answer (a missing or unknown session, a version refusal)."""
    if error is not None:
        return of_refusal(error, method)
    found = answer_error(response)
    if isinstance(found, dict) and isinstance(found.get("code"), int) and isinstance(found.get("message"), str):
        return of_error(found["code"], found["message"], response.status if response.status >= 401 else None, by_backend=False,
                        method=method)
    return of_error(0, "", response.status, by_backend=False, method=method)


@functools.lru_cache(maxsize=64)
def _accept(accept: str | None) -> bool:
    return accept_repaired(accept)


def repairs_of(method: str, params: Any, headers: Any) -> tuple[str, ...]:
    """What the proxy makes good for a checked modern request (`translators.failures`): its
    missing routing headers, and an `Accept` without both media types (the few `Accept` values a
    fleet sends are remembered)."""
    missing = missing_headers(method, params, headers)
    if _accept(headers.get("Accept")):
        return (*missing, ACCEPT)
    return missing
