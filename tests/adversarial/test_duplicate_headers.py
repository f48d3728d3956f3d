"""A modern header sent twice with different values. `check_headers`
(translators/envelope.py, `headers.get(...)`) looks only at the first field line, so the result
depends on the order of the lines, and an intermediary that honours the last one (or the
RFC 9110 §5.3 combined value "a, b") sees a different request than the proxy validated.
The combined value of conflicting lines never equals the body value: docs/behaviour.md §2 rule 1
makes that HTTP 400 `-32020`, and a refused request must not reach the backend (§6)."""

from __future__ import annotations

import json

import aiohttp
import pytest
from adv_support import MODERN_HEADERS, healthz_ok, modern_body
from multidict import CIMultiDict
from support import Caller, running_proxy

pytestmark = pytest.mark.peers

GREET = modern_body("tools/call", {"name": "greet", "arguments": {"name": "dup"}})


@pytest.fixture
async def env(tapped, tmp_path):
    async with running_proxy(tapped.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        await Caller(http, proxy.url).call("tools/list")
        yield http, proxy, tapped, len(tapped.methods)
        assert await healthz_ok(http, proxy.base_url)


@pytest.mark.parametrize(
    ("name", "values", "body"),
    [
        ("Mcp-Method", ("tools/call", "tools/list"), GREET),
        ("Mcp-Name", ("greet", "other"), GREET),
        ("MCP-Protocol-Version", ("2026-07-28", "2099-01-01"), modern_body("tools/list")),
        # case-varied names are the same field (RFC 9110 §5.1)
        ("mcp-method", ("tools/call", "tools/list"), GREET),
    ],
    ids=["Mcp-Method", "Mcp-Name", "MCP-Protocol-Version", "case-varied"],
)
async def test_conflicting_duplicate_headers_are_32020_and_never_forwarded(env, name, values, body):
    http, proxy, tap, mark = env
    headers = CIMultiDict(MODERN_HEADERS)
    if name.lower() == "mcp-protocol-version":
        del headers["MCP-Protocol-Version"]
    for value in values:
        headers.add(name, value)
    async with http.post(proxy.url, data=json.dumps(body), headers=headers) as response:
        status, answer = response.status, await response.json()
    assert (status, answer.get("error", {}).get("code")) == (400, -32020), answer
    assert tap.since(mark) == []


@pytest.mark.parametrize(
    ("name", "values", "body"),
    [
        ("Authorization", ("Bearer alice", "Bearer bob"), GREET),
        ("authorization", ("Bearer bob", "Bearer alice"), GREET),  # the same field, the other order
        ("Mcp-Session-Id", ("one", "two"), {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}),
    ],
    ids=["Authorization", "authorization-reversed", "Mcp-Session-Id"],
)
async def test_a_callers_credentials_or_session_sent_twice_differently_are_refused_and_never_forwarded(env, name, values, body):
    """Whose session or task a request reaches must not depend on which of two lines is read
    (docs/decisions.md §138): HTTP 400, -32600 naming the header, on POST, GET and DELETE."""
    http, proxy, tap, mark = env
    headers = CIMultiDict(MODERN_HEADERS)
    if name == "Mcp-Session-Id":
        headers["MCP-Protocol-Version"] = "2025-11-25"
    for value in values:
        headers.add(name, value)
    said = "Authorization" if name.lower() == "authorization" else name  # as the proxy spells the field
    refusal = {"code": -32600, "message": f"{said} header sent more than once with different values"}
    async with http.post(proxy.url, data=json.dumps(body), headers=headers) as response:
        assert (response.status, await response.json()) == (400, {"jsonrpc": "2.0", "id": body["id"], "error": refusal})
    for method in ("GET", "DELETE"):
        async with http.request(method, proxy.url, headers=headers) as response:
            assert (response.status, await response.json()) == (400, {"jsonrpc": "2.0", "error": refusal})
    assert tap.since(mark) == []
