"""TLS to backends (issue 41 part 2; docs/configuration.md "TLS to backends", docs/decisions.md
§172): a backend behind mutual TLS with a private CA, served through the proxy with `tls_ca_file`,
`tls_client_cert` and `tls_client_key`, to a 2026-07-28 client and to the official `mcp` 1.30
client; without the client certificate, with the wrong CA, and with a certificate issued to
another name (`tls_server_name`), the error names what failed, within 10 s. The backend is the
plain `mcp` 1.30 server on uvicorn with `CERT_REQUIRED` (`tests/peers/tls_mcp1_server.py`). A
server that sends TLS alerts (OpenSSL's own, on blocking sockets: `tls_support.AlertingServer`)
shows how they are named, how a reload reads the files again, and the outbound proxy of
`HTTPS_PROXY` (a CONNECT proxy of the test's own). The CA is made in the test (`tests/tls_support.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support import Caller, running_proxy
from tls_support import AlertingServer, Authority, Issued

from proxy.app import start
from proxy.config import ConfigError, load
from proxy.demo.processes import ServerProcess
from proxy.upstream.tls import env_proxy

PEERS = Path(__file__).resolve().parents[1] / "peers"
ALERTED = "the server requires a client certificate and none was sent (tlsv13 alert certificate required)"
UNTRUSTED = "certificate verify failed: self-signed certificate in certificate chain"
"""What OpenSSL says of a chain whose root is not the CA trusted: the servers here send their CA
after their certificate (OpenSSL builds the chain from the CA they verify clients with)."""
CA_ALONE = "the server closed the connection right after the handshake, as a server that requires a client certificate does, and none was sent (tls_client_cert, tls_client_key)"  # noqa: E501


class Pki:
    """The test's CA, another CA nobody trusts, and what they issued."""

    def __init__(self, folder: Path):
        self.ca = Authority(folder, "private")
        self.other = Authority(folder, "other")
        self.server = self.ca.issue("server", names=("127.0.0.1",))
        self.named = self.ca.issue("named", names=("mcp.internal",))
        self.client = self.ca.issue("client", names=(), client=True)
        self.stranger = self.other.issue("stranger", names=(), client=True)

    def keys(self, client: Issued | None = None, ca: Path | None = None, **more: str) -> dict[str, str]:
        """The `[[upstream]]` TLS keys: `tls_ca_file` (this CA unless `ca`), the client certificate."""
        keys = {"tls_ca_file": str(ca or self.ca.pem), **more}
        if client is not None:
            keys |= {"tls_client_cert": str(client.cert), "tls_client_key": str(client.key)}
        return keys


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def _tls_server(pki: Pki, server: Issued) -> ServerProcess:
    from proxy.demo.peers import ensure_peer_env

    argv = [str(ensure_peer_env("mcp-v1")), str(PEERS / "tls_mcp1_server.py"), "--certfile", str(server.cert),
            "--keyfile", str(server.key), "--client-ca", str(pki.ca.pem)]  # fmt: skip
    return ServerProcess.start(argv)


@pytest.fixture(scope="module")
def mtls_servers(pki) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two HTTPS backends requiring a client certificate of the CA: one with a certificate for
    127.0.0.1, one with a certificate for `mcp.internal` alone. Each stopped by its own handle."""
    first = _tls_server(pki, pki.server)
    try:
        second = _tls_server(pki, pki.named)
        try:
            yield first, second
        finally:
            second.stop()
    finally:
        first.stop()


async def _listed(caller: Caller) -> tuple[float, dict[str, Any]]:
    """The seconds a modern `tools/list` took and its answer's body."""
    started = time.monotonic()
    answer = await caller.call("tools/list")
    return time.monotonic() - started, {"status": answer.status, **answer.body}


def _unavailable(reason: str) -> dict[str, Any]:
    return {"status": 502, "jsonrpc": "2.0", "id": 1,
            "error": {"code": -32603, "message": f"Backend 'main' unavailable: TLS handshake failed: {reason}"}}  # fmt: skip


