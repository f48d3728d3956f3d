"""TLS: to backends (docs/configuration.md "TLS to backends", docs/decisions.md §172) and on the
proxy's face (its listening socket: "HTTPS on the proxy's face", §173).

A backend whose `url` is `https://` is reached with the system's trust store, unless its
`[[upstream]]` table names `tls_ca_file` (a PEM bundle trusted instead: a private CA),
`tls_client_cert` + `tls_client_key` (a client certificate, mTLS) or `tls_server_name` (the name
its certificate must hold and the SNI sent, instead of the URL's host). Each such backend gets one
`ssl.SSLContext` of its own, built here from the files (`request_options`); a file that does not
exist or does not load refuses the start, or the reload, with a `ConfigError` naming the backend,
the file and what is wrong. `request_options` is what every aiohttp request to the backend carries
(`Endpoint.request_options`): `ssl=`, `server_hostname=`, and `proxy=` (with `proxy_auth=`) when the
environment's `HTTPS_PROXY` applies to the backend (`NO_PROXY` not naming it). Plain `http://`
backends get none of it: their requests go on the proxy's own HTTP/1.1 pool, unchanged.

A TLS failure is told by what failed (`failure`): the server's certificate not verified (an unknown
CA, a name that does not match), a client certificate the server required and was not sent, or
one it refused. A server on asyncio (uvicorn, aiohttp) that requires a client certificate sends
no alert: it closes the connection after the handshake, and the request fails as a reset or a
disconnection; `closed_after_handshake` then makes one more handshake, sends nothing and listens,
to tell that apart from a backend that merely broke a connection.

The face: `tls_cert` + `tls_key` make the proxy serve HTTPS (`face_context`); a reload loads the
files again into the same context (`face_reload`), so that new handshakes present the new
certificate while open connections go on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import tempfile
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from ..config import ConfigError, Settings, Upstream

log = logging.getLogger(__name__)

MAX_PEM_BYTES = 1024 * 1024
"""A certificate, key or CA file is read up to this (1 MiB); a larger one is refused."""
LISTEN_S = 1.0
"""How long `closed_after_handshake` listens after its handshake for the server to close or alert."""
ALERTS = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the server requires a client certificate and none was sent",
    "TLSV1_ALERT_UNKNOWN_CA": "the server does not trust the client certificate",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the server refused the client certificate",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the server refused the client certificate as expired",
    "SSLV3_ALERT_HANDSHAKE_FAILURE": "the server refused the handshake (a TLS 1.2 server that requires a client certificate says so)",
    "TLSV1_ALERT_PROTOCOL_VERSION": "no TLS version both sides speak",
    "WRONG_VERSION_NUMBER": "the server does not speak TLS on this port",
}
"""What the server's alert (or OpenSSL's reason) says, for the error and the log line."""


class TlsProblem(Exception):
    """A TLS file that cannot be used; the message names the key and the file and says what is wrong."""


class BackendContext(ssl.SSLContext):
    """A backend's client context; `client_cert` names the certificate it presents (None: none)."""

    client_cert: str | None = None


def _read(key: str, path: str) -> bytes:
    """The bytes of the PEM file `path` given as `key`; `TlsProblem` when it cannot be read or is not PEM."""
    try:
        with open(Path(path).expanduser(), "rb") as fh:
            data = fh.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise TlsProblem(f"{key} {path}: cannot read it: {exc.strerror}") from None
    if len(data) > MAX_PEM_BYTES:
        raise TlsProblem(f"{key} {path}: larger than {MAX_PEM_BYTES} bytes: not a PEM file")
    if b"-----BEGIN " not in data:
        raise TlsProblem(f"{key} {path}: not PEM (no -----BEGIN line)")
    return data


