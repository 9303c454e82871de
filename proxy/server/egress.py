"""Where upstream connections go: names vetted at connect time, and the optional egress proxy.

**Connect-time vetting (DNS rebinding).** A client-chosen upstream (`X-Upstream-Base-URL`) may
name a host whose DNS answer is a loopback, metadata or private address, and a name can answer
differently a second later. So the check is made by the resolver the HTTP client connects with,
on the very addresses it connects to, not by a separate lookup beforehand. Client-chosen requests
use their own connection pool whose resolver is guarded (`ConnectGuard`); a pooled connection made
for the operator's configured upstream is never handed to a client-chosen request. A name a
`THINKPROXY_ALLOWED_UPSTREAMS` pattern names exactly is the operator's choice and is not vetted.
A name that does not resolve is a refusal, never a pass.

**Egress proxy.** `THINKPROXY_EGRESS_PROXY` sends every upstream request through an HTTP proxy
(CONNECT for https); `THINKPROXY_TRUST_ENV=true` takes `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY`
from the environment instead. Through a proxy the connection goes to the proxy, which resolves the
upstream's name itself: client-chosen names are then vetted by a lookup just before the request
(`precheck`), so rebinding protection there is as good as the egress proxy's own rules.

The adapters (`GuardedAiohttpResolver`, `GuardedNetworkBackend`, `EgressTransport`) plug the guard
into aiohttp and httpx; the upstream clients (proxy.server.upstream) use them.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import urllib.request
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import aiohttp.abc
import anyio
import httpcore
import httpx

from proxy.core.errors import Forbidden, ProxyError
from proxy.server.upstream.policy import UPSTREAM_PARAM, UpstreamPolicy, address_is_sensitive, host_address
from proxy.settings import Settings

# (host, port) -> the IP addresses to try, in order. OSError (socket.gaierror) when it fails.
Resolve = Callable[[str, int], Awaitable[list[str]]]

CLIENT_CHOSEN = "thinkproxy.client_chosen"  # httpx request extension: this request uses the guarded pool


async def system_resolve(host: str, port: int) -> list[str]:
    """The machine's resolver (getaddrinfo in a thread, as aiohttp's default resolver does)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_ADDRCONFIG)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class EgressRefused(OSError):
    """Raised inside an HTTP client's connect step; proxy.server.upstream.common.translate_error
    turns it back into the `ProxyError` it carries (an OSError, so both clients pass it through as
    a connect error)."""

    def __init__(self, error: ProxyError) -> None:
        super().__init__(error.message)
        self.error = error


def refusal(exc: BaseException) -> ProxyError | None:
    """The refusal behind a transport exception, if a `ConnectGuard` caused it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, EgressRefused):
            return current.error
        seen.add(id(current))
        nxt = getattr(current, "os_error", None)  # aiohttp.ClientConnectorError keeps it here
        current = nxt if isinstance(nxt, BaseException) else (current.__cause__ or current.__context__)
    return None


# --------------------------------------------------------------------------------------------------
# The egress proxy
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EgressProxy:
    """Which proxy (if any) a request to an upstream URL goes through."""

    proxies: dict[str, str] = field(default_factory=dict)  # scheme -> proxy URL
    no_proxy: str = ""  # NO_PROXY syntax: comma-separated hosts / domain suffixes, "*" for all

    @classmethod
    def from_settings(cls, settings: Settings) -> EgressProxy:
        explicit = settings.egress_proxy.get_secret_value() if settings.egress_proxy else None
        if explicit:
            return cls({"http": explicit, "https": explicit})
        if settings.trust_env:
            env = urllib.request.getproxies_environment()  # HTTP(S)_PROXY, NO_PROXY, lower or upper case
            return cls({k: v for k, v in env.items() if k in ("http", "https")}, env.get("no", ""))
        return cls()

    def for_url(self, url: str) -> str | None:
        if not self.proxies:
            return None
        parts = urlsplit(url)
        proxy = self.proxies.get(parts.scheme)
        if proxy is None:
            return None
        host = parts.hostname or ""
        bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # (untyped in typeshed)
        if self.no_proxy and bypass(host, {"no": self.no_proxy}):
            return None
        return proxy


@dataclass(frozen=True, slots=True)
class ConnectGuard:
    """Resolves names for the HTTP clients and refuses what a client-chosen upstream must not reach."""

    policy: UpstreamPolicy
    resolve: Resolve = system_resolve
    egress: EgressProxy = field(default_factory=lambda: EgressProxy())

    async def precheck(self, url: str) -> None:
        """Before a client-chosen request: through an egress proxy the connect-time check only
        sees the proxy's name, so the upstream's own name is vetted here (the best a proxy that
        resolves names itself allows). Without a proxy this does nothing: the connect step vets."""
        if self.egress.for_url(url) is None:
            return
        parts = urlsplit(url)
        host = parts.hostname or ""
        if host_address(host) is None:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                await self.addresses(host, port, client_chosen=True)
            except EgressRefused as exc:
                raise exc.error from None

    async def addresses(self, host: str, port: int, *, client_chosen: bool) -> list[str]:
        if not client_chosen or self.policy.names_exactly(host, port):
            return await self.resolve(host, port)
        try:
            found = await self.resolve(host, port)
        except OSError as exc:
            raise EgressRefused(
                Forbidden(
                    f"Upstream host {host!r} could not be resolved ({exc.strerror or exc}); a "
                    "client-chosen upstream is only connected once its addresses have been vetted.",
                    param=UPSTREAM_PARAM,
                )
            ) from None
        sensitive = [a for a in found if _sensitive(a)]
        if sensitive or not found:
            raise EgressRefused(
                Forbidden(
                    f"Upstream host {host!r} resolves to a loopback, link-local, metadata or private "
                    "address; name it exactly in THINKPROXY_ALLOWED_UPSTREAMS if that is intended.",
                    param=UPSTREAM_PARAM,
                )
            )
        return found


def _sensitive(address: str) -> bool:
    try:
        return address_is_sensitive(ipaddress.ip_address(address.split("%", 1)[0]))
    except ValueError:
        return True  # not an address at all: never connect to it unvetted


# --------------------------------------------------------------------------------------------------
# aiohttp: a resolver for the connector
# --------------------------------------------------------------------------------------------------


class GuardedAiohttpResolver(aiohttp.abc.AbstractResolver):
    """aiohttp's resolver interface over a `ConnectGuard`: what it returns is what aiohttp connects to."""

    def __init__(self, guard: ConnectGuard, *, client_chosen: bool, exempt: Iterable[str] = ()) -> None:
        self._guard = guard
        self._client_chosen = client_chosen
        self._exempt = frozenset(exempt)  # egress proxy hosts: the connection goes there, not upstream

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        chosen = self._client_chosen and host not in self._exempt
        try:
            found = await self._guard.addresses(host, port, client_chosen=chosen)
        except EgressRefused:
            raise
        except OSError as exc:
            raise OSError(exc.errno, f"could not resolve {host!r}: {exc.strerror or exc}") from exc
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in found
            if family in (socket.AF_UNSPEC, socket.AF_INET6 if ":" in address else socket.AF_INET)
        ]

    async def close(self) -> None:
        return None


