"""Deployed database connections verify the server: sslmode=verify-full against a CA bundle shipped with the
package (or DATABASE_CA_BUNDLE), while DATABASE_URL (local development, tests) is used as given.

The TLS tests put a TLS front door, with certificates this file makes, before the test PostgreSQL server
(which speaks plain TCP or a Unix socket): it answers libpq's SSLRequest, completes the handshake with its
certificate, then relays the decrypted protocol. A client that trusts the front door's CA logs in to the real
server behind it; one that trusts another CA, or asked for another host name, never gets past the handshake.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import select
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from psycopg.conninfo import conninfo_to_dict

from tollgate.db import build_database
from tollgate.db.database import conninfo_from_secret, secret_conninfo
from tollgate.settings import SHIPPED_CA_BUNDLE, DatabaseSettings

pytestmark = pytest.mark.integration

SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:tollgate/test/database-TlsTls"
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104


# --- certificates -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Authority:
    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def write(self, path: Path) -> Path:
        path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        return path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _authority(name: str) -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Authority(name, key, cert)


def _server_chain(authority: Authority, host: str, directory: Path) -> tuple[Path, Path]:
    """A server certificate for ``host`` signed by ``authority``: (certificate file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(host))
        .issuer_name(authority.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()), critical=False
        )
        .sign(authority.key, hashes.SHA256())
    )
    cert_file, key_file = directory / f"{host}.crt", directory / f"{host}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


# --- the TLS front door ---------------------------------------------------------------------------------


class TlsFront:
    """Listens on 127.0.0.1, speaks PostgreSQL's TLS negotiation with ``context``, relays to ``backend``.

    One connection at a time, on one thread: the tests connect one after another.
    """

    def __init__(self, context: ssl.SSLContext, backend: dict[str, str]) -> None:
        self._context = context
        self._backend = backend
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.handshake_errors: list[str] = []
        self._thread = threading.Thread(target=self._serve, name="tls-front", daemon=True)
        self._thread.start()

    def close(self) -> None:
        # shutdown wakes the blocked accept(); the thread then sees the listener gone and ends.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with client:
                self._handle(client)

    def _handle(self, client: socket.socket) -> None:
        try:
            while True:
                length, code = struct.unpack("!II", _read_exactly(client, 8))
                if length == 8 and code == GSSENC_REQUEST:
                    client.sendall(b"N")
                    continue
                if length == 8 and code == SSL_REQUEST:
                    client.sendall(b"S")
                    break
                return  # a client that would go on without TLS gets nothing from us
            tls = self._context.wrap_socket(client, server_side=True)
        except (OSError, ssl.SSLError) as error:
            self.handshake_errors.append(str(error))
            return
        with tls, self._connect_backend() as backend:
            _relay(tls, backend)

    def _connect_backend(self) -> socket.socket:
        host, port = self._backend.get("host") or "127.0.0.1", int(self._backend.get("port") or 5432)
        if host.startswith("/"):
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.connect(f"{host}/.s.PGSQL.{port}")
            return unix
        return socket.create_connection((host, port))


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the client went away during negotiation")
        data += chunk
    return data


def _relay(tls: ssl.SSLSocket, plain: socket.socket) -> None:
    """Copies bytes both ways until either side closes. Decrypted bytes already read by OpenSSL are not
    visible to select, so they are drained first."""
    try:
        while True:
            ready = [tls] if tls.pending() else select.select([tls, plain], [], [])[0]
            for source, sink in ((tls, plain), (plain, tls)):
                if source in ready:
                    data = source.recv(65536)
                    if not data:
                        return
                    sink.sendall(data)
    except (OSError, ssl.SSLError):
        return


# --- fixtures -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    trusted: Path  # bundle holding the CA that signed the front door's certificates
    other: Path  # bundle holding an unrelated CA
    right_name: tuple[Path, Path]  # "localhost", signed by the trusted CA
    wrong_name: tuple[Path, Path]  # "db.example", signed by the trusted CA


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ours, theirs = _authority("Tollgate Test Database CA"), _authority("Somebody Else's CA")
    return Pki(
        trusted=ours.write(directory / "trusted.pem"),
        other=theirs.write(directory / "other.pem"),
        right_name=_server_chain(ours, "localhost", directory),
        wrong_name=_server_chain(ours, "db.example", directory),
    )


def _front(chain: tuple[Path, Path], database_url: str) -> TlsFront:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*chain)
    return TlsFront(context, conninfo_to_dict(database_url))  # type: ignore[arg-type]


@pytest.fixture
def front(pki: Pki, database_url: str) -> Iterator[TlsFront]:
    front = _front(pki.right_name, database_url)
    yield front
    front.close()


