"""The Responses front door's request side, bridged to chat completions (issue 28, item 1).

Request bodies are shaped (and checked) by the openai-python types: `ResponseCreateParams` in,
chat `CompletionCreateParams` out.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
from openai.types.responses import ResponseInputItemParam, ToolParam
from openai.types.responses.response_create_params import ResponseCreateParamsStreaming
from pydantic import TypeAdapter

from proxy.core.controls import Level
from proxy.core.errors import BadRequest
from proxy.core.protocols.responses.request import (
    SEPARATOR,
    BridgedRequest,
    ToolName,
    bridge_request,
)

CHAT = TypeAdapter(CompletionCreateParamsStreaming)
RESPONSES = TypeAdapter(ResponseCreateParamsStreaming)


def conforms(adapter: TypeAdapter[Any], value: Any) -> None:
    """Validate, consuming the lazy iterators pydantic returns for `Iterable[...]` fields."""

    def drain(v: Any) -> None:
        if isinstance(v, dict):
            for x in v.values():
                drain(x)
        elif isinstance(v, list | tuple) or hasattr(v, "__next__"):
            for x in v:
                drain(x)

    drain(adapter.validate_python(value))


def bridged(body: dict[str, Any], **kwargs: Any) -> BridgedRequest:
    out = bridge_request({"model": "deepseek-v4-pro", "stream": True, **body}, **kwargs)
    conforms(CHAT, out.body)
    assert_valid_chat(out)
    return out


def assert_valid_chat(out: BridgedRequest) -> None:
    """Chat's rule: an assistant message with tool_calls is followed by exactly one tool message
    per call and nothing else; a tool message answers a call of the assistant message before it."""
    messages = out.body["messages"]
    ids: set[str] = set()
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] in ("system", "user", "assistant"), m
        i += 1
        calls = [c["id"] for c in m.get("tool_calls", [])]
        assert not ids & set(calls) and len(set(calls)) == len(calls)
        ids |= set(calls)
        answered = []
        while i < len(messages) and messages[i]["role"] == "tool":
            answered.append(messages[i]["tool_call_id"])
            i += 1
        assert sorted(answered) == sorted(calls), (calls, answered)
    for turn in out.reasoning:
        message = messages[turn.message_index]
        assert message["role"] == "assistant"
        assert turn.tool_call_ids == tuple(c["id"] for c in message.get("tool_calls", []))


def refused(body: dict[str, Any], **kwargs: Any) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        bridge_request({"model": "m", **body}, **kwargs)
    err = info.value
    assert err.status == 400
    payload = err.payload()["error"]
    assert payload["type"] == "invalid_request_error" and payload["message"] == err.message
    return err


EXEC_COMMAND = {
    "type": "function",
    "name": "exec_command",
    "description": "Runs a command in a PTY, returning output or a session ID for ongoing interaction.",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}},
        "required": ["cmd"],
        "additionalProperties": False,
    },
}
DOCS_NAMESPACE = {
    "type": "namespace",
    "name": "docs",
    "description": "Tools of the docs MCP server.",
    "tools": [
        {
            "type": "function",
            "name": "search",
            "description": "Search the docs.",
            "strict": None,
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ],
}
CODEX = {
    "model": "deepseek-v4-pro",
    "instructions": "You are Codex, a coding agent.",
    "input": [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "<permissions/>"}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "<environment_context/>"}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "**Listing files**"}],
            "encrypted_content": "sealed-1",
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "exec_command",
            "arguments": '{"cmd":"ls","workdir":"/repo"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "README.md\nsrc\n"},
        {
            "type": "reasoning",
            "id": "rs_2",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Two entries; search the docs next."}],
            "encrypted_content": "sealed-2",
        },
        {
            "type": "function_call",
            "call_id": "call_2",
            "name": "search",
            "namespace": "docs",
            "arguments": '{"q":"layout"}',
        },
        {"type": "function_call_output", "call_id": "call_2", "output": "Layout: src/ holds the code."},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "phase": "final_answer",
            "content": [{"type": "output_text", "text": "README.md and src/.", "annotations": []}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and the tests?"}]},
    ],
    "tools": [EXEC_COMMAND, DOCS_NAMESPACE, {"type": "web_search"}],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "reasoning": {"effort": "high", "summary": "auto"},
    "store": False,
    "stream": True,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "0199a1b2-session",
    "text": {"verbosity": "medium"},
}


def test_the_codex_request_is_typed_as_openai_python_sends_it() -> None:
    conforms(RESPONSES, CODEX)


def test_codex_request_becomes_a_chat_request() -> None:
    out = bridged(CODEX)
    body = out.body
    assert body["messages"] == [
        {"role": "system", "content": "You are Codex, a coding agent."},
        {"role": "system", "content": "<permissions/>"},
        {"role": "user", "content": "<environment_context/>"},
        {"role": "user", "content": "list the files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "exec_command", "arguments": '{"cmd":"ls","workdir":"/repo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "README.md\nsrc\n"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "docs__search", "arguments": '{"q":"layout"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "Layout: src/ holds the code."},
        {"role": "assistant", "content": "README.md and src/."},
        {"role": "user", "content": "and the tests?"},
    ]
    assert [t["function"]["name"] for t in body["tools"]] == ["exec_command", "docs__search"]
    assert body["tools"][0]["function"] == {
        "name": "exec_command",
        "description": EXEC_COMMAND["description"],
        "parameters": EXEC_COMMAND["parameters"],
        "strict": False,
    }
    assert body["tools"][1]["function"]["description"] == "Tools of the docs MCP server.\n\nSearch the docs."
    assert body["tool_choice"] == "auto" and body["parallel_tool_calls"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    for absent in ("input", "instructions", "reasoning", "store", "include", "text", "prompt_cache_key"):
        assert absent not in body
    assert out.level is Level.DEEP and out.summary == "auto"
    assert out.omitted_tools == ("web_search",)
    assert dict(out.tool_names) == {
        "exec_command": ToolName("function", "exec_command"),
        "docs__search": ToolName("function", "search", "docs"),
    }
    assert out.store is False and out.previous_response_id is None
    assert out.include == ("reasoning.encrypted_content",) and out.wants_encrypted_reasoning
    assert set(out.dropped) == {"prompt_cache_key", "text.verbosity"}


def test_codex_reasoning_is_returned_to_restore_not_sent() -> None:
    out = bridged(CODEX)
    first, second = out.reasoning
    assert (first.message_index, first.tool_call_ids) == (4, ("call_1",))
    assert [(i.index, i.id, i.encrypted_content) for i in first.items] == [(3, "rs_1", "sealed-1")]
    assert first.text == "**Listing files**" and first.items[0].summary == ("**Listing files**",)
    assert (second.message_index, second.tool_call_ids) == (6, ("call_2",))
    assert second.items[0].encrypted_content == "sealed-2"
    assert second.text == "Two entries; search the docs next."  # reasoning_text wins over a summary
    assert all("reasoning" not in str(m.keys()) for m in out.body["messages"])


def test_agents_sdk_echo_of_output_items() -> None:
    """The Agents SDK sends the previous response's output items back as they were."""
    output = [
        {"type": "reasoning", "id": "rs_a", "summary": [{"type": "summary_text", "text": "Weather tool."}]},
        {
            "type": "function_call",
            "id": "fc_a",
            "call_id": "c1",
            "name": "get_weather",
            "arguments": '{"city":"Oslo"}',
            "status": "completed",
        },
        {
            "type": "function_call",
            "id": "fc_b",
            "call_id": "c2",
            "name": "get_weather",
            "arguments": '{"city":"Rome"}',
            "status": "completed",
        },
    ]
    body = {
        "input": [
            {"role": "user", "content": "Weather in Oslo and Rome?"},
            *output,
            {"type": "function_call_output", "call_id": "c1", "output": "3°C"},
            {"type": "function_call_output", "call_id": "c2", "output": "19°C"},
        ],
        "tools": [
            {"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": True}
        ],
        "reasoning": {"effort": "medium"},
    }
    conforms(RESPONSES, {**body, "model": "m", "stream": True})
    out = bridged(body)
    user, assistant, t1, t2 = out.body["messages"]
    assert user == {"role": "user", "content": "Weather in Oslo and Rome?"}
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]  # consecutive calls: one message
    assert (t1["tool_call_id"], t2["tool_call_id"]) == ("c1", "c2")
    assert out.reasoning[0].message_index == 1 and out.reasoning[0].tool_call_ids == ("c1", "c2")
    assert out.level is Level.STANDARD and out.summary is None
    assert out.body["tools"][0]["function"]["strict"] is True


