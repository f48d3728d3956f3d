"""HTTPS on the proxy's face (issue 41 part 3; docs/configuration.md "HTTPS on the proxy's face",
docs/decisions.md §173): `tls_cert` and `tls_key` make the listening socket serve TLS, the MCP
endpoint, `/healthz` and `/metrics` alike; a client that does not trust the certificate fails the
handshake; a reload reads the files again into the serving context (the next handshake shows the
renewed certificate), and refuses a key that does not match; `check` and the start name the file.
The official `mcp` 1.30 client (its peer environment) trusting the private CA lists and calls tools
through it. A private CA made in the test (`tests/tls_support.py`), ports ephemeral on 127.0.0.1."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import signal
import ssl
import sys
from pathlib import Path

import aiohttp
import pytest
from peer_checks import run_script
from support import TEST_KEY, free_port
from tls_support import Authority, client_context, presented_serial

from proxy.app import start
from proxy.check import check
from proxy.config import ConfigError, load
from proxy.keys import new_key_text
from proxy.listening import shared_sockets
from translators.sealing import Keyring

PEERS = Path(__file__).resolve().parents[1] / "peers"
ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, cert: Path, key: Path, upstream: str) -> Path:
    path = tmp_path / "proxy.toml"
    path.write_text(
        f'listen = "127.0.0.1:0"\nstate_dir = "{tmp_path / "state"}"\nstore = "memory"\n'
        f'tls_cert = "{cert}"\ntls_key = "{key}"\n[[upstream]]\nname = "main"\nurl = "{upstream}"\n'
    )
    return path


@pytest.fixture
def pki(tmp_path: Path) -> Authority:
    return Authority(tmp_path, "face")


async def test_the_proxy_serves_https_on_its_listening_socket_and_says_so(tmp_path, pki):
    server = pki.issue("server", serial=1001)
    settings = load(_config(tmp_path, server.cert, server.key, f"http://127.0.0.1:{free_port()}/mcp"))
    running = await start(settings, keyring=Keyring(TEST_KEY))
    try:
        port = int(running.base_url.rsplit(":", 1)[1])
        assert (running.base_url, running.url) == (f"https://127.0.0.1:{port}", f"https://127.0.0.1:{port}/mcp")
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context(pki.pem))) as http:
            async with http.get(running.base_url + "/healthz") as response:
                assert (response.status, await response.json()) == (200, {"status": "ok"})
            async with http.get(running.base_url + "/metrics") as response:
                assert response.status == 200
                assert (await response.text()).count("# TYPE mcp_tasks_proxy_requests_total counter") == 1
        assert await presented_serial(port, pki.pem) == 1001
    finally:
        await running.stop()


async def test_a_client_that_does_not_trust_the_certificate_fails_the_handshake(tmp_path, pki):
    server = pki.issue("server")
    settings = load(_config(tmp_path, server.cert, server.key, f"http://127.0.0.1:{free_port()}/mcp"))
    running = await start(settings, keyring=Keyring(TEST_KEY))
    try:
        async with aiohttp.ClientSession() as http:  # the system's CAs only
            with pytest.raises(aiohttp.ClientConnectorCertificateError) as caught:
                await http.get(running.base_url + "/healthz")
        error = caught.value.certificate_error
        assert type(error) is ssl.SSLCertVerificationError
        assert (error.reason, error.verify_message) == ("CERTIFICATE_VERIFY_FAILED", "unable to get local issuer certificate")
        async with aiohttp.ClientSession() as http:  # plain HTTP to the HTTPS port: no answer in HTTP
            with pytest.raises(aiohttp.ServerDisconnectedError):
                await http.get(running.base_url.replace("https://", "http://") + "/healthz")
    finally:
        await running.stop()


async def test_a_reload_reads_a_renewed_certificate_on_the_same_paths_into_the_next_handshake(tmp_path, pki):
    server = pki.issue("server", serial=1001)
    path = _config(tmp_path, server.cert, server.key, f"http://127.0.0.1:{free_port()}/mcp")
    running = await start(load(path), keyring=Keyring(TEST_KEY))
    try:
        port = int(running.base_url.rsplit(":", 1)[1])
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context(pki.pem))) as http:
            async with http.get(running.base_url + "/healthz") as response:  # a kept-alive connection, before the reload
                assert response.status == 200
            assert await presented_serial(port, pki.pem) == 1001
            renewed = pki.issue("server", serial=0x2002)  # the same two paths, new contents, the file unchanged
            changes = await running.reload(load(path))
            valid_until = f"{pki.now + datetime.timedelta(days=1):%Y-%m-%d}"
            assert changes == [f"tls_cert {renewed.cert} loaded (serial 2002, valid until {valid_until})"]
            assert await presented_serial(port, pki.pem) == 0x2002
            async with http.get(running.base_url + "/healthz") as response:  # the open connection goes on
                assert (response.status, await response.json()) == (200, {"status": "ok"})

            server.key.write_bytes(pki.issue("other").key.read_bytes())  # the key of another certificate
            with pytest.raises(ConfigError) as refused:
                await running.reload(load(path))
            assert str(refused.value) == f"tls_key {server.key} does not match the certificate in tls_cert {server.cert}"
            assert await presented_serial(port, pki.pem) == 0x2002  # the running certificate stays
    finally:
        await running.stop()


async def test_a_handed_listening_socket_serves_https_too(tmp_path, pki):
    """A worker of `serve --workers N`, or a restart's new process, serves on a socket it is handed
    (`listening.shared_sockets`): TLS there too."""
    server = pki.issue("server", serial=1003)
    port = free_port()
    path = _config(tmp_path, server.cert, server.key, f"http://127.0.0.1:{free_port()}/mcp")
    path.write_text(path.read_text().replace('listen = "127.0.0.1:0"', f'listen = "127.0.0.1:{port}"'))
    fd = shared_sockets("127.0.0.1", port, 1)[0].detach()
    running = await start(load(path), keyring=Keyring(TEST_KEY), listening_fd=fd)
    try:
        assert running.url == f"https://127.0.0.1:{port}/mcp"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_context(pki.pem))) as http:
            async with http.get(running.base_url + "/healthz") as response:
                assert (response.status, await response.json()) == (200, {"status": "ok"})
        assert await presented_serial(port, pki.pem) == 1003
    finally:
        await running.stop()


async def test_serve_with_two_workers_serves_https_on_the_shared_port(tmp_path, pki, redis_url):
    """`serve --workers 2`: the supervisor's `SO_REUSEPORT` sockets, handed to each worker, serve TLS."""
    server = pki.issue("server", serial=1004)
    port = free_port()
    path = _config(tmp_path, server.cert, server.key, f"http://127.0.0.1:{free_port()}/mcp")
    path.write_text(path.read_text().replace('listen = "127.0.0.1:0"', f'listen = "127.0.0.1:{port}"'))
    env = {**os.environ, "MCP_TASKS_PROXY_KEY": new_key_text()}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "serve", "--config", str(path), "--workers", "2", "--store", redis_url,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        banners = [(await asyncio.wait_for(process.stdout.readline(), 30)).decode().split(" (")[0] for _ in range(2)]
        assert banners == [f"mcp-tasks-proxy listening on https://127.0.0.1:{port}/mcp"] * 2
        context = client_context(pki.pem)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, force_close=True)) as http:
            for _ in range(4):  # a new connection each: both workers answer
                async with http.get(f"https://127.0.0.1:{port}/healthz") as response:
                    assert (response.status, await response.json()) == (200, {"status": "ok"})
        assert await presented_serial(port, pki.pem) == 1004
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)  # the supervisor this test started, by its own PID
        stopped = await asyncio.wait_for(process.wait(), 20)  # asserted after the block: a failure above is not masked
    assert stopped == 0


