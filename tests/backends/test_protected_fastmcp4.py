"""The proxy in front of a task-capable server protected with the MCP authorization profile: the
reference v2 server on FastMCP 4.1.4 with `RemoteAuthProvider` over a `StaticTokenVerifier`
(`tests/peers/protected_v2_server.py`), no authorization server running (docs/configuration.md
"Servers behind OAuth"; docs/decisions.md §80–§82). Its challenge names a scope and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from oauth_support import V1_INIT, V2_SESSION_INIT, backend_status, metadata_url_of, open_session, readyz, session_post, text_of
from support import Caller, running_proxy

from proxy.demo.processes import ServerProcess

pytestmark = pytest.mark.peers

PEER = Path(__file__).resolve().parents[1] / "peers"
ISSUER = "http://127.0.0.1:9/"
UNAUTHORIZED = {"code": -32600, "message": "Unauthorized: backend 'main' asks for authorization"}


@pytest.fixture(scope="module")
def protected_v2_server() -> Iterator[ServerProcess]:
    """`tests/peers/protected_v2_server.py` in the `fastmcp4` peer environment, one per module."""
    from proxy.demo.peers import ensure_peer_env

    argv = [
        str(ensure_peer_env("fastmcp4")),
        str(PEER / "protected_v2_server.py"),
        "--issuer",
        ISSUER,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
    ]
    server = ServerProcess.start(argv)
    try:
        yield server
    finally:
        server.stop()


INVALID = (
    "Authentication failed. The provided bearer token is invalid, expired, or no longer recognized by the server. "
    "To resolve: clear authentication tokens in your MCP client and reconnect. "
    "Your client should automatically re-register and obtain new tokens."
)


def scope_challenge(proxy_url: str) -> str:
    """FastMCP 4's challenge to a request without a token, as the proxy relays it."""
    return f'Bearer scope="mcp:tools", resource_metadata="{metadata_url_of(proxy_url)}"'


def invalid_token_challenge(proxy_url: str) -> str:
    """FastMCP 4's challenge to a bad or expired token, as the proxy relays it."""
    return f'Bearer error="invalid_token", error_description="{INVALID}", scope="mcp:tools", resource_metadata="{metadata_url_of(proxy_url)}"'


async def poll_session_task(
    http: aiohttp.ClientSession, url: str, authorization: str, session_id: str, task_id: str, method: str = "tasks/get"
) -> dict[str, Any]:
    """`tasks/get` on a session until the task is terminal (20 s at most); its last answer."""
    import asyncio

    deadline = asyncio.get_running_loop().time() + 20
    request_id = 100
    while True:
        request_id += 1
        status, _, answer = await session_post(
            http, url, method, {"taskId": task_id}, authorization=authorization, session_id=session_id, request_id=request_id
        )
        assert status == 200, answer
        result = answer["result"]
        if result["status"] in ("completed", "failed", "cancelled"):
            return result
        assert asyncio.get_running_loop().time() < deadline, result
        await asyncio.sleep(0.1)


