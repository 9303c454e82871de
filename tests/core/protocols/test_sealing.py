"""The sealing helpers both front doors share: bound to their ids, spilled when large."""

from __future__ import annotations

from proxy.core import seal
from proxy.core.protocols.sealing import SealContext, open_reasoning, reference_key, seal_reasoning, spill_key

CTX = SealContext(seal.SealKeys(b"s"), "t", "deepseek", "https://api.deepseek.com", 1)


def test_a_blob_opens_only_under_its_ids() -> None:
    text = seal_reasoning(
        CTX, "anthropic.thinking", ("call_a",), {"reasoning": "r"}, spill=None, spill_id="x"
    )
    assert text is not None
    assert open_reasoning(CTX, "anthropic.thinking", [("call_b",), ("call_a",)], text, {}) == {
        "reasoning": "r"
    }
    assert open_reasoning(CTX, "anthropic.thinking", [()], text, {}) is None
    assert open_reasoning(CTX, "responses.reasoning", [("call_a",)], text, {}) is None  # another kind


def test_a_large_payload_spills_and_the_blob_seals_its_key() -> None:
    spill: list[tuple[str, bytes]] = []
    payload = {"reasoning": "".join(f"{i:x}" for i in range(200_000))}
    text = seal_reasoning(CTX, "anthropic.thinking", (), payload, spill=spill, spill_id="msg_1.0")
    assert text is not None and spill[0][0] == spill_key(CTX, "msg_1.0")
    assert reference_key(CTX, "anthropic.thinking", [()], text) == spill[0][0]
    assert open_reasoning(CTX, "anthropic.thinking", [()], text, dict(spill)) == payload
    assert seal_reasoning(CTX, "anthropic.thinking", (), payload, spill=None, spill_id="y") is None
