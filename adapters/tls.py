"""TLS for the gRPC gateways: a development PKI and the ``ssl`` contexts for grpclib.

The node control and telemetry gateways serve TLS only; clients always verify the server
certificate against a configured CA and check its name (docs/tls.md). For local use
``ensure_dev_pki`` creates a private CA and a server certificate under ``<state>/pki/``;
production supplies its own files (docs/tls.md). Keys are ECDSA P-256, written 0600.

grpclib sets ALPN only on the context it builds for ``ssl=True``: a context passed in must offer
"h2" itself, so both contexts here do; the server side needs it as well.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import ipaddress
import os
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from domain.errors import InvalidInput

CA_CERT, CA_KEY = "ca.pem", "ca-key.pem"
SERVER_CERT, SERVER_KEY = "server.pem", "server-key.pem"
# TLS 1.2 suites that HTTP/2 (RFC 7540 §9.2.2) allows; TLS 1.3 suites are always fine.
_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20"
_RENEW_BEFORE = dt.timedelta(days=1)  # a server certificate this close to expiry is re-issued


@dataclass(frozen=True)
class CertPaths:
    cert: Path
    key: Path


@dataclass(frozen=True)
class DevPki:
    ca: CertPaths  # ca.cert is what clients trust (TUNEPLANE_CA_FILE)
    server: CertPaths  # the gateway's certificate and key (TUNEPLANE_GATEWAY_CERT / _KEY)


def generate_ca(
    directory: Path,
    name: str = "TunePlane dev CA",
    days: int = 3650,
    *,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> CertPaths:
    """Create a self-signed CA in ``directory`` (``ca.pem``, ``ca-key.pem`` 0600), replacing one.
    ``not_before``/``not_after`` override the validity window (tests make expired ones)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    start, end = _window(days, not_before, not_after)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _write_pair(directory, CA_CERT, CA_KEY, cert, key)


