"""The sandbox's own certificate authority and the HTTPS server certificate it signs.

Generated on first use (EC P-256), persisted under the data directory and reused
afterwards; regenerated only when missing, unreadable or close to expiry. Clients
trust the sandbox by pointing ``REQUESTS_CA_BUNDLE`` / ``SSL_CERT_FILE`` (or their
``verify`` option) at ``TlsPaths.ca_cert``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sandbox.config import SandboxSettings
from sandbox.identity._files import atomic_write, locked

CA_VALIDITY = dt.timedelta(days=3650)
SERVER_VALIDITY = dt.timedelta(days=397)
RENEW_BEFORE = dt.timedelta(days=30)
SERVER_DNS_NAMES = ("localhost",)
SERVER_IPS = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class TlsPaths:
    """Where the CA certificate and the server certificate/key live (PEM files)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def ensure_tls_material(settings: SandboxSettings) -> TlsPaths:
    """Create (once) and return the sandbox CA and its ``localhost`` server certificate.

    Safe when several processes start together: generation happens under a file lock
    and every file is written atomically.
    """
    paths = TlsPaths(settings.ca_cert_path, settings.server_cert_path, settings.server_key_path)
    with locked(settings.data_dir, "tls"):
        ca = _load_ca(settings)
        if ca is None:
            ca = _create_ca(settings)
            _create_server_cert(settings, *ca)
        elif not _server_cert_usable(settings, ca[0]):
            _create_server_cert(settings, *ca)
    return paths


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _load_ca(settings: SandboxSettings) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
    try:
        cert = x509.load_pem_x509_certificate(settings.ca_cert_path.read_bytes())
        key = serialization.load_pem_private_key(settings.ca_key_path.read_bytes(), password=None)
    except (OSError, ValueError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or cert.not_valid_after_utc - RENEW_BEFORE < _now():
        return None
    if cert.public_key() != key.public_key():
        return None
    return cert, key


def _server_cert_usable(settings: SandboxSettings, ca_cert: x509.Certificate) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(settings.server_cert_path.read_bytes())
        key = serialization.load_pem_private_key(settings.server_key_path.read_bytes(), password=None)
    except (OSError, ValueError):
        return False
    if not isinstance(key, ec.EllipticCurvePrivateKey) or cert.public_key() != key.public_key():
        return False
    if cert.issuer != ca_cert.subject or cert.not_valid_after_utc - RENEW_BEFORE < _now():
        return False
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _create_ca(settings: SandboxSettings) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "CRM Sales Copilot Sandbox"),
            x509.NameAttribute(NameOID.COMMON_NAME, "CRM Sales Copilot Sandbox Local CA"),
        ]
    )
    now = _now()
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    atomic_write(settings.ca_key_path, _key_pem(key), private=True)
    atomic_write(settings.ca_cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _create_server_cert(
    settings: SandboxSettings, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    san = x509.SubjectAlternativeName(
        [x509.DNSName(n) for n in SERVER_DNS_NAMES]
        + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVER_IPS]
    )
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(now + SERVER_VALIDITY, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(san, critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    # Key first: a reader that sees the new certificate must also find its key.
    atomic_write(settings.server_key_path, _key_pem(key), private=True)
    atomic_write(settings.server_cert_path, cert.public_bytes(serialization.Encoding.PEM))


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