async def _v1_calls(url: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One session of the official mcp 1.30 client (`tests/peers/mcp1_tool_calls.py`), its lines."""
    from proxy.demo.peers import ensure_peer_env

    child = await asyncio.create_subprocess_exec(
        str(ensure_peer_env("mcp-v1")), str(PEERS / "mcp1_tool_calls.py"), "--url", url, "--calls", json.dumps(calls),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(child.communicate(), 120)
    assert child.returncode == 0, err.decode()[-2000:]
    return [json.loads(line) for line in out.decode().splitlines()]


@pytest.mark.peers
async def test_a_backend_behind_mutual_tls_serves_a_modern_client_and_the_official_client(pki, mtls_servers, tmp_path):
    server = mtls_servers[0]
    async with running_proxy(server.url, tmp_path, main_keys=pki.keys(pki.client)) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        listed = await caller.call("tools/list")
        assert (listed.status, [tool["name"] for tool in listed.result["tools"]]) == (200, ["slow_echo"])
        created = await caller.call("tools/call", {"name": "slow_echo", "arguments": {"text": "over mtls", "seconds": 0.1}})
        assert (created.status, created.result["resultType"]) == (200, "task")
        done = await caller.poll(created.result["taskId"])
        assert (done["status"], done["result"]["content"]) == ("completed", [{"type": "text", "text": "echo over mtls"}])
        lines = await _v1_calls(proxy.url, [{"list": True}, {"name": "slow_echo", "arguments": {"text": "v1", "seconds": 0.1}}])
        assert lines == [{"tools": ["slow_echo"]}, {"texts": ["echo v1"], "isError": False}]


@pytest.mark.peers
async def test_without_the_client_certificate_the_error_names_the_tls_failure_within_10_s(pki, mtls_servers, tmp_path):
    async with running_proxy(mtls_servers[0].url, tmp_path, main_keys=pki.keys()) as proxy, aiohttp.ClientSession() as http:
        took, body = await _listed(Caller(http, proxy.url))
    assert body == _unavailable(CA_ALONE)
    assert took < 10


@pytest.mark.peers
async def test_with_the_wrong_ca_the_error_names_the_certificate_verify_failure(pki, mtls_servers, tmp_path):
    keys = pki.keys(pki.client, ca=pki.other.pem)
    async with running_proxy(mtls_servers[0].url, tmp_path, main_keys=keys) as proxy, aiohttp.ClientSession() as http:
        took, body = await _listed(Caller(http, proxy.url))
    assert body == _unavailable(UNTRUSTED)
    assert took < 10


@pytest.mark.peers
async def test_tls_server_name_checks_a_certificate_issued_to_another_name(pki, mtls_servers, tmp_path):
    url = mtls_servers[1].url.replace("127.0.0.1", "localhost")  # the certificate names mcp.internal alone
    keys = pki.keys(pki.client, tls_server_name="mcp.internal")
    async with running_proxy(url, tmp_path / "a", main_keys=keys) as proxy, aiohttp.ClientSession() as http:
        listed = await Caller(http, proxy.url).call("tools/list")
        assert (listed.status, [tool["name"] for tool in listed.result["tools"]]) == (200, ["slow_echo"])
    async with running_proxy(url, tmp_path / "b", main_keys=pki.keys(pki.client)) as proxy, aiohttp.ClientSession() as http:
        took, body = await _listed(Caller(http, proxy.url))
    assert body == _unavailable("certificate verify failed: Hostname mismatch, certificate is not valid for 'localhost'.")
    assert took < 10


# Without peers: a server that alerts, the files at start and at a reload, the outbound proxy.


@contextlib.asynccontextmanager
async def _alerting(pki: Pki) -> AsyncIterator[AlertingServer]:
    server = AlertingServer(pki.server, pki.ca.pem)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


async def test_a_servers_alerts_name_what_it_refused(pki, tmp_path):
    async with _alerting(pki) as server, aiohttp.ClientSession() as http:
        url = f"https://127.0.0.1:{server.port}/mcp"
        async with running_proxy(url, tmp_path / "a", main_keys=pki.keys()) as proxy:
            took, body = await _listed(Caller(http, proxy.url))
        assert body == _unavailable(ALERTED)
        assert took < 10
        async with running_proxy(url, tmp_path / "b", main_keys=pki.keys(pki.stranger)) as proxy:
            took, body = await _listed(Caller(http, proxy.url))
        assert body == _unavailable("the server does not trust the client certificate (tlsv1 alert unknown ca)")
        assert took < 10
    assert set(server.failures) == {"PEER_DID_NOT_RETURN_A_CERTIFICATE", "CERTIFICATE_VERIFY_FAILED"}


async def test_a_reload_reads_the_backends_tls_files_again(pki, tmp_path):
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(pki.other.pem.read_bytes())  # the wrong CA first
    config = tmp_path / "proxy.toml"
    async with _alerting(pki) as server, aiohttp.ClientSession() as http:
        config.write_text(f'listen = "127.0.0.1:0"\nstate_dir = "{tmp_path / "state"}"\nstore = "memory"\n[[upstream]]\n'
                          f'name = "main"\nurl = "https://127.0.0.1:{server.port}/mcp"\ntls_ca_file = "{ca_file}"\n')  # fmt: skip
        running = await start(load(config))
        try:
            _, body = await _listed(Caller(http, running.url))
            assert body == _unavailable(UNTRUSTED)
            ca_file.write_bytes(pki.ca.pem.read_bytes())  # the right CA under the same path; the file unchanged
            assert await running.reload(load(config)) == ["backend main: TLS files read again (tls_ca_file)"]
            _, body = await _listed(Caller(http, running.url))
            assert body == _unavailable(ALERTED)
            ca_file.write_text("garbage\n")
            with pytest.raises(ConfigError) as refused:
                await running.reload(load(config))
            assert str(refused.value) == f"backend 'main': tls_ca_file {ca_file}: not PEM (no -----BEGIN line)"
            _, body = await _listed(Caller(http, running.url))  # the running context stays
            assert body == _unavailable(ALERTED)
        finally:
            await running.stop()


async def test_tls_files_that_do_not_load_refuse_the_start_naming_the_backend_and_the_file(pki, tmp_path):
    missing = tmp_path / "missing.key"
    keys = {"tls_client_cert": str(pki.client.cert), "tls_client_key": str(missing)}
    with pytest.raises(ConfigError) as refused:
        async with running_proxy("https://127.0.0.1:9/mcp", tmp_path / "a", main_keys=keys):
            pass
    assert str(refused.value) == f"backend 'main': tls_client_key {missing}: cannot read it: No such file or directory"
    keys = {"tls_client_cert": str(pki.client.cert), "tls_client_key": str(pki.stranger.key)}
    with pytest.raises(ConfigError) as refused:
        async with running_proxy("https://127.0.0.1:9/mcp", tmp_path / "b", main_keys=keys):
            pass
    assert str(refused.value) == (
        f"backend 'main': tls_client_key {pki.stranger.key} does not match the certificate in tls_client_cert {pki.client.cert}"
    )


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"url": "http://127.0.0.1:3000/mcp", "tls_ca_file": "/ca.pem"},
            "upstream.0: Value error, tls_ca_file: only for a backend whose url is https:// (got {'url': "
            "'http://127.0.0.1:3000/mcp', 'tls_ca_file': '/ca.pem'})",
        ),
        (
            {"url": "https://127.0.0.1:3000/mcp", "tls_client_cert": "/c.pem"},
            "upstream.0: Value error, tls_client_cert and tls_client_key go together: give both (the certificate chain and "
            "its private key) or neither (got {'url': 'https://127.0.0.1:3000/mcp', 'tls_client_cert': '/c.pem'})",
        ),
    ],
)
def test_tls_keys_are_checked_at_load(keys, message):
    with pytest.raises(ConfigError) as refused:
        load(None, {"upstream": [keys]})
    assert str(refused.value) == f"configuration: {message}"


def test_the_environments_https_proxy_applies_to_https_backends_not_named_by_no_proxy():
    environ = {"HTTPS_PROXY": "http://user:secret@proxy.example:3128", "NO_PROXY": "localhost,.internal.example"}
    assert env_proxy("https://mcp.example.com/mcp", environ) == {
        "proxy": "http://proxy.example:3128",
        "proxy_headers": {"Proxy-Authorization": "Basic dXNlcjpzZWNyZXQ="},
    }
    assert env_proxy("https://a.internal.example:8443/mcp", environ) == {}
    assert env_proxy("https://localhost/mcp", environ) == {}
    assert env_proxy("http://mcp.example.com/mcp", environ) == {}  # plain http: never proxied
    assert env_proxy("https://mcp.example.com/mcp", {"https_proxy": "proxy.example:3128"}) == {
        "proxy": "http://proxy.example:3128"
    }


async def _connect_proxy(seen: list[str]) -> asyncio.Server:
    """An HTTP CONNECT proxy on 127.0.0.1:<ephemeral> that records each CONNECT target and pipes."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        target = head.split(b" ")[1].decode()
        seen.append(target)
        host, port = target.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return await asyncio.start_server(client, "127.0.0.1", 0)


async def test_an_https_backend_is_reached_through_the_environments_https_proxy(pki, tmp_path, monkeypatch):
    seen: list[str] = []
    relay = await _connect_proxy(seen)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{relay.sockets[0].getsockname()[1]}")
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.setenv("NO_PROXY", "")
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        async with _alerting(pki) as server, aiohttp.ClientSession() as http:
            async with running_proxy(f"https://127.0.0.1:{server.port}/mcp", tmp_path, main_keys=pki.keys()) as proxy:
                _, body = await _listed(Caller(http, proxy.url))
            assert body == _unavailable(ALERTED)
            assert set(seen) == {f"127.0.0.1:{server.port}"}
    finally:
        relay.close()
