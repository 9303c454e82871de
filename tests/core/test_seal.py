"""Sealed blobs (pure): round trips in both forms, every binding, rotation, tampering, truncation,
the size caps, foreign blobs and a repr that hides the blob."""

from __future__ import annotations

import ast
import base64
import functools
import random
import string
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proxy
from proxy.core.replay.keys import tenant_of
from proxy.core.seal import (
    INLINE_CAP,
    KINDS,
    MAX_BLOB_CHARS,
    MAX_KEY_CHARS,
    PREFIX,
    RAW_CAP,
    Binding,
    Blob,
    Inline,
    Reference,
    SealKeys,
    TooLarge,
    _seal,
    is_ours,
    open_blob,
    seal,
    seal_reference,
)

SECRET = b"deployment secret A, 32 bytes.."
KEYS = SealKeys(SECRET)
BINDING = Binding(
    tenant="3f2a9c0d1e4b5a6978877665544332211",
    provider="deepseek",
    base_url="https://api.deepseek.com/v1",
    kind="responses.reasoning",
    ids=("rs_68af0c1e2d3b4a59",),
)
PAYLOAD: dict[str, Any] = {
    "reasoning": "The user wants the weather in Paris; I should call get_weather with city=Paris.",
    "details": [{"type": "reasoning.text", "text": "…", "signature": None}],
    "model": "deepseek-v4-pro",
    "tool_call_ids": ["call_0_8f1d2c3b"],
    "created": 1767225600,
}


def sealed(payload: dict[str, Any] = PAYLOAD, binding: Binding = BINDING, keys: SealKeys = KEYS) -> str:
    blob = seal(keys, binding, payload)
    assert isinstance(blob, Blob)
    return blob.text


BLOB = sealed()


# --------------------------------------------------------------------------------------------------
# Round trips and format
# --------------------------------------------------------------------------------------------------


def test_an_inline_blob_opens_to_its_payload() -> None:
    assert open_blob(KEYS, BINDING, BLOB) == Inline(PAYLOAD)


def test_a_reference_blob_opens_to_its_store_key() -> None:
    blob = seal_reference(KEYS, BINDING, "thinkproxy:responses:0123abcd")
    assert open_blob(KEYS, BINDING, blob.text) == Reference("thinkproxy:responses:0123abcd")


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_round_trips(kind: Any) -> None:
    binding = replace(BINDING, kind=kind)
    assert open_blob(KEYS, binding, sealed(binding=binding)) == Inline(PAYLOAD)


def test_the_format_is_the_prefix_and_unpadded_url_safe_base64() -> None:
    assert BLOB.startswith(PREFIX)
    body = BLOB[len(PREFIX) :]
    assert set(body) <= set(string.ascii_letters + string.digits + "-_")
    assert "=" not in body


def test_every_blob_has_a_fresh_nonce() -> None:
    first, second = sealed(), sealed()
    assert first != second
    assert open_blob(KEYS, BINDING, first) == open_blob(KEYS, BINDING, second) == Inline(PAYLOAD)


def test_unicode_and_empty_payloads_round_trip() -> None:
    for payload in ({}, {"reasoning": "思考中… 🤔 \u2028", "details": [{"a": [1, 2.5, None, True]}]}):
        assert open_blob(KEYS, BINDING, sealed(payload)) == Inline(payload)


def test_a_blob_deflated_with_the_full_window_still_opens() -> None:
    """Blobs sealed by earlier versions (level 9, always the full 32 KiB window) still open, as do
    blobs sealed now with a smaller window: opening inflates with the full window whatever the
    sealer used. The payload's repeats lie farther apart than a small window reaches."""
    payload = {"reasoning": "".join(random.Random(5).choice("ab cd") for _ in range(20_000)) * 2}
    old = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = old.compress(orjson.dumps(payload)) + old.flush()
    assert open_blob(KEYS, BINDING, _seal(KEYS, BINDING, b"i" + body, None).text) == Inline(payload)
    assert open_blob(KEYS, BINDING, sealed(payload)) == Inline(payload)


