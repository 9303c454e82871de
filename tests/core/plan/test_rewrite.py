from __future__ import annotations

import copy
from typing import Any

import pytest

from proxy.core.config.providers import Dialect, ProvidersTable
from proxy.core.controls import Level
from proxy.core.plan.rewrite import rewrite_body

TABLE = ProvidersTable.load()

BASE_URLS = {
    "deepseek": "https://api.deepseek.com/v1",
    "dashscope": "https://dashscope.aliyuncs.com/compatible-mode/v1",
    "kimi": "https://api.moonshot.ai/v1",
    "minimax": "https://api.minimax.io/v1",
    "zhipu": "https://open.bigmodel.cn/api/paas/v4",
    "ark": "https://ark.cn-beijing.volces.com/api/v3",
    "siliconflow": "https://api.siliconflow.cn/v1",
    "openai": "https://api.openai.com/v1",
    "azure": "https://my-resource.openai.azure.com/openai/v1",
    "gemini": "https://generativelanguage.googleapis.com/v1beta/openai/",
    "anthropic": "https://api.anthropic.com/v1/",
    "xai": "https://api.x.ai/v1",
    "groq": "https://api.groq.com/openai/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "mistral": "https://api.mistral.ai/v1",
    "ollama": "http://localhost:11434/v1",
    "self-hosted": "http://gpu-box.internal:8000/v1",
    "sglang": "http://gpu-box.internal:30000/v1",
    "fallback": "https://llm-gateway.example/v1",
}

NOT_SUPPORTED = None
DISABLED = {"thinking": {"type": "disabled"}}
ENABLED = {"thinking": {"type": "enabled"}}

# entry -> (off, standard, deep): the params merged into the body, for a model no override matches.
EXPECTED_PARAMS: dict[str, tuple[dict[str, Any] | None, ...]] = {
    "deepseek": (DISABLED, ENABLED, {"thinking": {"type": "enabled"}, "reasoning_effort": "max"}),
    "dashscope": ({"enable_thinking": False}, {"enable_thinking": True}, {"enable_thinking": True}),
    "kimi": (DISABLED, ENABLED, ENABLED),
    "minimax": (NOT_SUPPORTED, {}, {}),
    "zhipu": (DISABLED, ENABLED, ENABLED),
    "ark": (DISABLED, ENABLED, {"thinking": {"type": "enabled"}, "reasoning_effort": "high"}),
    "siliconflow": (
        {"enable_thinking": False},
        {"enable_thinking": True},
        {"enable_thinking": True, "thinking_budget": 32768},
    ),
    "openai": (NOT_SUPPORTED, {}, {"reasoning_effort": "high"}),
    "azure": (NOT_SUPPORTED, {}, {"reasoning_effort": "high"}),
    "gemini": ({"reasoning_effort": "none"}, {}, {"reasoning_effort": "high"}),
    "anthropic": (
        {},
        {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        {"thinking": {"type": "enabled", "budget_tokens": 16384}},
    ),
    "xai": (NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED),
    "groq": (NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED),
    "openrouter": (
        {"reasoning": {"effort": "none"}},
        {"reasoning": {"enabled": True}},
        {"reasoning": {"effort": "high"}},
    ),
    "mistral": (NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED),
    "ollama": ({"reasoning_effort": "none"}, {}, {"reasoning_effort": "high"}),
    "self-hosted": (
        {"chat_template_kwargs": {"enable_thinking": False}},
        {"chat_template_kwargs": {"enable_thinking": True}},
        {"chat_template_kwargs": {"enable_thinking": True}},
    ),
    "sglang": (
        {"chat_template_kwargs": {"enable_thinking": False}},
        {"chat_template_kwargs": {"enable_thinking": True}},
        {"chat_template_kwargs": {"enable_thinking": True}},
    ),
    "fallback": ({"reasoning_effort": "none"}, {"reasoning_effort": "low"}, {"reasoning_effort": "high"}),
}

LEVELS = (Level.OFF, Level.STANDARD, Level.DEEP)


def simple_body(model: str = "test-model") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}


def dialect(entry: str, model: str | None = None) -> Dialect:
    return TABLE.match(BASE_URLS[entry], model)


