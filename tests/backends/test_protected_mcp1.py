"""The proxy in front of a server protected with the MCP authorization profile: the official `mcp`
1.30 SDK's FastMCP with a token verifier and `AuthSettings` (`tests/peers/protected_mcp1_server.py`),
no authorization server running (docs/configuration.md "Servers behind OAuth"; docs/decisions.md
§80–§82). Every face gets the backend's 401/403 with a `WWW-Authenticate` naming the proxy's
metadata, the metadata is served under the proxy's URL, the probe borrows nobody's credentials
and a client's token stays its principal.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import aiohttp
import pytest
from oauth_support import (
    V1_INIT,
    V2_SESSION_INIT,
    backend_status,
    challenge,
    open_session,
    readyz,
    recording_server,
    session_post,
    text_of,
)
from support import Caller, free_port, running_proxy

from proxy.demo.processes import ServerProcess

pytestmark = pytest.mark.peers

PEER = __import__("pathlib").Path(__file__).resolve().parents[1] / "peers"


@pytest.fixture(scope="module")
def issuer_port() -> int:
    """The port of the authorization server the protected server names (nothing runs there unless a test starts it)."""
    return free_port()


@pytest.fixture(scope="module")
def protected_server(issuer_port: int) -> Iterator[ServerProcess]:
    """`tests/peers/protected_mcp1_server.py` in the `mcp-v1` peer environment, one per module."""
    from proxy.demo.peers import ensure_peer_env

    argv = [
        str(ensure_peer_env("mcp-v1")),
        str(PEER / "protected_mcp1_server.py"),
        "--issuer",
        f"http://127.0.0.1:{issuer_port}/",
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


async def test_every_face_is_challenged_with_the_proxys_metadata_and_the_backend_stays_up(protected_server, tmp_path):
    """Nothing configured: the proxy starts and is ready; an unauthenticated 2026-07-28 call, a v1
    `initialize` and a v2-session `initialize` each get 401 with the backend's challenge naming the
    proxy's metadata URL (never 502), and the backend is not marked down."""
    async with running_proxy(protected_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        assert await readyz(http, proxy.base_url) == (200, {"status": "ready"})
        expected = challenge(proxy.url, "invalid_token", "Authentication required")
        modern = await Caller(http, proxy.url).call("tools/call", {"name": "whoami", "arguments": {}})
        assert (modern.status, modern.headers["WWW-Authenticate"]) == (401, expected)
        assert modern.body == {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32600, "message": "Unauthorized: Authentication required"},
        }
        for params in (V1_INIT, V2_SESSION_INIT):
            status, headers, answer = await session_post(http, proxy.url, "initialize", params)
            assert (status, headers["WWW-Authenticate"]) == (401, expected)
            assert answer == {
                "jsonrpc": "2.0",
                "id": 1,
                "error": {"code": -32600, "message": "Unauthorized: Authentication required"},
            }
        assert await readyz(http, proxy.base_url) == (200, {"status": "ready"})
        status = await backend_status(http, proxy.base_url)
        assert (status["health"], status["down_reason"]) == ("up", None)