@functools.cache
def _prose() -> str:
    """English prose, as reasoning is: the docstrings of the proxy's modules, each once."""
    root = Path(proxy.__file__).parent
    docs = (ast.get_docstring(ast.parse(path.read_text("utf-8"))) for path in sorted(root.rglob("*.py")))
    return "\n\n".join(doc for doc in docs if doc)


@pytest.mark.parametrize("size", [0, 1, 255, 256, 511, 512, 4095, 4096, 4097, 20_000, 70_000, 110_000])
def test_payloads_of_every_window_size_round_trip_as_small_as_level_9_makes_them(size: int) -> None:
    """The window is sized to the payload (seal._deflate_params): every size opens, and for prose
    the blob is within 1% of what level 9 with the full window makes of the same text."""
    text = _prose()[:size]
    assert len(text) == size
    payload = {"reasoning": text}
    result = seal(KEYS, BINDING, payload)
    assert not isinstance(result, TooLarge)
    assert open_blob(KEYS, BINDING, result.text) == Inline(payload)
    best = zlib.compressobj(9, zlib.DEFLATED, -15)
    smallest = len(best.compress(orjson.dumps(payload)) + best.flush())
    ours = (len(result.text) - len(_seal(KEYS, BINDING, b"i", None).text)) * 3 // 4
    assert ours <= smallest * 1.01 + 2, (ours, smallest)


# --------------------------------------------------------------------------------------------------
# Bindings: another tenant, deployment, upstream, kind or item does not open
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "other",
    [
        replace(BINDING, tenant="anonymous"),
        replace(BINDING, provider="moonshot"),
        replace(BINDING, base_url="https://api.deepseek.com/beta"),
        replace(BINDING, kind="anthropic.thinking"),
        replace(BINDING, kind="responses.compaction"),
        replace(BINDING, ids=("rs_other",)),
        replace(BINDING, ids=()),
        replace(BINDING, ids=(*BINDING.ids, "toolu_01")),
        # Length-prefixed fields: moving a boundary is another binding.
        replace(BINDING, provider="deepseekh", base_url="ttps://api.deepseek.com/v1"),
    ],
    ids=["tenant", "provider", "base_url", "kind", "kind2", "id", "no_id", "extra_id", "boundary"],
)
def test_a_blob_does_not_open_under_another_binding(other: Binding) -> None:
    assert open_blob(KEYS, other, BLOB) is None
    reference = seal_reference(KEYS, BINDING, "k").text
    assert open_blob(KEYS, other, reference) is None


def test_the_ids_are_a_set() -> None:
    binding = replace(BINDING, kind="anthropic.thinking", ids=("toolu_a", "toolu_b"))
    blob = sealed(binding=binding)
    assert open_blob(KEYS, replace(binding, ids=("toolu_b", "toolu_a", "toolu_a")), blob) == Inline(PAYLOAD)


def test_another_deployment_does_not_open_it() -> None:
    assert open_blob(SealKeys(b"deployment secret B"), BINDING, BLOB) is None


def test_rotation_old_secrets_open_only_the_first_seals() -> None:
    rotated = SealKeys(b"new secret", old_secrets=[b"older", SECRET])
    assert open_blob(rotated, BINDING, BLOB) == Inline(PAYLOAD)  # sealed before the rotation
    fresh = sealed(keys=rotated)
    assert open_blob(rotated, BINDING, fresh) == Inline(PAYLOAD)
    assert open_blob(SealKeys(b"new secret"), BINDING, fresh) == Inline(PAYLOAD)
    assert open_blob(KEYS, BINDING, fresh) is None  # the old secret did not seal it
    assert open_blob(SealKeys(b"new secret"), BINDING, BLOB) is None  # once retired, it is gone


