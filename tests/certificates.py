"""Made-up X.509 CA certificates for the database CA tests: none is Amazon's, whatever its name says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from layers import database_ca

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def certificate(
    common_name: str,
    *,
    organization: str = database_ca.RDS_ORGANIZATION,
    ca: bool = True,
    not_after: datetime = NOW + timedelta(days=3650),
) -> bytes:
    """A self-signed certificate in PEM, named as asked (by default as an Amazon RDS CA would be)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    built = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - timedelta(days=365))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return built.public_bytes(serialization.Encoding.PEM)


def digests(pem: bytes) -> dict[str, str]:
    """``SHA-256 -> subject`` of each certificate of ``pem``: a stand-in for amazon_rds_roots.txt."""
    return {
        database_ca.certificate_digest(c): c.subject.rfc4514_string()
        for c in x509.load_pem_x509_certificates(pem)
    }