def test_check_rejects_a_key_that_does_not_match_the_certificate_naming_both_files(tmp_path, pki):
    server, other = pki.issue("server"), pki.issue("other")
    path = _config(tmp_path, server.cert, other.key, "http://127.0.0.1:3000/mcp")
    lines, held = check(str(path), {}, environ={})
    assert held is False
    assert [line for line in lines if line.startswith("error:")] == [
        f"error: tls: tls_key {other.key} does not match the certificate in tls_cert {server.cert}"
    ]
    good = _config(tmp_path, server.cert, server.key, "http://127.0.0.1:3000/mcp")
    lines, held = check(str(good), {}, environ={})
    assert held is True
    assert f"ok: tls: tls_cert {server.cert} with tls_key {server.key} (CN=127.0.0.1, valid until " in "\n".join(lines)


async def test_the_start_is_refused_naming_the_file_that_does_not_load(tmp_path, pki):
    server = pki.issue("server")
    missing = tmp_path / "missing.key"
    with pytest.raises(ConfigError) as refused:
        await start(load(_config(tmp_path, server.cert, missing, "http://127.0.0.1:3000/mcp")), keyring=Keyring(TEST_KEY))
    assert str(refused.value) == f"tls_key {missing}: cannot read it: No such file or directory"
    server.cert.write_text("not a certificate\n")
    with pytest.raises(ConfigError) as refused:
        await start(load(_config(tmp_path, server.cert, server.key, "http://127.0.0.1:3000/mcp")), keyring=Keyring(TEST_KEY))
    assert str(refused.value) == f"tls_cert {server.cert}: not PEM (no -----BEGIN line)"