def test_an_old_secret_opens_its_blobs_bound_to_its_own_tenant_hash() -> None:
    """The tenant hash is keyed with the deployment secret (replay_keys.tenant_of), so a blob sealed
    before a rotation is bound to the hash the old secret made: each key opens with its own."""
    client = "sk-client-1"
    before = replace(BINDING, tenant=tenant_of(SECRET, client))
    blob = sealed(binding=before)
    rotated = SealKeys(b"new secret", old_secrets=[b"older", SECRET])
    now = replace(BINDING, tenant=tenant_of(b"new secret", client))
    assert open_blob(rotated, now, blob) is None  # the current hash does not verify it
    per_request = rotated.for_tenants([tenant_of(b"older", client), tenant_of(SECRET, client)])
    assert open_blob(per_request, now, blob) == Inline(PAYLOAD)
    # Sealing is unchanged: the current key, bound to the current hash.
    fresh = sealed(binding=now, keys=per_request)
    assert open_blob(SealKeys(b"new secret"), now, fresh) == Inline(PAYLOAD)
    # Another client's hashes open nothing of this one's.
    other = rotated.for_tenants([tenant_of(b"older", "sk-2"), tenant_of(SECRET, "sk-2")])
    assert open_blob(other, replace(BINDING, tenant=tenant_of(b"new secret", "sk-2")), blob) is None
    # Each old key with its own hash only: the older secret's hash with this one's key does not open.
    swapped = rotated.for_tenants([tenant_of(SECRET, client), tenant_of(b"older", client)])
    assert open_blob(swapped, now, blob) is None
    with pytest.raises(ValueError, match="2 earlier secret"):
        rotated.for_tenants([tenant_of(SECRET, client)])


def test_tenants_follow_repeated_secrets() -> None:
    """A secret given twice (or the current one listed as old) is one key: the hashes stay aligned."""
    client = "sk-client-1"
    blob = sealed(binding=replace(BINDING, tenant=tenant_of(SECRET, client)))
    keys = SealKeys(b"new", old_secrets=[b"new", SECRET, SECRET])
    tenants = [tenant_of(b"new", client), tenant_of(SECRET, client), tenant_of(SECRET, client)]
    now = replace(BINDING, tenant=tenant_of(b"new", client))
    assert open_blob(keys.for_tenants(tenants), now, blob) == Inline(PAYLOAD)


def test_an_empty_secret_or_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        SealKeys(b"")
    with pytest.raises(ValueError):
        SealKeys(SECRET, old_secrets=[b""])
    with pytest.raises(ValueError):
        replace(BINDING, kind="chat.reasoning")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Bad blobs: None, never an exception
# --------------------------------------------------------------------------------------------------


@given(st.data())
@settings(max_examples=500, deadline=None)
def test_changing_any_single_character_fails(data: st.DataObject) -> None:
    position = data.draw(st.integers(0, len(BLOB) - 1), label="position")
    replacement = data.draw(st.characters(codec="latin-1").filter(lambda c: c != BLOB[position]))
    tampered = BLOB[:position] + replacement + BLOB[position + 1 :]
    assert open_blob(KEYS, BINDING, tampered) is None


def test_changing_any_character_to_any_base64_letter_fails() -> None:
    """Exhaustive over the alphabet: in particular the last character's unused bits (a non-canonical
    encoding of the same bytes) do not open."""
    alphabet = string.ascii_letters + string.digits + "-_"
    for position in range(len(BLOB)):
        for letter in alphabet:
            if letter != BLOB[position]:
                tampered = BLOB[:position] + letter + BLOB[position + 1 :]
                assert open_blob(KEYS, BINDING, tampered) is None, (position, letter)


