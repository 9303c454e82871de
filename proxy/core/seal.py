"""Sealed blobs: the proxy's own opaque state in a client's hands (DESIGN.md, "Sealed blobs").

A Responses reasoning item's `encrypted_content`, a Responses compaction item's `encrypted_content`
and an Anthropic thinking block's `signature` carry what the next turn needs (the reasoning text,
`reasoning_details` / thought signatures, the model, the tool-call ids it preceded) without server
state. Clients echo them back unchanged; nobody but this deployment can read or forge them.

Format: `tp1.` + URL-safe base64 without padding of `nonce (12) || ciphertext || tag (16)`,
ChaCha20-Poly1305 (RFC 8439) with a random nonce per blob. The plaintext is one form byte and its
body: `i` + the payload (a JSON object, raw-deflate compressed), or `r` + a state-store key (the
reference form, for payloads over the inline cap). The key is HKDF-SHA256 of the deployment secret
(THINKPROXY_STATE_SECRET) with the fixed label `INFO`; old secrets open, only the first seals.
The tenant hash in the binding is keyed with the deployment secret too, so after a rotation a blob
sealed with an old secret is bound to the hash that secret made: `SealKeys.for_tenants` pairs each
old key with it for one request's opening (proxy.server.tenancy).

Bound to its context: the associated data is the version, the kind, the tenant hash, the upstream
entry (provider name and base URL) and the ids the blob belongs to (a set: order and repeats do
not matter), each length-prefixed so no two contexts encode alike. A blob from another tenant,
deployment, upstream, kind or item fails its tag: `open_blob` answers None, as it does for
anything else that is not a well-formed blob of ours (foreign, truncated, re-encoded, tampered,
too large). It never raises for a bad blob: the caller counts it as missing and its miss policy
applies. Real providers' blobs (OpenAI `encrypted_content`, Anthropic `signature`) never start
with `tp1.`: `is_ours` tells them apart, so the edge hands a foreign blob only to the provider
that made it.

Size: a payload whose compressed size passes `INLINE_CAP` (48 KiB; or whose JSON passes
`RAW_CAP`, 1 MiB) is not sealed inline: `seal` answers `TooLarge` and the caller stores the
payload and seals its key with `seal_reference`. Blobs are thus at most `MAX_BLOB_CHARS`
(65,579) characters, and `open_blob` refuses longer text before any work. The fixed overhead is
4 (prefix) + base64 of 29 bytes (nonce, form byte, tag) = 43 characters. Measured
(tests/core/test_seal.py::test_typical_blob_sizes): a reference blob (a 61-character store key)
124 characters; a short turn (180 characters of reasoning, model, one tool-call id, created) 326;
a typical one (1.6 KB of English reasoning, two tool-call ids) 1,355; the same with a 400-byte
provider signature in `details` (incompressible) 1,974.

Never logged: `Blob`'s repr (and str) hide the text, `Inline`'s hides the payload's values and
`SealKeys`' the keys. Pure: no I/O, no settings, no clock (the caller puts the creation time in the
payload); the one outside input is the random nonce (`secrets.token_bytes`).
"""

from __future__ import annotations

import base64
import binascii
import secrets
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypedDict

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PREFIX: Final = "tp1."
INFO: Final = b"thinkproxy sealed blob v1 (chacha20-poly1305)"
NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16
# Compressed payload bytes carried inline. A whole blob then stays within ~64 KiB of text, well inside
# what clients store per item and what request-size limits allow for a history of several turns.
INLINE_CAP: Final = 48 * 1024
# Uncompressed JSON bytes carried inline: also the bound when decompressing, so no blob, even one
# sealed by a peer with a leaked secret, makes the proxy inflate more than this.
RAW_CAP: Final = 1024 * 1024
# A state-store key in the reference form (store keys are ~60 characters).
MAX_KEY_CHARS: Final = 1024