def test_expectations_cover_every_shipped_entry() -> None:
    assert sorted(EXPECTED_PARAMS) == sorted(TABLE.entry_names) == sorted(BASE_URLS)


@pytest.mark.parametrize("entry", sorted(EXPECTED_PARAMS))
@pytest.mark.parametrize("level_index", range(3))
def test_every_entry_and_level_gives_the_exact_upstream_body(entry: str, level_index: int) -> None:
    level = LEVELS[level_index]
    params = EXPECTED_PARAMS[entry][level_index]
    body = simple_body()
    result = rewrite_body(body, level, dialect(entry, "test-model"))
    if params is None:
        assert result.body == simple_body()
        assert (result.level_applied, result.method) == (None, None)
    else:
        assert result.body == {**simple_body(), **params}
        assert (result.level_applied, result.method) == (level, "params")


@pytest.mark.parametrize(
    ("entry", "model", "level", "params"),
    [
        ("dashscope", "qwq-plus", Level.OFF, None),
        ("dashscope", "qwq-plus", Level.DEEP, {}),
        ("kimi", "kimi-k2-thinking", Level.OFF, None),
        ("kimi", "kimi-k3", Level.OFF, None),
        ("kimi", "kimi-k3.1-pro", Level.DEEP, {"reasoning_effort": "max"}),
        ("kimi", "kimi-k3", Level.STANDARD, {}),
        ("kimi", "kimi-k2.6", Level.STANDARD, {"thinking": {"type": "enabled"}}),
        ("gemini", "gemini-3-flash-preview", Level.OFF, None),
        ("gemini", "gemini-3-flash-preview", Level.STANDARD, {}),
        ("gemini", "gemini-3-pro-preview", Level.DEEP, {"reasoning_effort": "high"}),
        ("kimi", "moonshot-v1-8k", Level.OFF, {}),
        ("kimi", "moonshot-v1-8k", Level.STANDARD, None),
        ("siliconflow", "deepseek-ai/DeepSeek-R1", Level.DEEP, {"thinking_budget": 32768}),
        ("siliconflow", "deepseek-ai/DeepSeek-R1", Level.OFF, None),
        ("openai", "gpt-5.1", Level.OFF, {"reasoning_effort": "none"}),
        ("openai", "gpt-5.1", Level.STANDARD, {"reasoning_effort": "medium"}),
        ("openai", "gpt-4o", Level.OFF, {}),
        ("gemini", "gemini-3-pro-preview", Level.OFF, None),
        ("gemini", "gemini-2.5-flash", Level.OFF, {"reasoning_effort": "none"}),
        ("anthropic", "claude-sonnet-4-6", Level.DEEP, {"thinking": {"type": "adaptive"}}),
        ("xai", "grok-4.3", Level.OFF, {"reasoning_effort": "none"}),
        ("xai", "grok-3-mini", Level.DEEP, {"reasoning_effort": "high"}),
        ("groq", "openai/gpt-oss-20b", Level.DEEP, {"reasoning_effort": "high"}),
        ("groq", "qwen/qwen3-32b", Level.STANDARD, {}),
        ("groq", "llama-3.3-70b-versatile", Level.DEEP, None),
        ("mistral", "mistral-small-latest", Level.OFF, {"reasoning_effort": "none"}),
        ("mistral", "mistral-medium-3-5", Level.DEEP, {"reasoning_effort": "high"}),
        ("mistral", "magistral-medium-latest", Level.STANDARD, {}),
        ("zhipu", "glm-5.2", Level.DEEP, {"thinking": {"type": "enabled"}, "reasoning_effort": "max"}),
    ],
)
def test_model_overrides_give_the_exact_upstream_body(
    entry: str, model: str, level: Level, params: dict[str, Any] | None
) -> None:
    result = rewrite_body(simple_body(model), level, dialect(entry, model))
    if params is None:
        assert result.body == simple_body(model)
        assert result.level_applied is None
    else:
        assert result.body == {**simple_body(model), **params}
        assert result.level_applied is level