@given(st.integers(0, 200), st.integers(0, 7))
@settings(max_examples=300, deadline=None)
def test_flipping_any_bit_of_the_sealed_bytes_fails(index: int, bit: int) -> None:
    raw = bytearray(base64.urlsafe_b64decode(BLOB[len(PREFIX) :] + "=" * (-len(BLOB) % 4)))
    raw[index % len(raw)] ^= 1 << bit
    text = PREFIX + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    assert open_blob(KEYS, BINDING, text) is None


def test_truncation_at_every_length_is_none() -> None:
    for blob in (BLOB, seal_reference(KEYS, BINDING, "k").text):
        for length in range(len(blob)):
            assert open_blob(KEYS, BINDING, blob[:length]) is None, length


def test_appending_anything_is_none() -> None:
    for tail in ("A", "AA", "=", "==", "\n", " ", "."):
        assert open_blob(KEYS, BINDING, BLOB + tail) is None


@pytest.mark.parametrize(
    "text",
    [
        None,
        42,
        b"tp1.AAAA",
        {"text": BLOB},
        "",
        "tp1.",
        "tp1.A",
        "tp1.AAAA",
        "tp1.!!!!" * 20,
        "tp1." + "é" * 60,
        "TP1." + BLOB[4:],
        "tp2." + BLOB[4:],
        BLOB[4:],
        "gAAAAABo" + "x" * 200,  # an OpenAI encrypted_content (a Fernet token)
        "EqQBCkgIARABGAIiQL" + "y" * 200,  # an Anthropic signature
        "tp1." + "A" * (MAX_BLOB_CHARS + 10),  # too large: refused before decoding
    ],
)
def test_anything_else_is_none(text: object) -> None:
    assert open_blob(KEYS, BINDING, text) is None


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_arbitrary_text_never_raises(text: str) -> None:
    assert open_blob(KEYS, BINDING, PREFIX + text) is None


@pytest.mark.parametrize(
    "plaintext",
    [
        b"",
        b"x" + b"anything",  # an unknown form
        b"i" + b"not deflate",
        b"i" + zlib.compress(b"{}"),  # zlib framing, not raw deflate
        b"i" + zlib.compress(b"{}")[2:-4] + b"trailing",
        b"i" + zlib.compress(b"{}")[2:-6],  # cut short
        b"i" + zlib.compress(b"[1, 2]")[2:-4],  # JSON but not an object
        b"i" + zlib.compress(b"{not json")[2:-4],
        b"r",  # an empty key
        b"r" + b"\xff\xfe",  # not UTF-8
        b"r" + b"k" * (MAX_KEY_CHARS + 1),
    ],
)
def test_a_well_sealed_but_malformed_plaintext_is_none(plaintext: bytes) -> None:
    """Authentic yet malformed (a bug, or a leaked secret): still None, never an exception."""
    assert open_blob(KEYS, BINDING, _seal(KEYS, BINDING, plaintext, None).text) is None


def test_a_sealed_decompression_bomb_is_refused() -> None:
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = bomb.compress(b'{"r":"' + b"a" * (RAW_CAP + 10) + b'"}') + bomb.flush()
    assert len(body) < INLINE_CAP
    assert open_blob(KEYS, BINDING, _seal(KEYS, BINDING, b"i" + body, None).text) is None


# --------------------------------------------------------------------------------------------------
# Size: the inline cap and the reference form
# --------------------------------------------------------------------------------------------------


def test_an_oversized_payload_gets_the_reference_form() -> None:
    noise = random.Random(7).randbytes(INLINE_CAP)
    payload = {"details": [{"signature": base64.b64encode(noise).decode()}]}
    result = seal(KEYS, BINDING, payload)
    assert isinstance(result, TooLarge)
    assert result.size > result.cap == INLINE_CAP
    assert orjson.loads(result.data) == payload  # what the caller stores
    blob = seal_reference(KEYS, BINDING, "thinkproxy:responses:abc")
    assert len(blob.text) < 120
    assert open_blob(KEYS, BINDING, blob.text) == Reference("thinkproxy:responses:abc")


