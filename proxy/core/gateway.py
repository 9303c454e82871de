"""Who pays upstream: bring-your-own-key by default, or gateway mode with the proxy's own keys.

Gateway mode is on when `THINKPROXY_CLIENT_KEYS` is set: a client must present one of those keys,
compared in constant time and never echoed anywhere. A key may carry a name (`alice:ck-…`); the name,
never the key, is what the access log shows. The client's own credentials never go upstream in
gateway mode; what goes instead depends on where the request goes:

- the configured upstream (`THINKPROXY_UPSTREAM_BASE_URL`) gets `THINKPROXY_UPSTREAM_API_KEY`;
- a route of the routes file gets the key in the variable its `api_key_env` names (or none);
- a client-chosen upstream (`X-Upstream-Base-URL`) is refused: an operator's key must never follow
  a destination the client picked. An upstream that needs the gateway's key is given a route.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from proxy.core.config.routing import Destination
from proxy.core.errors import ConfigError, Forbidden, Unauthorized

# Every request header that carries a client's credential, in any provider's or browser's form.
# In gateway mode none of them reaches an upstream (chat, pass-through and model listings alike):
# the operator's key is the only credential sent. Proxy-Authorization is for a hop, never an end.
CREDENTIAL_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "api-key",  # Azure OpenAI
        "x-api-key",  # Anthropic and others
        "x-goog-api-key",  # Gemini
        "cookie",
    }
)
# `name:key`; a key that itself contains ':' must therefore be given a name.
_NAMED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63}):(.*)$", re.DOTALL)


class Secret(Protocol):
    """A configured secret (pydantic's SecretStr): its value is read only where it is needed."""

    def get_secret_value(self) -> str: ...


class KeySettings(Protocol):
    """The key settings this module reads, as a protocol: the process settings object fits it, and
    the edge passes it in (the core never imports the settings module, which reads the
    environment). Read-only properties, so that a `list[SecretStr]` fits a `Sequence[Secret]`."""

    @property
    def upstream_api_key(self) -> Secret | None: ...
    @property
    def client_keys(self) -> Sequence[Secret]: ...
    @property
    def reviewer_keys(self) -> Sequence[Secret]: ...
    @property
    def admin_keys(self) -> Sequence[Secret]: ...


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
class ClientKey:
    name: str | None
    key: bytes = field(repr=False)


def parse_client_keys(items: Iterable[str], setting: str = "THINKPROXY_CLIENT_KEYS") -> tuple[ClientKey, ...]:
    """`alice:ck-1` → named key, `ck-2` → unnamed; names must be unique (they label metrics)."""
    keys: list[ClientKey] = []
    names: set[str] = set()
    for item in items:
        text = item.strip()
        found = _NAMED.match(text)
        name, key = (found.group(1), found.group(2).strip()) if found else (None, text)
        if not key:
            raise ConfigError(f"{setting}: the key named {name!r} is empty")
        if name is not None:
            if name in names:
                raise ConfigError(f"{setting}: the name {name!r} is used twice")
            names.add(name)
        keys.append(ClientKey(name, key.encode()))
    return tuple(keys)


def check_key_roles(settings: KeySettings) -> None:
    """ConfigError when one key is given two roles: a client key that is also a reviewer key could
    approve its own held tool calls, one that is also an admin key could read every tenant's
    requests. The keys are compared, never printed; the variables are named."""
    holders: dict[bytes, str] = {}
    clashes: list[str] = []
    # Read through the protocol's attributes (not getattr by name) so mypy checks each one.
    roles: tuple[tuple[Sequence[Secret], str], ...] = (
        (settings.client_keys, "THINKPROXY_CLIENT_KEYS"),
        (settings.reviewer_keys, "THINKPROXY_REVIEWER_KEYS"),
        (settings.admin_keys, "THINKPROXY_ADMIN_KEYS"),
    )
    for values, variable in roles:
        for key in parse_client_keys((k.get_secret_value() for k in values), variable):
            other = holders.setdefault(key.key, variable)
            if other != variable:
                shown = f"the key named {key.name!r}" if key.name else "a key"
                clashes.append(f"{shown} is in both {other} and {variable}")
    if clashes:
        raise ConfigError(
            "one key in two roles: "
            + "; ".join(sorted(set(clashes)))
            + ". A client could then act as a reviewer or an admin; give each role its own keys."
        )


def find_key(key: str | None, keys: Iterable[ClientKey]) -> ClientKey | None:
    """The configured key `key` is, if any."""
    if key is None:
        return None
    given = key.encode()
    # Compare against every key so the time taken does not reveal which one nearly matched.
    found: ClientKey | None = None
    for candidate in keys:
        if hmac.compare_digest(given, candidate.key) and found is None:
            found = candidate
    return found


@dataclass(frozen=True, slots=True)
class GatewayAuth:
    upstream_key: str | None
    client_keys: tuple[ClientKey, ...]
    route_keys: Mapping[int, str] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: KeySettings, route_keys: Mapping[int, str] | None = None) -> GatewayAuth:
        key = settings.upstream_api_key.get_secret_value() if settings.upstream_api_key else None
        clients = parse_client_keys(k.get_secret_value() for k in settings.client_keys)
        check_key_roles(settings)
        if key and not clients:
            raise ConfigError(
                "THINKPROXY_UPSTREAM_API_KEY is set but THINKPROXY_CLIENT_KEYS is empty: the proxy would "
                "spend its key for anyone. Set THINKPROXY_CLIENT_KEYS (comma-separated)."
            )
        return cls(key, clients, dict(route_keys or {}))

    @property
    def enabled(self) -> bool:
        """Gateway mode: clients present the gateway's keys, the proxy sends its own upstream."""
        return bool(self.client_keys)

    def _client(self, key: str | None) -> ClientKey | None:
        return find_key(key, self.client_keys)

    def authorize(self, headers: Iterable[tuple[str, str]]) -> str | None:
        """Gateway mode only: the client must present one of the configured client keys (else 401).
        Returns the key's name (None for an unnamed key, and in BYOK mode)."""
        if not self.enabled:
            return None
        client = self._client(presented_key(headers))
        if client is None:
            raise Unauthorized(
                "Missing or unknown client key: send 'Authorization: Bearer <key>' with one of the keys "
                "this gateway issued.",
            )
        return client.name

    def session_scope(self, headers: Iterable[tuple[str, str]]) -> str | None:
        """Gateway mode: whose sessions a request counts in (None in BYOK mode). A named key's
        name; an unnamed key's place in THINKPROXY_CLIENT_KEYS (`_2`), so two unnamed keys never
        share a session; `_refused` for a key this gateway did not issue. A name starts with a
        letter or digit, so none of these labels equals a name; none tells anything of a key, and
        each is safe in a URL path and a Redis key."""
        if not self.enabled:
            return None
        client = self._client(presented_key(headers))
        if client is None:
            return "_refused"
        if client.name is not None:
            return client.name
        return f"_{self.client_keys.index(client) + 1}"

    def check_client_upstream(self) -> None:
        """Gateway mode refuses a client-chosen upstream (X-Upstream-Base-URL), allow-listed or not:
        the gateway's keys go only where the operator configured them."""
        if self.enabled:
            raise Forbidden(
                "X-Upstream-Base-URL is not accepted by this gateway: it sends its own keys only to the "
                "upstreams its operator configured. Drop the header (the model picks the route), or ask "
                "the operator to add a route for that upstream.",
                param="X-Upstream-Base-URL",
            )

    def key_for(self, destination: Destination) -> str | None:
        """The key this gateway sends to `destination` (None: none at all)."""
        if not self.enabled or destination.client_chosen:
            return None
        if destination.route is not None and not destination.route.implicit:
            return self.route_keys.get(destination.route.index)
        return self.upstream_key

    def upstream_headers(
        self, headers: Iterable[tuple[str, str]], destination: Destination
    ) -> list[tuple[str, str]]:
        """The client's headers with the upstream credentials this mode calls for."""
        pairs = list(headers)
        if not self.enabled:
            return pairs  # BYOK: the client's Authorization goes upstream untouched
        kept = [(n, v) for n, v in pairs if n.lower() not in CREDENTIAL_HEADERS]
        key = self.key_for(destination)
        if key is None:
            return kept
        if ".openai.azure.com" in destination.base_url:
            kept.append(("api-key", key))
        else:
            kept.append(("authorization", f"Bearer {key}"))
        return kept