def test_no_level_returns_the_very_same_body() -> None:
    for entry, field in (("deepseek", "reasoning_content"), ("self-hosted", "reasoning"), ("openai", "x")):
        body = {"model": "m", "messages": [{"role": "assistant", "content": "x", field: "r"}]}
        result = rewrite_body(body, None, dialect(entry))
        assert result.body is body, entry
        assert (result.level_applied, result.method) == (None, None)


def test_no_level_still_puts_reasoning_in_the_field_the_upstream_reads() -> None:
    # recent vLLM reads `reasoning` and silently drops `reasoning_content` (vllm#38488)
    sent = {"role": "assistant", "content": "x", "reasoning_content": "r", "tool_calls": [tool_call("c1")]}
    body = {"model": "Qwen/Qwen3-8B", "messages": [{"role": "user", "content": "q"}, sent]}
    result = rewrite_body(body, None, dialect("self-hosted", "Qwen/Qwen3-8B"))
    assert result.body["messages"][1] == {
        "role": "assistant",
        "content": "x",
        "reasoning": "r",
        "tool_calls": [tool_call("c1")],
    }
    assert list(result.body["messages"][1]) == ["role", "content", "reasoning", "tool_calls"]
    assert result.body["messages"][0] is body["messages"][0]
    assert body["messages"][1] is sent and "reasoning_content" in sent  # the caller's body untouched
    assert result.level_applied is None


# ---- knobs ----------------------------------------------------------------------------------------


def knobbed_body() -> dict[str, Any]:
    return {
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        "thinking": {"type": "enabled", "budget_tokens": 4000},
        "enable_thinking": True,
        "thinking_budget": 100,
        "reasoning_effort": "low",
        "reasoning": {"effort": "low", "exclude": True},
        "think": True,
        "chat_template_kwargs": {"enable_thinking": True, "thinking": True, "add_generation_prompt": True},
        "extra_body": {"google": {"thinking_config": {"thinking_budget": 0}}},
        "temperature": 0.2,
    }


def test_conflicting_knobs_are_removed_before_merging() -> None:
    result = rewrite_body(knobbed_body(), Level.STANDARD, dialect("deepseek"))
    assert result.body == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        "chat_template_kwargs": {"add_generation_prompt": True},  # only the thinking keys go
        "temperature": 0.2,
        "thinking": {"type": "enabled"},  # the client's budget_tokens does not leak into the merge
    }


def test_a_parent_emptied_by_removal_is_dropped() -> None:
    body = {"model": "m", "messages": [], "chat_template_kwargs": {"enable_thinking": False}}
    assert rewrite_body(body, Level.DEEP, dialect("ollama")).body == {
        "model": "m",
        "messages": [],
        "reasoning_effort": "high",
    }


def test_openrouter_keeps_the_clients_exclude_and_merges_the_level() -> None:
    result = rewrite_body(knobbed_body(), Level.DEEP, dialect("openrouter"))
    assert result.body["reasoning"] == {"exclude": True, "effort": "high"}
    assert "reasoning_effort" not in result.body  # "Only one of reasoning and reasoning_effort"


def test_a_level_the_provider_lacks_sends_nothing_and_removes_nothing() -> None:
    body = {"model": "grok-4", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "low"}
    result = rewrite_body(body, Level.OFF, dialect("xai", "grok-4"))
    assert result.body == body
    assert (result.level_applied, result.method) == (None, None)


def test_the_callers_body_is_never_mutated() -> None:
    cases = [
        ("deepseek", None, Level.DEEP),
        ("openrouter", None, Level.OFF),
        ("ollama", None, Level.STANDARD),
        ("minimax", None, Level.DEEP),
        ("openai", "gpt-4o", Level.DEEP),
        ("xai", "grok-4", Level.OFF),
    ]
    for entry, model, level in cases:
        body = knobbed_body()
        body["messages"] = conversation()
        before = copy.deepcopy(body)
        rewrite_body(body, level, dialect(entry, model))
        assert body == before, (entry, level)


