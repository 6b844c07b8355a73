"""The CA bundle deployed database connections verify the server with (``sslmode=verify-full``).

RDS Proxy presents ACM certificates, which chain to the Amazon roots in Mozilla's bundle (certifi); the
Aurora cluster itself, which the migration runner and every client of a stage without a proxy connect to,
presents a certificate of Amazon's RDS CAs, which no public bundle holds. The build fetches Amazon's RDS
bundle (or reads a copy), checks that it is Amazon's: RDS root CAs and nothing else, at least one of them a
root recorded in ``amazon_rds_roots.txt``; and writes one file with both sets into the layer (Lambda) and
beside it for the worker image, so either kind of endpoint verifies. Any other bundle is refused unless
the build is told it is a test bundle.
"""

from __future__ import annotations

import hashlib
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

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
# Amazon's RDS root CAs by certificate digest: what tells Amazon's bundle from a stand-in with the same
# names, offline (names are free to copy; a certificate's digest is not).
AMAZON_RDS_ROOTS_FILE = Path(__file__).with_name("amazon_rds_roots.txt")
TEST_BUNDLE_HINT = (
    "Pass Amazon's global-bundle.pem ({url}) with --rds-ca-bundle FILE (or LAMBDA_RDS_CA_BUNDLE), or, for a "
    "layer that will never be deployed, say that this is a test bundle with --test-ca-bundle "
    "(or LAMBDA_TEST_CA_BUNDLE=1)."
)


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


def _certificates(pem: bytes) -> list[Certificate]:
    from cryptography import x509  # build-time only: the layer build runs in the project's virtualenv

    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError as error:
        raise DatabaseCaError(f"the RDS CA bundle is not a PEM file of certificates: {error}") from error


def _is_rds_named(certificate: Certificate) -> bool:
    from cryptography.x509.oid import NameOID

    name = certificate.subject
    organizations = [a.value for a in name.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    common_names = [a.value for a in name.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return RDS_ORGANIZATION in organizations and any(RDS_NAME_MARK in str(n) for n in common_names)


def _check_usable(certificates: list[Certificate], moment: datetime) -> None:
    """Every certificate a CA, at least one valid now: what any bundle needs to verify a server at all."""
    from cryptography import x509

    for certificate in certificates:
        try:
            constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
        except x509.ExtensionNotFound:
            constraints = None
        if constraints is None or not constraints.ca:
            subject = certificate.subject.rfc4514_string()
            raise DatabaseCaError(f"the RDS CA bundle holds a certificate that is not a CA: {subject}")
    if not any(c.not_valid_before_utc <= moment <= c.not_valid_after_utc for c in certificates):
        raise DatabaseCaError("no certificate of the RDS CA bundle is valid now")


def check_rds_bundle(pem: bytes, now: datetime | None = None) -> list[str]:
    """The subjects of the bundle's certificates, after checking that each is an RDS root CA and that at
    least one is valid now; raises ``DatabaseCaError`` otherwise. Names only: ``rds_bundle`` also asks
    whether the roots are Amazon's own."""
    certificates = _certificates(pem)
    for certificate in certificates:
        if not _is_rds_named(certificate):
            subject = certificate.subject.rfc4514_string()
            raise DatabaseCaError(f"the RDS CA bundle holds a certificate not of Amazon RDS: {subject}")
    _check_usable(certificates, now or datetime.now(UTC))
    return [certificate.subject.rfc4514_string() for certificate in certificates]


def certificate_digest(certificate: Certificate) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding

    return hashlib.sha256(certificate.public_bytes(Encoding.DER)).hexdigest()


def amazon_rds_roots(path: Path = AMAZON_RDS_ROOTS_FILE) -> dict[str, str]:
    """``certificate SHA-256 -> common name`` of the roots recorded in ``amazon_rds_roots.txt``."""
    roots = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, _, common_name = line.partition("  ")
            roots[digest.strip().lower()] = common_name.strip()
    return roots


@dataclass(frozen=True)
class RdsBundle:
    """An RDS CA bundle as the build will ship it, and what is known of where it came from."""

    pem: bytes
    from_amazon: bool  # False only for a bundle the build was told is a test bundle
    source: str  # the file or address it was read from
    # Amazon RDS roots of an Amazon bundle that amazon_rds_roots.txt does not record yet, as lines to add.
    unrecorded: tuple[str, ...] = field(default=())

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.pem).hexdigest()


def classify_rds_bundle(
    pem: bytes,
    source: str,
    *,
    test_bundle: bool = False,
    roots: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> RdsBundle:
    """Amazon's bundle when it holds RDS root CAs only and at least one of them is a recorded Amazon root;
    any other usable bundle only when ``test_bundle`` says so; else ``DatabaseCaError``, saying how to
    proceed."""
    known = amazon_rds_roots() if roots is None else roots
    moment = now or datetime.now(UTC)
    certificates = _certificates(pem)
    digests = [certificate_digest(c) for c in certificates]
    recorded = [d for d in digests if d in known]
    if recorded:
        check_rds_bundle(pem, now=moment)  # a recorded root beside a foreign certificate is still refused
        unrecorded = tuple(
            f"{digest}  {_common_name(certificate)}"
            for digest, certificate in zip(digests, certificates, strict=True)
            if digest not in known
        )
        return RdsBundle(pem, from_amazon=True, source=source, unrecorded=unrecorded)
    if not test_bundle:
        first = certificates[0].subject.rfc4514_string() if certificates else "none"
        raise DatabaseCaError(
            f"{source} is not Amazon's RDS CA bundle: none of its {len(certificates)} certificates is an "
            f"Amazon RDS root recorded in layers/{AMAZON_RDS_ROOTS_FILE.name} (the first: {first}). A layer "
            "with it would fail every verify-full connection to a deployed cluster. "
            + TEST_BUNDLE_HINT.format(url=RDS_CA_BUNDLE_URL)
        )
    if not certificates:
        raise DatabaseCaError(f"{source} holds no certificate")
    _check_usable(certificates, moment)
    return RdsBundle(pem, from_amazon=False, source=source)


def _common_name(certificate: Certificate) -> str:
    from cryptography.x509.oid import NameOID

    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else certificate.subject.rfc4514_string()


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


def rds_bundle(
    local_file: Path | None, url: str = RDS_CA_BUNDLE_URL, *, test_bundle: bool = False
) -> RdsBundle:
    """The RDS bundle from ``local_file`` when given, else downloaded; classified either way (see
    ``classify_rds_bundle``), so a download is held to the same test as a file."""
    if local_file is not None:
        return classify_rds_bundle(local_file.read_bytes(), str(local_file), test_bundle=test_bundle)
    return classify_rds_bundle(fetch_rds_bundle(url), url, test_bundle=test_bundle)