# Raw deflate at level 6 with a window just large enough for the payload (up to the full 32 KiB),
# and a hash table to match. For prose (what reasoning is) the blobs are within 1% of level 9's with
# the full window (a text of a ten-word vocabulary: up to 8% larger); level 9 costs 20-40% more on
# long reasoning (16-64 KB), and a full-size compressor's ~256 KiB of state for a 1 KB text is what
# made sealing one cost ~110 µs instead of ~11-20 µs in a process whose allocator hands that state
# back to the system after each blob (bench/README, "The front doors, fifth pass"). Opening
# inflates with the full window, so blobs sealed with any window, these and earlier ones, open alike.
def _deflate_params(size: int) -> tuple[int, int, int, int]:
    window_bits = min(15, max(9, size.bit_length()))
    return 6, zlib.DEFLATED, -window_bits, window_bits - 7  # (memLevel 2..8: a hash table to match)


# A length in the associated data: 4 bytes, big-endian.
_LENGTH: Final = struct.Struct(">I").pack
_INLINE: Final = b"i"
_REFERENCE: Final = b"r"
_MIN_BYTES: Final = NONCE_BYTES + 1 + TAG_BYTES
MAX_BLOB_CHARS: Final = len(PREFIX) + (4 * (NONCE_BYTES + 1 + INLINE_CAP + TAG_BYTES) + 2) // 3

Kind = Literal["responses.reasoning", "anthropic.thinking", "responses.compaction"]
KINDS: Final[tuple[Kind, ...]] = ("responses.reasoning", "anthropic.thinking", "responses.compaction")


class Payload(TypedDict, total=False):
    """The payload's usual fields (any JSON object seals; these are what the front doors put in)."""

    reasoning: str  # the reasoning text, as the upstream gave it
    details: list[Any]  # reasoning_details / thought signatures, verbatim
    model: str
    tool_call_ids: list[str]  # the tool calls this reasoning preceded
    created: int  # unix seconds, from the caller's clock
    summary: list[Any]  # a compaction's summary items


# --------------------------------------------------------------------------------------------------
# Keys and bindings
# --------------------------------------------------------------------------------------------------


def derive_key(secret: bytes) -> bytes:
    """The 32-byte AEAD key of a deployment secret (HKDF-SHA256, no salt, info `INFO`)."""
    if not secret:
        raise ValueError("the deployment secret is empty")
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=INFO).derive(secret)


class SealKeys:
    """The keys of one deployment: the first seals, every one opens (rotation: put the new secret
    first and keep the old ones until blobs sealed with them have aged out of clients' histories).
    Derive once at start-up; sealing and opening reuse the cipher objects.

    A blob's binding holds the tenant hash, which is keyed with the deployment secret too
    (proxy.core.replay.keys.tenant_of): a blob sealed before a rotation is bound to the hash its
    own secret made of the client's key. `for_tenants` pairs each earlier key with that hash, per
    request; without it every key opens with the binding's tenant (the current hash)."""

    __slots__ = ("_ciphers", "_given", "_kept", "_tenants")

    def __init__(self, secret: bytes, old_secrets: Iterable[bytes] = ()) -> None:
        keys: list[bytes] = []
        kept: list[int] = []  # for each key, the position of its secret among those given
        given = 0
        for position, one in enumerate((secret, *old_secrets)):
            given += 1
            key = derive_key(one)
            if key not in keys:
                keys.append(key)
                kept.append(position)
        self._ciphers = tuple(ChaCha20Poly1305(key) for key in keys)
        self._given = given - 1  # the number of old secrets given
        self._kept = tuple(kept)
        self._tenants: tuple[str | None, ...] = (None,) * len(keys)

    def for_tenants(self, old_tenants: Sequence[str]) -> SealKeys:
        """These keys for one request: `old_tenants[i]` is the tenant hash the i-th old secret
        given to the constructor makes of the request's client key (`Tenants.old`). Each earlier key
        then opens blobs bound to its own hash; the sealing key keeps the binding's tenant."""
        if len(old_tenants) != self._given:
            raise ValueError(f"{self._given} earlier secret(s): as many tenant hashes, in their order")
        if len(self._ciphers) == 1:
            return self  # (no earlier key: nothing to pair)
        out = SealKeys.__new__(SealKeys)
        out._ciphers, out._given, out._kept = self._ciphers, self._given, self._kept
        out._tenants = (None, *(old_tenants[position - 1] for position in self._kept[1:]))
        return out

    @property
    def sealing(self) -> ChaCha20Poly1305:
        return self._ciphers[0]

    @property
    def opening(self) -> tuple[ChaCha20Poly1305, ...]:
        return self._ciphers

    @property
    def tenants(self) -> tuple[str | None, ...]:
        """Per opening key, the tenant hash its blobs are bound to (None: the binding's own)."""
        return self._tenants

    def __repr__(self) -> str:
        return f"SealKeys(<{len(self._ciphers)} key(s) hidden>)"