async def test_anonymous_and_bad_tokens_are_challenged_on_every_face(protected_v2_server, tmp_path):
    """Nothing configured: ready; no token, a bad and an expired one get 401 with the backend's
    challenge naming the proxy's metadata, on the 2026-07-28 face, at a v1 and a v2-session
    `initialize` (which the proxy answers itself in front of this backend), and on a request of
    such a session opened with an expired token; the backend stays up."""
    async with running_proxy(protected_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        assert await readyz(http, proxy.base_url) == (200, {"status": "ready"})
        anonymous = (401, scope_challenge(proxy.url), UNAUTHORIZED)
        invalid = (401, invalid_token_challenge(proxy.url), {"code": -32600, "message": f"Unauthorized: {INVALID}"})
        for authorization, expected in (
            (None, anonymous),
            ("Bearer nobody-knows-this", invalid),
            ("Bearer expired-token", invalid),
        ):
            modern = await Caller(http, proxy.url, authorization=authorization).call(
                "tools/call", {"name": "whoami", "arguments": {}}
            )
            assert (modern.status, modern.headers["WWW-Authenticate"], modern.body["error"]) == expected, authorization
        for params in (V1_INIT, V2_SESSION_INIT):
            status, headers, answer = await session_post(http, proxy.url, "initialize", params)
            assert (status, headers["WWW-Authenticate"], answer["error"]) == anonymous
            status, headers, answer = await session_post(
                http, proxy.url, "initialize", params, authorization="Bearer expired-token"
            )
            assert (status, headers["WWW-Authenticate"], answer["error"]) == invalid  # the dialect is learnt with it: refused
        alice = await Caller(http, proxy.url, authorization="Bearer alice-token").call(
            "tools/call", {"name": "whoami", "arguments": {}}
        )
        assert text_of(alice.result) == "alice"  # the dialect learnt
        for params in (V1_INIT, V2_SESSION_INIT):
            session = await open_session(http, proxy.url, "Bearer expired-token", params)  # answered by the proxy itself
            status, headers, answer = await session_post(
                http,
                proxy.url,
                "tools/call",
                {"name": "whoami", "arguments": {}},
                authorization="Bearer expired-token",
                session_id=session,
                request_id=2,
            )
            assert (status, headers["WWW-Authenticate"], answer["error"]) == invalid
        assert await readyz(http, proxy.base_url) == (200, {"status": "ready"})
        assert (await backend_status(http, proxy.base_url))["health"] == "up"


async def test_task_lifecycles_with_a_valid_token_in_every_pairing(protected_v2_server, tmp_path):
    """With a valid token: a 2026-07-28 task (relayed), a v1 session's task (v1 over v2) and a
    v2-session session's task (carried), each followed to `computed <label>`; `whoami` answers
    the token's identity on each."""
    async with running_proxy(protected_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        alice = Caller(http, proxy.url, authorization="Bearer alice-token")
        assert text_of((await alice.call("tools/call", {"name": "whoami", "arguments": {}})).result) == "alice"
        assert (await backend_status(http, proxy.base_url))["dialect"] == "v2-modern"
        created = await alice.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.3, "label": "modern"}})
        assert created.result["resultType"] == "task", created.result
        done = await alice.poll(created.result["taskId"])
        assert (done["status"], done["result"]["content"]) == ("completed", [{"type": "text", "text": "computed modern"}])

        v1 = await open_session(http, proxy.url, "Bearer bob-token")
        status, _, answer = await session_post(
            http,
            proxy.url,
            "tools/call",
            {"name": "whoami", "arguments": {}},
            authorization="Bearer bob-token",
            session_id=v1,
            request_id=2,
        )
        assert (status, text_of(answer["result"])) == (200, "bob")
        status, _, answer = await session_post(
            http,
            proxy.url,
            "tools/call",
            {"name": "slow_compute", "arguments": {"seconds": 0.3, "label": "v1"}, "task": {"ttl": 60000}},
            authorization="Bearer bob-token",
            session_id=v1,
            request_id=3,
        )
        task_id = answer["result"]["task"]["taskId"]
        assert (await poll_session_task(http, proxy.url, "Bearer bob-token", v1, task_id))["status"] == "completed"
        status, _, answer = await session_post(
            http, proxy.url, "tasks/result", {"taskId": task_id}, authorization="Bearer bob-token", session_id=v1, request_id=4
        )
        assert (status, answer["result"]["content"]) == (200, [{"type": "text", "text": "computed v1"}])

        v2 = await open_session(http, proxy.url, "Bearer alice-token", V2_SESSION_INIT)
        status, _, answer = await session_post(
            http,
            proxy.url,
            "tools/call",
            {"name": "slow_compute", "arguments": {"seconds": 0.3, "label": "session"}},
            authorization="Bearer alice-token",
            session_id=v2,
            request_id=2,
        )
        assert answer["result"]["resultType"] == "task", answer
        done = await poll_session_task(http, proxy.url, "Bearer alice-token", v2, answer["result"]["taskId"])
        assert (done["status"], done["result"]["content"]) == ("completed", [{"type": "text", "text": "computed session"}])