def test_the_result_shares_nothing_with_the_table() -> None:
    d = dialect("deepseek")
    first = rewrite_body(simple_body(), Level.DEEP, d).body
    first["thinking"]["type"] = "tampered"
    second = rewrite_body(simple_body(), Level.DEEP, d).body
    assert second["thinking"] == {"type": "enabled"}
    assert d.levels[Level.DEEP].params == {"thinking": {"type": "enabled"}, "reasoning_effort": "max"}


# ---- replay ---------------------------------------------------------------------------------------


def tool_call(call_id: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
    }


def conversation() -> list[dict[str, Any]]:
    """A tool loop after a plain turn, as a client sends it back with the proxy's normalized field."""
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello <think>this is the user's text</think>"},
        {"role": "assistant", "content": "Hi.", "reasoning_content": "greet back"},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "need the tool",
            "tool_calls": [tool_call("c1")],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 3}'},
        {"role": "assistant", "content": "3 °C.", "reasoning_content": "read the result"},
        {"role": "user", "content": "Thanks"},
    ]


def assistant_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "assistant"]


def test_deepseek_tool_loop_keeps_reasoning_on_the_tool_call_turn_only() -> None:
    result = rewrite_body(
        {"model": "deepseek-v4-flash", "messages": conversation()}, Level.STANDARD, dialect("deepseek")
    )
    plain, tool_turn, answer = assistant_messages(result.body)
    assert plain == {"role": "assistant", "content": "Hi."}
    assert tool_turn == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "need the tool",
        "tool_calls": [tool_call("c1")],
    }
    assert list(tool_turn) == ["role", "content", "reasoning_content", "tool_calls"]  # order kept
    assert answer == {"role": "assistant", "content": "3 °C."}
    # everything that is not an assistant message is untouched
    others = [m for m in result.body["messages"] if m["role"] != "assistant"]
    assert others == [m for m in conversation() if m["role"] != "assistant"]


def test_tool_call_turn_without_reasoning_gets_no_placeholder() -> None:
    messages = [{"role": "assistant", "content": None, "tool_calls": [tool_call("c1")]}]
    for entry in ("deepseek", "kimi", "zhipu"):
        result = rewrite_body({"model": "m", "messages": messages}, Level.STANDARD, dialect(entry))
        assert result.body["messages"] == messages


def test_ollama_receives_reasoning_content_as_reasoning() -> None:
    result = rewrite_body({"model": "qwen3", "messages": conversation()}, Level.DEEP, dialect("ollama"))
    plain, tool_turn, answer = assistant_messages(result.body)
    assert plain == {"role": "assistant", "content": "Hi.", "reasoning": "greet back"}
    assert tool_turn["reasoning"] == "need the tool" and "reasoning_content" not in tool_turn
    assert answer == {"role": "assistant", "content": "3 °C.", "reasoning": "read the result"}


def test_keep_takes_reasoning_when_reasoning_content_is_absent_and_drops_details() -> None:
    message = {
        "role": "assistant",
        "content": "x",
        "reasoning": "r",
        "reasoning_details": [{"type": "reasoning.text"}],
    }
    result = rewrite_body({"model": "m", "messages": [message]}, Level.STANDARD, dialect("kimi"))
    # kimi's policy is tool_calls: a message without tool calls is stripped
    assert result.body["messages"] == [{"role": "assistant", "content": "x"}]
    message["tool_calls"] = [tool_call("c9")]
    result = rewrite_body({"model": "m", "messages": [message]}, Level.STANDARD, dialect("kimi"))
    assert result.body["messages"] == [
        {"role": "assistant", "content": "x", "reasoning_content": "r", "tool_calls": [tool_call("c9")]}
    ]


def test_minimax_gets_reasoning_back_inline_in_content() -> None:
    result = rewrite_body(
        {"model": "MiniMax-M2.5", "messages": conversation()}, Level.STANDARD, dialect("minimax")
    )
    plain, tool_turn, answer = assistant_messages(result.body)
    assert plain == {"role": "assistant", "content": "<think>greet back</think>\n\nHi."}
    assert tool_turn == {
        "role": "assistant",
        "content": "<think>need the tool</think>",
        "tool_calls": [tool_call("c1")],
    }
    assert answer["content"] == "<think>read the result</think>\n\n3 °C."