def test_tls_cert_without_tls_key_is_refused_at_load(tmp_path):
    path = tmp_path / "proxy.toml"
    path.write_text('tls_cert = "/etc/cert.pem"\n[[upstream]]\nurl = "http://127.0.0.1:3000/mcp"\n')
    with pytest.raises(ConfigError) as refused:
        load(path)
    assert str(refused.value) == (
        f"{path}: (top level): Value error, tls_cert and tls_key go together: give both (the certificate chain and its "
        "private key) or neither (got {'tls_cert': '/etc/cert.pem', 'upstream': [{'url': 'http://127.0.0.1:3000/mcp'}]})"
    )


@pytest.mark.peers
async def test_the_official_mcp_client_trusting_the_ca_works_over_https_and_one_that_does_not_fails_the_handshake(
    tmp_path, pki, plain_mcp1_server
):
    from proxy.demo.peers import ensure_peer_env

    server = pki.issue("server")
    running = await start(load(_config(tmp_path, server.cert, server.key, plain_mcp1_server.url)), keyring=Keyring(TEST_KEY))
    try:
        calls = [{"list": True}, {"name": "slow_echo", "arguments": {"text": "over tls", "seconds": 0.1}}]
        python, script = ensure_peer_env("mcp-v1"), PEERS / "mcp1_tool_calls.py"
        trusting = {**os.environ, "SSL_CERT_FILE": str(pki.pem)}  # httpx (the SDK's client) trusts this file
        code, out, err = await run_script(python, script, running.url, 120, "--calls", json.dumps(calls), env=trusting)
        assert code == 0, err[-2000:]
        assert [json.loads(line) for line in out.splitlines()] == [
            {"tools": ["slow_echo"]},
            {"texts": ["echo over tls"], "isError": False},
        ]
        # certifi's CAs alone: the proxy's certificate is not trusted
        environ = {name: value for name, value in os.environ.items() if name not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
        code, out, err = await run_script(python, script, running.url, 120, "--calls", json.dumps(calls), env=environ)
        assert (code, out) == (1, "")  # the session never opened
        assert (
            "httpx.ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate"
            in err
        )
    finally:
        await running.stop()
