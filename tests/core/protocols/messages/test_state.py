"""Thinking signatures the proxy mints: sealed by the encoder, opened on the next turn into the
provider's reasoning field; tampered, foreign and other-context signatures count as missing."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from proxy.core import seal
from proxy.core.protocols.messages.events import MessagesEncoder
from proxy.core.protocols.messages.request import bridge_messages
from proxy.core.protocols.messages.state import restore_thinking, spilled_keys, thinking_sealer
from proxy.core.protocols.messages.stream import message_from_completion
from proxy.core.protocols.sealing import RestoreReport, SealContext

KEYS = seal.SealKeys(b"secret-one")
CTX = SealContext(KEYS, "tenant-a", "deepseek", "https://api.deepseek.com", 1_700_000_000)
ASK = {"role": "user", "content": "Weather in Paris?"}


def answer(
    ctx: SealContext, reasoning: str = "Look up the weather first.", spill: Any = None
) -> dict[str, Any]:
    """A first turn's Message: thinking right before a get_weather call, signed under `ctx`."""
    completion = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": reasoning,
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": "{}"},
                        }
                    ],
                },
            }
        ]
    }
    return message_from_completion(
        completion, MessagesEncoder("msg_1", "m", seal=thinking_sealer(ctx, spill), new_id=lambda p: p)
    )


def second_turn(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    result = {"type": "tool_result", "tool_use_id": "call_a", "content": "sunny"}
    return [ASK, {"role": "assistant", "content": content}, {"role": "user", "content": [result]}]


def restore(
    messages: list[dict[str, Any]], ctx: SealContext = CTX, spilled: Any = None
) -> tuple[list[dict[str, Any]], RestoreReport]:
    bridged = bridge_messages({"model": "m", "messages": messages})
    chat = bridged.body["messages"]
    return chat, restore_thinking(chat, bridged.thinking, ctx, spilled)


def test_a_signed_block_round_trips_into_reasoning_content() -> None:
    content = answer(CTX)["content"]
    assert content[0]["signature"].startswith("tp1.")
    chat, report = restore(second_turn(content))
    assert chat[1]["reasoning_content"] == "Look up the weather first."
    assert report == RestoreReport(restored=1)


@pytest.mark.parametrize(
    "other",
    [
        replace(CTX, tenant="tenant-b"),
        replace(CTX, provider="kimi"),
        replace(CTX, base_url="https://other.example"),
        replace(CTX, keys=seal.SealKeys(b"another-deployment")),
    ],
)
def test_a_signature_from_another_context_is_missing(other: SealContext) -> None:
    chat, report = restore(second_turn(answer(other)["content"]))
    assert "reasoning_content" not in chat[1]
    assert report == RestoreReport(unverified=1)


def test_a_tampered_signature_is_missing() -> None:
    content = answer(CTX)["content"]
    sig = content[0]["signature"]
    content[0]["signature"] = sig[:-3] + ("AAA" if not sig.endswith("AAA") else "BBB")
    chat, report = restore(second_turn(content))
    assert "reasoning_content" not in chat[1] and report.unverified == 1


def test_a_block_moved_to_another_call_does_not_open() -> None:
    content = answer(CTX)["content"]
    content[1]["id"] = "call_z"  # bound to call_a, now before call_z
    messages = second_turn(content)
    messages[2]["content"][0]["tool_use_id"] = "call_z"
    chat, report = restore(messages)
    assert "reasoning_content" not in chat[1] and report.unverified == 1


def test_anthropic_signatures_are_foreign_and_never_forwarded() -> None:
    content = [
        {"type": "thinking", "thinking": "real claude", "signature": "EqQBCkgIARABGAIiQL..."},
        *answer(CTX)["content"][1:],
    ]
    chat, report = restore(second_turn(content))
    assert "reasoning_content" not in chat[1] and report == RestoreReport(foreign=1)
    assert "EqQB" not in json.dumps(chat)


def test_an_unsigned_block_is_restored_from_its_text() -> None:
    content = [{"type": "thinking", "thinking": "my own notes"}, *answer(CTX)["content"][1:]]
    chat, report = restore(second_turn(content))
    assert chat[1]["reasoning_content"] == "my own notes" and report.restored == 1


def test_display_omitted_blocks_carry_the_reasoning_in_the_signature_alone() -> None:
    content = answer(CTX)["content"]
    content[0]["thinking"] = ""  # what a client with display: omitted holds
    chat, _ = restore(second_turn(content))
    assert chat[1]["reasoning_content"] == "Look up the weather first."


def test_a_large_reasoning_spills_to_the_store_and_its_key_is_sealed() -> None:
    spill: list[tuple[str, bytes]] = []
    huge = "".join(f"{i:x}" for i in range(200_000))  # incompressible enough to pass the inline cap
    content = answer(CTX, huge, spill)["content"]
    assert len(spill) == 1 and len(content[0]["signature"]) < 300
    bridged = bridge_messages({"model": "m", "messages": second_turn(content)})
    assert spilled_keys(bridged.thinking, CTX) == [spill[0][0]]
    chat, report = restore(second_turn(content), spilled=dict(spill))
    assert chat[1]["reasoning_content"] == huge and report.restored == 1
    chat, report = restore(second_turn(content), spilled={})  # expired: missing
    assert "reasoning_content" not in chat[1]


def test_without_a_store_a_large_reasoning_gets_no_signature() -> None:
    huge = "".join(f"{i:x}" for i in range(200_000))
    assert answer(CTX, huge, None)["content"][0]["signature"] == ""
