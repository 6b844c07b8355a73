"""Decides whether a tenant's webhook URL may be called, before a single byte is sent.

A URL passes when it is HTTPS without userinfo, on an allowed port, and every address its host resolves to
is public. The checked addresses are returned so the sender connects to exactly those (a second lookup
would let DNS rebinding swap in an internal address). ``allow_private_targets`` is the local-development
switch: plain HTTP and private addresses (the demo ERP on 127.0.0.1); it is off unless asked for.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import idna

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]
"""Host and port to the addresses a connection would use, as strings. Raises ``socket.gaierror`` with
EAI_NONAME or EAI_NODATA when the name has no address, another ``OSError`` when it could not find out."""

MAX_URL_LENGTH = 2048
HTTPS_PORT = 443
HTTP_PORT = 80
# Below 1024 live SMTP, SSH, LDAP and friends, where a POST body can be read as protocol commands; a
# receiver on a public address uses 443 or an unprivileged port.
FIRST_UNPRIVILEGED_PORT = 1024


class TargetRefused(Exception):
    """The URL or one of its addresses must not be called."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ResolutionFailed(Exception):
    """The host name did not resolve; nothing was refused, but there is nothing to call either.

    ``temporary`` is true when the resolver itself failed (no answer in time, a server failure) rather than
    saying the name has no addresses: the same question may well be answered a moment later.
    """

    def __init__(self, reason: str, *, temporary: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.temporary = temporary


@dataclass(frozen=True)
class ParsedTarget:
    """A URL whose shape passed the policy: scheme, normalized host, port and, for a literal, its address."""

    scheme: str
    host: str  # ASCII (IDNA2008) name or canonical IP
    port: int
    request_target: str
    address: IPAddress | None  # the checked literal address; None when the host is a name


@dataclass(frozen=True)
class CheckedTarget:
    """A URL that passed the policy, and the only addresses the sender may connect to."""

    scheme: str
    host: str  # ASCII (IDNA) name or canonical IP: TLS server name and Host header
    port: int
    request_target: str  # path and query, as sent on the request line
    addresses: tuple[IPAddress, ...]

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = HTTPS_PORT if self.tls else HTTP_PORT
        return host if self.port == default else f"{host}:{self.port}"


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


def check_url(
    url: str, *, allow_private_targets: bool = False, resolver: Resolver = system_resolver
) -> CheckedTarget:
    """Parses, normalizes and checks ``url``; raises ``TargetRefused`` or ``ResolutionFailed``."""
    parsed = parse_url(url, allow_private_targets=allow_private_targets)
    if parsed.address is not None:
        addresses: tuple[IPAddress, ...] = (parsed.address,)
    else:
        addresses = _resolve(parsed.host, parsed.port, resolver, allow_private_targets)
    return CheckedTarget(parsed.scheme, parsed.host, parsed.port, parsed.request_target, addresses)


def parse_url(url: str, *, allow_private_targets: bool = False) -> ParsedTarget:
    """Everything ``check_url`` decides without asking DNS: the URL's shape, its host in ASCII form, and a
    literal address's class. Raises ``TargetRefused``."""
    if len(url) > MAX_URL_LENGTH:
        raise TargetRefused(f"the URL is longer than {MAX_URL_LENGTH} characters")
    # urlsplit and the receiver's parser disagree about whitespace, control characters and backslashes;
    # refusing them leaves no room for a parser differential (a CR or LF would also split a request line).
    if _UNSAFE_URL_CHARS.search(url):
        raise TargetRefused("the URL holds whitespace, control characters or backslashes")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise TargetRefused(f"the URL does not parse: {exc}") from exc

    scheme = _checked_scheme(parts.scheme, allow_private_targets)
    if "@" in parts.netloc:
        raise TargetRefused("the URL carries userinfo (user:password@)")
    port = _checked_port(port, scheme, allow_private_targets)
    host = _normalize_host(parts.netloc, parts.hostname)
    if not (parts.path + parts.query).isascii():
        raise TargetRefused("the URL's path and query must be ASCII (percent-encode them)")
    request_target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    literal = _ip_literal(host)
    if literal is not None:
        address = literal if allow_private_targets else check_address(literal)
        return ParsedTarget(scheme, str(address), port, request_target, address)
    if not allow_private_targets and (host == "localhost" or host.endswith(".localhost")):
        raise TargetRefused("localhost names always mean loopback (RFC 6761)")
    return ParsedTarget(scheme, host, port, request_target, None)


def check_address(address: IPAddress, host: str | None = None) -> IPAddress:
    """The address to connect to if ``address`` is public (an IPv4-mapped IPv6 address becomes its IPv4
    address); raises ``TargetRefused`` otherwise."""
    reason = refusal_reason(address)
    if reason is not None:
        name = f"{host} resolves to {address}" if host else str(address)
        raise TargetRefused(f"{name}: {reason}")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def refusal_reason(address: IPAddress) -> str | None:
    """Why ``address`` is not a public unicast address, or None when it is."""
    if isinstance(address, ipaddress.IPv4Address):
        return _ipv4_reason(address)
    if address.scope_id:
        return "an IPv6 address with a zone index is link-scoped"
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        kind, inner = embedded
        inner_reason = _ipv4_reason(inner)
        if inner_reason is not None:
            return f"{kind} address embedding {inner}, which is {inner_reason}"
    for network, why in _IPV6_BLOCKED:
        if address in network:
            return why
    if address in _NAT64_WELL_KNOWN or address.ipv4_mapped is not None:
        return None  # the embedded IPv4 address, public, was checked above
    if address not in _IPV6_GLOBAL_UNICAST:
        return "reserved (outside global unicast 2000::/3)"
    if not address.is_global:
        return "not globally routable"
    return None


def _ipv4_reason(address: ipaddress.IPv4Address) -> str | None:
    for network, why in _IPV4_BLOCKED:
        if address in network:
            return why
    # The table above is explicit so reasons are readable; the standard library's registry catches any
    # special-purpose range added after it was written.
    if not address.is_global:
        return "not globally routable"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[str, ipaddress.IPv4Address] | None:
    if address.ipv4_mapped is not None:
        return "IPv4-mapped", address.ipv4_mapped
    if address in _NAT64_WELL_KNOWN:
        return "NAT64", ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return "6to4", address.sixtofour
    if address.teredo is not None:
        server, client = address.teredo
        # The client address is what a Teredo relay finally reaches; a non-public server is just as bad.
        if _ipv4_reason(client) is not None:
            return "Teredo", client
        return "Teredo", server
    return None


def _checked_scheme(raw: str, allow_private_targets: bool) -> str:
    scheme = raw.lower()
    if scheme != "https" and not (allow_private_targets and scheme == "http"):
        raise TargetRefused(f"only https URLs are allowed, not {scheme or 'a relative URL'}")
    return scheme


def _checked_port(port: int | None, scheme: str, allow_private_targets: bool) -> int:
    port = port if port is not None else (HTTPS_PORT if scheme == "https" else HTTP_PORT)
    if not 0 < port < 65536:
        raise TargetRefused(f"port {port} is not a TCP port")
    if not allow_private_targets and port != HTTPS_PORT and port < FIRST_UNPRIVILEGED_PORT:
        raise TargetRefused(f"port {port} is not allowed: use 443 or a port from {FIRST_UNPRIVILEGED_PORT}")
    return port


def _resolve(host: str, port: int, resolver: Resolver, allow_private_targets: bool) -> tuple[IPAddress, ...]:
    try:
        answers = resolver(host, port)
    except socket.gaierror as exc:
        # Only "no such name" and "no address for it" are the DNS's answer; anything else is the resolver
        # failing to get one.
        raise ResolutionFailed(
            f"{host} did not resolve: {exc}", temporary=exc.errno not in _NO_SUCH_NAME
        ) from exc
    except UnicodeError as exc:
        raise ResolutionFailed(f"{host} did not resolve: {exc}") from exc
    except OSError as exc:
        raise ResolutionFailed(f"{host} did not resolve: {exc}", temporary=True) from exc
    addresses: list[IPAddress] = []
    for answer in answers:
        try:
            resolved = ipaddress.ip_address(answer)
        except ValueError as exc:
            raise TargetRefused(f"the resolver answered {answer!r}, which is not an address") from exc
        # One non-public answer refuses the whole name: which answer a connection would use is not ours
        # to predict, and an attacker only needs one.
        checked = resolved if allow_private_targets else check_address(resolved, host)
        if checked not in addresses:
            addresses.append(checked)
    if not addresses:
        raise ResolutionFailed(f"{host} resolved to no addresses")
    return tuple(addresses)


def _normalize_host(netloc: str, hostname: str | None) -> str:
    if not hostname:
        raise TargetRefused("the URL has no host")
    if "%" in hostname:
        raise TargetRefused("zone indexes and percent-encoding are not allowed in the host")
    bracketed = netloc.rpartition("@")[2].startswith("[")
    if bracketed:
        try:
            ipaddress.IPv6Address(hostname)
        except ValueError as exc:
            raise TargetRefused("brackets in the host hold something other than an IPv6 address") from exc
        return hostname
    ascii_host = _ascii_name(hostname).removesuffix(".")
    if len(ascii_host) > 253 or not all(_LABEL.fullmatch(label) for label in ascii_host.split(".")):
        raise TargetRefused(f"{hostname!r} is not a host name")
    return ascii_host


def _ascii_name(hostname: str) -> str:
    """The name as DNS is asked for it: IDNA2008 with UTS #46 mapping, non-transitional, so ``faß.de`` is
    ``xn--fa-hia.de`` (as browsers and registries use it), never the IDNA2003 ``fass.de``, a different
    domain that someone else may hold. Plain ASCII names are only lower-cased, so a name with an underscore
    (legal in DNS, not in IDNA) still works; an ``xn--`` label is checked to be a valid A-label."""
    lowered = hostname.lower()
    if lowered.isascii() and not any(label.startswith("xn--") for label in lowered.split(".")):
        return lowered
    try:
        return idna.encode(hostname, uts46=True, transitional=False, std3_rules=True).decode("ascii")
    except idna.IDNAError as exc:
        raise TargetRefused(f"the host name is not a valid internationalized name: {exc}") from exc


def _ip_literal(host: str) -> IPAddress | None:
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise TargetRefused(f"{host!r} is not an IPv6 address") from exc
    return _ipv4_literal(host)


def _ipv4_literal(host: str) -> ipaddress.IPv4Address | None:
    """Reads a host the way inet_aton and browsers do, so 2130706433, 0177.0.0.1, 0x7f.0.0.1 and 127.1 are
    all seen as the 127.0.0.1 they are; None for a DNS name.

    A host whose last label is numeric is an IPv4 literal or invalid (WHATWG URL); passing an invalid one
    on to getaddrinfo would let the system resolver guess, so it is refused.
    """
    labels = host.split(".")
    if not _NUMERIC_LABEL.fullmatch(labels[-1]):
        return None
    if len(labels) > 4:
        raise TargetRefused(f"{host!r} looks like an IPv4 address but has more than four parts")
    values = [_ipv4_part(label, host) for label in labels]
    *leading, last = values
    if any(v > 255 for v in leading) or last >= 256 ** (5 - len(values)):
        raise TargetRefused(f"{host!r} looks like an IPv4 address but a part is out of range")
    number = last
    for index, value in enumerate(leading):
        number += value << (8 * (3 - index))
    return ipaddress.IPv4Address(number)


def _ipv4_part(label: str, host: str) -> int:
    lowered = label.lower()
    try:
        if lowered.startswith("0x"):
            return int(lowered[2:], 16) if len(lowered) > 2 else 0
        if len(lowered) > 1 and lowered.startswith("0"):
            return int(lowered[1:], 8)
        return int(lowered, 10)
    except ValueError as exc:
        raise TargetRefused(f"{host!r} looks like an IPv4 address but {label!r} is not a number") from exc


# C0 controls, space, DEL, backslash and the C1 controls (U+0080 to U+009F).
_UNSAFE_URL_CHARS = re.compile(r"[\x00-\x20\x7f-\x9f\\]")
_NO_SUCH_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_NUMERIC_LABEL = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")

# AS112 (RFC 7534, RFC 7535): 192.31.196.0/24 and 192.175.48.0/24, 2620:4f:8000::/48 and 2001:4:112::/48
# are refused in both families. IANA's special-purpose registry marks them globally reachable, and they are,
# but only as anycast sinks for stray DNS queries, run by whoever volunteers nearest the sender: no tenant's
# receiver lives there, and a request to one reaches an operator nobody chose. Nothing legitimate is lost by
# refusing them, and one rule for both families keeps a name from passing over IPv6 what IPv4 refuses.
_IPV4_BLOCKED: tuple[tuple[ipaddress.IPv4Network, str], ...] = tuple(
    (ipaddress.IPv4Network(cidr), why)
    for cidr, why in (
        ("169.254.169.254/32", "the cloud instance metadata service (link-local)"),
        ("169.254.170.2/32", "the ECS task metadata and credentials endpoint (link-local)"),
        ("255.255.255.255/32", "limited broadcast"),
        ("0.0.0.0/8", "'this network' (0.0.0.0/8)"),
        ("10.0.0.0/8", "private (RFC 1918)"),
        ("100.64.0.0/10", "shared address space / CGNAT (RFC 6598)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private (RFC 1918)"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation (TEST-NET-1)"),
        ("192.31.196.0/24", "AS112 (a DNS sink, not a webhook receiver)"),
        ("192.52.193.0/24", "AMT"),
        ("192.88.99.0/24", "the deprecated 6to4 relay anycast"),
        ("192.168.0.0/16", "private (RFC 1918)"),
        ("192.175.48.0/24", "AS112 direct delegation (a DNS sink, not a webhook receiver)"),
        ("198.18.0.0/15", "benchmarking (RFC 2544)"),
        ("198.51.100.0/24", "documentation (TEST-NET-2)"),
        ("203.0.113.0/24", "documentation (TEST-NET-3)"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
    )
)

_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
_IPV6_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_IPV6_BLOCKED: tuple[tuple[ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.IPv6Network(cidr), why)
    for cidr, why in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible (deprecated)"),
        ("::ffff:0:0:0/96", "IPv4-translated (SIIT)"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("100::/64", "discard-only"),
        ("2620:4f:8000::/48", "AS112-v6 (a DNS sink, not a webhook receiver)"),
        ("2001:4:112::/48", "AS112-v6 direct delegation (a DNS sink, not a webhook receiver)"),
        ("2001::/32", "Teredo"),
        ("2001:db8::/32", "documentation"),
        ("2001::/23", "IETF protocol assignments"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "SRv6 segment identifiers"),
        ("fd00:ec2::/32", "the EC2 IPv6 metadata and DNS range (unique local)"),
        ("fc00::/7", "unique local (ULA)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)
