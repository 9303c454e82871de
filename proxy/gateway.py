"""Who pays upstream: bring-your-own-key by default, or gateway mode with the proxy's own key.

In gateway mode (`THINKPROXY_UPSTREAM_API_KEY` set) a client must present one of
`THINKPROXY_CLIENT_KEYS`; keys are compared in constant time and never echoed anywhere.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from proxy.errors import ConfigError, Unauthorized
from proxy.settings import Settings

AUTH_HEADERS = frozenset({"authorization", "api-key", "x-api-key"})


def presented_key(headers: Iterable[tuple[str, str]]) -> str | None:
    for name, value in headers:
        low = name.lower()
        if low == "authorization":
            scheme, _, token = value.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else value.strip()
        if low in ("api-key", "x-api-key"):
            return value.strip()
    return None


@dataclass(frozen=True, slots=True)
class GatewayAuth:
    upstream_key: str | None
    client_keys: tuple[bytes, ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> GatewayAuth:
        key = settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
        clients = tuple(k.get_secret_value().encode() for k in settings.client_keys)
        if key and not clients:
            raise ConfigError(
                "THINKPROXY_UPSTREAM_API_KEY is set but THINKPROXY_CLIENT_KEYS is empty: the proxy would "
                "spend its key for anyone. Set THINKPROXY_CLIENT_KEYS (comma-separated)."
            )
        return cls(key, clients)

    def _client_allowed(self, key: str | None) -> bool:
        if key is None:
            return False
        given = key.encode()
        # Compare against every key so the time taken does not reveal which one nearly matched.
        matched = False
        for candidate in self.client_keys:
            matched |= hmac.compare_digest(given, candidate)
        return matched

    def authorize(self, headers: Iterable[tuple[str, str]]) -> None:
        """Gateway mode only: the client must present one of the configured client keys (else 401)."""
        if self.upstream_key is not None and not self._client_allowed(presented_key(headers)):
            raise Unauthorized(
                "Missing or unknown client key: send 'Authorization: Bearer <key>' with one of the keys "
                "this gateway issued.",
            )

    def upstream_headers(self, headers: Iterable[tuple[str, str]], base_url: str) -> list[tuple[str, str]]:
        """The client's headers with the upstream credentials this mode calls for."""
        pairs = list(headers)
        if self.upstream_key is None:
            return pairs  # BYOK: the client's Authorization goes upstream untouched
        kept = [(n, v) for n, v in pairs if n.lower() not in AUTH_HEADERS]
        if ".openai.azure.com" in base_url:
            kept.append(("api-key", self.upstream_key))
        else:
            kept.append(("authorization", f"Bearer {self.upstream_key}"))
        return kept
