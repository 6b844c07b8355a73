"""The SSRF policy: which webhook URLs are refused, and proof that a refused one never gets a byte.

Every case in the table runs twice: through ``check_url`` (the refusal and its reason), and through the
sender with a "network" in which every connection, to whatever address, lands on one local trap socket;
the trap must see zero connections.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import ssl
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import PUBLIC_V4, PUBLIC_V6, FakeResolver, Trap
from tollgate.delivery.sender import DeliveryError, SenderLimits, WebhookSender
from tollgate.delivery.ssrf import (
    IPAddress,
    ResolutionFailed,
    TargetRefused,
    check_url,
    parse_url,
    refusal_reason,
)

# Loading the system trust store takes ~50 ms; one context serves every sender here.
TLS = ssl.create_default_context()


class RoutingConnector:
    """Stands in for the network: whatever address the sender asks for, the connection reaches the trap."""

    def __init__(self, trap: Trap) -> None:
        self.trap = trap
        self.calls: list[tuple[IPAddress, int]] = []

    def __call__(self, address: IPAddress, port: int, timeout: float) -> socket.socket:
        self.calls.append((address, port))
        return socket.create_connection(("127.0.0.1", self.trap.port), timeout=timeout)


@pytest.fixture
def trap() -> Iterator[Trap]:
    trap = Trap()
    yield trap
    trap.close()


RESOLVER_ANSWERS: dict[str, Sequence[str]] = {
    "public.example": [PUBLIC_V4],
    "mixed.example": [PUBLIC_V4, PUBLIC_V6, "10.0.0.7"],
    "mixed6.example": [PUBLIC_V4, "fd12:3456::1"],
    "internal.example": ["192.168.0.10"],
    "loopback.example": ["127.0.0.1"],
    "metadata.example": ["169.254.169.254"],
    "mapped.example": ["::ffff:127.0.0.1"],
    "ula.example": ["fd00::5"],
    "cgnat.example": ["100.100.100.100"],
    "garbage.example": ["not-an-address"],
}

# (case id, URL with {port} = the trap's port, expected fragment of the refusal reason)
REFUSED: list[tuple[str, str, str]] = [
    # loopback, in every spelling a URL parser or inet_aton accepts
    ("loopback", "https://127.0.0.1:{port}/hook", "loopback"),
    ("loopback-top", "https://127.255.255.254:{port}/", "loopback"),
    ("loopback-decimal", "https://2130706433:{port}/", "127.0.0.1: loopback"),
    ("loopback-octal", "https://0177.0.0.1:{port}/", "127.0.0.1: loopback"),
    ("loopback-octal-whole", "https://017700000001:{port}/", "127.0.0.1: loopback"),
    ("loopback-hex", "https://0x7f.0.0.1:{port}/", "127.0.0.1: loopback"),
    ("loopback-hex-whole", "https://0x7F000001:{port}/", "127.0.0.1: loopback"),
    ("loopback-short", "https://127.1:{port}/", "127.0.0.1: loopback"),
    ("loopback-trailing-dot", "https://127.0.0.1.:{port}/", "loopback"),
    ("localhost-name", "https://localhost:{port}/", "localhost"),
    ("localhost-subdomain", "https://erp.localhost:{port}/", "localhost"),
    ("loopback-by-dns", "https://loopback.example:{port}/", "resolves to 127.0.0.1: loopback"),
    # private, CGNAT, link-local and the metadata endpoints
    ("private-10", "https://10.0.0.8:{port}/", "private"),
    ("private-10-short", "https://10.1:{port}/", "10.0.0.1: private"),
    ("private-172", "https://172.16.5.4:{port}/", "private"),
    ("private-192", "https://192.168.1.1:{port}/", "private"),
    ("private-by-dns", "https://internal.example:{port}/", "private"),
    ("metadata", "https://169.254.169.254:{port}/latest/meta-data/", "instance metadata"),
    ("metadata-short", "https://169.254.43518:{port}/", "instance metadata"),
    ("metadata-by-dns", "https://metadata.example:{port}/", "instance metadata"),
    ("ecs-credentials", "https://169.254.170.2:{port}/v2/credentials", "ECS task metadata"),
    ("link-local", "https://169.254.10.10:{port}/", "link-local"),
    ("cgnat", "https://100.64.0.1:{port}/", "CGNAT"),
    ("cgnat-top", "https://100.127.255.254:{port}/", "CGNAT"),
    ("cgnat-by-dns", "https://cgnat.example:{port}/", "CGNAT"),
    # the rest of the special-purpose IPv4 space
    ("this-network", "https://0.0.0.0:{port}/", "this network"),
    ("zero", "https://0:{port}/", "this network"),
    ("broadcast", "https://255.255.255.255:{port}/", "broadcast"),
    ("multicast", "https://224.0.0.251:{port}/", "multicast"),
    ("reserved", "https://240.0.0.1:{port}/", "reserved"),
    ("test-net-1", "https://192.0.2.10:{port}/", "documentation"),
    ("test-net-2", "https://198.51.100.7:{port}/", "documentation"),
    ("test-net-3", "https://203.0.113.9:{port}/", "documentation"),
    ("benchmarking", "https://198.18.0.1:{port}/", "benchmarking"),
    # AS112 DNS sinks: one rule for both families (see the table in ssrf)
    ("as112-v4", "https://192.31.196.1:{port}/", "AS112"),
    ("as112-v4-direct", "https://192.175.48.6:{port}/", "AS112 direct delegation"),
    ("as112-v6", "https://[2620:4f:8000::6]:{port}/", "AS112-v6"),
    ("as112-v6-direct", "https://[2001:4:112::1]:{port}/", "AS112-v6 direct delegation"),
    ("as112-v4-mapped", "https://[::ffff:192.175.48.1]:{port}/", "embedding 192.175.48.1, which is AS112"),
    # IPv6
    ("v6-loopback", "https://[::1]:{port}/", "loopback"),
    ("v6-unspecified", "https://[::]:{port}/", "unspecified"),
    ("v6-ula", "https://[fd00::1]:{port}/", "unique local"),
    ("v6-ula-fc", "https://[fc00::1]:{port}/", "unique local"),
    ("v6-ula-by-dns", "https://ula.example:{port}/", "unique local"),
    ("v6-ec2-metadata", "https://[fd00:ec2::254]:{port}/", "EC2 IPv6 metadata"),
    ("v6-link-local", "https://[fe80::1]:{port}/", "link-local"),
    ("v6-site-local", "https://[fec0::1]:{port}/", "site-local"),
    ("v6-multicast", "https://[ff02::1]:{port}/", "multicast"),
    ("v6-documentation", "https://[2001:db8::1]:{port}/", "documentation"),
    ("v6-ipv4-compatible", "https://[::7f00:1]:{port}/", "IPv4-compatible"),
    ("v6-outside-global-unicast", "https://[4000::1]:{port}/", "outside global unicast"),
    # IPv6 addresses that carry an IPv4 address: the embedded one decides
    ("mapped-loopback", "https://[::ffff:127.0.0.1]:{port}/", "IPv4-mapped address embedding 127.0.0.1"),
    ("mapped-metadata-hex", "https://[::ffff:a9fe:a9fe]:{port}/", "embedding 169.254.169.254"),
    ("mapped-private", "https://[::ffff:10.0.0.1]:{port}/", "embedding 10.0.0.1, which is private"),
    ("mapped-by-dns", "https://mapped.example:{port}/", "embedding 127.0.0.1"),
    ("nat64-loopback", "https://[64:ff9b::7f00:1]:{port}/", "NAT64 address embedding 127.0.0.1"),
    ("nat64-metadata", "https://[64:ff9b::169.254.169.254]:{port}/", "NAT64 address embedding 169.254"),
    ("6to4-private", "https://[2002:c0a8:101::1]:{port}/", "6to4 address embedding 192.168.1.1"),
    ("teredo-loopback", "https://[2001:0:4136:e378:8000:63bf:80ff:fffe]:{port}/", "Teredo address"),
    # one bad answer among good ones refuses the name
    ("public-and-private", "https://mixed.example:{port}/", "resolves to 10.0.0.7: private"),
    ("public-and-ula", "https://mixed6.example:{port}/", "resolves to fd12:3456::1"),
    ("resolver-garbage", "https://garbage.example:{port}/", "not an address"),
    # URL shape
    ("plain-http", "http://public.example:{port}/", "only https"),
    ("plain-http-decimal", "http://2130706433:{port}/", "only https"),
    ("ftp", "ftp://public.example:{port}/", "only https"),
    ("file", "file:///etc/passwd", "only https"),
    ("userinfo", "https://user:pass@public.example:{port}/", "userinfo"),
    ("userinfo-confusion", "https://public.example@127.0.0.1:{port}/", "userinfo"),
    ("backslash-confusion", "https://public.example\\@127.0.0.1:{port}/", "backslashes"),
    ("whitespace", "https://public.example:{port}/a b", "whitespace"),
    ("crlf-in-path", "https://public.example:{port}/a\r\nX-Injected: 1", "control characters"),
    ("lf-in-host", "https://public.exa\nmple:{port}/", "control characters"),
    ("tab-in-query", "https://public.example:{port}/?a=\t", "control characters"),
    ("nul", "https://public.example:{port}/\x00", "control characters"),
    ("c1-next-line", "https://public.example:{port}/\x85", "control characters"),
    ("del", "https://public.example:{port}/\x7f", "control characters"),
    # host names: IDNA2008 refuses what IDNA2003 let through, and a full-width spelling is still loopback
    ("idna-bad-a-label", "https://xn--zz.example:{port}/", "not a valid internationalized name"),
    ("idna-disallowed-symbol", "https://\u2665.example:{port}/", "not a valid internationalized name"),
    ("idna-joiner", "https://foo\u200d.example:{port}/", "not a valid internationalized name"),
    ("empty-label", "https://public..example:{port}/", "not a host name"),
    (
        "fullwidth-loopback",
        "https://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11:{port}/",
        "loopback",
    ),
    ("smtp-port", "https://public.example:25/", "port 25 is not allowed"),
    ("port-zero", "https://public.example:0/", "not a TCP port"),
    ("port-out-of-range", "https://public.example:70000/", "does not parse"),
    ("five-part-ipv4", "https://1.2.3.4.5:{port}/", "more than four parts"),
    ("bad-octal", "https://08.0.0.1:{port}/", "not a number"),
    ("numeric-tld", "https://example.123:{port}/", "looks like an IPv4 address"),
    ("zone-index", "https://[fe80::1%25eth0]:{port}/", "zone"),
    ("percent-host", "https://127.0.0.%31:{port}/", "percent-encoding"),
    ("bracketed-name", "https://[public.example]:{port}/", "IPv6"),
]


@pytest.mark.parametrize(("url", "reason"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_the_policy_refuses_with_a_reason(url: str, reason: str) -> None:
    with pytest.raises(TargetRefused) as refused:
        check_url(url.format(port=8443), resolver=FakeResolver(RESOLVER_ANSWERS))

    assert reason in refused.value.reason


@pytest.mark.parametrize(("url", "reason"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_the_sender_refuses_before_any_connection(trap: Trap, url: str, reason: str) -> None:
    connector = RoutingConnector(trap)
    sender = WebhookSender(resolver=FakeResolver(RESOLVER_ANSWERS), connector=connector, ssl_context=TLS)

    result = sender.post(url.format(port=trap.port), b'{"secret":"payload"}', {"webhook-id": "dlv_1"})

    assert result.error is DeliveryError.SSRF_REFUSED
    assert reason in result.detail
    assert (result.status, result.request_sent, result.address) == (None, False, None)
    assert connector.calls == []
    assert trap.connections() == 0


def test_the_table_covers_at_least_thirty_cases() -> None:
    assert len(REFUSED) >= 30


def test_the_trap_does_see_a_connection_when_the_policy_lets_one_through(trap: Trap) -> None:
    # The control for the table: the zero above would be meaningless if the trap could not count.
    connector = RoutingConnector(trap)
    sender = WebhookSender(
        allow_private_targets=True,
        connector=connector,
        ssl_context=TLS,
        # The trap never answers, so the whole cap is spent on every run; it only has to leave room for the
        # connect and the send, which a loaded machine may delay by far more than a quiet one's microseconds.
        limits=SenderLimits(total_timeout=2.0),
    )

    result = sender.post(f"http://127.0.0.1:{trap.port}/hook", b"{}", {})

    assert result.request_sent
    assert connector.calls == [(ipaddress.ip_address("127.0.0.1"), trap.port)]
    assert trap.connections() == 1


def test_literal_addresses_never_reach_the_resolver() -> None:
    resolver = FakeResolver(RESOLVER_ANSWERS)
    for url in ("https://2130706433/", "https://[::1]/", "https://0x7f.1/"):
        with pytest.raises(TargetRefused):
            check_url(url, resolver=resolver)

    assert resolver.calls == []


def test_a_public_name_passes_with_every_address_checked_in_order() -> None:
    resolver = FakeResolver({"erp.example": [PUBLIC_V4, PUBLIC_V6, PUBLIC_V4]})

    target = check_url("https://ERP.example./webhooks/tollgate?tenant=7", resolver=resolver)

    assert target.addresses == (ipaddress.ip_address(PUBLIC_V4), ipaddress.ip_address(PUBLIC_V6))
    assert (target.scheme, target.host, target.port) == ("https", "erp.example", 443)
    assert target.request_target == "/webhooks/tollgate?tenant=7"
    assert target.host_header == "erp.example"
    assert resolver.calls == ["erp.example"]


@pytest.mark.parametrize(("port", "host_header"), [(443, "erp.example"), (8443, "erp.example:8443")])
def test_https_on_443_or_an_unprivileged_port_passes(port: int, host_header: str) -> None:
    target = check_url(f"https://erp.example:{port}/", resolver=FakeResolver({"erp.example": [PUBLIC_V4]}))

    assert target.port == port
    assert target.host_header == host_header


def test_a_public_literal_passes_and_an_ipv4_mapped_one_connects_over_ipv4() -> None:
    assert check_url("https://8.8.8.8/").addresses == (ipaddress.ip_address("8.8.8.8"),)
    mapped = check_url("https://[::ffff:8.8.8.8]/")
    assert mapped.addresses == (ipaddress.ip_address("8.8.8.8"),)
    assert mapped.host == "8.8.8.8"
    v6 = check_url("https://[2001:4860:4860::8888]/")
    assert v6.host_header == "[2001:4860:4860::8888]"


def test_an_internationalized_name_is_resolved_in_its_ascii_form() -> None:
    resolver = FakeResolver({"xn--bcher-kva.example": [PUBLIC_V4]})

    target = check_url("https://bücher.example/", resolver=resolver)

    assert target.host == "xn--bcher-kva.example"


def test_a_name_that_does_not_resolve_is_a_dns_failure_not_a_refusal() -> None:
    with pytest.raises(ResolutionFailed):
        check_url("https://nowhere.example/", resolver=FakeResolver({}))
    with pytest.raises(ResolutionFailed):
        check_url("https://empty.example/", resolver=FakeResolver({"empty.example": []}))


def test_local_development_allows_http_and_private_targets_only_when_asked() -> None:
    resolver = FakeResolver({"erp.local": ["127.0.0.1"]})
    url = "http://erp.local:9000/hook"
    with pytest.raises(TargetRefused):
        check_url(url, resolver=resolver)

    target = check_url(url, allow_private_targets=True, resolver=resolver)

    assert target.addresses == (ipaddress.ip_address("127.0.0.1"),)
    assert not target.tls
    assert check_url("http://127.0.0.1:80/", allow_private_targets=True).host_header == "127.0.0.1"


def test_the_sender_reports_a_dns_failure_without_connecting(trap: Trap) -> None:
    connector = RoutingConnector(trap)
    sender = WebhookSender(resolver=FakeResolver({}), connector=connector, ssl_context=TLS)

    result = sender.post(f"https://nowhere.example:{trap.port}/", b"{}", {})

    assert result.error is DeliveryError.DNS_FAILED
    assert connector.calls == []
    assert trap.connections() == 0


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("1.1.1.1", True),
        (PUBLIC_V6, True),
        ("::ffff:8.8.8.8", True),
        ("64:ff9b::808:808", True),
        ("2002:808:808::1", True),
        ("100.63.255.255", True),
        ("100.128.0.0", True),
        ("172.32.0.1", True),
        ("169.254.169.254", False),
        ("fe80::1%eth0", False),
        ("64:ff9b:1::1", False),
        ("100::1", False),
        ("3fff::1", False),
        # AS112, both families, and the addresses just outside each block
        ("192.31.196.1", False),
        ("192.175.48.42", False),
        ("2620:4f:8000::42", False),
        ("2001:4:112::42", False),
        ("192.31.197.1", True),
        ("192.175.49.1", True),
        ("2620:4f:8001::1", True),
    ],
)
def test_address_classification_at_the_edges(address: str, public: bool) -> None:
    reason = refusal_reason(ipaddress.ip_address(address))

    assert (reason is None) is public, reason


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://faß.de/", "xn--fa-hia.de"),  # IDNA2008: not the IDNA2003 fass.de, another domain
        ("https://FAß.DE/", "xn--fa-hia.de"),
        ("https://faß.de./", "xn--fa-hia.de"),
        ("https://XN--FA-HIA.DE/", "xn--fa-hia.de"),
        ("https://Bücher.Example./", "xn--bcher-kva.example"),
        ("https://\uff25\uff38\uff21\uff2d\uff30\uff2c\uff25.com/", "example.com"),  # full width
        ("https://ERP.Example.COM./", "erp.example.com"),
        ("https://my_erp.example/", "my_erp.example"),  # legal in DNS; plain ASCII names skip IDNA
    ],
)
def test_hosts_are_normalized_with_idna2008_for_the_resolver_and_the_tls_name(url: str, host: str) -> None:
    resolver = FakeResolver(default=[PUBLIC_V4])

    target = check_url(url, resolver=resolver)

    assert target.host == host
    assert resolver.calls == [host]
    assert target.host_header == host


def test_a_resolver_failure_is_temporary_and_no_such_name_is_not() -> None:
    resolver = FakeResolver({"empty.example": []}, failing={"flaky.example"})

    with pytest.raises(ResolutionFailed) as missing:
        check_url("https://nowhere.example/", resolver=resolver)
    with pytest.raises(ResolutionFailed) as empty:
        check_url("https://empty.example/", resolver=resolver)
    with pytest.raises(ResolutionFailed) as flaky:
        check_url("https://flaky.example/", resolver=resolver)

    assert (missing.value.temporary, empty.value.temporary, flaky.value.temporary) == (False, False, True)


@given(host=st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_any_host_text_is_either_a_target_or_a_refusal_never_another_error(host: str) -> None:
    # Registration answers 422 for TargetRefused; any other exception from a tenant's URL would be a 500.
    for url in (f"https://{host}/", f"https://{host}.de:8443/x"):
        with contextlib.suppress(TargetRefused):
            parse_url(url)