def test_a_payload_over_the_raw_cap_gets_the_reference_form_however_well_it_compresses() -> None:
    result = seal(KEYS, BINDING, {"reasoning": "a" * RAW_CAP})
    assert isinstance(result, TooLarge)
    assert (result.size, result.cap) == (0, RAW_CAP)


def test_the_largest_inline_payload_opens_and_stays_under_the_blob_bound() -> None:
    rng = random.Random(11)
    # Incompressible text sized so that the compressed payload lands just under the cap.
    reasoning = "".join(rng.choice(string.ascii_letters) for _ in range(int(INLINE_CAP * 1.45)))
    payload = {"reasoning": reasoning}
    while isinstance(result := seal(KEYS, BINDING, payload), TooLarge):
        payload = {"reasoning": payload["reasoning"][:-64]}
    assert len(result.text) <= MAX_BLOB_CHARS
    assert len(result.text) > MAX_BLOB_CHARS - 1024
    assert open_blob(KEYS, BINDING, result.text) == Inline(payload)


def test_a_store_key_is_bounded() -> None:
    with pytest.raises(ValueError):
        seal_reference(KEYS, BINDING, "")
    with pytest.raises(ValueError):
        seal_reference(KEYS, BINDING, "k" * (MAX_KEY_CHARS + 1))
    with pytest.raises(ValueError):
        seal(KEYS, BINDING, PAYLOAD, nonce=b"short")


REASONING = (
    "The user is asking about the weather in Paris tomorrow and whether they should bring an umbrella "
    "for their walk along the Seine. I don't have live data, so I need to call get_weather with "
    "city=Paris and date set to tomorrow. The tool returns temperatures in Celsius by default, which "
    "suits a European user, but they wrote 'degrees' without a unit, so I should keep Celsius and "
    "maybe mention Fahrenheit in passing. After that, the forecast probably includes a precipitation "
    "probability; if it is above roughly 40%, recommending an umbrella makes sense, otherwise a light "
    "jacket should do. I also noticed they mentioned a museum visit in the afternoon: the Orsay is "
    "closed on Mondays, and tomorrow is Monday, so it is worth flagging before they plan around it. "
    "Should I call a second tool for opening hours? There is get_place_details, which takes a place "
    "name and returns hours, address and a rating. Calling both in parallel saves a round trip, and the "
    "answers are independent, so parallel tool calls are fine here. Let me double-check the arguments: "
    "get_weather(city: string, date: ISO 8601 string, units: 'metric' | 'imperial'), and "
    "get_place_details(name: string, city: string). Tomorrow's date: today is 2026-01-04, a Sunday, so "
    "tomorrow is 2026-01-05. Units: metric. Once both results are back, I will summarize in two or three "
    "sentences: the temperature range, the rain chance with the umbrella advice, and a note about the "
    "museum's hours with an alternative such as the Louvre, which closes on Tuesdays instead. Keep it "
    "short; the user seems to be on a phone, judging by the brevity of their message and the typos."
)
assert 1600 <= len(REASONING) <= 1650


def test_typical_blob_sizes() -> None:
    """The sizes stated in proxy.core.seal's docstring."""
    short = {**PAYLOAD, "reasoning": REASONING[:180], "details": []}
    typical = {**PAYLOAD, "reasoning": REASONING, "tool_call_ids": ["call_0_8f1d2c3b", "call_1_a93e77d0"]}
    signature = base64.b64encode(random.Random(3).randbytes(400)).decode()
    signed = {**typical, "details": [{"type": "thinking", "signature": signature}]}
    sizes = {name: len(sealed(payload)) for name, payload in [("short", short), ("typical", typical)]}
    sizes["signed"] = len(sealed(signed))
    sizes["reference"] = len(seal_reference(KEYS, BINDING, "thinkproxy:responses:" + "0" * 40).text)
    # Measured: short 326, typical 1355, signed 1974, reference 124 characters.
    assert 300 <= sizes["short"] <= 360, sizes
    assert 1250 <= sizes["typical"] <= 1450, sizes
    assert 1850 <= sizes["signed"] <= 2100, sizes
    assert 115 <= sizes["reference"] <= 130, sizes
    assert len(_seal(KEYS, BINDING, b"i", None).text) == 43  # the fixed overhead
    assert MAX_BLOB_CHARS == 65_579


