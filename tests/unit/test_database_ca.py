"""The database CA bundle the layer build ships: fetched over a real socket, checked, told from a stand-in by
Amazon's recorded roots, written beside the public roots. The certificates are made here; none is Amazon's."""

from __future__ import annotations

import hashlib
import re
import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509

from layers import database_ca
from tests.certificates import NOW, certificate, digests

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

    with pytest.raises(database_ca.DatabaseCaError, match="not Amazon's RDS CA bundle"):
        database_ca.rds_bundle(local)


def test_a_stand_in_named_as_amazons_is_refused_and_told_about_the_test_flag(tmp_path: Path) -> None:
    # Given a bundle whose certificates are named exactly as Amazon's RDS roots are, but are not them
    local = tmp_path / "global-bundle.pem"
    local.write_bytes(RDS_BUNDLE)

    # When the build reads it as Amazon's, then it refuses, and says how to build with it on purpose
    with pytest.raises(database_ca.DatabaseCaError) as refused:
        database_ca.rds_bundle(local)
    message = str(refused.value)
    assert str(local) in message and "amazon_rds_roots.txt" in message
    assert "--test-ca-bundle" in message and "LAMBDA_TEST_CA_BUNDLE=1" in message


def test_a_downloaded_stand_in_is_refused_as_a_file_would_be(bundle_url: str) -> None:
    with pytest.raises(database_ca.DatabaseCaError, match="not Amazon's RDS CA bundle"):
        database_ca.rds_bundle(None, bundle_url)


def test_the_test_flag_takes_any_usable_ca_bundle_and_marks_it_a_test_bundle(tmp_path: Path) -> None:
    local = tmp_path / "test-ca.pem"
    local.write_bytes(certificate("Tollgate Local Test CA", organization="Tollgate tests"))

    bundle = database_ca.rds_bundle(local, test_bundle=True)

    assert not bundle.from_amazon and bundle.source == str(local)
    assert bundle.pem == local.read_bytes()


def test_the_test_flag_still_refuses_what_verifies_nothing() -> None:
    leaf = certificate("Tollgate leaf", ca=False)

    with pytest.raises(database_ca.DatabaseCaError, match="not a CA"):
        database_ca.classify_rds_bundle(leaf, "leaf.pem", test_bundle=True, now=NOW)


def test_a_bundle_with_a_recorded_amazon_root_is_amazons() -> None:
    bundle = database_ca.classify_rds_bundle(
        RDS_BUNDLE, "global-bundle.pem", roots=digests(RDS_BUNDLE), now=NOW
    )

    assert bundle.from_amazon and bundle.unrecorded == ()
    assert bundle.sha256 == hashlib.sha256(RDS_BUNDLE).hexdigest()


def test_a_newer_amazon_bundle_is_taken_and_its_new_roots_named_as_lines_to_record() -> None:
    # Amazon adds a region: its roots are in the bundle, not yet in amazon_rds_roots.txt.
    new_root = certificate("Amazon RDS new-region-1 Root CA RSA2048 G1")

    bundle = database_ca.classify_rds_bundle(
        RDS_BUNDLE + new_root, "global-bundle.pem", roots=digests(RDS_BUNDLE), now=NOW
    )

    assert bundle.from_amazon
    (line,) = bundle.unrecorded
    assert line == f"{next(iter(digests(new_root)))}  Amazon RDS new-region-1 Root CA RSA2048 G1"


def test_a_recorded_root_beside_a_foreign_certificate_is_refused() -> None:
    foreign = certificate("Some Other Root CA", organization="Example Corp")

    with pytest.raises(database_ca.DatabaseCaError, match="not of Amazon RDS"):
        database_ca.classify_rds_bundle(RDS_BUNDLE + foreign, "mixed.pem", roots=digests(RDS_BUNDLE), now=NOW)


def test_the_recorded_roots_are_the_rds_roots_of_amazons_commercial_regions() -> None:
    roots = database_ca.amazon_rds_roots()

    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in roots)
    assert all(
        re.fullmatch(r"Amazon RDS .+ Root CA (RSA2048|RSA4096|ECC384) G1", name) for name in roots.values()
    )
    # Three roots a region; the one the deployed stages' clusters present chains to is among them.
    regions = {name.removeprefix("Amazon RDS ").split(" Root CA")[0] for name in roots.values()}
    assert len(roots) == 3 * len(regions)
    assert "Amazon RDS us-east-1 Root CA RSA2048 G1" in roots.values()