def test_minimax_reasoning_details_and_raw_content_travel_unchanged() -> None:
    details = [{"type": "reasoning.text", "id": "r1", "text": "thought", "index": 0}]
    with_details = {
        "role": "assistant",
        "content": "A",
        "reasoning_details": details,
        "reasoning_content": "thought",
    }
    raw = {"role": "assistant", "content": "<think>\nthought\n</think>\n\nA", "reasoning_content": "thought"}
    parts = {"role": "assistant", "content": [{"type": "text", "text": "A"}], "reasoning_content": "t"}
    result = rewrite_body(
        {"model": "m", "messages": [with_details, raw, parts]}, Level.DEEP, dialect("minimax")
    )
    assert result.body["messages"] == [
        {"role": "assistant", "content": "A", "reasoning_details": details},
        {"role": "assistant", "content": "<think>\nthought\n</think>\n\nA"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "<think>t</think>"}, {"type": "text", "text": "A"}],
        },
    ]


def test_openrouter_gets_reasoning_details_back_unchanged() -> None:
    details = [{"type": "reasoning.encrypted", "data": "opaque", "id": "r1", "format": "anthropic-claude-v1"}]
    message = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "visible",
        "reasoning_details": details,
        "tool_calls": [tool_call("c1")],
    }
    result = rewrite_body({"model": "m", "messages": [message]}, Level.STANDARD, dialect("openrouter"))
    assert result.body["messages"] == [
        {"role": "assistant", "content": None, "reasoning_details": details, "tool_calls": [tool_call("c1")]}
    ]


def test_strip_removes_reasoning_fields_inline_blocks_and_thinking_parts() -> None:
    messages = [
        {"role": "user", "content": "keep <think>user text</think> as is"},
        {"role": "assistant", "content": "<think>a\nb</think>\n\nAnswer", "reasoning_content": "x"},
        {"role": "assistant", "content": "Answer <think>cut off while thinking", "reasoning": "y"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": [{"type": "text", "text": "hmm"}]},
                {"type": "text", "text": "<think>t</think>Final"},
            ],
            "reasoning_details": [{"type": "reasoning.text", "text": "z"}],
        },
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c1")], "reasoning_content": "w"},
    ]
    result = rewrite_body({"model": "m", "messages": messages}, Level.STANDARD, dialect("fallback"))
    assert result.body["messages"] == [
        {"role": "user", "content": "keep <think>user text</think> as is"},
        {"role": "assistant", "content": "Answer"},
        {"role": "assistant", "content": "Answer "},
        {"role": "assistant", "content": [{"type": "text", "text": "Final"}]},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c1")]},
    ]


def test_strip_uses_the_entrys_tags() -> None:
    messages = [{"role": "assistant", "content": "<thought>x</thought>Answer"}]
    gemini = rewrite_body(
        {"model": "gemini-2.5-flash", "messages": messages}, Level.STANDARD, dialect("gemini")
    )
    assert gemini.body["messages"] == [{"role": "assistant", "content": "Answer"}]
    other = rewrite_body({"model": "m", "messages": messages}, Level.STANDARD, dialect("fallback"))
    assert other.body["messages"] == messages


def implicit_open_dialect() -> Dialect:
    table = ProvidersTable.from_text(
        "providers:\n"
        "  local: {docs: 'https://l.example', match: ['localhost:8080'], conflicts: [],"
        " levels: {standard: {params: {}}}, reasoning: {tags: [think], implicit_open: true},"
        " replay: {mode: strip}}\n"
        "  fallback: {docs: 'https://f.example', match: ['*'], levels: {}, conflicts: [],"
        " reasoning: {tags: []}, replay: {mode: strip}}\n"
    )
    return table.match("http://localhost:8080/v1")


def test_strip_with_an_implicitly_opened_tag_drops_everything_before_the_close() -> None:
    messages = [
        {"role": "assistant", "content": "reasoning the template opened</think>\n\nAnswer"},
        {"role": "assistant", "content": "Plain answer, no tags"},
        {"role": "assistant", "content": "<think>explicit</think>Answer 2"},
    ]
    result = rewrite_body({"model": "m", "messages": messages}, Level.STANDARD, implicit_open_dialect())
    assert [m["content"] for m in result.body["messages"]] == ["Answer", "Plain answer, no tags", "Answer 2"]


