"""What one request may expand into (proxy.core.protocols.expansion): each distinct blob opened and
counted once, a repeated one put back once, a reference's payload capped, the total bounded."""

from __future__ import annotations

import orjson
import pytest

from proxy.core import seal
from proxy.core.errors import PayloadTooLarge
from proxy.core.protocols.expansion import SPILL_CAP, Expansion
from proxy.core.protocols.messages_request import bridge_messages
from proxy.core.protocols.messages_state import restore_thinking
from proxy.core.protocols.responses_input import map_input
from proxy.core.protocols.responses_state import restore_reasoning
from proxy.core.protocols.sealing import SealContext

KEYS = seal.SealKeys(b"secret-one")
CTX = SealContext(KEYS, "tenant-a", "deepseek", "https://api.deepseek.com", 1_700_000_000)
TEXT = "Think it through. " * 1_000  # 18 KB, a blob of a few hundred characters


def blob(kind: seal.Kind, text: str = TEXT) -> str:
    sealed = seal.seal(KEYS, CTX.binding(kind), {"reasoning": text, "model": "m", "created": 0})
    assert isinstance(sealed, seal.Blob)
    return sealed.text


def test_a_payload_is_read_and_counted_once() -> None:
    expansion = Expansion(CTX, 1_000_000)
    text = blob("responses.reasoning")
    first = expansion.payload("responses.reasoning", ((),), text, {})
    assert first is not None and first["reasoning"] == TEXT
    used = expansion.used
    assert used >= len(TEXT)
    for _ in range(100):
        assert expansion.payload("responses.reasoning", ((),), text, {}) == first
    assert expansion.used == used


def test_first_use_tells_a_repeated_blob() -> None:
    expansion = Expansion(CTX, 1_000)
    assert expansion.first_use("tp1.a") and not expansion.first_use("tp1.a") and expansion.first_use("tp1.b")


def test_past_the_limit_is_a_413_that_names_the_setting() -> None:
    expansion = Expansion(CTX, len(TEXT) + 100)
    expansion.payload("responses.reasoning", ((),), blob("responses.reasoning"), {})
    with pytest.raises(PayloadTooLarge) as caught:
        expansion.payload("responses.reasoning", ((),), blob("responses.reasoning", TEXT + "more"), {})
    assert caught.value.status == 413 and caught.value.code == "expansion_too_large"
    assert "THINKPROXY_MAX_BODY_BYTES" in caught.value.message


@pytest.mark.parametrize(("size", "found"), [(SPILL_CAP - 100, True), (SPILL_CAP + 1, False)])
def test_a_spilled_payload_is_read_up_to_the_inline_cap(size: int, found: bool) -> None:
    key = "tp:spilled"
    head, tail = b'{"reasoning":"', b'"}'
    data = head + b"x" * (size - len(head) - len(tail)) + tail
    assert len(data) == size and orjson.loads(data)
    reference = seal.seal_reference(KEYS, CTX.binding("responses.reasoning"), key).text
    payload = Expansion(CTX, 1 << 30).payload("responses.reasoning", ((),), reference, {key: data})
    assert (payload is not None) is found


def test_responses_a_repeated_blob_or_item_is_restored_once() -> None:
    text = blob("responses.reasoning")
    items = [
        {"role": "user", "content": "hi"},
        *[{"type": "reasoning", "summary": [], "encrypted_content": text}] * 50,
        *[{"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "own"}]}] * 50,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "again"},
        {"type": "reasoning", "summary": [], "encrypted_content": text},  # the same blob, a later turn
        {"role": "assistant", "content": "ok"},
    ]
    mapped = map_input(items, None)
    report = restore_reasoning(mapped.messages, mapped.restore, CTX, expansion=Expansion(CTX, 1 << 20))
    restored = [m.get("reasoning_content") for m in mapped.messages if m["role"] == "assistant"]
    assert restored == [f"{TEXT}\n\nown", None]
    assert report.restored == 1 and report.unverified == 0


def test_messages_a_repeated_signature_is_restored_once() -> None:
    signature = blob("anthropic.thinking")
    signed = {"type": "thinking", "thinking": "(shown)", "signature": signature}
    turn = {"role": "assistant", "content": [signed, signed, {"type": "text", "text": "ok"}]}
    messages = [{"role": "user", "content": "hi"}, turn, {"role": "user", "content": "again"}, turn]
    bridged = bridge_messages(
        {"model": "m", "max_tokens": 9, "messages": [*messages, {"role": "user", "content": "x"}]}
    )
    chat = bridged.body["messages"]
    restore_thinking(chat, bridged.thinking, CTX, expansion=Expansion(CTX, 1 << 20))
    assert [m.get("reasoning_content") for m in chat if m["role"] == "assistant"] == [TEXT, None]