def test_calls_echoed_interleaved_with_their_outputs_stay_one_turn() -> None:
    out = bridged(
        {
            "input": [
                {"role": "user", "content": "go"},
                {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "a", "output": "A"},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "b", "output": "B"},
                {"type": "function_call_output", "call_id": "c", "output": "C"},
                {"type": "function_call", "call_id": "d", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "d", "output": "D"},
            ]
        }
    )
    roles = [(m["role"], [c["id"] for c in m.get("tool_calls", [])]) for m in out.body["messages"]]
    assert roles == [
        ("user", []),
        ("assistant", ["a", "b", "c"]),
        ("tool", []),
        ("tool", []),
        ("tool", []),
        ("assistant", ["d"]),
        ("tool", []),
    ]


# ------------------------------------------------------------------------------------------------
# input
# ------------------------------------------------------------------------------------------------


def test_instructions_and_string_input() -> None:
    out = bridged({"instructions": "Be brief.", "input": "Hi"})
    assert out.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert out.reasoning == () and out.dropped == ()


@pytest.mark.parametrize(
    ("role", "chat_role"), [("user", "user"), ("developer", "system"), ("system", "system")]
)
def test_message_roles(role: str, chat_role: str) -> None:
    out = bridged(
        {"input": [{"type": "message", "role": role, "content": "x"}, {"role": "user", "content": "y"}]}
    )
    assert out.body["messages"][0] == {"role": chat_role, "content": "x"}