@pytest.mark.parametrize(
    ("model", "level"),
    [
        ("openai/gpt-oss-120b", Level.DEEP),
        ("openai/gpt-oss-120b", None),  # no level: the client's own fields still go
        ("llama-3.3-70b-versatile", Level.STANDARD),  # no rule for the level
        ("qwen/qwen3-32b", Level.OFF),
    ],
)
def test_groq_history_never_carries_reasoning(model: str, level: Level | None) -> None:
    # Groq: 400 "property 'reasoning_content' is unsupported" (and the same for `reasoning`)
    messages = [
        *conversation(),
        {"role": "assistant", "content": "ok", "reasoning": "r", "reasoning_details": [{"text": "r"}]},
    ]
    result = rewrite_body({"model": model, "messages": messages}, level, dialect("groq", model))
    for message in assistant_messages(result.body):
        assert not {"reasoning_content", "reasoning", "reasoning_details"} & set(message)
    assert [m.get("content") for m in result.body["messages"]] == [m.get("content") for m in messages]


@pytest.mark.parametrize(("entry", "model"), [("zhipu", "glm-4.7"), ("kimi", "kimi-k2.7-code")])
def test_preserved_thinking_keeps_reasoning_on_every_assistant_turn(entry: str, model: str) -> None:
    result = rewrite_body({"model": model, "messages": conversation()}, Level.STANDARD, dialect(entry, model))
    assert [m.get("reasoning_content") for m in assistant_messages(result.body)] == [
        "greet back",
        "need the tool",
        "read the result",
    ]


def test_kimi_k2_5_keeps_reasoning_on_tool_call_turns_only() -> None:
    result = rewrite_body(
        {"model": "kimi-k2.5", "messages": conversation()}, Level.STANDARD, dialect("kimi", "kimi-k2.5")
    )
    assert [m.get("reasoning_content") for m in assistant_messages(result.body)] == [
        None,
        "need the tool",
        None,
    ]
    assert result.body["thinking"] == {"type": "enabled"}  # k2.5 takes no `keep`


# ---- every-turn replay entries: the knob that asks the upstream to keep what is replayed ----------

# (entry, model, the level's own params, the replay params merged beside them, the field replayed)
EVERY_TURN = [
    (
        "kimi",
        "kimi-k2.6",
        {"thinking": {"type": "enabled"}},
        {"thinking": {"type": "enabled", "keep": "all"}},
        "reasoning_content",
    ),
    (
        "zhipu",
        "glm-5",
        {"thinking": {"type": "enabled"}},
        {"thinking": {"type": "enabled", "clear_thinking": False}},
        "reasoning_content",
    ),
    (
        "zhipu",
        "glm-5.2",
        {"thinking": {"type": "enabled"}},
        {"thinking": {"type": "enabled", "clear_thinking": False}},
        "reasoning_content",
    ),
    (
        "self-hosted",
        "Qwen/Qwen3.6-35B-A3B",
        {"chat_template_kwargs": {"enable_thinking": True}},
        {"chat_template_kwargs": {"enable_thinking": True, "preserve_thinking": True}},
        "reasoning",
    ),
    (  # the same family on SGLang: the field SGLang reads
        "sglang",
        "Qwen/Qwen3.6-35B-A3B",
        {"chat_template_kwargs": {"enable_thinking": True}},
        {"chat_template_kwargs": {"enable_thinking": True, "preserve_thinking": True}},
        "reasoning_content",
    ),
]


@pytest.mark.parametrize(("entry", "model", "alone", "replaying", "field"), EVERY_TURN)
@pytest.mark.parametrize("level", [Level.STANDARD, Level.DEEP])
def test_a_replayed_history_asks_the_upstream_to_keep_it(
    entry: str, model: str, alone: dict[str, Any], replaying: dict[str, Any], field: str, level: Level
) -> None:
    result = rewrite_body({"model": model, "messages": conversation()}, level, dialect(entry, model))
    for key, value in replaying.items():
        assert result.body[key] == value
    assert [m.get(field) for m in assistant_messages(result.body)] == [
        "greet back",
        "need the tool",
        "read the result",
    ]
    # a first turn has nothing to keep: the level's own params only
    first = rewrite_body(simple_body(model), level, dialect(entry, model))
    expected = dict(alone)
    if (entry, level) == ("zhipu", Level.DEEP) and model == "glm-5.2":
        expected["reasoning_effort"] = "max"
    assert first.body == {**simple_body(model), **expected}


