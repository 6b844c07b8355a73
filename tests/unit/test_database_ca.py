"""The database CA bundle the layer build ships: fetched over a real socket, checked, written beside the public
roots. The certificates are made here; none is Amazon's."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
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


RDS_BUNDLE = certificate("Amazon RDS test-region-1 Root CA RSA2048 G1") + certificate(
    "Amazon RDS test-region-1 Root CA ECC384 G1"
)


class _Bundle(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(RDS_BUNDLE)))
        self.end_headers()
        self.wfile.write(RDS_BUNDLE)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def bundle_url() -> Iterator[str]:
    """RDS_BUNDLE served over HTTP on 127.0.0.1 for the test's duration."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Bundle)
    thread = threading.Thread(target=server.serve_forever, name="ca-bundle-server")
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/global-bundle.pem"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_fetched_rds_bundle_is_checked_and_its_roots_named(bundle_url: str) -> None:
    url = bundle_url

    pem = database_ca.fetch_rds_bundle(url)

    assert pem == RDS_BUNDLE
    subjects = database_ca.check_rds_bundle(pem, now=NOW)
    assert len(subjects) == 2
    assert all("Amazon RDS" in subject for subject in subjects)


@pytest.mark.parametrize(
    ("bundle", "complaint"),
    [
        (b"<html>not found</html>", "not a PEM file"),
        (RDS_BUNDLE + certificate("Some Other Root CA", organization="Example Corp"), "not of Amazon RDS"),
        (certificate("Amazon RDS test-region-1 leaf", ca=False), "not a CA"),
        (certificate("Amazon RDS old Root CA", not_after=NOW - timedelta(days=1)), "valid now"),
    ],
    ids=["html", "foreign-ca", "leaf", "expired"],
)
def test_anything_but_rds_root_cas_is_refused(bundle: bytes, complaint: str) -> None:
    with pytest.raises(database_ca.DatabaseCaError, match=complaint):
        database_ca.check_rds_bundle(bundle, now=NOW)


def test_plain_http_is_refused_except_on_loopback() -> None:
    with pytest.raises(database_ca.DatabaseCaError, match="plain HTTP"):
        database_ca.fetch_rds_bundle("http://truststore.example/global-bundle.pem")


def test_an_unreachable_source_says_how_to_supply_the_file() -> None:
    # A port nothing listens on: bound to learn its number, then closed.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/global-bundle.pem"

    with pytest.raises(database_ca.DatabaseCaError, match="--rds-ca-bundle"):
        database_ca.fetch_rds_bundle(closed, timeout=5)


def test_the_written_bundle_holds_the_public_roots_then_the_rds_roots(tmp_path: Path) -> None:
    public = certificate("Public Root CA", organization="Public Trust")
    (tmp_path / "certifi").mkdir()
    (tmp_path / "certifi" / "cacert.pem").write_bytes(public)

    written = database_ca.write_database_ca(tmp_path, RDS_BUNDLE)

    assert written == tmp_path / "tollgate-ca" / "database-ca.pem"
    names = [c.subject.rfc4514_string() for c in x509.load_pem_x509_certificates(written.read_bytes())]
    assert names[0].endswith("O=Public Trust")
    assert len(names) == 3
    assert all("Amazon RDS" in name for name in names[1:])


def test_a_layer_without_certifi_is_refused(tmp_path: Path) -> None:
    with pytest.raises(database_ca.DatabaseCaError, match="certifi"):
        database_ca.write_database_ca(tmp_path, RDS_BUNDLE)


def test_a_local_bundle_file_is_checked_too(tmp_path: Path) -> None:
    local = tmp_path / "global-bundle.pem"
    local.write_bytes(certificate("Not RDS", organization="Example Corp"))

    with pytest.raises(database_ca.DatabaseCaError, match="not of Amazon RDS"):
        database_ca.rds_bundle(local)