def test_text_parts_join_into_one_string_and_images_become_image_url_parts() -> None:
    two_texts = [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]
    assert (
        bridged({"input": [{"role": "user", "content": two_texts}]}).body["messages"][0]["content"]
        == "a\n\nb"
    )
    parts = [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
        {"type": "input_image", "image_url": "https://x/y.png", "detail": "original"},
        {"type": "input_file", "file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"},
    ]
    content = bridged({"input": [{"role": "user", "content": parts}]}).body["messages"][0]["content"]
    assert content == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "high"}},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}},
    ]


def test_assistant_output_text_and_refusal_become_text() -> None:
    out = bridged(
        {
            "input": [
                {"role": "user", "content": "q"},
                {
                    "type": "message",
                    "id": "m",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": "part one"},
                        {"type": "refusal", "refusal": "no"},
                    ],
                },
                {"role": "assistant", "content": "more"},
                {"role": "user", "content": "ok"},
            ]
        }
    )
    assert out.body["messages"][1] == {"role": "assistant", "content": "part one\n\nno\n\nmore"}


def test_custom_tool_call_is_a_function_call_with_one_input_argument() -> None:
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
    out = bridged(
        {
            "input": [
                {"role": "user", "content": "add a.txt"},
                {"type": "custom_tool_call", "call_id": "p1", "name": "apply_patch", "input": patch},
                {"type": "custom_tool_call_output", "call_id": "p1", "output": "Done."},
                {
                    "type": "custom_tool_call",
                    "call_id": "p2",
                    "name": "run",
                    "namespace": "py",
                    "input": "1+1",
                },
                {
                    "type": "custom_tool_call_output",
                    "call_id": "p2",
                    "output": [{"type": "input_text", "text": "2"}],
                },
            ],
            "tools": [{"type": "custom", "name": "apply_patch", "description": "Edit files."}],
        }
    )
    call = out.body["messages"][1]["tool_calls"][0]["function"]
    assert call["name"] == "apply_patch" and json.loads(call["arguments"]) == {"input": patch}
    assert out.body["messages"][2] == {"role": "tool", "tool_call_id": "p1", "content": "Done."}
    assert out.body["messages"][3]["tool_calls"][0]["function"]["name"] == "py__run"
    assert out.body["messages"][4]["content"] == "2"


def test_an_image_in_a_tool_output_moves_to_a_user_message_after_the_outputs() -> None:
    """Codex's view_image answers with an input_image; chat tool messages carry text only."""
    out = bridged(
        {
            "input": [
                {"role": "user", "content": "look"},
                {
                    "type": "function_call",
                    "call_id": "v",
                    "name": "view_image",
                    "arguments": '{"path":"a.png"}',
                },
                {"type": "function_call", "call_id": "w", "name": "f", "arguments": "{}"},
                {
                    "type": "function_call_output",
                    "call_id": "v",
                    "output": [{"type": "input_image", "image_url": "data:image/png;base64,QQ=="}],
                },
                {"type": "function_call_output", "call_id": "w", "output": "ok"},
                {"role": "user", "content": "and?"},
            ]
        }
    )
    m = out.body["messages"]
    assert [x["role"] for x in m] == ["user", "assistant", "tool", "tool", "user", "user"]
    assert "attachment" in m[2]["content"]
    assert m[4]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,QQ=="}}
    assert "v" in m[4]["content"][0]["text"]