async def test_a_v1_task_created_under_one_token_cannot_be_read_with_another(protected_v2_server, tmp_path):
    """A v1 client's task (v1 over v2) belongs to its token: bob, on a session of his own, gets
    `-32602` for alice's task id; alice reads it to its end."""
    async with running_proxy(protected_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        alice = await open_session(http, proxy.url, "Bearer alice-token")
        bob = await open_session(http, proxy.url, "Bearer bob-token")
        status, _, answer = await session_post(
            http,
            proxy.url,
            "tools/call",
            {"name": "slow_compute", "arguments": {"seconds": 0.3, "label": "mine"}, "task": {"ttl": 60000}},
            authorization="Bearer alice-token",
            session_id=alice,
            request_id=2,
        )
        task_id = answer["result"]["task"]["taskId"]
        status, _, answer = await session_post(
            http, proxy.url, "tasks/get", {"taskId": task_id}, authorization="Bearer bob-token", session_id=bob, request_id=2
        )
        assert (status, answer["error"]["code"]) == (200, -32602), answer
        assert (await poll_session_task(http, proxy.url, "Bearer alice-token", alice, task_id))["status"] == "completed"


async def test_an_anonymous_server_discover_is_challenged_like_every_other_request(protected_v2_server, tmp_path):
    """Issue 37 defect 3 in front of a 2026-07-28 backend: with the dialect learnt from the probe's
    own credentials or from alice's token, a `server/discover` without a token (or with a bad one)
    gets the backend's 401 challenge naming the proxy's metadata, as `tools/list` does; alice's
    token is answered 200 with the backend's own `server/discover`."""
    for main_keys in ({"probe_headers": {"Authorization": "Bearer alice-token"}}, None):
        async with (
            running_proxy(protected_v2_server.url, tmp_path, main_keys=main_keys) as proxy,
            aiohttp.ClientSession() as http,
        ):
            alice = Caller(http, proxy.url, authorization="Bearer alice-token")
            if main_keys is None:  # the dialect learnt with alice's token
                assert text_of((await alice.call("tools/call", {"name": "whoami", "arguments": {}})).result) == "alice"
            assert (await backend_status(http, proxy.base_url))["dialect"] == "v2-modern"
            anonymous = (401, scope_challenge(proxy.url), {"jsonrpc": "2.0", "id": 1, "error": UNAUTHORIZED})
            invalid = (
                401,
                invalid_token_challenge(proxy.url),
                {"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": f"Unauthorized: {INVALID}"}},
            )
            for authorization, expected in ((None, anonymous), ("Bearer nobody-knows-this", invalid)):
                for method in ("server/discover", "tools/list"):
                    answer = await Caller(http, proxy.url, authorization=authorization).call(method)
                    assert (answer.status, answer.headers.get("WWW-Authenticate"), answer.body) == expected, (
                        main_keys,
                        authorization,
                        method,
                    )
            discovered = await alice.call("server/discover")
            assert (discovered.status, discovered.result) == (
                200,
                {
                    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "mcp-tasks-proxy-reference-v2", "version": "4.1.4"}},
                    "ttlMs": 0,
                    "cacheScope": "private",
                    "supportedVersions": ["2026-07-28"],
                    "capabilities": {
                        "logging": {},
                        "prompts": {"listChanged": False},
                        "resources": {"subscribe": False, "listChanged": False},
                        "tools": {"listChanged": False},
                        "extensions": {"io.modelcontextprotocol/ui": {}, "io.modelcontextprotocol/tasks": {}},
                    },
                    "resultType": "complete",
                },
            ), main_keys
