"""The upstream client the settings ask for (proxy.server.upstream)."""

from __future__ import annotations

import httpx

from proxy.server.egress import ConnectGuard, EgressProxy, EgressTransport
from proxy.server.upstream.aiohttp_client import AiohttpUpstream
from proxy.server.upstream.common import Upstream
from proxy.server.upstream.httpx_client import HttpxUpstream
from proxy.settings import Settings


def build_upstream(
    settings: Settings, transport: httpx.AsyncBaseTransport | None = None, guard: ConnectGuard | None = None
) -> Upstream:
    """The upstream client the settings ask for; an injected httpx transport (tests) wins. `guard`
    resolves names and vets client-chosen hosts at connect time (proxy.server.egress)."""
    if guard is None:
        from proxy.server.upstream.policy import UpstreamPolicy

        policy = UpstreamPolicy.from_settings(settings)
        guard = ConnectGuard(policy, egress=EgressProxy.from_settings(settings))
    if transport is None and settings.http_transport == "aiohttp":
        return AiohttpUpstream(settings, guard)
    if transport is None:
        limits = httpx.Limits(
            max_connections=settings.max_upstream_connections,
            max_keepalive_connections=min(settings.max_upstream_connections, 200),
            keepalive_expiry=30.0,
        )
        transport = EgressTransport(guard, limits)
    return HttpxUpstream(transport, settings)