def test_reasoning_with_no_assistant_item_after_it_is_dropped_and_listed() -> None:
    out = bridged(
        {
            "input": [
                {"role": "user", "content": "a"},
                {"type": "reasoning", "id": "rs_x", "summary": [], "encrypted_content": "e"},
                {"role": "user", "content": "b"},
                {"type": "reasoning", "id": "rs_y", "summary": []},
            ]
        }
    )
    assert out.reasoning == ()
    assert out.dropped == (
        "input[1] (reasoning with no assistant item after it)",
        "input[3] (reasoning with no assistant item after it)",
    )


def test_reasoning_before_a_text_answer_attaches_to_it() -> None:
    out = bridged(
        {
            "input": [
                {"role": "user", "content": "a"},
                {"type": "reasoning", "id": "r1", "summary": [{"type": "summary_text", "text": "s1"}]},
                {"type": "reasoning", "id": "r2", "summary": [{"type": "summary_text", "text": "s2"}]},
                {"role": "assistant", "content": "answer"},
                {"role": "user", "content": "b"},
            ]
        }
    )
    (turn,) = out.reasoning
    assert turn.message_index == 1 and turn.tool_call_ids == () and turn.text == "s1\n\ns2"


@pytest.mark.parametrize(
    ("item", "param", "words"),
    [
        ({"type": "item_reference", "id": "msg_1"}, "input[1]", "item_reference"),
        ({"id": "msg_1"}, "input[1]", "item_reference"),
        (
            {"type": "web_search_call", "id": "ws", "status": "completed", "action": {}},
            "input[1]",
            "web_search_call",
        ),
        (
            {"type": "local_shell_call", "id": "l", "call_id": "l", "status": "completed", "action": {}},
            "input[1]",
            "local_shell_call",
        ),
        ({"type": "compaction", "encrypted_content": "x"}, "input[1]", "compaction"),
        (
            {"type": "function_call_output", "call_id": "nope", "output": "x"},
            "input[1].call_id",
            "never made",
        ),
        (
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": {}},
            "input[1].arguments",
            "string",
        ),
        ({"type": "message", "role": "tool", "content": "x"}, "input[1].role", "user, developer"),
        (
            {"role": "system", "content": [{"type": "input_image", "image_url": "u"}]},
            "input[1].content[0]",
            "user message",
        ),
        (
            {"role": "user", "content": [{"type": "output_text", "text": "t"}]},
            "input[1].content[0]",
            "assistant",
        ),
        (
            {"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]},
            "input[1].content[0]",
            "image_url",
        ),
        (
            {"role": "user", "content": [{"type": "input_file", "file_url": "https://f"}]},
            "input[1].content[0]",
            "file_url",
        ),
        ({"type": "reasoning", "id": "r", "summary": "text"}, "input[1].summary", "summary_text"),
        ("text", "input[1]", "item object"),
    ],
)
def test_items_without_a_chat_equivalent_are_refused_by_index(item: Any, param: str, words: str) -> None:
    err = refused({"input": [{"role": "user", "content": "hi"}, item]})
    assert err.param == param and words in err.message


def test_a_call_without_its_output_is_refused_with_what_to_add() -> None:
    call = {"type": "function_call", "call_id": "c9", "name": "f", "arguments": "{}"}
    err = refused({"input": [{"role": "user", "content": "hi"}, call]})
    assert err.param == "input[1]" and "function_call_output" in err.message and "c9" in err.message
    err = refused({"input": [{"role": "user", "content": "hi"}, call, {"role": "user", "content": "?"}]})
    assert err.param == "input[1]" and "before input[2]" in err.message


def test_repeated_call_ids_and_outputs_are_refused() -> None:
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "c", "output": "x"}
    assert "already answered" in refused({"input": [call, out, out]}).message
    assert refused({"input": [call, call]}).param == "input[1].call_id"


