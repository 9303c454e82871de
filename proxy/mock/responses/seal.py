"""What the simulated Responses API issues and must recognise later: ids and sealed reasoning.

Pure. A stateless client (`store: false`) keeps a reasoning model's thinking across turns only by
sending back the reasoning item's `encrypted_content`. The mock's blob looks like OpenAI's (a
Fernet token: base64url of a 0x80 version byte and an 8-byte timestamp, so it starts `gAAAAA`)
but is signed, not encrypted: an HMAC-SHA256 over the JSON it carries (the reasoning item's id and
text). `unseal` returns that payload only for a blob this mock issued, so a forged, cut or foreign
blob (the proxy's own seal included) is told apart from a real one, and the id inside tells which
reasoning item came back. The key is fixed: a restarted mock still accepts its earlier blobs, as
OpenAI accepts an organisation's blobs across requests.

Ids follow OpenAI's layout, e.g. `rs_07b27acff2b3b348` `00697bc10b` `56608195bfcb7755c43d483c`:
the prefix, 16 hex digits shared by every item of one response, `00` and the creation time in 8
hex digits, then 24 random hex digits. Call ids are `call_` and 24 letters and digits.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import uuid
from dataclasses import dataclass

import orjson

_KEY = b"thinkproxy simulated upstream: reasoning seal v1"
_VERSION = b"\x80"
_HEAD = len(_VERSION) + 8  # version byte + timestamp
_MAC_BYTES = hashlib.sha256().digest_size
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class Sealed:
    """What a blob the mock issued carries: the reasoning item it belongs to, and its text."""

    id: str
    text: str


def seal(item_id: str, text: str, created: int) -> str:
    """The `encrypted_content` of a reasoning item."""
    body = _VERSION + struct.pack(">Q", created) + orjson.dumps({"id": item_id, "text": text})
    return base64.urlsafe_b64encode(body + _mac(body)).decode()


def unseal(blob: object) -> Sealed | None:
    """The payload of a blob this mock issued; None for anything else."""
    if not isinstance(blob, str):
        return None
    try:
        raw = base64.urlsafe_b64decode(blob.encode("ascii"))
    except ValueError:  # not ASCII, or bad padding (binascii.Error is a ValueError)
        return None
    body, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
    if len(body) <= _HEAD or not body.startswith(_VERSION) or not hmac.compare_digest(mac, _mac(body)):
        return None
    payload = orjson.loads(body[_HEAD:])  # signed by us, so it is the JSON we wrote
    return Sealed(id=payload["id"], text=payload["text"])


def shown(blob: str) -> str:
    """A blob as OpenAI names it in an error message: `gAAA...DQ==`."""
    return f"{blob[:4]}...{blob[-4:]}"


def _mac(body: bytes) -> bytes:
    return hmac.new(_KEY, body, hashlib.sha256).digest()


class Ids:
    """The ids of one response: every item id shares the response's stem and creation time."""

    def __init__(self, created: int) -> None:
        self.created = created
        self.stem = uuid.uuid4().hex[:16]

    def new(self, prefix: str) -> str:
        """`resp`, `rs`, `msg`, `fc` or `ctc`, then the shared part and a random tail."""
        return f"{prefix}_{self.stem}00{self.created:08x}{uuid.uuid4().hex[:24]}"


def call_id() -> str:
    """A tool call's `call_id`, as OpenAI's look: `call_` and 24 letters and digits."""
    number = uuid.uuid4().int << 64 | uuid.uuid4().int
    out = []
    for _ in range(24):
        number, digit = divmod(number, len(_ALNUM))
        out.append(_ALNUM[digit])
    return "call_" + "".join(out)