async def test_the_metadata_is_the_backends_with_the_proxys_resource(protected_server, issuer_port, tmp_path):
    """`/.well-known/oauth-protected-resource/mcp` and the root form through the proxy: the backend's
    authorization servers and scopes, `resource` the proxy's URL, the backend's Cache-Control."""
    async with running_proxy(protected_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
            async with http.get(proxy.base_url + path) as response:
                assert (response.status, response.headers["Cache-Control"]) == (200, "public, max-age=3600")
                assert await response.json() == {
                    "resource": proxy.url,
                    "authorization_servers": [f"http://127.0.0.1:{issuer_port}/"],
                    "scopes_supported": ["mcp:tools"],
                    "bearer_methods_supported": ["header"],
                }


async def test_public_url_names_the_resource_and_the_metadata(protected_server, tmp_path):
    """A proxy that took over a public name: `public_url` is the metadata's `resource` and the
    challenge's metadata URL, as the same string."""
    public = "https://mcp.example.com/mcp"
    async with running_proxy(protected_server.url, tmp_path, public_url=public) as proxy, aiohttp.ClientSession() as http:
        answer = await Caller(http, proxy.url).call("tools/list")
        assert (answer.status, answer.headers["WWW-Authenticate"]) == (
            401,
            challenge(public, "invalid_token", "Authentication required"),
        )
        async with http.get(proxy.base_url + "/.well-known/oauth-protected-resource/mcp") as response:
            assert (await response.json())["resource"] == public


BAD_TOKENS = [
    ("Bearer nobody-knows-this", 401, "invalid_token", "Authentication required"),
    ("Bearer expired-token", 401, "invalid_token", "Authentication required"),
    ("Bearer reader-token", 403, "insufficient_scope", "Required scope: mcp:tools"),
]


async def test_bad_expired_and_underscoped_tokens_on_every_face(protected_server, tmp_path):
    """A bad or expired token: 401; a token without the scope: 403 `insufficient_scope`; on the
    modern face, a v1 session (relayed) and a v2-session session, each with the rewritten
    challenge; the backend stays up and a valid token is served after them."""
    async with running_proxy(protected_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        assert (
            text_of(
                (
                    await Caller(http, proxy.url, authorization="Bearer alice-token").call(
                        "tools/call", {"name": "whoami", "arguments": {}}
                    )
                ).result
            )
            == "alice"
        )  # learns the dialect
        alice_v1 = await open_session(http, proxy.url, "Bearer alice-token")
        for authorization, status, error, description in BAD_TOKENS:
            expected = (status, challenge(proxy.url, error, description))
            what = "Unauthorized" if status == 401 else "Forbidden"
            modern = await Caller(http, proxy.url, authorization=authorization).call(
                "tools/call", {"name": "whoami", "arguments": {}}
            )
            assert (modern.status, modern.headers["WWW-Authenticate"]) == expected, authorization
            assert modern.body["error"] == {"code": -32600, "message": f"{what}: {description}"}
            got, headers, answer = await session_post(http, proxy.url, "initialize", V1_INIT, authorization=authorization)
            assert (got, headers["WWW-Authenticate"]) == expected, authorization
            got, headers, answer = await session_post(
                http,
                proxy.url,
                "tools/call",
                {"name": "whoami", "arguments": {}},
                authorization=authorization,
                session_id=alice_v1,
            )
            assert (got, headers["WWW-Authenticate"]) == expected, authorization
            v2_session = await open_session(http, proxy.url, authorization, V2_SESSION_INIT)
            got, headers, answer = await session_post(
                http,
                proxy.url,
                "tools/call",
                {"name": "whoami", "arguments": {}},
                authorization=authorization,
                session_id=v2_session,
                request_id=2,
            )
            assert (got, headers["WWW-Authenticate"]) == expected, authorization
            assert answer == {"jsonrpc": "2.0", "id": 2, "error": {"code": -32600, "message": f"{what}: {description}"}}
        assert await readyz(http, proxy.base_url) == (200, {"status": "ready"})
        assert (await backend_status(http, proxy.base_url))["health"] == "up"
        again = await Caller(http, proxy.url, authorization="Bearer alice-token").call(
            "tools/call", {"name": "whoami", "arguments": {}}
        )
        assert text_of(again.result) == "alice"


async def test_a_valid_token_is_served_in_every_pairing_in_front_of_the_v1_server(protected_server, tmp_path):
    """With nothing configured the dialect is learnt from the first authorized request: then a
    2026-07-28 call and a task lifecycle (v2-modern over v1), a relayed v1 session with a task,
    and a v2-session session (carried over v1) all answer the token's identity and results."""
    async with running_proxy(protected_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        assert await readyz(http, proxy.base_url) == (200, {"status": "ready"})
        assert (await backend_status(http, proxy.base_url))["dialect"] == "unknown"  # nothing learnt yet
        caller = Caller(http, proxy.url, authorization="Bearer alice-token")
        assert text_of((await caller.call("tools/call", {"name": "whoami", "arguments": {}})).result) == "alice"
        assert (await backend_status(http, proxy.base_url))["dialect"] == "v1"
        created = await caller.call("tools/call", {"name": "slow_echo", "arguments": {"text": "one", "seconds": 0.2}})
        assert created.result["resultType"] == "task", created.result
        done = await caller.poll(created.result["taskId"])
        assert (done["status"], done["result"]["content"]) == ("completed", [{"type": "text", "text": "echo one"}])

        v1 = await open_session(http, proxy.url, "Bearer alice-token")
        status, _, answer = await session_post(
            http,
            proxy.url,
            "tools/call",
            {"name": "whoami", "arguments": {}},
            authorization="Bearer alice-token",
            session_id=v1,
            request_id=2,
        )
        assert (status, text_of(answer["result"])) == (200, "alice")
        status, _, answer = await session_post(
            http,
            proxy.url,
            "tools/call",
            {"name": "slow_echo", "arguments": {"text": "two", "seconds": 0.1}, "task": {"ttl": 60000}},
            authorization="Bearer alice-token",
            session_id=v1,
            request_id=3,
        )
        task_id = answer["result"]["task"]["taskId"]
        status, _, answer = await session_post(
            http, proxy.url, "tasks/result", {"taskId": task_id}, authorization="Bearer alice-token", session_id=v1, request_id=4
        )
        assert (status, answer["result"]["content"]) == (200, [{"type": "text", "text": "echo two"}])
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": v1, "MCP-Protocol-Version": "2025-11-25"}
        async with http.get(proxy.url, headers=headers) as response:  # the relayed session's GET stream, without the token
            expected = challenge(proxy.url, "invalid_token", "Authentication required")
            assert (response.status, response.headers["WWW-Authenticate"]) == (401, expected)
            assert (await response.json())["error"] == {"code": -32600, "message": "Unauthorized: Authentication required"}

        v2 = await open_session(http, proxy.url, "Bearer bob-token", V2_SESSION_INIT)
        status, _, answer = await session_post(
            http,
            proxy.url,
            "tools/call",
            {"name": "whoami", "arguments": {}},
            authorization="Bearer bob-token",
            session_id=v2,
            request_id=2,
        )
        assert (status, text_of(answer["result"])) == (200, "bob")


async def test_a_task_created_under_one_token_cannot_be_read_with_another(protected_server, tmp_path):
    """Each client's Authorization is its principal: alice's task is "Unknown task" to bob (on
    `tasks/get` and `tasks/cancel`) and alice's own to read."""
    async with running_proxy(protected_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        alice = Caller(http, proxy.url, authorization="Bearer alice-token")
        bob = Caller(http, proxy.url, authorization="Bearer bob-token")
        created = await alice.call("tools/call", {"name": "slow_echo", "arguments": {"text": "mine", "seconds": 0.2}})
        task_id = created.result["taskId"]
        for method in ("tasks/get", "tasks/cancel"):
            refused = await bob.call(method, {"taskId": task_id})
            assert (refused.status, refused.body["error"]["code"], refused.body["error"]["message"]) == (
                400,
                -32602,
                "Unknown task: the id does not unseal: it was not issued by this proxy to this caller or session, or it was altered",
            )
        done = await alice.poll(task_id)
        assert (done["status"], done["result"]["content"]) == ("completed", [{"type": "text", "text": "echo mine"}])


async def test_probe_headers_serve_the_probe_and_nobody_else(protected_server, tmp_path):
    """With the operator's `probe_headers`, the probe learns the dialect before any client (the
    status page says v1) and an anonymous client is still challenged: it never sees the service
    identity, while alice sees her own."""
    upstream = [{"name": "main", "url": protected_server.url, "probe_headers": {"Authorization": "Bearer service-token"}}]
    async with running_proxy(protected_server.url, tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
        status = await backend_status(http, proxy.base_url)
        assert (status["dialect"], status["health"]) == ("v1", "up")
        anonymous = await Caller(http, proxy.url).call("tools/call", {"name": "whoami", "arguments": {}})
        assert (anonymous.status, anonymous.headers["WWW-Authenticate"]) == (
            401,
            challenge(proxy.url, "invalid_token", "Authentication required"),
        )
        status_code, headers, _ = await session_post(http, proxy.url, "initialize", V1_INIT)
        assert (status_code, "WWW-Authenticate" in headers) == (401, True)
        alice = await Caller(http, proxy.url, authorization="Bearer alice-token").call(
            "tools/call", {"name": "whoami", "arguments": {}}
        )
        assert text_of(alice.result) == "alice"


async def test_a_pinned_dialect_is_ready_and_relays_without_a_probe(protected_server, tmp_path):
    """`dialect = "v1"` and no probe credentials: ready at once, the v1 session is relayed with the
    client's token (no probe needed), and an anonymous one is challenged."""
    upstream = [{"name": "main", "url": protected_server.url, "dialect": "v1"}]
    async with running_proxy(protected_server.url, tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
        assert await readyz(http, proxy.base_url) == (200, {"status": "ready"})
        assert (await backend_status(http, proxy.base_url))["dialect"] == "v1"
        status, headers, _ = await session_post(http, proxy.url, "initialize", V1_INIT)
        assert (status, headers["WWW-Authenticate"]) == (401, challenge(proxy.url, "invalid_token", "Authentication required"))
        session = await open_session(http, proxy.url, "Bearer bob-token")
        status, _, answer = await session_post(
            http,
            proxy.url,
            "tools/call",
            {"name": "whoami", "arguments": {}},
            authorization="Bearer bob-token",
            session_id=session,
            request_id=2,
        )
        assert (status, text_of(answer["result"])) == (200, "bob")


async def test_the_mcp1_client_with_an_oauth_provider_reaches_the_authorization_server(protected_server, issuer_port, tmp_path):
    """The official `mcp` 1.30 client with `OAuthClientProvider` through the proxy: challenged, it
    reads the proxy's metadata and asks the authorization server it names for its metadata."""
    from proxy.demo.peers import ensure_peer_env

    async with recording_server(issuer_port) as seen, running_proxy(protected_server.url, tmp_path) as proxy:
        child = await asyncio.create_subprocess_exec(
            str(ensure_peer_env("mcp-v1")),
            str(PEER / "mcp1_oauth_check.py"),
            "--url",
            proxy.url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await child.communicate()
    line = json.loads(out.decode().strip().splitlines()[-1])
    assert (line["check"], line["ok"]) == ("oauth_discovery", True), (line, err.decode()[-2000:])
    assert ("GET", "/.well-known/oauth-authorization-server") in seen, seen


async def test_backends_that_disagree_on_authorization_servers_refuse_the_start(protected_server, tmp_path):
    """Two backends behind one URL whose metadata names different authorization servers: the start
    is refused naming both, unless `resource_backend` names the one that speaks for the resource."""
    from proxy.config import ConfigError

    other_port = free_port()
    other = {
        "/.well-known/oauth-protected-resource/mcp": {
            "resource": f"http://127.0.0.1:{other_port}/mcp",
            "authorization_servers": ["https://other-as.example/"],
        }
    }
    async with recording_server(other_port, other):
        upstream = [{"name": "a", "url": protected_server.url}, {"name": "b", "url": f"http://127.0.0.1:{other_port}/mcp"}]
        with pytest.raises(ConfigError) as refused:
            async with running_proxy(protected_server.url, tmp_path, upstream=upstream):
                pass
        assert "different authorization servers" in str(refused.value) and "https://other-as.example" in str(refused.value)
        async with (
            running_proxy(protected_server.url, tmp_path, upstream=upstream, resource_backend="b") as proxy,
            aiohttp.ClientSession() as http,
        ):
            async with http.get(proxy.base_url + "/.well-known/oauth-protected-resource/mcp") as response:
                assert await response.json() == {"resource": proxy.url, "authorization_servers": ["https://other-as.example/"]}


async def test_an_anonymous_server_discover_is_challenged_like_every_other_request(protected_server, tmp_path):
    """Issue 37 defect 3: the proxy answers `server/discover` itself in front of this v1 backend, from
    a profile learnt with someone's credentials (the probe's `probe_headers`, or alice's token):
    without a token it is challenged 401 with the backend's challenge, as `tools/list` is; with a
    bad token too; alice's valid token is answered 200 with the backend's capabilities."""
    for main_keys in ({"probe_headers": {"Authorization": "Bearer service-token"}}, None):
        async with (
            running_proxy(protected_server.url, tmp_path, main_keys=main_keys) as proxy,
            aiohttp.ClientSession() as http,
        ):
            alice = Caller(http, proxy.url, authorization="Bearer alice-token")
            if main_keys is None:  # the dialect learnt with alice's token
                assert text_of((await alice.call("tools/call", {"name": "whoami", "arguments": {}})).result) == "alice"
            assert (await backend_status(http, proxy.base_url))["dialect"] == "v1"
            refused = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": "Unauthorized: Authentication required"}}
            for authorization in (None, "Bearer nobody-knows-this"):
                for method in ("server/discover", "tools/list"):
                    answer = await Caller(http, proxy.url, authorization=authorization).call(method)
                    assert (answer.status, answer.headers.get("WWW-Authenticate"), answer.body) == (
                        401,
                        challenge(proxy.url, "invalid_token", "Authentication required"),
                        refused,
                    ), (main_keys, authorization, method)
            discovered = await alice.call("server/discover")
            assert (discovered.status, discovered.result) == (
                200,
                {
                    "supportedVersions": ["2026-07-28"],
                    "capabilities": {
                        "tools": {},
                        "resources": {},
                        "prompts": {},
                        "extensions": {"io.modelcontextprotocol/tasks": {}},
                    },
                    "resultType": "complete",
                    "ttlMs": 0,
                    "cacheScope": "private",
                    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "mcp-tasks-proxy", "version": "0.1.0"}},
                },
            ), main_keys