def test_empty_input_is_refused() -> None:
    assert refused({"instructions": "x"}).param == "input"
    assert refused({"input": [{"type": "reasoning", "id": "r", "summary": []}]}).param == "input"
    assert refused({"input": 3}).param == "input"


# ------------------------------------------------------------------------------------------------
# tools and tool_choice
# ------------------------------------------------------------------------------------------------

HOSTED = [
    {"type": "web_search"},
    {"type": "web_search_preview"},
    {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "code_interpreter", "container": {"type": "auto"}},
    {"type": "image_generation"},
    {"type": "computer_use_preview", "display_height": 768, "display_width": 1024, "environment": "linux"},
    {"type": "mcp", "server_label": "gh", "server_url": "https://mcp.example"},
    {"type": "local_shell"},
    {"type": "shell"},
    {"type": "apply_patch"},
]


def test_hosted_tools_are_omitted_and_listed() -> None:
    body = {"input": "hi", "tools": [*HOSTED, EXEC_COMMAND, {"type": "web_search"}]}
    conforms(RESPONSES, {**body, "model": "m", "stream": True})
    out = bridged(body)
    assert out.omitted_tools == tuple(t["type"] for t in HOSTED)
    assert [t["function"]["name"] for t in out.body["tools"]] == ["exec_command"]


def test_hosted_tools_refused_when_asked() -> None:
    err = refused({"input": "hi", "tools": [EXEC_COMMAND, *HOSTED[:2]]}, hosted_tools="refuse")
    assert err.param == "tools" and "web_search, web_search_preview" in err.message
    assert "Remove them from tools" in err.message
    assert bridged({"input": "hi", "tools": [EXEC_COMMAND]}, hosted_tools="refuse").omitted_tools == ()


def test_only_hosted_tools_leave_no_tools_and_no_choice() -> None:
    out = bridged(
        {"input": "hi", "tools": HOSTED[:1], "tool_choice": "required", "parallel_tool_calls": False}
    )
    for key in ("tools", "tool_choice", "parallel_tool_calls"):
        assert key not in out.body
    assert out.dropped == (
        "tool_choice (no function tools left)",
        "parallel_tool_calls (no function tools left)",
    )


def test_custom_tool_is_a_function_with_one_string_input() -> None:
    grammar = {"type": "grammar", "syntax": "lark", "definition": "start: /[a-z]+/"}
    out = bridged(
        {
            "input": "hi",
            "tools": [
                {
                    "type": "custom",
                    "name": "apply_patch",
                    "description": "Edit files.",
                    "format": {"type": "text"},
                },
                {"type": "custom", "name": "word", "format": grammar},
            ],
        }
    )
    patch, word = (t["function"] for t in out.body["tools"])
    assert patch["description"] == "Edit files."
    assert patch["parameters"]["required"] == ["input"]
    assert patch["parameters"]["properties"]["input"]["type"] == "string"
    assert "lark grammar:\nstart: /[a-z]+/" in word["description"]
    assert out.tool_names["apply_patch"] == ToolName("custom", "apply_patch")


def test_namespace_tools_flatten_with_the_separator_and_map_back() -> None:
    ns = {
        "type": "namespace",
        "name": "crm",
        "description": "CRM.",
        "tools": [
            {"type": "function", "name": "lookup", "parameters": None, "strict": None},
            {"type": "custom", "name": "note"},
        ],
    }
    out = bridged({"input": "hi", "tools": [ns]})
    assert SEPARATOR == "__"
    assert [t["function"]["name"] for t in out.body["tools"]] == ["crm__lookup", "crm__note"]
    assert "parameters" not in out.body["tools"][0]["function"]
    assert out.tool_names["crm__lookup"] == ToolName("function", "lookup", "crm")
    assert out.tool_names["crm__note"] == ToolName("custom", "note", "crm")