@pytest.fixture
def misnamed_front(pki: Pki, database_url: str) -> Iterator[TlsFront]:
    front = _front(pki.wrong_name, database_url)
    yield front
    front.close()


def _loader(front: TlsFront, database_url: str):  # type: ignore[no-untyped-def]
    """The database secret as Secrets Manager would hold it, pointing at the front door."""
    params = conninfo_to_dict(database_url)

    def load(secret_id: str, *, force_fetch: bool = False) -> str:
        assert secret_id == SECRET_ARN
        return json.dumps(
            {
                "host": "localhost",
                "port": front.port,
                "dbname": params.get("dbname", "postgres"),
                "username": params.get("user", "postgres"),
                "password": str(params.get("password") or "unused-under-trust"),
            }
        )

    return load


def _deployed(ca_bundle: Path | None = None) -> DatabaseSettings:
    # database_url=None explicitly: the test environment's DATABASE_URL must not turn this into the URL path.
    return DatabaseSettings(
        database_url=None,
        database_secret_arn=SECRET_ARN,
        database_ca_bundle=ca_bundle,
        database_role="",
        database_pool_size=1,
        database_wait_seconds=5,
    )


# --- what the settings produce ---------------------------------------------------------------------------


def test_deployed_settings_connect_with_verify_full_and_the_shipped_bundle() -> None:
    secret = {"host": "cluster.example", "port": 5432, "username": "u", "password": "p", "dbname": "d"}

    conninfo = conninfo_to_dict(secret_conninfo(_deployed(), lambda _id, force_fetch=False: secret).read())

    assert conninfo["sslmode"] == "verify-full"
    assert Path(str(conninfo["sslrootcert"])) == SHIPPED_CA_BUNDLE
    assert SHIPPED_CA_BUNDLE.is_file()


def test_the_shipped_bundle_holds_the_amazon_roots_rds_proxy_certificates_chain_to() -> None:
    # RDS Proxy presents ACM certificates, which chain to Amazon Root CA 1-4.
    store = ssl.create_default_context(cafile=str(SHIPPED_CA_BUNDLE))
    subjects = {
        value for cert in store.get_ca_certs() for ((key, value),) in cert["subject"] if key == "commonName"
    }

    assert {f"Amazon Root CA {n}" for n in range(1, 5)} <= subjects


def test_an_operator_bundle_replaces_the_shipped_one_and_must_exist(pki: Pki, tmp_path: Path) -> None:
    conninfo = conninfo_from_secret(
        {"host": "h", "username": "u", "password": "p"}, ca_bundle=_deployed(pki.trusted).ca_bundle
    )

    assert conninfo_to_dict(conninfo)["sslrootcert"] == str(pki.trusted)
    with pytest.raises(ValueError, match="DATABASE_CA_BUNDLE"):
        _deployed(tmp_path / "missing.pem")


def test_database_url_is_used_as_given(database_url: str, tmp_path: Path) -> None:
    # Local development: the URL (an embedded server on a Unix socket, or the test server) is not touched,
    # and a bundle setting, even a missing one, does not matter there.
    settings = DatabaseSettings(database_url=database_url, database_ca_bundle=tmp_path / "missing.pem")
    db = build_database(settings, pool_name="url-as-given")
    try:
        assert db.pool.conninfo == database_url
        with db.transaction() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
    finally:
        db.close()


# --- against a server that presents a certificate --------------------------------------------------------


def test_a_server_whose_certificate_chains_to_the_bundle_is_reached(
    front: TlsFront, pki: Pki, database_url: str
) -> None:
    db = build_database(
        _deployed(pki.trusted), pool_name="tls-trusted", secret_loader=_loader(front, database_url)
    )
    try:
        with db.transaction() as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
    finally:
        db.close()


def test_a_server_certificate_from_another_ca_is_refused(
    front: TlsFront, pki: Pki, database_url: str
) -> None:
    conninfo = secret_conninfo(_deployed(pki.other), _loader(front, database_url)).read()

    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(conninfo, connect_timeout=5).close()


def test_the_shipped_bundle_does_not_trust_a_private_ca(front: TlsFront, database_url: str) -> None:
    conninfo = secret_conninfo(_deployed(), _loader(front, database_url)).read()

    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(conninfo, connect_timeout=5).close()


def test_a_trusted_certificate_for_another_host_name_is_refused(
    misnamed_front: TlsFront, pki: Pki, database_url: str
) -> None:
    conninfo = secret_conninfo(_deployed(pki.trusted), _loader(misnamed_front, database_url)).read()

    with pytest.raises(psycopg.OperationalError, match="does not match host name"):
        psycopg.connect(conninfo, connect_timeout=5).close()
