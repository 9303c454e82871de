"""The one pattern language for upstream URLs: `providers.yaml` entries and `THINKPROXY_ALLOWED_UPSTREAMS`.

    [scheme://]host[:port][/path/prefix]      or the catch-all  *

- host: literal labels (`api.deepseek.com`, `127.0.0.1`), `*` for exactly one label
  (`ark.*.volces.com`), a leading `*.` for any depth of subdomain (`*.openai.azure.com`, which
  does not match `openai.azure.com` itself), a bracketed IPv6 address (`[::1]`), or a lone `*`
  with a port (`*:11434`: any host on that port, the least specific after the catch-all);
- port: a number, or `*` for any port;
- path prefix: literal segments, compared segment by segment after percent-decoding.

Two ways to match, for two jobs:

- `matches` (which provider is this?) ignores the scheme and, unless the pattern names one, the
  port: a dialect does not change with the port a server listens on.
- `admits` (may a client send requests there?) is strict: a named scheme must be the URL's
  scheme, and a pattern without a port admits only the scheme's default port (80 / 443).

Pure: strings in, values out.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?$")


# A URL inside free text (an HTTP client's error message): its credentials and query are cut.
_URL_IN_TEXT = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#@'\"]*@)?(?P<rest>[^\s?#'\"]*)(?:[?#][^\s'\"]*)?"
)


def scrub_urls(text: str) -> str:
    """`text` with every URL in it stripped of userinfo, query and fragment (which may hold keys)."""
    return _URL_IN_TEXT.sub(lambda m: m["scheme"] + m["rest"], text)


def canonical_host(host: str) -> str:
    """The host as a resolver will see it: IDNA-mapped (full-width letters and dots folded),
    lower-cased, without brackets or a trailing dot, IPv6 compressed; so `ｌｏｃａｌｈｏｓｔ`,
    `127。0。0。1` or `[0:0::1]` cannot slip past a name check."""
    host = host.strip("[]").rstrip(".").lower()
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host).compressed
        except ValueError:
            return host
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return host


def _labels(host: str) -> tuple[str, ...]:
    return (host,) if ":" in host else tuple(host.split("."))


def _segments(path: str) -> tuple[str, ...]:
    return tuple(unquote(segment) for segment in path.split("/") if segment)


@dataclass(frozen=True, slots=True)
class UrlTarget:
    """An absolute http(s) URL taken apart for matching."""

    scheme: str
    host: str  # canonical_host
    port: int  # the effective port: the scheme's default when the URL names none
    path: tuple[str, ...]  # percent-decoded segments

    @classmethod
    def parse(cls, url: str) -> UrlTarget:
        """ValueError when `url` is not an absolute http(s) URL with a host and a valid port."""
        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS or not parts.hostname:
            raise ValueError("not an absolute http:// or https:// URL")
        port = parts.port  # ValueError for a bad port
        return cls(
            scheme,
            canonical_host(parts.hostname),
            port if port is not None else DEFAULT_PORTS[scheme],
            _segments(parts.path),
        )

    @classmethod
    def lenient(cls, url: str) -> UrlTarget:
        """For provider lookup, which never fails: a missing scheme or a bad port is tolerated."""
        text = url.strip()
        parts = urlsplit(text if "://" in text else "//" + text)
        scheme = parts.scheme.lower()
        try:
            port = parts.port
        except ValueError:
            port = None
        return cls(
            scheme,
            canonical_host(parts.hostname or ""),
            port if port is not None else DEFAULT_PORTS.get(scheme, 0),
            _segments(parts.path),
        )


@dataclass(frozen=True, slots=True)
class UrlPattern:
    text: str
    scheme: str | None  # "http" / "https" when the pattern names one
    labels: tuple[str, ...]  # host labels, "*" = exactly one label; empty for the catch-all
    deep_wildcard: bool  # a leading "*." also covers deeper subdomains
    port: int | None  # None: not named
    any_port: bool  # ":*"
    path: tuple[str, ...]

    @property
    def catch_all(self) -> bool:
        return not self.labels

    @property
    def exact(self) -> bool:
        """Names one host, no wildcard: the only kind that may reach loopback or private addresses."""
        return bool(self.labels) and "*" not in self.labels

    @property
    def specificity(self) -> tuple[int, int, int, int, int]:
        """Larger wins: any host over the catch-all, a host without wildcard over one with, more
        literal labels, a longer path prefix, a named port."""
        if self.catch_all:
            return (0, 0, 0, 0, 0)
        literal = sum(1 for label in self.labels if label != "*")
        exact = 0 if literal < len(self.labels) else 1
        return (1, exact, literal, len(self.path), 1 if self.port is not None else 0)

    def matches_host(self, host: str) -> bool:
        if self.catch_all:
            return True
        target = _labels(host)
        labels = self.labels
        if self.deep_wildcard:
            labels = labels[1:]
            if len(target) <= len(labels):
                return False
            target = target[len(target) - len(labels) :]
        elif len(target) != len(labels):
            return False
        return all(p == "*" or p == h for p, h in zip(labels, target, strict=True))

    def _matches_path(self, path: tuple[str, ...]) -> bool:
        return path[: len(self.path)] == self.path

    def matches(self, target: UrlTarget) -> bool:
        """Provider lookup: scheme ignored; the port only when the pattern names one."""
        if self.port is not None and target.port != self.port:
            return False
        return self._matches_path(target.path) and self.matches_host(target.host)

    def admits(self, target: UrlTarget) -> bool:
        """Allow-list: the named scheme, the named port or else the scheme's default port."""
        if self.scheme is not None and target.scheme != self.scheme:
            return False
        if not self.any_port:
            wanted = self.port if self.port is not None else DEFAULT_PORTS[target.scheme]
            if target.port != wanted:
                return False
        return self._matches_path(target.path) and self.matches_host(target.host)

    @classmethod
    def parse(cls, text: str) -> UrlPattern:
        """ValueError (with a message naming the problem) for anything but the language above."""
        raw = text.strip()
        if not raw:
            raise ValueError("empty pattern")
        if raw == "*":
            return cls(raw, None, (), False, None, False, ())
        if any(c.isspace() for c in raw) or "?" in raw or "#" in raw or "@" in raw:
            raise ValueError(f"bad pattern {text!r}: no spaces, credentials, query or fragment")
        scheme: str | None = None
        rest = raw
        if "://" in raw:
            scheme, rest = raw.split("://", 1)
            scheme = scheme.lower()
            if scheme not in DEFAULT_PORTS:
                raise ValueError(f"bad pattern {text!r}: the scheme can only be http or https")
        hostport, _, path_text = rest.partition("/")
        labels: tuple[str, ...]
        if hostport.startswith("["):  # IPv6 literal
            end = hostport.find("]")
            if end < 0:
                raise ValueError(f"bad pattern {text!r}: unclosed '['")
            host, port_text = hostport[1:end], hostport[end + 1 :]
            if port_text and not port_text.startswith(":"):
                raise ValueError(f"bad pattern {text!r}: junk after ']'")
            port_text = port_text[1:]
            try:
                labels = (ipaddress.IPv6Address(host).compressed,)
            except ValueError:
                raise ValueError(f"bad pattern {text!r}: {host!r} is not an IPv6 address") from None
        else:
            if hostport.count(":") > 1:
                raise ValueError(
                    f"bad pattern {text!r}: write an IPv6 address in brackets, as in [::1]:11434"
                )
            host, _, port_text = hostport.partition(":")
            labels = tuple(canonical_host(host).split(".")) if host != "*" else ("*",)
            for label in labels:
                if "*" in label and label != "*":
                    raise ValueError(
                        f"bad pattern {text!r}: '*' must stand for a whole label, as in *.example.com"
                    )
                if label != "*" and not _LABEL.match(label):
                    raise ValueError(f"bad pattern {text!r}: {label!r} is not a host label")
            if all(label == "*" for label in labels) and not (labels == ("*",) and port_text.isdigit()):
                raise ValueError(
                    f"bad pattern {text!r}: the host needs at least one literal label "
                    "(or is a lone '*' with a port: any host on that port)"
                )
        port: int | None = None
        any_port = port_text == "*"
        if port_text and not any_port:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise ValueError(f"bad pattern {text!r}: port {port_text!r} is not a number from 1 to 65535")
            port = int(port_text)
        path = _segments(path_text)
        if any("*" in segment for segment in path):
            raise ValueError(f"bad pattern {text!r}: the path prefix is literal, no '*'")
        if any(segment in (".", "..") or "/" in segment or "\\" in segment for segment in path):
            raise ValueError(f"bad pattern {text!r}: the path prefix has a dot-segment or encoded slash")
        return cls(raw, scheme, labels, labels[0] == "*", port, any_port, path)