def test_a_flattened_name_colliding_with_another_tool_is_refused() -> None:
    clash = {"type": "function", "name": "crm__lookup", "parameters": {}, "strict": None}
    ns = {
        "type": "namespace",
        "name": "crm",
        "description": "",
        "tools": [{"type": "function", "name": "lookup"}],
    }
    err = refused({"input": "hi", "tools": [clash, ns]})
    assert err.param == "tools[1].tools[0]" and "crm__lookup" in err.message


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (
            {"type": "function", "name": "exec_command"},
            {"type": "function", "function": {"name": "exec_command"}},
        ),
        (
            {"type": "function", "name": "docs__search"},
            {"type": "function", "function": {"name": "docs__search"}},
        ),
        (
            {"type": "custom", "name": "apply_patch"},
            {"type": "function", "function": {"name": "apply_patch"}},
        ),
    ],
)
def test_tool_choice(choice: Any, expected: Any) -> None:
    tools = [EXEC_COMMAND, DOCS_NAMESPACE, {"type": "custom", "name": "apply_patch"}]
    out = bridged({"input": "hi", "tools": tools, "tool_choice": choice})
    assert out.body["tool_choice"] == expected and len(out.body["tools"]) == 3


def test_tool_choice_allowed_tools_keeps_only_those_tools() -> None:
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [
            {"type": "function", "name": "exec_command"},
            {"type": "namespace", "name": "docs"},
            {"type": "web_search"},
        ],
    }
    tools = [EXEC_COMMAND, DOCS_NAMESPACE, {"type": "custom", "name": "apply_patch"}, {"type": "web_search"}]
    out = bridged({"input": "hi", "tools": tools, "tool_choice": choice})
    assert out.body["tool_choice"] == "required"
    assert [t["function"]["name"] for t in out.body["tools"]] == ["exec_command", "docs__search"]
    only_hosted = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "web_search"}]}
    assert refused({"input": "hi", "tools": tools, "tool_choice": only_hosted}).param == "tool_choice"


def test_tool_choice_forcing_a_hosted_tool_is_dropped() -> None:
    out = bridged(
        {
            "input": "hi",
            "tools": [EXEC_COMMAND, {"type": "file_search", "vector_store_ids": []}],
            "tool_choice": {"type": "file_search"},
        }
    )
    assert "tool_choice" not in out.body
    assert out.dropped == ("tool_choice (forces hosted tool 'file_search', which is omitted)",)


@pytest.mark.parametrize(
    ("choice", "param"),
    [
        ({"type": "function", "name": "nope"}, "tool_choice"),
        ({"type": "custom", "name": "exec_command"}, "tool_choice"),
        ("sometimes", "tool_choice"),
        (
            {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "x"}]},
            "tool_choice.tools[0]",
        ),
    ],
)
def test_bad_tool_choice_is_refused(choice: Any, param: str) -> None:
    err = refused({"input": "hi", "tools": [EXEC_COMMAND], "tool_choice": choice})
    assert err.param == param


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ({"type": "function"}, "tools"),
        ([{"type": "function", "name": ""}], "tools[0].name"),
        ([{"name": "x"}], "tools[0]"),
        ([{"type": "function", "name": "x", "parameters": "{}"}], "tools[0].parameters"),
        ([{"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]}], "tools[0].tools[0]"),
        (
            [
                {
                    "type": "custom",
                    "name": "c",
                    "format": {"type": "grammar", "syntax": "ebnf", "definition": ""},
                }
            ],
            "tools[0].format",
        ),
    ],
)
def test_bad_tools_are_refused(tools: Any, param: str) -> None:
    assert refused({"input": "hi", "tools": tools}).param == param


# ------------------------------------------------------------------------------------------------
# options, levels, dropped fields
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ({"type": "text"}, {"type": "text"}),
        ({"type": "json_object"}, {"type": "json_object"}),
        (
            {
                "type": "json_schema",
                "name": "out",
                "schema": {"type": "object"},
                "strict": True,
                "description": "d",
            },
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "out",
                    "schema": {"type": "object"},
                    "description": "d",
                    "strict": True,
                },
            },
        ),
    ],
)
def test_text_format_becomes_response_format(fmt: dict[str, Any], expected: dict[str, Any]) -> None:
    assert bridged({"input": "hi", "text": {"format": fmt}}).body["response_format"] == expected


def test_bad_text_format_is_refused() -> None:
    assert (
        refused({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}).param
        == "text.format"
    )
    assert refused({"input": "hi", "text": {"format": {"type": "xml"}}}).param == "text.format.type"


def test_sampling_and_limits() -> None:
    out = bridged(
        {
            "input": "hi",
            "max_output_tokens": 512,
            "temperature": 0.2,
            "top_p": 0.9,
            "user": "u1",
            "safety_identifier": "s1",
        }
    )
    body = out.body
    assert (body["max_completion_tokens"], body["temperature"], body["top_p"], body["user"]) == (
        512,
        0.2,
        0.9,
        "u1",
    )
    assert "max_output_tokens" not in body and out.dropped == ("safety_identifier",)
    assert bridged({"input": "hi", "safety_identifier": "s1"}).body["user"] == "s1"