@dataclass(frozen=True, slots=True)
class Binding:
    """What a blob belongs to; opening needs the same binding it was sealed with.

    `tenant`: the tenant hash (proxy.core.replay.keys.tenant_of). `provider`, `base_url`: the
    upstream entry that produced the reasoning. `kind`: one of `KINDS`. `ids`: the item id
    (Responses) and/or the tool-use ids (Anthropic) the blob belongs to, as a set."""

    tenant: str
    provider: str
    base_url: str
    kind: Kind
    ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown blob kind {self.kind!r}")

    def associated_data(self) -> bytes:
        ids = sorted(set(self.ids)) if self.ids else []
        parts = [_LENGTH(len(ids))]
        for text in (PREFIX, self.kind, self.tenant, self.provider, self.base_url, *ids):
            raw = text.encode("utf-8", "surrogatepass")
            parts.append(_LENGTH(len(raw)))
            parts.append(raw)
        return b"".join(parts)  # (one join: a bytearray grown field by field and copied cost twice)


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, repr=False)
class Blob:
    """A sealed blob. Put `.text` where the client expects it; the repr and str hide it."""

    text: str

    def __repr__(self) -> str:
        return f"Blob(<sealed, {len(self.text)} chars>)"


@dataclass(frozen=True, slots=True, repr=False)
class TooLarge:
    """`seal`'s answer for a payload over the inline caps: store `data` (the payload's JSON) in the
    state store under a key of the caller's and seal that key with `seal_reference`."""

    data: bytes
    size: int  # the compressed size (0 when the JSON alone passed RAW_CAP)
    cap: int

    def __repr__(self) -> str:
        return f"TooLarge(json={len(self.data)} bytes, compressed={self.size}, cap={self.cap})"


@dataclass(frozen=True, slots=True, repr=False)
class Inline:
    """An opened blob that carried its payload."""

    payload: dict[str, Any]

    def __repr__(self) -> str:
        return f"Inline(<payload hidden, keys {sorted(self.payload)}>)"


@dataclass(frozen=True, slots=True)
class Reference:
    """An opened blob that carried a state-store key: the payload is in the store (or has expired:
    then it is a miss like any other)."""

    key: str


Opened = Inline | Reference


# --------------------------------------------------------------------------------------------------
# Sealing and opening
# --------------------------------------------------------------------------------------------------


def is_ours(text: object) -> bool:
    """Whether `text` claims to be one of the proxy's blobs (by its prefix: neither OpenAI's
    `encrypted_content` nor Anthropic's `signature` starts with `tp1.`). Claims only: a blob of
    ours that does not open is still ours, and is dropped, never passed upstream."""
    return isinstance(text, str) and text.startswith(PREFIX)


