"""A private CA made in the test (the `cryptography` package), and the certificates the TLS tests
use: servers' (by IP address or by name), clients', and files written as PEM."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Issued:
    """A certificate and its key, written as `cert` and `key` (PEM)."""

    cert: Path
    key: Path
    serial: int


class Authority:
    """A CA of the test's own (an EC P-256 root), written as `<folder>/<name>-ca.pem`."""

    def __init__(self, folder: Path, name: str):
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.now = datetime.datetime.now(datetime.UTC)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(1)
            .not_valid_before(self.now - datetime.timedelta(hours=1))
            .not_valid_after(self.now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        self.pem = folder / f"{name}-ca.pem"
        self.pem.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def issue(self, stem: str, *, names: tuple[str, ...] = ("127.0.0.1",), client: bool = False, serial: int = 1000) -> Issued:
        """A leaf certificate for `names` (IP addresses or DNS names; a client's has none), its key,
        written as `<stem>.pem` and `<stem>.key` (overwritten when they exist: a renewal)."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else stem)]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(self.now - datetime.timedelta(hours=1))
            .not_valid_after(self.now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(name) for name in names]), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        issued = Issued(self.folder / f"{stem}.pem", self.folder / f"{stem}.key", serial)
        issued.cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        issued.key.write_bytes(
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
        issued.key.chmod(0o600)
        return issued


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def client_context(ca: Path) -> ssl.SSLContext:
    """A client context trusting `ca` alone."""
    return ssl.create_default_context(cafile=str(ca))


async def presented_serial(port: int, ca: Path) -> int:
    """The serial number of the certificate a new TLS handshake with 127.0.0.1:`port` is shown."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context(ca), server_hostname="127.0.0.1")
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


class AlertingServer:
    """A TLS server on 127.0.0.1:<ephemeral> on blocking sockets in a thread: OpenSSL's own, which
    (unlike asyncio's servers) sends its alert when a handshake fails, e.g. `certificate required`
    under TLS 1.3 to a client without a certificate. It answers no request: every handshake of the
    tests that use it fails. Stop it with `stop()`."""

    def __init__(self, server: Issued, client_ca: Path):
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(server.cert, server.key)
        self.context.load_verify_locations(client_ca)
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)  # so that the thread sees `stop()` (a closed socket does not end an accept)
        self.port = self.sock.getsockname()[1]
        self.stopping = threading.Event()
        self.failures: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            try:
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError) as exc:
                self.failures.append(getattr(exc, "reason", None) or type(exc).__name__)
            finally:
                conn.close()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.sock.close()
