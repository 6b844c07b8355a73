"""The CA bundle deployed database connections verify the server with (``sslmode=verify-full``).

RDS Proxy presents ACM certificates, which chain to the Amazon roots in Mozilla's bundle (certifi); the
Aurora cluster itself, which the migration runner and every client of a stage without a proxy connect to,
presents a certificate of Amazon's RDS CAs, which no public bundle holds. The build fetches Amazon's RDS
bundle once, checks that it holds RDS root CAs and nothing else, and writes one file with both sets into
the layer (Lambda) and beside it for the worker image, so either kind of endpoint verifies.
"""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime
from pathlib import Path

# Where AWS publishes the RDS CA bundle for every commercial region ("global-bundle.pem"; RDS user guide,
# "Using SSL/TLS to encrypt a connection to a DB instance or cluster").
RDS_CA_BUNDLE_URL = "https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem"
# The file's place inside the layer's python/ folder, and so under /opt/python in Lambda.
LAYER_RELATIVE_PATH = Path("tollgate-ca") / "database-ca.pem"
FETCH_TIMEOUT_SECONDS = 30
# Amazon's bundle is about 150 KB; a much larger answer is not it.
MAX_BUNDLE_BYTES = 2 * 1024 * 1024
# What every certificate of the RDS bundle says of itself; anything else in the file is refused.
RDS_ORGANIZATION = "Amazon Web Services, Inc."
RDS_NAME_MARK = "Amazon RDS"


class DatabaseCaError(Exception):
    """The RDS bundle could not be had, or is not what it claims; the message says which."""


def fetch_rds_bundle(url: str = RDS_CA_BUNDLE_URL, timeout: float = FETCH_TIMEOUT_SECONDS) -> bytes:
    """Downloads the bundle (HTTPS verified with this machine's trust store)."""
    if not url.startswith(("https://", "http://127.0.0.1", "http://[::1]")):
        raise DatabaseCaError(f"refusing to fetch the RDS CA bundle over plain HTTP from {url}")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310  # scheme checked above
            body: bytes = response.read(MAX_BUNDLE_BYTES + 1)
    except OSError as error:
        raise DatabaseCaError(
            f"cannot download the RDS CA bundle from {url}: {error}. Download it yourself and pass it with "
            "--rds-ca-bundle FILE (or LAMBDA_RDS_CA_BUNDLE)."
        ) from error
    if len(body) > MAX_BUNDLE_BYTES:
        raise DatabaseCaError(f"{url} answered more than {MAX_BUNDLE_BYTES} bytes: not the RDS CA bundle")
    return body


def check_rds_bundle(pem: bytes, now: datetime | None = None) -> list[str]:
    """The subjects of the bundle's certificates, after checking that each is an RDS root CA and that at
    least one is valid now; raises ``DatabaseCaError`` otherwise."""
    from cryptography import x509  # build-time only: the layer build runs in the project's virtualenv
    from cryptography.x509.oid import NameOID

    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError as error:
        raise DatabaseCaError(f"the RDS CA bundle is not a PEM file of certificates: {error}") from error
    moment = now or datetime.now(UTC)
    subjects = []
    for certificate in certificates:
        subject = certificate.subject.rfc4514_string()
        name = certificate.subject
        organizations = [a.value for a in name.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
        common_names = [a.value for a in name.get_attributes_for_oid(NameOID.COMMON_NAME)]
        if RDS_ORGANIZATION not in organizations or not any(RDS_NAME_MARK in str(n) for n in common_names):
            raise DatabaseCaError(f"the RDS CA bundle holds a certificate not of Amazon RDS: {subject}")
        try:
            constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
        except x509.ExtensionNotFound:
            constraints = None
        if constraints is None or not constraints.ca:
            raise DatabaseCaError(f"the RDS CA bundle holds a certificate that is not a CA: {subject}")
        subjects.append(subject)
    if not any(c.not_valid_before_utc <= moment <= c.not_valid_after_utc for c in certificates):
        raise DatabaseCaError("no certificate of the RDS CA bundle is valid now")
    return subjects


def write_database_ca(site: Path, rds_pem: bytes) -> Path:
    """Writes the layer's bundle: the public roots of the ``certifi`` installed in ``site`` (the layer's
    own, so proxies verify exactly as the runtime would without this file) followed by the RDS roots."""
    public = site / "certifi" / "cacert.pem"
    if not public.is_file():
        raise DatabaseCaError(f"{public} is missing: certifi must be a runtime dependency")
    target = site / LAYER_RELATIVE_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(public.read_bytes().rstrip(b"\n") + b"\n" + rds_pem.strip() + b"\n")
    return target


def rds_bundle(local_file: Path | None, url: str = RDS_CA_BUNDLE_URL) -> bytes:
    """The RDS bundle from ``local_file`` when given, else downloaded; checked either way."""
    pem = local_file.read_bytes() if local_file is not None else fetch_rds_bundle(url)
    check_rds_bundle(pem)
    return pem
