"""proxy.core.replay.signatures: Gemini's documented placeholder where its validator wants a thought
signature (the first tool call of each step of the current turn) and none came."""

from __future__ import annotations

import copy
from typing import Any

from proxy.core.replay.policy import SKIP_SIGNATURE
from proxy.core.replay.signatures import with_skipped_signatures


def call(call_id: str, signature: str | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    if signature is not None or extra:
        google = {"thought_signature": signature} if signature is not None else {}
        out["extra_content"] = {"google": google, **extra}
    return out


def steps(*calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for made in calls:
        out.append({"role": "assistant", "content": None, "tool_calls": made})
        out += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in made]
    return out


def signature(message: dict[str, Any], index: int = 0) -> Any:
    return message["tool_calls"][index].get("extra_content", {}).get("google", {}).get("thought_signature")


def test_each_step_of_the_current_turn_gets_it_on_its_first_call_only() -> None:
    messages = steps([call("a"), call("b")], [call("c")])
    before = copy.deepcopy(messages)
    out = with_skipped_signatures(messages)
    assert messages == before  # never mutated
    assert signature(out[1]) == SKIP_SIGNATURE and "extra_content" not in out[1]["tool_calls"][1]
    assert signature(out[4]) == SKIP_SIGNATURE


def test_earlier_turns_and_signed_calls_are_left_alone() -> None:
    earlier = steps([call("a")])
    messages = [*earlier, {"role": "assistant", "content": "done"}, *steps([call("b", "real")])]
    out = with_skipped_signatures(messages)
    assert out is messages  # nothing to do: the same list
    assert "extra_content" not in out[1]["tool_calls"][0]  # before the last user message: not checked


def test_other_extra_content_is_kept_beside_the_placeholder() -> None:
    messages = steps([call("a", None, other={"x": 1})])
    out = with_skipped_signatures(messages)
    assert out[1]["tool_calls"][0]["extra_content"] == {
        "google": {"thought_signature": SKIP_SIGNATURE},
        "other": {"x": 1},
    }


def test_malformed_messages_pass_as_they_came() -> None:
    messages: list[Any] = [
        "x",
        {"role": "assistant", "tool_calls": "no"},
        {"role": "assistant", "tool_calls": [1]},
    ]
    assert with_skipped_signatures(messages) is messages
    assert with_skipped_signatures([]) == []