@pytest.mark.parametrize(("entry", "model", "alone", "replaying", "field"), EVERY_TURN)
def test_off_and_no_level_never_send_the_keep_knob(
    entry: str, model: str, alone: dict[str, Any], replaying: dict[str, Any], field: str
) -> None:
    body = {"model": model, "messages": conversation()}
    off = rewrite_body(body, Level.OFF, dialect(entry, model))
    assert "keep" not in str(off.body) and "clear_thinking" not in str(off.body)
    assert "preserve_thinking" not in str(off.body)
    untouched = rewrite_body(body, None, dialect(entry, model))
    assert {k: v for k, v in untouched.body.items() if k != "messages"} == {"model": model}


def test_the_keep_knob_does_not_override_the_client_s_own_choice_of_level_knobs() -> None:
    # The client's `thinking` is a conflicting knob: removed, then the level and the replay knob set.
    body = {"model": "kimi-k2.6", "messages": conversation(), "thinking": {"type": "disabled", "keep": None}}
    result = rewrite_body(body, Level.STANDARD, dialect("kimi", "kimi-k2.6"))
    assert result.body["thinking"] == {"type": "enabled", "keep": "all"}


# ---- Gemini 3: a history it did not sign ----------------------------------------------------------

SKIP = "skip_thought_signature_validator"


def gemini_history(signature: str | None) -> list[dict[str, Any]]:
    call: dict[str, Any] = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    if signature is not None:
        call["extra_content"] = {"google": {"thought_signature": signature}}
    second = {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}
    return [
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": None, "tool_calls": [dict(call, id="c0")]},
        {"role": "tool", "tool_call_id": "c0", "content": "x"},
        {"role": "user", "content": "now"},
        {"role": "assistant", "content": None, "tool_calls": [call, second]},
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
        {"role": "tool", "tool_call_id": "c2", "content": "2"},
    ]


def signature_of(call: dict[str, Any]) -> Any:
    return call.get("extra_content", {}).get("google", {}).get("thought_signature")


@pytest.mark.parametrize("level", [None, Level.OFF, Level.STANDARD, Level.DEEP])
def test_gemini_3_gets_the_documented_placeholder_where_a_signature_is_missing(level: Level | None) -> None:
    model = "gemini-3-flash-preview"
    body = {"model": model, "messages": gemini_history(None)}
    result = rewrite_body(body, level, dialect("gemini", model))
    current = result.body["messages"][4]["tool_calls"]
    assert signature_of(current[0]) == SKIP  # the first call of the current turn's step
    assert "extra_content" not in current[1]  # Gemini checks the first call of a step only
    assert "extra_content" not in result.body["messages"][1]["tool_calls"][0]  # an earlier turn
    assert "extra_content" not in body["messages"][4]["tool_calls"][0]  # the caller's body untouched


def test_a_real_gemini_signature_is_never_replaced() -> None:
    model = "gemini-3-pro-preview"
    body = {"model": model, "messages": gemini_history("real-signature")}
    result = rewrite_body(body, None, dialect("gemini", model))
    assert result.body is body
    assert signature_of(result.body["messages"][4]["tool_calls"][0]) == "real-signature"


def test_gemini_2_5_histories_are_left_as_they_came() -> None:
    body = {"model": "gemini-2.5-flash", "messages": gemini_history(None)}
    assert rewrite_body(body, None, dialect("gemini", "gemini-2.5-flash")).body is body


# ---- prompted thinking ----------------------------------------------------------------------------

OPENAI_INSTRUCTIONS = dialect("openai", "gpt-4o").instructions


def instruction(name: str, lang: str = "en") -> str:
    return OPENAI_INSTRUCTIONS[name][lang]