def test_non_stream_sends_no_stream_options() -> None:
    out = bridge_request({"model": "m", "input": "hi"})
    assert "stream" not in out.body and "stream_options" not in out.body
    assert out.store is True  # OpenAI's default


@pytest.mark.parametrize(
    ("effort", "level"),
    [
        ("none", Level.OFF),
        ("minimal", Level.STANDARD),
        ("low", Level.STANDARD),
        ("medium", Level.STANDARD),
        ("high", Level.DEEP),
        ("xhigh", Level.DEEP),
        ("max", Level.DEEP),
        (None, None),
    ],
)
def test_reasoning_effort_implies_a_level(effort: str | None, level: Level | None) -> None:
    out = bridged({"input": "hi", "reasoning": {"effort": effort, "summary": "detailed"}})
    assert out.level is level and out.summary == "detailed"
    assert "reasoning_effort" not in out.body and "reasoning" not in out.body


def test_reasoning_values_are_checked() -> None:
    assert refused({"input": "hi", "reasoning": {"effort": "extreme"}}).param == "reasoning.effort"
    assert refused({"input": "hi", "reasoning": {"summary": "long"}}).param == "reasoning.summary"
    assert bridged({"input": "hi", "reasoning": {"generate_summary": "concise"}}).summary == "concise"
    assert bridged({"input": "hi"}).level is None


def test_edge_fields_ride_beside_the_body_and_the_rest_is_dropped_and_listed() -> None:
    out = bridged(
        {
            "input": "hi",
            "store": True,
            "previous_response_id": "resp_1",
            "include": ["reasoning.encrypted_content"],
            "metadata": {"k": "v"},
            "truncation": "auto",
            "prompt_cache_key": "k",
            "background": False,
            "service_tier": "flex",
            "max_tool_calls": 3,
            "top_logprobs": 2,
            "stream_options": {"include_obfuscation": False},
            "reasoning": {"effort": "low", "mode": "pro"},
            "some_future_field": 1,
            "temperature": None,
        }
    )
    assert out.previous_response_id == "resp_1" and out.store is True
    assert set(out.dropped) == {
        "metadata",
        "truncation",
        "prompt_cache_key",
        "background",
        "service_tier",
        "max_tool_calls",
        "top_logprobs",
        "stream_options",
        "reasoning.mode",
        "some_future_field",
    }
    assert set(out.body) == {"model", "messages", "stream", "stream_options"}
    assert out.body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("field", ["conversation", "prompt"])
def test_server_side_state_the_bridge_lacks_is_refused(field: str) -> None:
    err = refused({"input": "hi", field: {"id": "x"}})
    assert err.param == field and err.code == "unsupported_parameter"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"store": "no"}, "store"),
        ({"include": "reasoning.encrypted_content"}, "include"),
        ({"previous_response_id": 7}, "previous_response_id"),
        ({"stream": "yes"}, "stream"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"instructions": ["x"]}, "instructions"),
        ({"reasoning": "high"}, "reasoning"),
        ({"text": "json"}, "text"),
    ],
)
def test_bad_field_types_are_refused(body: dict[str, Any], param: str) -> None:
    assert refused({"input": "hi", **body}).param == param


def test_the_error_body_is_openai_shaped() -> None:
    err = refused({"input": [{"type": "item_reference", "id": "msg_9"}]})
    payload = err.payload()
    assert payload == {
        "error": {
            "message": err.message,
            "type": "invalid_request_error",
            "code": "unsupported_item",
            "param": "input[0]",
        }
    }
    assert "Send the item itself" in err.message


# ------------------------------------------------------------------------------------------------
# properties
# ------------------------------------------------------------------------------------------------


def jsonish(value: Any) -> Any:
    """What a JSON parser would have given: lists for every iterable the types allow."""
    if isinstance(value, dict):
        return {k: jsonish(v) for k, v in value.items()}
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if hasattr(value, "__iter__"):  # (some generated iterables never end: a JSON list does)
        return [jsonish(v) for v in itertools.islice(value, 8)]
    return repr(value)  # an `object` field: any JSON value will do