# --------------------------------------------------------------------------------------------------
# httpx: a network backend for httpcore, and a transport that picks pool and proxy per request
# --------------------------------------------------------------------------------------------------


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with name resolution done by a `ConnectGuard`; the stream is
    opened to the vetted address itself (TLS still uses the name for SNI and certificates)."""

    def __init__(
        self,
        guard: ConnectGuard,
        *,
        client_chosen: bool,
        inner: httpcore.AsyncNetworkBackend | None = None,
        exempt: Iterable[str] = (),
    ) -> None:
        self._guard = guard
        self._client_chosen = client_chosen
        self._inner = inner or httpcore.AnyIOBackend()
        self._exempt = frozenset(exempt)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if host_address(host) is not None:
            return await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        chosen = self._client_chosen and host not in self._exempt
        try:
            with anyio.fail_after(timeout):
                found = await self._guard.addresses(host, port, client_chosen=chosen)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving {host!r} timed out") from exc
        except EgressRefused:
            raise
        except OSError as exc:
            raise httpcore.ConnectError(f"could not resolve {host!r}: {exc.strerror or exc}") from exc
        last: Exception | None = None
        for address in found:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        return await self._inner.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class EgressTransport(httpx.AsyncBaseTransport):
    """One httpx transport per (pool, proxy): the operator's upstreams and client-chosen ones never
    share a pooled connection, and each request goes through the proxy `EgressProxy` picks for it."""

    def __init__(self, guard: ConnectGuard, limits: httpx.Limits) -> None:
        self._guard = guard
        self._limits = limits
        self._transports: dict[tuple[bool, str | None], httpx.AsyncHTTPTransport] = {}

    def _transport(self, client_chosen: bool, proxy: str | None) -> httpx.AsyncHTTPTransport:
        key = (client_chosen, proxy)
        found = self._transports.get(key)
        if found is None:
            found = httpx.AsyncHTTPTransport(limits=self._limits, proxy=proxy)
            pool: Any = found._pool  # httpx has no public way to set httpcore's network backend
            exempt = [urlsplit(proxy).hostname or ""] if proxy else []
            pool._network_backend = GuardedNetworkBackend(
                self._guard, client_chosen=client_chosen, inner=pool._network_backend, exempt=exempt
            )
            self._transports[key] = found
        return found

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        chosen = bool(request.extensions.get(CLIENT_CHOSEN))
        proxy = self._guard.egress.for_url(str(request.url))
        return await self._transport(chosen, proxy).handle_async_request(request)

    async def aclose(self) -> None:
        for transport in self._transports.values():
            await transport.aclose()
        self._transports.clear()