def is_instruction(message: dict[str, Any]) -> bool:
    texts = {text for pair in OPENAI_INSTRUCTIONS.values() for text in pair.values()}
    return message.get("role") == "system" and message.get("content") in texts


@pytest.mark.parametrize(("level", "name"), [(Level.STANDARD, "think_standard"), (Level.DEEP, "think_deep")])
@pytest.mark.parametrize("entry", ["openai", "azure"])
def test_prompt_levels_insert_exactly_one_instruction_at_position_zero(
    entry: str, level: Level, name: str
) -> None:
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}],
        "reasoning_effort": "high",  # gpt-4o rejects it: a conflicting knob
    }
    result = rewrite_body(body, level, dialect(entry, "gpt-4o"))
    assert (result.level_applied, result.method) == (level, "prompt")
    assert result.body == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": instruction(name)},
            {"role": "system", "content": "You are terse."},  # the client's own, not merged into
            {"role": "user", "content": "hi"},
        ],
    }


def test_off_on_a_prompted_model_injects_nothing() -> None:
    body = simple_body("gpt-4.1-mini")
    result = rewrite_body(body, Level.OFF, dialect("openai", "gpt-4.1-mini"))
    assert result.body == simple_body("gpt-4.1-mini")
    assert (result.level_applied, result.method) == (Level.OFF, "params")


def test_chinese_callers_get_the_chinese_instruction() -> None:
    result = rewrite_body(simple_body("gpt-4o"), Level.DEEP, dialect("openai", "gpt-4o"), zh=True)
    assert result.body["messages"][0] == {"role": "system", "content": instruction("think_deep", "zh")}


def test_history_is_cleaned_before_the_instruction_is_injected() -> None:
    messages = [
        {"role": "system", "content": instruction("think_standard")},  # an old copy of ours (en)
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>2+2 is 4</think>\n\n4", "reasoning_content": "2+2 is 4"},
        {"role": "system", "content": [{"type": "text", "text": instruction("think_deep", "zh") + "\n"}]},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "<think>3+3=6", "reasoning": "3+3=6"},  # cut off mid-thought
        {"role": "developer", "content": "  " + instruction("think_deep") + "  "},
        {"role": "user", "content": "And 4+4?"},
    ]
    body = {"model": "gpt-4o", "messages": messages}
    for level, name in ((Level.STANDARD, "think_standard"), (Level.DEEP, "think_deep")):
        result = rewrite_body(body, level, dialect("openai", "gpt-4o"))
        assert result.body["messages"] == [
            {"role": "system", "content": instruction(name)},
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And 3+3?"},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "And 4+4?"},
        ]


def test_rewriting_a_rewritten_body_still_has_one_instruction() -> None:
    d = dialect("openai", "gpt-4o")
    once = rewrite_body(simple_body("gpt-4o"), Level.DEEP, d).body
    twice = rewrite_body(once, Level.STANDARD, d).body
    assert sum(1 for m in twice["messages"] if is_instruction(m)) == 1
    assert twice["messages"][0]["content"] == instruction("think_standard")


def test_old_instructions_are_dropped_even_when_the_level_is_applied_by_params() -> None:
    messages = [{"role": "system", "content": instruction("think_deep")}, {"role": "user", "content": "hi"}]
    result = rewrite_body({"model": "o3", "messages": messages}, Level.DEEP, dialect("openai", "o3"))
    assert result.body["messages"] == [{"role": "user", "content": "hi"}]


def test_a_prompt_level_without_messages_applies_nothing() -> None:
    result = rewrite_body({"model": "gpt-4o", "prompt": "legacy"}, Level.DEEP, dialect("openai", "gpt-4o"))
    assert result.body == {"model": "gpt-4o", "prompt": "legacy"}
    assert (result.level_applied, result.method) == (None, None)


def test_odd_messages_pass_through() -> None:
    messages: list[Any] = ["not a dict", {"role": "assistant"}, {"content": "no role"}]
    result = rewrite_body({"model": "m", "messages": messages}, Level.STANDARD, dialect("deepseek"))
    assert result.body["messages"] == messages
