"""The sealing helpers both front doors share: bound to their ids, spilled when large."""

from __future__ import annotations

from dataclasses import replace

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


# --------------------------------------------------------------------------------------------------
# The replay store's model rule, for blobs too (issue 41, item 11)
# --------------------------------------------------------------------------------------------------
SIGNED = {
    "reasoning": "Look up the weather first.",
    "details": [{"type": "reasoning.encrypted", "data": "b3BhcXVl"}],
    "signatures": {"call_a": {"google": {"thought_signature": "c2ln"}}},
    "model": "gemini-3-pro",
}


def test_signed_reasoning_is_restored_only_for_the_model_that_made_it() -> None:
    """Reasoning text goes to any model of the entry (the binding); reasoning_details and thought
    signatures only to the model they came from, as the replay store does (Remembered.same_origin)."""
    made = replace(CTX, model="gemini-3-pro")
    text = seal_reasoning(made, "responses.reasoning", ("call_a",), SIGNED, spill=None, spill_id="x")
    assert text is not None
    assert open_reasoning(made, "responses.reasoning", [("call_a",)], text, {}) == SIGNED
    other = replace(CTX, model="gemini-3-flash")
    assert open_reasoning(other, "responses.reasoning", [("call_a",)], text, {}) == {
        "reasoning": "Look up the weather first.",
        "model": "gemini-3-pro",
    }


def test_the_model_rule_holds_for_a_spilled_payload_too() -> None:
    spill: list[tuple[str, bytes]] = []
    large = {**SIGNED, "reasoning": "".join(f"{i:x}" for i in range(200_000))}
    made = replace(CTX, model="gemini-3-pro")
    text = seal_reasoning(made, "anthropic.thinking", (), large, spill=spill, spill_id="msg_1.0")
    assert text is not None and spill
    other = replace(CTX, model="gemini-3-flash")
    opened = open_reasoning(other, "anthropic.thinking", [()], text, dict(spill))
    assert opened == {"reasoning": large["reasoning"], "model": "gemini-3-pro"}
    assert open_reasoning(made, "anthropic.thinking", [()], text, dict(spill)) == large


def test_a_bridged_restore_applies_the_model_rule() -> None:
    """Through the Responses door's restore (and its spilled-payload path)."""
    from proxy.core.protocols.responses.inputs import map_input
    from proxy.core.protocols.responses.state import restore_reasoning

    made = replace(CTX, model="gemini-3-pro")
    for large in (False, True):
        spilled: list[tuple[str, bytes]] = []
        payload = {**SIGNED, "reasoning": "".join(f"{i:x}" for i in range(200_000))} if large else SIGNED
        text = seal_reasoning(
            made, "responses.reasoning", ("call_a",), payload, spill=spilled, spill_id="rs_1"
        )
        items = [
            {"type": "message", "role": "user", "content": "Weather?"},
            {"type": "reasoning", "summary": [], "encrypted_content": text},
            {"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
        ]
        for model, signed in (("gemini-3-flash", False), ("gemini-3-pro", True)):
            mapped = map_input(items, None)
            restore_reasoning(mapped.messages, mapped.restore, replace(CTX, model=model), dict(spilled))
            (message,) = (m for m in mapped.messages if m["role"] == "assistant")
            assert message["reasoning_content"] == payload["reasoning"]
            assert ("reasoning_details" in message) is signed
            assert ("extra_content" in message["tool_calls"][0]) is signed


def test_a_messages_restore_applies_the_model_rule() -> None:
    """Through the Messages door's restore: a signature's details go back to its own model only."""
    from proxy.core.protocols.messages.request import bridge_messages
    from proxy.core.protocols.messages.state import restore_thinking

    made = replace(CTX, model="gemini-3-pro")
    text = seal_reasoning(made, "anthropic.thinking", ("toolu_a",), SIGNED, spill=None, spill_id="m.0")
    history = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "", "signature": text},
                {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "sunny"}]},
    ]
    for model, signed in (("gemini-3-flash", False), ("gemini-3-pro", True)):
        bridged = bridge_messages({"model": model, "messages": history})
        chat = bridged.body["messages"]
        restore_thinking(chat, bridged.thinking, replace(CTX, model=model))
        (message,) = (m for m in chat if m["role"] == "assistant")
        assert message["reasoning_content"] == SIGNED["reasoning"]
        assert ("reasoning_details" in message) is signed