# Hypothesis sometimes prints the repr of these strategies (drawn from the SDK's typed unions: ~60 kB)
# and warns that it is large; the repr says nothing a failure would not, so that warning is noise.
@pytest.mark.filterwarnings("ignore:Generating overly large repr:hypothesis.errors.HypothesisWarning")
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    items=st.lists(st.from_type(ResponseInputItemParam), max_size=6),
    tools=st.lists(st.from_type(ToolParam), max_size=3),
    hosted=st.sampled_from(["omit", "refuse"]),
)
def test_any_typed_items_give_a_valid_chat_body_or_a_bad_request(items: Any, tools: Any, hosted: Any) -> None:
    body = {"model": "m", "input": jsonish(items), "tools": jsonish(tools), "tool_choice": "auto"}
    try:
        out = bridge_request(body, hosted_tools=hosted)
    except BadRequest as err:
        assert err.message and err.payload()["error"]["type"] == "invalid_request_error"
        return
    assert_valid_chat(out)


ids = st.text("abcdefghij0123456789_", min_size=1, max_size=8)
texts = st.text(max_size=20)
input_part = st.one_of(
    st.builds(lambda t: {"type": "input_text", "text": t}, texts),
    st.builds(lambda u: {"type": "input_image", "image_url": f"https://img/{u}", "detail": "auto"}, ids),
)
user_message = st.builds(
    lambda role, content: {"type": "message", "role": role, "content": content},
    st.sampled_from(["user", "developer", "system"]),
    st.one_of(texts, st.lists(st.builds(lambda t: {"type": "input_text", "text": t}, texts), max_size=3)),
)
reasoning = st.builds(
    lambda rid, summary, enc: {
        "type": "reasoning",
        "id": f"rs_{rid}",
        "summary": [{"type": "summary_text", "text": s} for s in summary],
        "encrypted_content": enc,
    },
    ids,
    st.lists(texts, max_size=2),
    st.one_of(st.none(), texts),
)


@st.composite
def assistant_turn(draw: st.DrawFn, n: int) -> list[dict[str, Any]]:
    """One response's output items echoed, then the outputs of its calls in any order, possibly
    interleaved with the calls (as clients record parallel calls)."""
    head: list[dict[str, Any]] = draw(st.lists(reasoning, max_size=2))
    if draw(st.booleans()):
        head.append(
            {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": draw(texts), "annotations": []}],
            }
        )
    calls, outputs = [], []
    for k in range(draw(st.integers(0, 3))):
        call_id = f"call_{n}_{k}"
        if draw(st.booleans()):
            calls.append({"type": "function_call", "call_id": call_id, "name": draw(ids), "arguments": "{}"})
            out_type = "function_call_output"
        else:
            calls.append(
                {"type": "custom_tool_call", "call_id": call_id, "name": draw(ids), "input": draw(texts)}
            )
            out_type = "custom_tool_call_output"
        output = draw(st.one_of(texts, st.lists(input_part, max_size=2)))
        outputs.append({"type": out_type, "call_id": call_id, "output": output})
    tail: list[dict[str, Any]] = []
    pending = list(calls)
    for out in draw(st.permutations(outputs)):  # each output after its call, maybe after more calls
        while pending and all(c["call_id"] != out["call_id"] for c in tail):
            tail.append(pending.pop(0))
        if pending and draw(st.booleans()):
            tail.append(pending.pop(0))
        tail.append(out)
    return head + tail


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [draw(user_message)]
    for n in range(draw(st.integers(0, 4))):
        items += draw(assistant_turn(n))
        if draw(st.booleans()):
            items.append(draw(user_message))
    return items


@settings(max_examples=300, deadline=None)
@given(conversations())
def test_well_formed_conversations_always_bridge_to_valid_chat(items: list[dict[str, Any]]) -> None:
    conforms(RESPONSES, {"model": "m", "input": items, "stream": True})
    out = bridged({"input": items})
    calls = [i["call_id"] for i in items if i["type"] in ("function_call", "custom_tool_call")]
    made = [c["id"] for m in out.body["messages"] for c in m.get("tool_calls", [])]
    assert sorted(made) == sorted(calls)
    restored = [r.id for turn in out.reasoning for r in turn.items]
    stray = [d for d in out.dropped if "reasoning" in d]
    assert len(restored) + len(stray) == sum(i["type"] == "reasoning" for i in items)
