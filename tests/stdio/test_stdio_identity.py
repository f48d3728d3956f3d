"""A stdio backend's processes follow the proxy's principal, `identity_header` included
(docs/decisions.md §144; before, §139 refused `process_scope = "principal"` beside another
identity header).

The pool keyed a process by a hash of the `Authorization` it saw, and the bridge never sees a
custom identity header: callers behind one gateway token (one `Authorization`, told apart by
`X-User`) would have shared a process and its notes. Now every `initialize` the proxy sends a
stdio backend names the caller's principal, signed with the connector's secret, on each path that
opens a session: a relayed v1 session and the proxy's own pooled session of a translated (v2)
call. `notes_stdio_server.py` keeps its notes in its process, so a `recall` shows whose process a
session reached.
"""

from __future__ import annotations

import aiohttp
from session_support import SessionCaller
from stdio_support import TEST_KEY
from support import Caller
from test_stdio_isolation import _pool, _proxy, _text

from proxy.upstream.stdio.bridge import CALLER_HEADER, Bridge
from translators.sealing import Keyring

KEYRING = Keyring(TEST_KEY)
"""The proxy's keyring (`_proxy` starts it with `TEST_KEY`): whose principal a process is for."""

GATEWAY = "Bearer the-gateway's-one-token"


def _as(user: str) -> aiohttp.ClientSession:
    """An HTTP client whose every request names `user` in `X-User` (behind the shared token)."""
    return aiohttp.ClientSession(headers={"X-User": user})


async def _relayed(http: aiohttp.ClientSession, url: str) -> SessionCaller:
    caller = SessionCaller(http, url, authorization=GATEWAY, capabilities={})
    answer = await caller.initialize()
    assert (answer["_status"], answer["result"]["serverInfo"]) == (200, {"name": "notes", "version": "1"})
    return caller


async def test_callers_behind_one_token_get_a_process_each_by_their_identity_header(tmp_path):
    proxy = await _proxy(tmp_path, process_scope="principal", top={"identity_header": "X-User"})
    try:
        async with _as("carol") as as_carol, _as("dave") as as_dave:
            carol = await _relayed(as_carol, proxy.url)
            assert _text(await carol.call("tools/call", {"name": "remember", "arguments": {"text": "carol's note"}})) == "kept"
            dave = await _relayed(as_dave, proxy.url)
            assert _text(await dave.call("tools/call", {"name": "recall", "arguments": {}})) == ""
            # carol's second session is hers: the same process, her note
            again = await _relayed(as_carol, proxy.url)
            assert _text(await again.call("tools/call", {"name": "recall", "arguments": {}})) == "carol's note"
            # a translated call of each goes to that caller's process too (the proxy's pooled session)
            carol_v2 = Caller(as_carol, proxy.url, authorization=GATEWAY)
            dave_v2 = Caller(as_dave, proxy.url, authorization=GATEWAY)
            assert _text((await carol_v2.call("tools/call", {"name": "recall", "arguments": {}})).body) == "carol's note"
            assert _text((await dave_v2.call("tools/call", {"name": "remember", "arguments": {"text": "dave's"}})).body) == "kept"
            assert _text(await dave.call("tools/call", {"name": "recall", "arguments": {}})) == "dave's"
            assert _text(await carol.call("tools/call", {"name": "recall", "arguments": {}})) == "carol's note"
            owners = {owner for owner in _pool(proxy).owners.values() if owner is not None}
            assert owners == {KEYRING.principal("carol"), KEYRING.principal("dave")}
    finally:
        await proxy.stop()


def test_the_bridge_reads_only_the_caller_values_it_signed():
    """On the private socket (and for any caller header that reached the bridge some other way)
    only a value made with this connector's secret names a caller; `forward_headers` refuses the
    proxy's own header names (tests/config)."""
    bridge = Bridge(None, "the connector's secret", 1024)
    other = Bridge(None, "another connector's secret", 1024)
    value = bridge.caller_value("0123456789abcdef0123456789abcdef")
    assert bridge.caller({CALLER_HEADER: value}) == "0123456789abcdef0123456789abcdef"
    assert bridge.caller({CALLER_HEADER: bridge.caller_value("anonymous")}) == "anonymous"
    assert other.caller({CALLER_HEADER: value}) is None
    principal, _, mac = value.rpartition(".")
    assert bridge.caller({CALLER_HEADER: f"fedcba9876543210fedcba9876543210.{mac}"}) is None
    assert bridge.caller({CALLER_HEADER: f"{principal}.{'0' * len(mac)}"}) is None
    assert bridge.caller({CALLER_HEADER: principal}) is None
    assert bridge.caller({CALLER_HEADER: f".{mac}"}) is None
    assert bridge.caller({CALLER_HEADER: ""}) is None
    assert bridge.caller({}) is None
