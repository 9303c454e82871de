"""Whom a request belongs to, before and after a rotation of THINKPROXY_STATE_SECRET (DESIGN.md,
"Sealed blobs": rotation is real).

A tenant is a keyed hash of the key a client presented (proxy.core.replay.keys.tenant_of), keyed
with the deployment secret; it names every store key of the client's state (replay entries,
stored responses and their items, spilled reasoning payloads) and is bound into every blob sealed
for it. After a rotation the same client has another hash, so what the old secret left is found
under the hash the old secret makes: `Secrets.tenants` computes both, `get_rotated` looks a
client's entries up under the current hash and then, for what is missing, under each earlier one,
and `DoorSecrets.seal_context` gives each earlier key its own hash for opening. New state is
always written under the current hash and sealed with the current key. Once an old secret is
removed from THINKPROXY_STATE_OLD_SECRETS, what it left is a miss like any other.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from proxy.core import seal
from proxy.core.gateway import presented_key
from proxy.core.protocols.sealing import SealContext
from proxy.core.replay.keys import Secrets, Tenants
from proxy.settings import Settings
from proxy.state.base import StateStore


def deployment_secret(settings: Settings) -> bytes:
    """The key of the tenant hash. THINKPROXY_STATE_SECRET when set; else, with Redis, derived from
    the state URL (every replica of a deployment names the same one, so they agree); else random
    per process (memory is per process anyway)."""
    if settings.state_secret is not None:
        return settings.state_secret.get_secret_value().encode()
    if settings.state_url is not None:
        url = settings.state_url.get_secret_value().encode()
        return hashlib.sha256(b"thinkproxy-tenant\0" + url).digest()
    return secrets.token_bytes(32)


def deployment_secrets(settings: Settings) -> Secrets:
    """`deployment_secret` and the earlier secrets THINKPROXY_STATE_OLD_SECRETS lists
    (comma-separated, spaces around each ignored)."""
    old = settings.state_old_secrets
    listed = old.get_secret_value().split(",") if old is not None else []
    return Secrets(deployment_secret(settings), tuple(one.strip().encode() for one in listed if one.strip()))


async def get_rotated(
    store: StateStore, tenants: Tenants, keys_of: Callable[[str], Sequence[str]]
) -> list[bytes | None]:
    """The values stored for one client: `keys_of(tenant)` names the same entries under each of
    its tenant hashes, in the same order. Asked under the current hash; what is missing there is
    asked under each earlier secret's in turn, so a lookup costs one more round trip per earlier
    secret only while something is missing. Raises what the store raises."""
    values = list(await store.get_many(keys_of(tenants.current)))
    for tenant in tenants.earlier:
        missing = [index for index, value in enumerate(values) if value is None]
        if not missing:
            break
        older = keys_of(tenant)
        found = await store.get_many([older[index] for index in missing])
        for index, value in zip(missing, found, strict=True):
            if value is not None:
                values[index] = value
    return values


def every_key(tenants: Tenants, key_of: Callable[[str], str]) -> list[str]:
    """One entry's key under each of the client's hashes (to delete it wherever it was kept)."""
    return [key_of(tenant) for tenant in tenants.every]


@dataclass(frozen=True, slots=True)
class DoorSecrets:
    """A front door's secrets: the tenant hashes of each request and the keys its blobs are sealed
    and opened with. One per door, built at start-up; the same secrets as the replay store's."""

    secrets: Secrets
    keys: seal.SealKeys

    @classmethod
    def of(cls, settings: Settings, replay_secrets: Secrets | None) -> DoorSecrets:
        """The replay store's secrets when it is on (its random per-process secret included), else
        the settings' own."""
        chosen = replay_secrets if replay_secrets is not None else deployment_secrets(settings)
        return cls(chosen, seal.SealKeys(chosen.current, chosen.old))

    def tenants(self, headers: Iterable[tuple[str, str]]) -> Tenants:
        return self.secrets.tenants(presented_key(headers))

    def seal_context(
        self, tenants: Tenants, provider: str, base_url: str, created: int, model: str | None = None
    ) -> SealContext:
        """What this request's blobs are bound to: new ones to the current hash; those sealed
        before a rotation open with the earlier key and the hash it made. `model`: the model the
        request names (signed reasoning restored only for the model it came from)."""
        keys = self.keys.for_tenants(tenants.old)
        return SealContext(keys, tenants.current, provider, base_url, created, model)
