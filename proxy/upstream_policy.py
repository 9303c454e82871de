"""Which upstream a request may go to: the configured one, or an allow-listed X-Upstream-Base-URL.

A client-chosen upstream is the classic way to turn a proxy into an open relay (SSRF), so it is
refused unless it matches `THINKPROXY_ALLOWED_UPSTREAMS`; only http/https; link-local,
cloud-metadata and loopback addresses need an explicit pattern naming them.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from proxy.errors import BadRequest, ConfigError, Forbidden
from proxy.settings import Settings

METADATA_HOSTS = frozenset(
    {"metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal"}
)


# Cloud metadata services outside the link-local range (Alibaba Cloud).
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("100.100.100.200"), ipaddress.ip_address("fd00:ec2::254")}
)


def canonical_host(host: str) -> str:
    """The host as a resolver will see it: IDNA-mapped (full-width letters and dots folded) and
    lower-cased, so `ｌｏｃａｌｈｏｓｔ` or `127。0。0。1` cannot slip past a name check."""
    host = host.strip("[]").rstrip(".").lower()
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return host


def host_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address a host literal denotes, including the shorthand IPv4 forms the C resolver
    accepts (`127.1`, `2130706433`, `0x7f.1`), or None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host) and host[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def host_is_sensitive(host: str) -> bool:
    """Loopback, link-local, cloud metadata or unspecified: never reached by accident."""
    host = canonical_host(host)
    if host in METADATA_HOSTS or host == "localhost" or host.endswith(".localhost"):
        return True
    ip = host_address(host)
    if ip is None:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (
        ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast or ip in METADATA_ADDRESSES
    )


@dataclass(frozen=True, slots=True)
class HostPattern:
    host: str  # "*.example.com", "api.x.ai", "127.0.0.1"
    port: int | None
    path: str  # "" or "/compatible-mode"

    @classmethod
    def parse(cls, text: str) -> HostPattern:
        text = text.strip()
        if "://" in text:
            text = text.split("://", 1)[1]
        hostport, _, path = text.partition("/")
        host, _, port = hostport.rpartition(":") if hostport.count(":") == 1 else (hostport, "", "")
        if port and port != "*" and not port.isdigit():
            raise ConfigError(f"THINKPROXY_ALLOWED_UPSTREAMS: pattern {text!r} has an invalid port {port!r}")
        return cls(
            canonical_host(host),
            int(port) if port and port != "*" else None,
            ("/" + path).rstrip("/") if path else "",
        )

    @property
    def names_sensitive_host(self) -> bool:
        return not self.host.startswith("*") and host_is_sensitive(self.host)

    def matches(self, host: str, port: int | None, path: str) -> bool:
        if self.host.startswith("*."):
            if not host.endswith(self.host[1:]):
                return False
        elif self.host != "*" and host != self.host:
            return False
        if self.port is not None and port != self.port:
            return False
        return not self.path or path == self.path or path.startswith(self.path + "/")


@dataclass(frozen=True, slots=True)
class UpstreamPolicy:
    default: str | None
    allowed: tuple[HostPattern, ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> UpstreamPolicy:
        return cls(
            settings.upstream_base_url, tuple(HostPattern.parse(p) for p in settings.allowed_upstreams)
        )

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

    def host_to_vet(self, url: str) -> str | None:
        """For a client-chosen upstream: the host name whose DNS answers must be vetted before
        connecting (a public-looking name may resolve to a metadata or loopback address), or None
        when the host is an IP literal or a pattern names it exactly (the operator chose it)."""
        host = canonical_host(urlsplit(url).hostname or "")
        if host_address(host) is not None:
            return None
        if any(p.host == host for p in self.allowed):
            return None
        return host

    def check(self, url: str) -> str:
        try:
            parts = urlsplit(url)
            hostname = parts.hostname
        except ValueError:
            raise Forbidden("X-Upstream-Base-URL is not a valid URL.", param="X-Upstream-Base-URL") from None
        if parts.scheme not in ("http", "https") or not hostname:
            raise Forbidden(
                "X-Upstream-Base-URL must be an absolute http:// or https:// URL.",
                param="X-Upstream-Base-URL",
            )
        if parts.username or parts.password:
            raise Forbidden("X-Upstream-Base-URL must not carry credentials.", param="X-Upstream-Base-URL")
        host = canonical_host(hostname)
        try:
            port = parts.port
        except ValueError:
            raise Forbidden("X-Upstream-Base-URL has an invalid port.", param="X-Upstream-Base-URL") from None
        path = parts.path.rstrip("/")
        sensitive = host_is_sensitive(host)
        for pattern in self.allowed:
            if pattern.matches(host, port, path) and (not sensitive or pattern.names_sensitive_host):
                return url.rstrip("/")
        raise Forbidden(
            f"Upstream host {host!r} is not allowed: the proxy only forwards to upstreams listed in "
            "THINKPROXY_ALLOWED_UPSTREAMS"
            + (
                " (loopback, link-local and metadata addresses must be named explicitly)."
                if sensitive
                else "."
            ),
            param="X-Upstream-Base-URL",
        )