def issue_server_cert(
    ca_dir: Path,
    out_dir: Path,
    names: list[str],
    days: int = 825,
    *,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> CertPaths:
    """Issue ``server.pem`` + ``server-key.pem`` (0600) in ``out_dir`` for ``names``, signed by
    the CA in ``ca_dir``. Names that parse as IP addresses become IP SANs, the rest DNS SANs.
    ``not_before``/``not_after`` override the validity window (tests issue expired ones)."""
    if not names:
        raise InvalidInput("a server certificate needs at least one name", fix="pass a host name")
    ca_cert = load_cert(ca_dir / CA_CERT)
    ca_key = load_key(ca_dir / CA_KEY)
    _check_pair(ca_dir / CA_CERT, ca_cert, ca_dir / CA_KEY, ca_key)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise InvalidInput(f"the CA key {ca_dir / CA_KEY} is not EC or RSA", fix="use an EC CA")
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _window(days, not_before, not_after)
    cn = names[0][:64]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return _write_pair(out_dir, SERVER_CERT, SERVER_KEY, cert, key)


def ensure_dev_pki(state_dir: Path, names: list[str]) -> DevPki:
    """The development PKI under ``state_dir/pki``: created on first use, then reused.

    The server certificate is re-issued when it is missing, expires within a day, lacks one of
    ``names``, does not match its key, or was not signed by the CA. An expired or unreadable CA
    is an error (replacing it silently would break every node that trusts it).

    Safe when several processes call it at once (gateways starting together): all of it runs
    under an exclusive lock on ``pki/.lock``, so they all end with the same CA."""
    with _pki_lock(state_dir / "pki"):
        return _ensure_dev_pki(state_dir, names)


def dev_server_context(state_dir: Path, names: list[str]) -> tuple[ssl.SSLContext, Path]:
    """``ensure_dev_pki``, then the server context of its certificate, read under the same lock
    (another process re-issuing the certificate meanwhile cannot hand us its key with our
    certificate); and the CA file clients trust."""
    with _pki_lock(state_dir / "pki"):
        pki = _ensure_dev_pki(state_dir, names)
        return server_context(pki.server.cert, pki.server.key), pki.ca.cert


@contextlib.contextmanager
def _pki_lock(pki: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``pki/.lock`` (released by the kernel if the process dies)."""
    pki.mkdir(parents=True, exist_ok=True)
    fd = os.open(pki / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _ensure_dev_pki(state_dir: Path, names: list[str]) -> DevPki:
    pki = state_dir / "pki"
    ca = CertPaths(pki / CA_CERT, pki / CA_KEY)
    if not ca.cert.exists():
        # no ca.pem: nothing trusts a CA here yet. A key alone is what a process killed between
        # writing the key and the certificate leaves (the key is written first): start again.
        generate_ca(pki)
    ca_cert = load_cert(ca.cert)
    _check_pair(ca.cert, ca_cert, ca.key, load_key(ca.key))
    if ca_cert.not_valid_after_utc <= _now():
        raise InvalidInput(
            f"the development CA {ca.cert} expired on {ca_cert.not_valid_after_utc:%Y-%m-%d}",
            fix=f"delete {pki} to create a new one, then give nodes the new {ca.cert}",
        )
    server = CertPaths(pki / SERVER_CERT, pki / SERVER_KEY)
    if not _server_cert_usable(server, ca_cert, names):
        server = issue_server_cert(pki, pki, names)
    return DevPki(ca=ca, server=server)


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server context for grpclib: TLS 1.2+, ALPN "h2", no client certificate requested."""
    _check_pair(cert_file, load_cert(cert_file), key_file, load_key(key_file))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.verify_mode = ssl.CERT_NONE  # nodes authenticate with their credential, not certificates
    _harden(ctx)
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidInput(
            f"cannot use {cert_file} with {key_file}: {exc}",
            fix="pass the PEM certificate and its own unencrypted private key",
        ) from exc
    return ctx


def client_context(ca_file: Path) -> ssl.SSLContext:
    """A client context that trusts only ``ca_file``, verifies the chain and checks the host name
    (never turned off), and offers ALPN "h2"."""
    load_cert(ca_file)  # a clear error for a missing or non-PEM file
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.check_hostname = True
    _harden(ctx)
    return ctx


def load_cert(path: Path) -> x509.Certificate:
    data = _read(path, "certificate")
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError as exc:
        raise InvalidInput(
            f"{path} is not a PEM certificate ({exc})",
            fix=f"point to a PEM file ('-----BEGIN CERTIFICATE-----…'), or recreate {path}",
        ) from exc


def load_key(path: Path) -> PrivateKeyTypes:
    data = _read(path, "private key")
    try:
        return serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(
            f"{path} is not an unencrypted PEM private key ({exc})",
            fix=f"point to the certificate's unencrypted PEM key, or recreate {path}",
        ) from exc


# ---- helpers ----------------------------------------------------------------------------------


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _window(
    days: int, not_before: dt.datetime | None, not_after: dt.datetime | None
) -> tuple[dt.datetime, dt.datetime]:
    start = not_before or _now() - dt.timedelta(minutes=5)  # a little slack for clock skew
    return start, not_after or start + dt.timedelta(days=days)


def _harden(ctx: ssl.SSLContext) -> None:
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(_CIPHERS)
    ctx.set_alpn_protocols(["h2"])


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        pass
    if not name or not name.isascii() or any(c.isspace() for c in name):
        raise InvalidInput(
            f"{name!r} is neither an IP address nor an ASCII DNS name",
            fix="use an IP address or a host name (IDNA A-label, e.g. xn--…, for non-ASCII)",
        )
    return x509.DNSName(name.lower())


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise InvalidInput(
            f"the TLS {what} {path} does not exist",
            fix="check the path (see docs/tls.md), or let `tp up` create the development PKI",
        ) from exc
    except OSError as exc:  # permission denied, a directory, …
        raise InvalidInput(
            f"cannot read the TLS {what} {path}: {exc.strerror or exc}",
            fix=f"make {path} a file readable by this process's user",
        ) from exc


def _check_pair(
    cert_path: Path, cert: x509.Certificate, key_path: Path, key: PrivateKeyTypes
) -> None:
    der, spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(der, spki) != cert.public_key().public_bytes(der, spki):
        raise InvalidInput(
            f"the private key {key_path} does not belong to the certificate {cert_path}",
            fix="pass the key the certificate was issued for (or re-issue both together)",
        )


def _server_cert_usable(server: CertPaths, ca_cert: x509.Certificate, names: list[str]) -> bool:
    try:
        cert = load_cert(server.cert)
        _check_pair(server.cert, cert, server.key, load_key(server.key))
        cert.verify_directly_issued_by(ca_cert)
    except (InvalidInput, InvalidSignature, ValueError, TypeError):
        return False
    if cert.not_valid_after_utc - _RENEW_BEFORE <= _now():
        return False
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return all(_san(n) in sans for n in names)


def _write_pair(
    directory: Path, cert_name: str, key_name: str, cert: x509.Certificate, key: PrivateKeyTypes
) -> CertPaths:
    directory.mkdir(parents=True, exist_ok=True)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    paths = CertPaths(directory / cert_name, directory / key_name)
    _write_atomic(paths.key, key_pem, 0o600)
    _write_atomic(paths.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return paths


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write to a temporary file created with ``mode`` (never wider), then rename into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # the umask cannot widen it, but make it exact
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename survives a power loss
    finally:
        os.close(dir_fd)
