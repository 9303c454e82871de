"""Which upstream a request may go to: the configured one, or an allow-listed X-Upstream-Base-URL.

A client-chosen upstream is the classic way to turn a proxy into an open relay (SSRF), so it is
refused unless a `THINKPROXY_ALLOWED_UPSTREAMS` pattern admits it
(proxy.core.config.url_patterns: the pattern's
scheme, its port or else the scheme's default port, its path prefix after dot-segments are
refused). Loopback, link-local, cloud-metadata and private addresses (RFC 1918, 100.64.0.0/10,
fc00::/7) are sensitive: only a pattern naming the host exactly reaches them, never a wildcard.
This module judges the URL as written; what a *name* resolves to is judged where the connection
is made (proxy.server.egress), so the address vetted is the address connected.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from proxy.core.config.url_patterns import UrlPattern, UrlTarget, canonical_host
from proxy.core.errors import BadRequest, ConfigError, Forbidden
from proxy.core.paths import escape, has_dot_segment
from proxy.settings import Settings

METADATA_HOSTS = frozenset(
    {"metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal"}
)

# Cloud metadata services outside the link-local range (Alibaba Cloud, AWS over IPv6).
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("100.100.100.200"), ipaddress.ip_address("fd00:ec2::254")}
)

# Networks a public upstream never lives in: an organisation's own hosts sit there.
PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # "this network": Linux connects 0.x to the local host
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",  # carrier-grade NAT, also used inside clouds and clusters
        "fc00::/7",  # unique local
        "fec0::/10",  # deprecated site-local, still routed by some stacks
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

UPSTREAM_PARAM = "X-Upstream-Base-URL"


def host_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address a host literal denotes, including the shorthand IPv4 forms the C resolver
    accepts (`127.1`, `2130706433`, `0x7f.1`), or None for a name."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])  # (an IPv6 zone id does not change the address)
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host) and host[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def address_is_sensitive(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Loopback, link-local, metadata, private, unspecified, multicast or reserved."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:  # an IPv4 address reached through the NAT64 gateway
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return (
        ip.is_loopback
        or ip.is_link_local
        or ip.is_unspecified
        or ip.is_multicast
        or ip.is_reserved
        or ip in METADATA_ADDRESSES
        or any(ip.version == net.version and ip in net for net in PRIVATE_NETWORKS)
    )


def host_is_sensitive(host: str) -> bool:
    """Whether a host *as written* is sensitive: a loopback or metadata name, or a sensitive IP
    literal. (A public-looking name that resolves to a sensitive address is caught at connect.)"""
    host = canonical_host(host)
    if host in METADATA_HOSTS or host == "localhost" or host.endswith(".localhost"):
        return True
    ip = host_address(host)
    return ip is not None and address_is_sensitive(ip)


def parse_allowed(text: str) -> UrlPattern:
    """One `THINKPROXY_ALLOWED_UPSTREAMS` pattern; ConfigError naming it when it is malformed."""
    try:
        return UrlPattern.parse(text)
    except ValueError as exc:
        raise ConfigError(f"THINKPROXY_ALLOWED_UPSTREAMS: {exc}") from None


@dataclass(frozen=True, slots=True)
class UpstreamPolicy:
    default: str | None
    allowed: tuple[UrlPattern, ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> UpstreamPolicy:
        return cls(settings.upstream_base_url, tuple(parse_allowed(p) for p in settings.allowed_upstreams))

    def resolve(self, requested: str | None) -> str:
        """The base URL this request goes to; raises 403 for a refused X-Upstream-Base-URL."""
        if requested is None:
            if self.default is None:
                raise BadRequest(
                    "No upstream configured: set THINKPROXY_UPSTREAM_BASE_URL on the proxy, or send "
                    "X-Upstream-Base-URL with an upstream allowed by THINKPROXY_ALLOWED_UPSTREAMS.",
                    code="no_upstream",
                )
            return self.default
        return self.check(requested.strip())

    def names_exactly(self, host: str, port: int) -> bool:
        """Whether a pattern names `host` (on `port`) without a wildcard: the operator chose that
        host, so whatever its name resolves to may be connected, private addresses included."""
        host = canonical_host(host)
        return any(
            p.exact and p.matches_host(host) and (p.any_port or p.port is None or p.port == port)
            for p in self.allowed
        )

    def check(self, url: str) -> str:
        """The client-chosen base URL, normalized, or Forbidden / BadRequest saying why not."""
        try:
            parts = urlsplit(url)
            hostname = parts.hostname
            target = UrlTarget.parse(url)
        except ValueError:
            raise Forbidden(
                "X-Upstream-Base-URL is not a valid absolute http:// or https:// URL with a valid port.",
                param=UPSTREAM_PARAM,
            ) from None
        if parts.username is not None or parts.password is not None:
            raise Forbidden("X-Upstream-Base-URL must not carry credentials.", param=UPSTREAM_PARAM)
        if parts.query or parts.fragment or url.endswith(("?", "#")):
            raise Forbidden(
                "X-Upstream-Base-URL must not carry a query or fragment: send a base URL such as "
                "https://host/v1.",
                param=UPSTREAM_PARAM,
            )
        if has_dot_segment(parts.path):
            raise BadRequest(
                "X-Upstream-Base-URL has a dot-segment ('.' or '..', possibly percent-encoded) in its "
                "path; send the base path without them.",
                param=UPSTREAM_PARAM,
                code="invalid_path",
            )
        sensitive = host_is_sensitive(target.host)
        for pattern in self.allowed:
            if pattern.admits(target) and (not sensitive or pattern.exact):
                return self._normalized(parts.scheme, hostname or "", parts.port, parts.path)
        raise Forbidden(
            f"Upstream {target.scheme}://{_netloc(target.host, target.port)} is not allowed: the proxy only "
            "forwards to upstreams listed in THINKPROXY_ALLOWED_UPSTREAMS (a pattern names the scheme "
            "if it must, and the port unless it is the scheme's default)"
            + (
                "; loopback, link-local, metadata and private addresses must be named exactly."
                if sensitive
                else "."
            ),
            param=UPSTREAM_PARAM,
        )

    @staticmethod
    def _normalized(scheme: str, hostname: str, port: int | None, path: str) -> str:
        """The URL the HTTP client gets: lower-case scheme, the host in ASCII (IDNA), the path
        with any byte that cannot travel in a URL escaped, no trailing slash."""
        host = canonical_host(hostname)
        netloc = f"[{host}]" if ":" in host else host
        if port is not None:
            netloc += f":{port}"
        return f"{scheme.lower()}://{netloc}{escape(path).rstrip('/')}"


def _netloc(host: str, port: int) -> str:
    return (f"[{host}]" if ":" in host else host) + f":{port}"