# --------------------------------------------------------------------------------------------------
# Foreign blobs and logging
# --------------------------------------------------------------------------------------------------


def test_is_ours_tells_our_blobs_from_the_providers() -> None:
    assert is_ours(BLOB)
    assert is_ours(seal_reference(KEYS, BINDING, "k").text)
    assert is_ours("tp1.garbage")  # ours by claim: it does not open, and is dropped, never passed on
    for foreign in ("gAAAAABo1x2y", "EqQBCkgIARABGAIiQL", "ErUBCkYIBRgCIkB", "", "tp1", "TP1.x", None, 1):
        assert not is_ours(foreign)


def test_no_repr_shows_the_blob_or_the_payload() -> None:
    blob = seal(KEYS, BINDING, PAYLOAD)
    assert isinstance(blob, Blob)
    body = blob.text[len(PREFIX) :]
    for shown in (repr(blob), str(blob), f"{blob}", repr([blob]), repr({"b": blob})):
        assert body[:8] not in shown and PREFIX not in shown
    opened = open_blob(KEYS, BINDING, blob.text)
    assert PAYLOAD["reasoning"] not in repr(opened)
    assert "reasoning" in repr(opened)  # the keys are shown, not their values
    assert "secret" not in repr(KEYS) and "2 key" in repr(SealKeys(SECRET, [b"old"]))
    too_large = seal(KEYS, BINDING, {"reasoning": "a" * RAW_CAP})
    assert "aaaa" not in repr(too_large)


# A blob sealed before associated_data was last rewritten (a fixed nonce): blobs already in
# clients' hands must keep opening, so the binding's bytes may never change.
KNOWN_BINDING = Binding(
    "t" * 8, "deepseek", "https://api.deepseek.com", "responses.reasoning", ("call_b", "call_é", "call_b")
)
KNOWN_BLOB = (
    "tp1.AQEBAQEBAQEBAQEByi_7mv7wPO6QMkZPbV6o3c7W1eadNjGO3iVPLNzTCiLMvV0IXNZA75odlANlgdUbabRTLZjaYgtaTi"
    "vhc18stAAE9Y1Mw18w2bu0jFRRnCnDMGjNhcYAK8C4uBXI0UU1lkyA"
)


def test_the_bindings_bytes_are_the_formats_and_an_earlier_blob_opens() -> None:
    """The associated data: the number of distinct ids, then each field length-prefixed (4 bytes,
    big-endian) in the format's order, the ids sorted; a blob sealed with these bytes opens."""
    assert KNOWN_BINDING.associated_data() == (
        b"\x00\x00\x00\x02"
        b"\x00\x00\x00\x04tp1."
        b"\x00\x00\x00\x13responses.reasoning"
        b"\x00\x00\x00\x08tttttttt"
        b"\x00\x00\x00\x08deepseek"
        b"\x00\x00\x00\x18https://api.deepseek.com"
        b"\x00\x00\x00\x06call_b"
        b"\x00\x00\x00\x07call_\xc3\xa9"
    )
    payload = {"reasoning": "why the sky is blue", "model": "m", "tool_call_ids": ["call_é"], "created": 1}
    opened = open_blob(SealKeys(b"k" * 32), KNOWN_BINDING, KNOWN_BLOB)
    assert isinstance(opened, Inline) and opened.payload == payload
    resealed = seal(SealKeys(b"k" * 32), KNOWN_BINDING, payload, nonce=b"\x01" * 12)
    assert isinstance(resealed, Blob) and resealed.text == KNOWN_BLOB