def _certificates(key: str, path: str, data: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise TlsProblem(f"{key} {path}: holds no PEM certificate") from None


def _check_key(key: str, path: str, data: bytes) -> None:
    try:
        load_pem_private_key(data, password=None)
    except TypeError:
        raise TlsProblem(f"{key} {path}: the private key is encrypted with a passphrase; give it unencrypted "
                         "(a file only the proxy's user can read)") from None
    except Exception as exc:  # noqa: BLE001 - any key cryptography cannot read (ValueError, UnsupportedAlgorithm)
        raise TlsProblem(f"{key} {path}: holds no PEM private key ({type(exc).__name__})") from None


def load_pair(context: ssl.SSLContext, cert: tuple[str, str], key: tuple[str, str]) -> x509.Certificate:
    """Load the certificate chain `cert` and its private key `key` (each `(config key, path)`) into
    `context`; returns the leaf certificate. `TlsProblem` names the file and what is wrong, e.g.
    `tls_key /etc/proxy/key.pem does not match the certificate in tls_cert /etc/proxy/cert.pem`."""
    (cert_key, cert_path), (key_key, key_path) = cert, key
    chain = _certificates(cert_key, cert_path, _read(cert_key, cert_path))
    _check_key(key_key, key_path, _read(key_key, key_path))
    try:
        context.load_cert_chain(Path(cert_path).expanduser(), Path(key_path).expanduser())
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TlsProblem(f"{key_key} {key_path} does not match the certificate in {cert_key} {cert_path}") from None
        raise TlsProblem(f"{cert_key} {cert_path} with {key_key} {key_path}: {exc.reason or exc}") from None
    except OSError as exc:
        raise TlsProblem(f"{cert_key} {cert_path} with {key_key} {key_path}: cannot read them: {exc.strerror}") from None
    return chain[0]


def client_context(upstream: Upstream) -> BackendContext | None:
    """The client context of a backend with `tls_ca_file` or a client certificate; None for one
    with neither (the system's trust store, aiohttp's default). Raises `TlsProblem`."""
    if upstream.tls_ca_file is None and upstream.tls_client_cert is None:
        return None
    context = BackendContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the certificate and its name
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if upstream.tls_ca_file is not None:
        path = upstream.tls_ca_file
        _certificates("tls_ca_file", path, _read("tls_ca_file", path))
        try:
            context.load_verify_locations(cafile=Path(path).expanduser())
        except (ssl.SSLError, OSError) as exc:
            raise TlsProblem(f"tls_ca_file {path}: {getattr(exc, 'reason', None) or exc}") from None
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if upstream.tls_client_cert is not None and upstream.tls_client_key is not None:
        load_pair(context, ("tls_client_cert", upstream.tls_client_cert), ("tls_client_key", upstream.tls_client_key))
        context.client_cert = upstream.tls_client_cert
    return context


def env_proxy(url: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """`proxy=` (and `proxy_headers=` with its `Proxy-Authorization` for a proxy URL with a user) for an `https://` backend when the
    environment names an HTTPS proxy (`HTTPS_PROXY`/`https_proxy`) that `NO_PROXY`/`no_proxy` does
    not exempt the backend from (`urllib.request`'s reading of them); else nothing. Plain `http://`
    backends are never proxied (docs/configuration.md "TLS to backends")."""
    parts = urlsplit(url)
    if parts.scheme != "https" or parts.hostname is None:
        return {}
    proxy = environ.get("https_proxy") or environ.get("HTTPS_PROXY")
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    no_proxy = environ.get("no_proxy") or environ.get("NO_PROXY") or ""
    if not proxy or urllib.request.proxy_bypass_environment(host, {"no": no_proxy}):  # type: ignore[attr-defined]
        return {}
    proxy_url = urlsplit(proxy if "://" in proxy else "http://" + proxy)
    options: dict[str, Any] = {"proxy": f"{proxy_url.scheme}://{proxy_url.hostname}" + (f":{proxy_url.port}" if proxy_url.port else "")}
    if proxy_url.username:
        credentials = aiohttp.encode_basic_auth(unquote(proxy_url.username), unquote(proxy_url.password or ""))
        options["proxy_headers"] = {"Proxy-Authorization": credentials}
    return options


def request_options(upstream: Upstream, environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The keyword arguments of every aiohttp request to `upstream` (`Endpoint.request_options`):
    `ssl` (its own context), `server_hostname`, `proxy`; empty for a plain `http://` backend and a
    stdio one. Builds the context from the files now (at start, and at every reload): raises
    `ConfigError` naming the backend and the file."""
    if not upstream.url.startswith("https://"):
        return {}
    try:
        context = client_context(upstream)
    except TlsProblem as exc:
        raise ConfigError(f"backend {upstream.name!r}: {exc}") from None
    options: dict[str, Any] = {} if context is None else {"ssl": context}
    if upstream.tls_server_name is not None:
        options["server_hostname"] = upstream.tls_server_name
    options.update(env_proxy(upstream.url, environ))
    return options


def failure(exc: BaseException | None) -> str | None:
    """What TLS failure `exc` is (an aiohttp client error, or the `ssl.SSLError` under it), for the
    error a client gets and the log line: `certificate verify failed: unable to get local issuer
    certificate`, `certificate verify failed: Hostname mismatch, certificate is not valid for
    'mcp.internal'.`, `the server requires a client certificate and none was sent (tlsv13 alert
    certificate required)`, …; None when it is no TLS failure."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, aiohttp.ClientError):  # aiohttp's errors (some of them `ssl.SSLError`s too) wrap OpenSSL's
            exc = getattr(exc, "certificate_error", None) or getattr(exc, "os_error", None) or exc.__cause__ or exc.__context__
            continue
        if isinstance(exc, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {exc.verify_message}"
        if isinstance(exc, ssl.SSLError):
            reason = exc.reason or ""
            said = reason.lower().replace("_", " ") or str(exc)
            return f"{ALERTS[reason]} ({said})" if reason in ALERTS else said
        exc = getattr(exc, "os_error", None) or exc.__cause__ or exc.__context__
    return None


async def closed_after_handshake(url: str, options: Mapping[str, Any]) -> str | None:
    """After a request to `url` broke off (a reset, a disconnection): make one more TLS handshake with
    the backend's `options`, send nothing and listen `LISTEN_S`. A server that requires a client
    certificate it did not get (or refuses the one sent) closes the connection, or alerts, right
    after the handshake; one that waits for a request was not refusing TLS (None: the request's own
    error stands). Never over 3 × `LISTEN_S`; not tried through an outbound proxy."""
    parts = urlsplit(url)
    if parts.scheme != "https" or parts.hostname is None or "proxy" in options:
        return None
    context = options.get("ssl")
    if not isinstance(context, ssl.SSLContext):
        context = ssl.create_default_context()
    writer = None
    try:
        async with asyncio.timeout(3 * LISTEN_S):
            reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 443, ssl=context,
                                                           server_hostname=options.get("server_hostname") or parts.hostname)
            try:
                async with asyncio.timeout(LISTEN_S):
                    data = await reader.read(1)
            except TimeoutError:
                return None  # it waits for a request: the handshake was not the trouble
    except TimeoutError:
        return None
    except (OSError, EOFError) as exc:
        described = failure(exc)
        if described is not None or isinstance(exc, ssl.SSLError) or writer is None:
            return described
        data = b""  # reset by the server right after the handshake
    finally:
        if writer is not None:
            writer.close()
    if data:
        return None
    if getattr(context, "client_cert", None) is None:
        return ("the server closed the connection right after the handshake, as a server that requires a client "
                "certificate does, and none was sent (tls_client_cert, tls_client_key)")
    return "the server closed the connection right after the handshake: it did not accept the client certificate sent"


def face_context(settings: Settings) -> ssl.SSLContext | None:
    """The server context of the proxy's listening socket with `tls_cert` and `tls_key`, None without
    them (plain HTTP). Raises `ConfigError` naming the file and what is wrong."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    try:
        load_pair(context, ("tls_cert", settings.tls_cert), ("tls_key", settings.tls_key))
    except TlsProblem as exc:
        raise ConfigError(str(exc)) from None
    return context


def checked_at_start(settings: Settings) -> ssl.SSLContext | None:
    """Before the proxy starts anything: every backend's TLS files load (`request_options`, each
    `ConfigError` naming the backend and the file), and the face's context (`face_context`)."""
    for upstream in settings.upstream:
        request_options(upstream)
    return face_context(settings)


def face_reload(context: ssl.SSLContext | None, running: Settings, new: Settings) -> Callable[[], list[str]]:
    """A reload's step for the face: reads `new`'s `tls_cert` and `tls_key` now and checks them (in a
    context of their own: `ConfigError` naming the file, before anything is applied), and returns
    what loads those very bytes into the serving `context` (new handshakes present the new
    certificate; open connections keep theirs) and says so. HTTPS cannot be switched on or off by a
    reload: that is logged as waiting for a restart, and nothing is loaded."""
    if context is None or new.tls_cert is None or new.tls_key is None:
        if (context is None) != (new.tls_cert is None):
            log.warning("reload: tls_cert and tls_key changed in the file; HTTPS on the listening socket is switched %s at the "
                        "next restart", "on" if context is None else "off")
        return lambda: []
    cert, key = ("tls_cert", new.tls_cert), ("tls_key", new.tls_key)
    try:
        files = (_read(*cert), _read(*key))
    except TlsProblem as exc:
        raise ConfigError(str(exc)) from None

    def loaded(target: ssl.SSLContext) -> x509.Certificate:
        with tempfile.TemporaryDirectory(prefix="mcp-tasks-proxy-tls-") as folder:  # the bytes checked, loaded as they are
            paths = []
            for name, data in zip(("cert.pem", "key.pem"), files, strict=True):
                fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                paths.append(os.path.join(folder, name))
            try:
                return load_pair(target, (cert[0], paths[0]), (key[0], paths[1]))
            except TlsProblem as exc:
                raise TlsProblem(str(exc).replace(paths[0], cert[1]).replace(paths[1], key[1])) from None

    try:
        loaded(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    except TlsProblem as exc:
        raise ConfigError(str(exc)) from None

    def apply() -> list[str]:
        leaf = loaded(context)
        running.tls_cert, running.tls_key = new.tls_cert, new.tls_key
        line = f"tls_cert {new.tls_cert} loaded (serial {leaf.serial_number:x}, valid until {leaf.not_valid_after_utc:%Y-%m-%d})"
        log.info("reload: %s", line)
        return [line]

    return apply

