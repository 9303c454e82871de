"""Messages content blocks → chat messages: order, tool results, images, documents, thinking."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.errors import BadRequest
from proxy.core.protocols.messages.inputs import ThinkingBlock, ThinkingTurn, map_messages

PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


def test_a_tool_loop_keeps_its_order() -> None:
    mapped = map_messages(
        "Be brief.",
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Weather?"}, {"type": "text", "text": "In Paris."}],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Call it.", "signature": "tp1.x"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "call_b", "name": "get_time", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_a", "content": "sunny"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_b",
                        "content": [{"type": "text", "text": "noon"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "Thanks."},
                ],
            },
        ],
    )
    assert mapped.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?\n\nIn Paris."},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": "Error: noon"},
        {"role": "user", "content": "Thanks."},
    ]
    # Text came between the thinking and the call: the block is bound to no call.
    assert mapped.thinking == (
        ThinkingTurn(2, ("call_a", "call_b"), (ThinkingBlock("Call it.", "tp1.x", None),)),
    )


def test_thinking_right_before_a_call_names_it_and_redacted_thinking_is_counted() -> None:
    mapped = map_messages(
        None,
        [
            {"role": "user", "content": "Go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "redacted_thinking", "data": "EmwKAhgB"},
                    {"type": "thinking", "thinking": "t", "signature": ""},
                    {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1"}]},
        ],
    )
    assert mapped.redacted == 1
    assert mapped.thinking[0].blocks == (ThinkingBlock("t", None, "c1"),)
    assert mapped.messages[1]["content"] is None and mapped.messages[2]["content"] == ""


def test_images_and_documents() -> None:
    mapped = map_messages(
        None,
        [
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": PNG},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                    {
                        "type": "document",
                        "title": "Notes",
                        "source": {"type": "text", "media_type": "text/plain", "data": "abc"},
                    },
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBER"},
                    },
                ],
            }
        ],
    )
    assert mapped.messages[0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "text", "text": "Notes\n\nabc"},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBER"}},
    ]


def test_an_image_in_a_tool_result_follows_the_results_in_a_user_message() -> None:
    mapped = map_messages(
        None,
        [
            {"role": "user", "content": "Look"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "shot", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "c1",
                        "content": [{"type": "image", "source": PNG}],
                    }
                ],
            },
        ],
    )
    tool, media = mapped.messages[2:]
    assert tool["role"] == "tool" and "attachment" in tool["content"]
    assert media["role"] == "user" and media["content"][1]["type"] == "image_url"


def test_a_mid_conversation_system_message_stays_where_it_was() -> None:
    """Claude Code 2.1 sends its environment section as a `role: system` message after the first
    user turn (Anthropic's mid-conversation system messages): a chat `system` message in place."""
    mapped = map_messages(
        [{"type": "text", "text": "You are an agent."}],
        [
            {"role": "user", "content": [{"type": "text", "text": "Run it."}]},
            {
                "role": "system",
                "content": [
                    {"type": "text", "text": "# Environment", "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": "cwd: /tmp"},
                ],
            },
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Thanks."},
            {"role": "system", "content": "Be brief from here on."},
        ],
    )
    assert mapped.messages == [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Run it."},
        {"role": "system", "content": "# Environment\n\ncwd: /tmp"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks."},
        {"role": "system", "content": "Be brief from here on."},
    ]


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ([{"role": "system", "content": "x"}], "messages[0].role"),
        ([{"role": "tool", "content": "x"}], "messages[0].role"),
        (
            [
                {"role": "user", "content": "Hi"},
                {"role": "system", "content": [{"type": "image", "source": PNG}]},
            ],
            "messages[1].content[0]",
        ),
        (
            [{"role": "user", "content": [{"type": "server_tool_use", "id": "s", "name": "web_search"}]}],
            "messages[0].content[0]",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}],
                }
            ],
            "messages[0].content[0].source",
        ),
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}],
            "messages[0].content[0].source",
        ),
        ([{"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}], "messages[0].content[0]"),
        ([{"role": "user", "content": [{"type": "thinking", "thinking": "x"}]}], "messages[0].content[0]"),
    ],
)
def test_what_a_chat_upstream_cannot_take_is_refused_naming_it(messages: list[Any], param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        map_messages(None, messages)
    assert caught.value.param == param


def _call(call_id: str = "c1") -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "f", "input": {}}]}


def _result(call_id: str = "c1") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "ok"}]}


ASK_MSG = {"role": "user", "content": "Go"}


@pytest.mark.parametrize(
    ("messages", "param", "words"),
    [
        # A result with no call before it, or answering one already answered.
        ([ASK_MSG, _result("c9")], "messages[1].content[0].tool_use_id", "'c9', which was never made"),
        (
            [ASK_MSG, _call(), _result(), {"role": "assistant", "content": "ok"}, _result()],
            "messages[4].content[0].tool_use_id",
            "already answered",
        ),
        # A call with no result: at the end, in the user message after it, or before the next turn.
        ([ASK_MSG, _call()], "messages[1].content[0]", "'c1', which has no result:"),
        (
            [ASK_MSG, _call(), {"role": "user", "content": "And?"}],
            "messages[1].content[0]",
            "has no result in messages[2]",
        ),
        ([ASK_MSG, _call(), _call("c2")], "messages[1].content[0]", "has no result before messages[2]"),
        # A call id used twice.
        ([ASK_MSG, _call(), _result(), _call()], "messages[3].content[0].id", "repeats id 'c1'"),
    ],
)
def test_tool_results_and_calls_are_paired_as_on_the_responses_door(
    messages: list[dict[str, Any]], param: str, words: str
) -> None:
    """One rule for both bridged doors (proxy.core.protocols.tool_pairing): a result answers a call
    made before it and not yet answered; every call is answered in the user message right after it."""
    with pytest.raises(BadRequest) as raised:
        map_messages(None, messages)
    assert raised.value.param == param and words in raised.value.message, raised.value.message
    assert "tool_result" in raised.value.message or "repeats" in raised.value.message


def test_parallel_calls_answered_in_any_order_are_paired() -> None:
    two = {"role": "assistant", "content": [_call("a")["content"][0], _call("b")["content"][0]]}
    results = {"role": "user", "content": [_result("b")["content"][0], _result("a")["content"][0]]}
    mapped = map_messages(None, [ASK_MSG, two, results, {"role": "assistant", "content": "Done."}])
    assert [m["role"] for m in mapped.messages] == ["user", "assistant", "tool", "tool", "assistant"]
