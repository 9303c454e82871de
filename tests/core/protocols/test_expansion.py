"""What one request may expand into (proxy.core.protocols.expansion): each distinct blob opened and
counted once, a repeated one put back once, a reference's payload capped, the total bounded."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core import seal
from proxy.core.errors import PayloadTooLarge
from proxy.core.protocols.expansion import SPILL_CAP, Expansion
from proxy.core.protocols.messages.request import bridge_messages
from proxy.core.protocols.messages.state import restore_thinking
from proxy.core.protocols.messages.state import spilled_keys as messages_spilled_keys
from proxy.core.protocols.responses.inputs import map_input
from proxy.core.protocols.responses.state import expand_compaction, restore_reasoning, seal_compaction
from proxy.core.protocols.responses.state import spilled_keys as responses_spilled_keys
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


def test_many_distinct_blobs_are_a_413_before_their_payloads_are_held() -> None:
    """Each distinct blob's payload counts when it is opened (spilled_keys opens them all before
    the restore): 60 blobs of ~1 KB that inflate to ~900 KB each pass a 5 MB limit at the sixth,
    not after 54 MB were inflated and held."""
    limit = 5_000_000
    blobs = [blob("responses.reasoning", f"{i} " + "y" * 900_000) for i in range(60)]
    assert all(len(text) < 2_000 for text in blobs)
    items: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    for text in blobs:
        items += [{"type": "reasoning", "summary": [], "encrypted_content": text}]
        items += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]
    mapped = map_input(items, None)
    expansion = Expansion(CTX, limit)
    with pytest.raises(PayloadTooLarge):
        responses_spilled_keys(mapped.restore, CTX, expansion)
    assert expansion.opened_blobs <= limit // 900_000 + 1
    assert expansion.used <= limit + SPILL_CAP


def test_an_opened_payload_is_counted_once_whether_opened_or_put_back() -> None:
    expansion = Expansion(CTX, 1 << 30)
    text = blob("responses.reasoning")
    expansion.opened("responses.reasoning", ((),), text)
    used = expansion.used
    assert used >= len(TEXT)
    assert expansion.payload("responses.reasoning", ((),), text, {}) is not None
    assert expansion.used == used and expansion.opened_blobs == 1


def test_a_reference_payload_has_the_model_rule_applied_once() -> None:
    key = "tp:spilled"
    data = orjson.dumps({"reasoning": "r", "model": "m", "details": [{"type": "x"}]})
    reference = seal.seal_reference(KEYS, CTX.binding("responses.reasoning"), key).text
    ctx = SealContext(KEYS, "tenant-a", "deepseek", "https://api.deepseek.com", 1_700_000_000, "m")
    payload = Expansion(ctx, 1 << 30).payload("responses.reasoning", ((),), reference, {key: data})
    assert payload == ctx.usable(orjson.loads(data))


def test_a_compaction_summary_counts_its_utf8_bytes() -> None:
    summary = "对话摘要：用户要求重构模块。" * 10  # 3 bytes a character
    compaction = seal_compaction(CTX, summary)
    assert compaction is not None
    expansion = Expansion(CTX, 1 << 20)
    out, dropped = expand_compaction(
        [{"type": "compaction", "encrypted_content": compaction}], CTX, expansion
    )
    assert dropped == 0 and out[0]["content"] == summary
    assert expansion.used == len(summary.encode())
    item = {"type": "compaction", "encrypted_content": compaction}
    out, _ = expand_compaction([item, item], CTX, expansion)  # a repeat puts the summary back again
    assert len(out) == 2 and expansion.used == 3 * len(summary.encode())


def test_messages_many_distinct_signatures_are_a_413_before_their_payloads_are_held() -> None:
    limit = 5_000_000
    messages: list[dict[str, Any]] = []
    for i in range(60):
        signature = blob("anthropic.thinking", f"{i} " + "y" * 900_000)
        thinking = {"type": "thinking", "thinking": "(shown)", "signature": signature}
        messages += [{"role": "user", "content": "next"}, {"role": "assistant", "content": [thinking]}]
    bridged = bridge_messages(
        {"model": "m", "max_tokens": 9, "messages": [*messages, {"role": "user", "content": "x"}]}
    )
    expansion = Expansion(CTX, limit)
    with pytest.raises(PayloadTooLarge):
        messages_spilled_keys(bridged.thinking, CTX, expansion)
    assert expansion.opened_blobs <= limit // 900_000 + 1