def seal(
    keys: SealKeys, binding: Binding, payload: Mapping[str, Any], *, nonce: bytes | None = None
) -> Blob | TooLarge:
    """Seal `payload` (a JSON-serializable object; orjson raises TypeError otherwise) inline, or
    answer `TooLarge` when it passes a cap. `nonce` is for tests only: leave it to the default."""
    data = orjson.dumps(payload)
    if len(data) > RAW_CAP:
        return TooLarge(data, 0, RAW_CAP)
    packer = zlib.compressobj(*_deflate_params(len(data)))
    compressed = packer.compress(data) + packer.flush()
    if len(compressed) > INLINE_CAP:
        return TooLarge(data, len(compressed), INLINE_CAP)
    return _seal(keys, binding, _INLINE + compressed, nonce)


def seal_reference(keys: SealKeys, binding: Binding, key: str, *, nonce: bytes | None = None) -> Blob:
    """Seal a state-store key (the reference form), bound like an inline blob."""
    if not key or len(key) > MAX_KEY_CHARS:
        raise ValueError(f"a store key is 1 to {MAX_KEY_CHARS} characters")
    return _seal(keys, binding, _REFERENCE + key.encode(), nonce)


def _seal(keys: SealKeys, binding: Binding, plaintext: bytes, nonce: bytes | None) -> Blob:
    if nonce is None:
        nonce = secrets.token_bytes(NONCE_BYTES)
    elif len(nonce) != NONCE_BYTES:
        raise ValueError(f"a nonce is {NONCE_BYTES} bytes")
    sealed = nonce + keys.sealing.encrypt(nonce, plaintext, binding.associated_data())
    return Blob(PREFIX + base64.urlsafe_b64encode(sealed).rstrip(b"=").decode("ascii"))


def open_blob(keys: SealKeys, binding: Binding, text: object) -> Opened | None:
    """The payload (or store key) of a blob sealed by these keys for this binding; None for
    anything else, whatever it is. Never raises."""
    raw = _decode(text)
    if raw is None:
        return None
    nonce, sealed = raw[:NONCE_BYTES], raw[NONCE_BYTES:]
    aad = binding.associated_data()
    for cipher, tenant in zip(keys.opening, keys.tenants, strict=True):
        data = aad if tenant is None or tenant == binding.tenant else _with_tenant(binding, tenant)
        try:
            plaintext = cipher.decrypt(nonce, sealed, data)
        except InvalidTag:
            continue
        return _parse(plaintext)
    return None


def _with_tenant(binding: Binding, tenant: str) -> bytes:
    return Binding(tenant, binding.provider, binding.base_url, binding.kind, binding.ids).associated_data()


def _decode(text: object) -> bytes | None:
    """The bytes of a well-formed blob text: our prefix, within the size bound, canonical unpadded
    URL-safe base64 (re-encoding gives the same text, so no two texts open as the same blob)."""
    if not isinstance(text, str) or not text.startswith(PREFIX) or len(text) > MAX_BLOB_CHARS:
        return None
    body = text[len(PREFIX) :]
    if not body.isascii() or len(body) % 4 == 1:
        return None
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        return None
    if len(raw) < _MIN_BYTES or base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != body:
        return None
    return raw


def _parse(plaintext: bytes) -> Opened | None:
    # Authenticated, so written by this deployment; still checked, so a bug or a leaked secret
    # cannot make opening raise or inflate without bound.
    form, body = plaintext[:1], plaintext[1:]
    try:
        if form == _REFERENCE:
            key = body.decode("utf-8")
            return Reference(key) if 0 < len(key) <= MAX_KEY_CHARS else None
        if form != _INLINE:
            return None
        unpacker = zlib.decompressobj(-15)
        data = unpacker.decompress(body, RAW_CAP + 1)
        if len(data) > RAW_CAP or not unpacker.eof or unpacker.unconsumed_tail or unpacker.unused_data:
            return None
        payload = orjson.loads(data)
    except (ValueError, zlib.error):  # UnicodeDecodeError and orjson.JSONDecodeError are ValueErrors
        return None
    return Inline(payload) if isinstance(payload, dict) else None
