"""The webhook sender against real HTTP and HTTPS servers on 127.0.0.1, and the receiver end to end.

Covers what a tenant's endpoint can do to us (2xx, redirects, 410, 429 and 5xx with Retry-After, a silent or
dripping server, an oversized answer, garbage) and what an attacker's DNS can do (rebinding between check
and connect). Private targets are allowed only where a test says so, for its first hop. The TLS tests make
a throwaway CA with ``cryptography`` (installed with moto for the local stack).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import ssl
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support import Trap
from tollgate.core.clock import FakeClock
from tollgate.delivery.sender import (
    DeliveryError,
    DeliveryResult,
    SenderLimits,
    WebhookSender,
    connect_tcp,
)
from tollgate.delivery.signing import new_secret, sign, verify
from tollgate.delivery.ssrf import IPAddress
from tollgate_dev.receiver import WebhookReceiver

BODY = b'{"type":"extraction.completed.v1","data":{"job_id":"0b6f","total":"119.00"}}'
PUBLIC_V4 = "93.184.215.14"  # stands for a tenant's public address; never contacted
CAP = 4096
# The time caps under test, for the servers that never finish answering: short, so the caps fire quickly.
FAST = SenderLimits(connect_timeout=1.0, total_timeout=0.5, max_response_bytes=CAP)
# Every other exchange is expected to complete; on a loaded machine it may take seconds, and a cap that
# fired there would fail the test for the machine's sake, not the sender's.
ROOMY = SenderLimits(connect_timeout=60.0, total_timeout=60.0, max_response_bytes=CAP)
# How late past its cap a loaded machine may notice that a cap ran out. A missing cap shows as HANG_SECONDS
# (the hanging server's hold) or as never ending (drip, silent TLS), both far beyond this.
CAP_SLACK_SECONDS = 5.0
HANG_SECONDS = 60.0


# --- local servers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    path: str
    headers: dict[str, str]
    body: bytes


class LocalServer:
    """An HTTP(S) endpoint on 127.0.0.1 whose behaviour is chosen by the request path; it records every
    request it gets (and, over TLS, the SNI name) before answering."""

    def __init__(self, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.requests: list[Recorded] = []
        self.sni: list[str | None] = []
        self.redirect_to = ""
        # Set at teardown: frees handlers that hold a response back on purpose.
        self.release = threading.Event()
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        if tls is not None:
            tls.sni_callback = lambda _sock, name, _ctx: self.sni.append(name)
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.port: int = self._server.server_address[1]
        # shutdown() waits up to one poll interval; the default 0.5 s would dominate these tests.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.requests.append(Recorded(self.path, headers, body))
                route, _, arg = self.path.partition("?")[0].strip("/").partition("/")
                # OSError: the sender hung up, as it should when a cap is hit.
                with contextlib.suppress(OSError):
                    getattr(self, f"route_{route.replace('-', '_')}")(arg)

            def answer(self, status: int, body: bytes = b"{}", /, **headers: str) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name.replace("_", "-"), value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def route_status(self, code: str) -> None:
                extra = {"Retry_After": "7"} if code in {"429", "503"} else {}
                self.answer(int(code), b"{}", **extra)

            def route_redirect(self, code: str) -> None:
                self.answer(int(code), Location=server.redirect_to)

            def route_hang(self, _: str) -> None:
                server.release.wait(HANG_SECONDS)  # set at teardown, so the hold costs nothing then
                self.close_connection = True

            def route_drip(self, _: str) -> None:
                # A status line, then one header byte at a time: each read makes progress, so only a cap
                # on the whole exchange (not a per-read timeout) ends it.
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Drip: ")
                while not server.release.wait(0.02):
                    self.wfile.write(b"x")
                self.close_connection = True

            def route_declared_large(self, _: str) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(10 * 1024 * 1024))
                self.end_headers()
                self.wfile.write(b"x" * CAP * 2)
                self.close_connection = True

            def route_streamed_large(self, _: str) -> None:
                self.send_response(200)
                self.send_header("Connection", "close")
                self.end_headers()
                for _chunk in range(256):
                    self.wfile.write(b"x" * 16384)
                self.close_connection = True

            def route_exact(self, _: str) -> None:
                self.answer(200, b"y" * CAP)

            def route_many_headers(self, _: str) -> None:
                self.send_response(200)
                for i in range(150):
                    self.send_header(f"X-H{i}", "v")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def route_garbage(self, _: str) -> None:
                self.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


class ScriptedResolver:
    """Answers each lookup with the next scripted answer (the last one repeats) and counts lookups."""

    def __init__(self, *answers: Sequence[str]) -> None:
        self.answers = list(answers)
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        return self.answers[min(len(self.calls), len(self.answers)) - 1]


@dataclass(frozen=True)
class Pki:
    ca: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pytest.importorskip("cryptography", reason="the TLS tests make their certificates with cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.now(UTC)
    usage = dict.fromkeys(
        (
            "content_commitment",
            "key_encipherment",
            "data_encipherment",
            "key_agreement",
            "encipher_only",
            "decipher_only",
        ),
        False,
    )
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Tollgate test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, **usage), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhooks.test")]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("webhooks.test"), x509.DNSName("rebind.example")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False, **usage),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("pki")
    paths = Pki(folder / "ca.pem", folder / "cert.pem", folder / "key.pem")
    paths.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths.cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths.key.write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


@pytest.fixture
def server() -> Iterator[LocalServer]:
    server = LocalServer()
    yield server
    server.stop()


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[LocalServer]:
    server = LocalServer(tls=pki.server_context())
    yield server
    server.stop()


@pytest.fixture
def trap() -> Iterator[Trap]:
    trap = Trap()
    yield trap
    trap.close()


def local_sender(**overrides: Any) -> WebhookSender:
    """A sender for the local-development case: plain HTTP and 127.0.0.1 allowed; roomy time caps unless a
    test that expects one to fire passes ``limits=FAST``."""
    options: dict[str, Any] = {"allow_private_targets": True, "limits": ROOMY}
    options.update(overrides)
    return WebhookSender(**options)


def signed(secret: str, delivery_id: str = "dlv_0001", at: int = 1_767_225_600) -> dict[str, str]:
    return sign(secret, delivery_id, at, BODY)


# --- status handling ----------------------------------------------------------------------------------


def test_a_2xx_answer_is_a_delivery_of_the_exact_signed_bytes(server: LocalServer) -> None:
    secret = new_secret()
    headers = signed(secret)

    result = local_sender().post(f"http://127.0.0.1:{server.port}/status/200?tenant=7", BODY, headers)

    assert result.delivered
    assert (result.status, result.error, result.address) == (200, None, "127.0.0.1")
    assert result.request_sent
    assert 0 < result.elapsed < ROOMY.total_timeout
    [request] = server.requests
    assert request.path == "/status/200?tenant=7"
    assert request.body == BODY
    assert request.headers["host"] == f"127.0.0.1:{server.port}"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["connection"] == "close"
    at = datetime.fromtimestamp(1_767_225_600, UTC)
    assert verify(secret, request.headers, request.body, now=at).msg_id == "dlv_0001"


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_a_failure_and_is_never_followed(server: LocalServer, trap: Trap, code: int) -> None:
    # Private targets are allowed so the first hop can reach the local server; the redirect points at
    # another local address the policy would also allow, so only "never follow" keeps the trap at zero.
    server.redirect_to = f"http://127.0.0.1:{trap.port}/latest/meta-data/"

    result = local_sender().post(f"http://127.0.0.1:{server.port}/redirect/{code}", BODY, {})

    assert result.status == code
    assert result.error is None
    assert not result.delivered
    assert result.headers["location"] == server.redirect_to
    assert len(server.requests) == 1
    assert trap.connections() == 0


def test_410_gone_is_reported_for_the_dispatcher_to_disable_the_endpoint(server: LocalServer) -> None:
    result = local_sender().post(f"http://127.0.0.1:{server.port}/status/410", BODY, {})

    assert (result.status, result.error, result.delivered) == (410, None, False)


@pytest.mark.parametrize("code", [429, 503])
def test_throttling_answers_carry_retry_after(server: LocalServer, code: int) -> None:
    result = local_sender().post(f"http://127.0.0.1:{server.port}/status/{code}", BODY, {})

    assert (result.status, result.delivered, result.retry_after) == (code, False, "7")


@pytest.mark.parametrize("code", [500, 502, 504])
def test_a_server_error_is_a_failed_attempt(server: LocalServer, code: int) -> None:
    result = local_sender().post(f"http://127.0.0.1:{server.port}/status/{code}", BODY, {})

    assert (result.status, result.error, result.delivered) == (code, None, False)


# --- caps ---------------------------------------------------------------------------------------------


def test_a_server_that_never_answers_hits_the_total_time_cap(server: LocalServer) -> None:
    result = local_sender(limits=FAST).post(f"http://127.0.0.1:{server.port}/hang", BODY, {})

    assert result.error is DeliveryError.TIMEOUT
    assert result.status is None
    assert result.request_sent  # the receiver got the body and may act on it: retries must be idempotent
    assert FAST.total_timeout <= result.elapsed < FAST.total_timeout + CAP_SLACK_SECONDS


def test_a_server_dripping_bytes_cannot_stretch_the_time_cap(server: LocalServer) -> None:
    result = local_sender(limits=FAST).post(f"http://127.0.0.1:{server.port}/drip", BODY, {})

    assert result.error is DeliveryError.TIMEOUT
    assert result.elapsed < FAST.total_timeout + CAP_SLACK_SECONDS


def test_a_declared_oversized_response_is_refused_without_reading_it(server: LocalServer) -> None:
    result = local_sender().post(f"http://127.0.0.1:{server.port}/declared-large", BODY, {})

    assert (result.status, result.error, result.body) == (200, DeliveryError.TOO_LARGE, b"")
    assert not result.delivered


def test_an_undeclared_oversized_response_is_cut_at_the_cap(server: LocalServer) -> None:
    result = local_sender().post(f"http://127.0.0.1:{server.port}/streamed-large", BODY, {})

    assert (result.status, result.error) == (200, DeliveryError.TOO_LARGE)
    assert len(result.body) == CAP


def test_a_response_exactly_at_the_cap_is_fine(server: LocalServer) -> None:
    result = local_sender().post(f"http://127.0.0.1:{server.port}/exact", BODY, {})

    assert result.delivered
    assert result.body == b"y" * CAP


def test_too_many_response_headers_count_as_too_large(server: LocalServer) -> None:
    result = local_sender().post(f"http://127.0.0.1:{server.port}/many-headers", BODY, {})

    assert result.error is DeliveryError.TOO_LARGE


def test_an_answer_that_is_not_http_is_a_protocol_error(server: LocalServer) -> None:
    result = local_sender().post(f"http://127.0.0.1:{server.port}/garbage", BODY, {})

    assert result.error is DeliveryError.PROTOCOL_ERROR
    assert result.status is None


def test_a_closed_port_is_a_connect_failure() -> None:
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()

    result = local_sender().post(f"http://127.0.0.1:{port}/", BODY, {})

    assert result.error is DeliveryError.CONNECT_FAILED
    assert not result.request_sent


def test_the_next_checked_address_is_tried_when_one_refuses(server: LocalServer) -> None:
    # 127.0.0.3 is loopback too, but nothing listens there on this port.
    resolver = ScriptedResolver(["127.0.0.3", "127.0.0.1"])

    result = local_sender(resolver=resolver).post(f"http://erp.local:{server.port}/status/204", BODY, {})

    assert (result.status, result.address) == (204, "127.0.0.1")
    assert resolver.calls == ["erp.local"]


def test_a_caller_cannot_override_the_framing_headers() -> None:
    for name in ("Host", "Content-Length", "Transfer-Encoding", "Connection"):
        with pytest.raises(ValueError, match=name):
            local_sender().post("http://127.0.0.1:9/", BODY, {name: "x"})
    with pytest.raises(ValueError, match="wire"):
        local_sender().post("http://127.0.0.1:9/", BODY, {"webhook-id": "a\r\nX-Evil: 1"})


# --- TLS ----------------------------------------------------------------------------------------------


def test_tls_uses_the_url_host_for_sni_certificate_and_host_header(pki: Pki, tls_server: LocalServer) -> None:
    resolver = ScriptedResolver(["127.0.0.1"])
    sender = local_sender(resolver=resolver, ssl_context=pki.client_context())

    result = sender.post(f"https://webhooks.test:{tls_server.port}/status/204", BODY, {})

    assert (result.status, result.error, result.address) == (204, None, "127.0.0.1")
    assert tls_server.sni == ["webhooks.test"]
    assert tls_server.requests[0].headers["host"] == f"webhooks.test:{tls_server.port}"


def test_a_certificate_for_another_name_is_a_tls_error(pki: Pki, tls_server: LocalServer) -> None:
    sender = local_sender(resolver=ScriptedResolver(["127.0.0.1"]), ssl_context=pki.client_context())

    result = sender.post(f"https://other.test:{tls_server.port}/status/204", BODY, {})

    assert result.error is DeliveryError.TLS_ERROR
    assert "other.test" in result.detail
    assert tls_server.requests == []


def test_an_untrusted_certificate_is_a_tls_error(tls_server: LocalServer) -> None:
    sender = local_sender(resolver=ScriptedResolver(["127.0.0.1"]))  # the system trust store

    result = sender.post(f"https://webhooks.test:{tls_server.port}/status/204", BODY, {})

    assert result.error is DeliveryError.TLS_ERROR
    assert tls_server.requests == []
    assert not result.request_sent


def test_a_silent_tls_server_hits_the_time_cap_in_the_handshake(pki: Pki, trap: Trap) -> None:
    sender = local_sender(
        resolver=ScriptedResolver(["127.0.0.1"]), ssl_context=pki.client_context(), limits=FAST
    )

    result = sender.post(f"https://webhooks.test:{trap.port}/", BODY, {})

    assert result.error is DeliveryError.TIMEOUT
    assert not result.request_sent
    assert result.elapsed < FAST.total_timeout + CAP_SLACK_SECONDS


# --- DNS rebinding ------------------------------------------------------------------------------------


class PublicNetwork:
    """Connects requests for the stand-in public address to a local server; any other address is
    connected for real, so a lookup that turned into 127.0.0.1 would reach 127.0.0.1."""

    def __init__(self, public_port: int) -> None:
        self.public_port = public_port
        self.calls: list[tuple[IPAddress, int]] = []

    def __call__(self, address: IPAddress, port: int, timeout: float) -> socket.socket:
        self.calls.append((address, port))
        if address == ipaddress.ip_address(PUBLIC_V4):
            return connect_tcp(ipaddress.ip_address("127.0.0.1"), self.public_port, timeout)
        return connect_tcp(address, port, timeout)


def test_dns_rebinding_after_the_check_cannot_redirect_the_connection(
    pki: Pki, tls_server: LocalServer, trap: Trap
) -> None:
    # Given a name that answers a public address to the check and 127.0.0.1 to any later lookup, with the
    # trap listening on 127.0.0.1 at the URL's port, and private targets NOT allowed:
    resolver = ScriptedResolver([PUBLIC_V4], ["127.0.0.1"])
    network = PublicNetwork(tls_server.port)
    sender = WebhookSender(
        resolver=resolver, connector=network, ssl_context=pki.client_context(), limits=ROOMY
    )

    result = sender.post(f"https://rebind.example:{trap.port}/status/204", BODY, {})

    # then the one lookup's checked address is the one connected to, and 127.0.0.1 never hears from us.
    assert result.delivered
    assert resolver.calls == ["rebind.example"]
    assert network.calls == [(ipaddress.ip_address(PUBLIC_V4), trap.port)]
    assert result.address == PUBLIC_V4
    assert trap.connections() == 0
    assert tls_server.sni == ["rebind.example"]
    assert tls_server.requests[0].headers["host"] == f"rebind.example:{trap.port}"


def test_dns_rebinding_with_the_real_connector_reaches_only_the_checked_address(
    server: LocalServer,
) -> None:
    # The first answer (127.0.0.1) is where the server listens; a second lookup would answer 127.0.0.2,
    # where a trap listens on the same port.
    try:
        trap = Trap("127.0.0.2", server.port)
    except OSError:
        pytest.skip("127.0.0.2 is not usable on this machine")
    try:
        resolver = ScriptedResolver(["127.0.0.1"], ["127.0.0.2"])

        result = local_sender(resolver=resolver).post(f"http://erp.local:{server.port}/status/200", BODY, {})

        assert (result.status, result.address) == (200, "127.0.0.1")
        assert resolver.calls == ["erp.local"]
        assert trap.connections() == 0
    finally:
        trap.close()


# --- the receiver, end to end --------------------------------------------------------------------------


RECEIVER_NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def receiver_secrets() -> tuple[str, str]:
    return new_secret(), new_secret()


@pytest.fixture
def receiver(receiver_secrets: tuple[str, str]) -> Iterator[WebhookReceiver]:
    with WebhookReceiver(list(receiver_secrets), clock=FakeClock(RECEIVER_NOW)) as receiver:
        yield receiver


def deliver(receiver: WebhookReceiver, headers: dict[str, str]) -> tuple[DeliveryResult, dict[str, Any]]:
    result = local_sender().post(f"{receiver.url}/erp/webhooks", BODY, headers)
    return result, json.loads(result.body)


def test_the_receiver_accepts_a_signed_delivery(
    receiver: WebhookReceiver, receiver_secrets: tuple[str, str]
) -> None:
    result, answer = deliver(receiver, sign(receiver_secrets[0], "dlv_a", RECEIVER_NOW, BODY))

    assert result.delivered
    assert answer == {"status": "accepted", "webhook_id": "dlv_a"}
    [accepted] = receiver.accepted
    assert (accepted.webhook_id, accepted.body, accepted.path) == ("dlv_a", BODY, "/erp/webhooks")


def test_the_receiver_accepts_the_new_secret_during_rotation(
    receiver: WebhookReceiver, receiver_secrets: tuple[str, str]
) -> None:
    result, _ = deliver(receiver, sign(receiver_secrets[1], "dlv_b", RECEIVER_NOW, BODY))

    assert result.delivered


def test_the_receiver_rejects_a_bad_signature(receiver: WebhookReceiver) -> None:
    result, answer = deliver(receiver, sign(new_secret(), "dlv_c", RECEIVER_NOW, BODY))

    assert (result.status, answer) == (401, {"error": "bad_signature"})
    assert receiver.accepted == []
    assert [r.reason for r in receiver.rejections] == ["bad_signature"]


def test_the_receiver_rejects_a_stale_timestamp(
    receiver: WebhookReceiver, receiver_secrets: tuple[str, str]
) -> None:
    stale = RECEIVER_NOW - timedelta(seconds=301)

    result, answer = deliver(receiver, sign(receiver_secrets[0], "dlv_d", stale, BODY))

    assert (result.status, answer) == (400, {"error": "stale_timestamp"})
    assert receiver.accepted == []


def test_the_receiver_deduplicates_a_replay_of_the_same_webhook_id(
    receiver: WebhookReceiver, receiver_secrets: tuple[str, str]
) -> None:
    first, _ = deliver(receiver, sign(receiver_secrets[0], "dlv_e", RECEIVER_NOW, BODY))
    # A retry carries the same id with a fresh timestamp and signature.
    retry_at = RECEIVER_NOW + timedelta(seconds=5)
    retry, answer = deliver(receiver, sign(receiver_secrets[0], "dlv_e", retry_at, BODY))

    assert first.delivered and retry.delivered
    assert answer == {"status": "duplicate", "webhook_id": "dlv_e"}
    assert [w.webhook_id for w in receiver.accepted] == ["dlv_e"]
    assert receiver.duplicates == 1


def test_the_receiver_recognizes_a_retry_that_comes_hours_later(receiver_secrets: tuple[str, str]) -> None:
    # The retry schedule reaches far past the timestamp tolerance, and every retry is freshly signed.
    clock = FakeClock(RECEIVER_NOW)
    receiver = WebhookReceiver(receiver_secrets[0], clock=clock)
    try:
        first = receiver.receive("/erp", sign(receiver_secrets[0], "dlv_f", clock.now(), BODY), BODY)
        clock.advance(5 * 3600)
        retry = receiver.receive("/erp", sign(receiver_secrets[0], "dlv_f", clock.now(), BODY), BODY)
    finally:
        receiver.stop()

    assert (first.body["status"], retry.body["status"]) == ("accepted", "duplicate")
    assert len(receiver.accepted) == 1
