"""What level a body's own thinking knobs ask (proxy.core.policy.body_level), per entry of the shipped
providers table and per door; the bodies capped at a level; where off is impossible."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.config.providers import Dialect, ProvidersTable
from proxy.core.controls import Level
from proxy.core.policy.body_level import (
    budget_number,
    can_turn_off,
    cap_messages,
    cap_responses,
    chat_asks,
    knobs_level,
    messages_can_turn_off,
    messages_level,
    responses_can_turn_off,
    responses_level,
    strip_knobs,
)

TABLE = ProvidersTable.load()
OFF, STANDARD, DEEP = Level.OFF, Level.STANDARD, Level.DEEP


BASE_URLS = {
    "deepseek": "https://api.deepseek.com",
    "dashscope": "https://dashscope.aliyuncs.com/compatible-mode/v1",
    "kimi": "https://api.moonshot.ai/v1",
    "minimax": "https://api.minimax.io/v1",
    "siliconflow": "https://api.siliconflow.cn/v1",
    "openai": "https://api.openai.com/v1",
    "azure": "https://acme.openai.azure.com/openai/v1",
    "gemini": "https://generativelanguage.googleapis.com/v1beta/openai",
    "anthropic": "https://api.anthropic.com/v1",
    "xai": "https://api.x.ai/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "mistral": "https://api.mistral.ai/v1",
    "ollama": "http://localhost:11434/v1",
    "self-hosted": "http://10.0.0.5:8000/v1",
}


def dialect(entry: str, model: str | None = None) -> Dialect:
    """The entry's dialect for `model`, as a request to that provider finds it."""
    found = TABLE.match(BASE_URLS[entry], model)
    assert found.name == entry
    return found


def every_dialect() -> list[tuple[str, Dialect]]:
    out = []
    for summary in TABLE.summaries():
        out.append((summary.name, summary.dialect))
        out += [(f"{summary.name}:{','.join(d.model_override or ())}", d) for d in summary.overrides]
    return out


EVERY = every_dialect()


# -- chat: every entry's own params read as their level ---------------------------------------------


@pytest.mark.parametrize(("name", "entry"), EVERY, ids=[name for name, _ in EVERY])
def test_each_level_s_own_params_read_as_that_level(name: str, entry: Dialect) -> None:
    """What the proxy itself sends at a level is judged that level (the lowest level that sends
    the same, where standard and deep honestly send one switch), for every entry and override:
    a body capped at a level never reads above it."""
    for level, rule in entry.levels.items():
        same = [low for low, other in entry.levels.items() if other.params == rule.params]
        lowest = min(same, key=list(Level).index)
        if rule.params:
            assert knobs_level(rule.params, entry) is lowest, (name, level, rule.params)
        else:
            assert knobs_level(rule.params or {}, entry) is None


def test_a_body_without_knobs_asks_nothing() -> None:
    assert knobs_level({"model": "m", "messages": []}, dialect("deepseek")) is None


@pytest.mark.parametrize(
    ("entry", "model", "body", "level"),
    [
        # DeepSeek: the deep knobs; high is above the table's standard (which sends none)
        ("deepseek", None, {"thinking": {"type": "enabled"}, "reasoning_effort": "max"}, DEEP),
        ("deepseek", None, {"thinking": {"type": "enabled"}}, STANDARD),
        ("deepseek", None, {"thinking": {"type": "disabled"}}, OFF),
        ("deepseek", None, {"reasoning_effort": "high"}, DEEP),
        ("deepseek", None, {"thinking": {"type": "disabled"}, "reasoning_effort": "max"}, DEEP),
        # a word no reader knows: never judged lower than deep
        ("deepseek", None, {"reasoning_effort": "ultra"}, DEEP),
        ("deepseek", None, {"thinking": {"type": "turbo"}}, DEEP),
        # DashScope / SiliconFlow: a switch and a budget (no number at standard: below 16,000)
        ("dashscope", "qwen3-max", {"enable_thinking": True}, STANDARD),
        ("dashscope", "qwen3-max", {"enable_thinking": False}, OFF),
        ("dashscope", "qwen3-max", {"enable_thinking": True, "thinking_budget": 8_000}, STANDARD),
        ("dashscope", "qwen3-max", {"enable_thinking": True, "thinking_budget": 30_000}, DEEP),
        ("siliconflow", None, {"thinking_budget": 0}, OFF),
        # Anthropic's compat chat: standard's number is 1,024
        (
            "anthropic",
            "claude-sonnet-4-5",
            {"thinking": {"type": "enabled", "budget_tokens": 1024}},
            STANDARD,
        ),
        ("anthropic", "claude-sonnet-4-5", {"thinking": {"type": "enabled", "budget_tokens": 4000}}, DEEP),
        ("anthropic", "claude-sonnet-4-5", {"thinking": {"type": "enabled", "budget_tokens": 200_000}}, DEEP),
        ("anthropic", "claude-opus-4-7", {"thinking": {"type": "adaptive"}}, STANDARD),
        # Mistral: `high` is its standard (a switch), not deep
        ("mistral", "mistral-small-latest", {"reasoning_effort": "high"}, STANDARD),
        ("mistral", "mistral-small-latest", {"reasoning_effort": "none"}, OFF),
        # OpenAI: an effort word; gpt-5.1's standard is medium
        ("openai", "o3", {"reasoning_effort": "high"}, DEEP),
        ("openai", "o3", {"reasoning_effort": "low"}, STANDARD),
        ("openai", "gpt-5.1", {"reasoning_effort": "minimal"}, STANDARD),
        # OpenRouter's reasoning object
        ("openrouter", None, {"reasoning": {"max_tokens": 50_000}}, DEEP),
        ("openrouter", None, {"reasoning": {"max_tokens": 2_000}}, STANDARD),
        ("openrouter", None, {"reasoning": {"enabled": False}}, OFF),
        ("openrouter", None, {"reasoning": {"exclude": True}}, None),
        # vLLM's template switches; Ollama's think; Gemini's thinking_config
        ("self-hosted", "Qwen/Qwen3-8B", {"chat_template_kwargs": {"enable_thinking": False}}, OFF),
        ("self-hosted", "deepseek-ai/DeepSeek-V3.1", {"chat_template_kwargs": {"thinking": True}}, STANDARD),
        ("ollama", None, {"think": "high"}, DEEP),
        ("ollama", None, {"think": False}, OFF),
        ("gemini", None, {"extra_body": {"google": {"thinking_config": {"thinking_budget": -1}}}}, DEEP),
        ("gemini", None, {"extra_body": {"google": {"thinking_config": {"thinking_budget": 0}}}}, OFF),
        ("gemini", None, {"extra_body": {"google": {"thinking_config": {"include_thoughts": True}}}}, None),
    ],
)
def test_the_level_a_chat_body_asks(
    entry: str, model: str | None, body: dict[str, Any], level: Level | None
) -> None:
    assert knobs_level(body, dialect(entry, model)) is level


def test_a_knob_an_operator_names_that_no_reader_knows_reads_deep() -> None:
    from dataclasses import replace

    custom = replace(dialect("deepseek"), conflicts=("vendor.depth",))
    assert knobs_level({"vendor": {"depth": 3}}, custom) is DEEP
    assert knobs_level({"vendor": {"other": 3}}, custom) is None


def test_chat_asks_the_level_s_own_where_the_entry_applies_it() -> None:
    deepseek = dialect("deepseek")
    deep_knobs = {"reasoning_effort": "max"}
    assert chat_asks(deep_knobs, STANDARD, deepseek) is STANDARD  # (its params replace the knob)
    assert chat_asks(deep_knobs, None, deepseek) is DEEP  # (the knob goes as it came)
    xai = dialect("xai", "grok-4")
    assert chat_asks(deep_knobs | {"reasoning_effort": "high"}, STANDARD, xai) is DEEP  # no rule: kept
    # A Messages client's budget goes in the level's number: above standard's 1,024 it is deep.
    claude = dialect("anthropic", "claude-sonnet-4-5")
    assert chat_asks({}, STANDARD, claude, budget=200_000) is DEEP
    assert chat_asks({}, STANDARD, claude, budget=1_000) is STANDARD
    assert chat_asks({}, STANDARD, deepseek, budget=200_000) is STANDARD  # (no number: not sent)


def test_strip_knobs_removes_every_knob_of_the_entry() -> None:
    body = {
        "model": "m",
        "reasoning_effort": "high",
        "chat_template_kwargs": {"enable_thinking": True},
        "reasoning": {"effort": "high"},
    }
    assert strip_knobs(body, dialect("deepseek")) == {"model": "m"}
    assert body["reasoning_effort"] == "high"  # (a copy)


def test_budget_number() -> None:
    assert budget_number(dialect("anthropic", "claude-sonnet-4-5"), STANDARD) == 1024
    assert budget_number(dialect("anthropic", "claude-sonnet-4-5"), DEEP) == 16384
    assert budget_number(dialect("siliconflow"), DEEP) == 32768
    assert budget_number(dialect("siliconflow"), STANDARD) is None
    assert budget_number(dialect("deepseek"), STANDARD) is None


# -- off: which entries can turn thinking off ---------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "model", "possible"),
    [
        ("openai", "o3", False),  # "do not support none"
        ("openai", "o4-mini", False),
        ("openai", "gpt-5", False),  # before 5.1
        ("openai", "gpt-5-mini", False),
        ("openai", "gpt-5.1", True),
        ("openai", "gpt-5.5", True),
        ("openai", "gpt-4o", True),  # (no thinking at all unless prompted)
        ("azure", "o3", False),
        ("azure", "gpt-5", False),
        ("azure", "gpt-5.1", True),
        ("self-hosted", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", False),
        ("self-hosted", "Qwen/QwQ-32B", False),
        ("self-hosted", "Qwen/Qwen3-235B-A22B-Thinking-2507", False),
        ("self-hosted", "openai/gpt-oss-20b", False),
        ("self-hosted", "Qwen/Qwen3-8B", True),
        ("minimax", "MiniMax-M2", False),
        ("dashscope", "qwq-plus", False),
        ("dashscope", "qwen3-max", True),
        ("kimi", "kimi-k2-thinking", False),
        ("kimi", "kimi-k2.6", True),
        ("gemini", "gemini-2.5-pro", False),
        ("gemini", "gemini-2.5-flash", True),
        ("deepseek", "deepseek-v4-pro", True),
        ("anthropic", "claude-sonnet-4-5", True),
    ],
)
def test_which_entries_can_turn_thinking_off(entry: str, model: str, possible: bool) -> None:
    assert can_turn_off(dialect(entry, model)) is possible


@pytest.mark.parametrize(
    ("entry", "model", "possible"),
    [
        ("openai", "o3", False),
        ("openai", "gpt-5", False),
        ("openai", "gpt-5.1", True),  # effort none
        ("openai", "gpt-4o", True),  # (sends nothing: no reasoning)
        ("azure", "o3", False),
        ("openrouter", "deepseek/deepseek-r1", True),
    ],
)
def test_which_native_responses_entries_can_turn_thinking_off(entry: str, model: str, possible: bool) -> None:
    assert responses_can_turn_off(dialect(entry, model)) is possible


def test_both_native_messages_entries_can_turn_thinking_off() -> None:
    assert messages_can_turn_off(dialect("anthropic", "claude-sonnet-4-5").messages)
    assert messages_can_turn_off(dialect("anthropic", "claude-opus-4-7").messages)
    assert messages_can_turn_off(dialect("deepseek").messages)


# -- the native Responses door ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "model", "reasoning", "level"),
    [
        ("openai", "o3", None, None),
        ("openai", "o3", {"summary": "auto"}, None),
        ("openai", "o3", {"effort": "high"}, DEEP),
        ("openai", "o3", {"effort": "medium"}, STANDARD),
        ("openai", "gpt-5.1", {"effort": "none"}, OFF),
        ("openai", "gpt-5.1", {"effort": "xhigh"}, DEEP),
        ("openrouter", None, {"max_tokens": 50_000}, DEEP),
        ("openrouter", None, {"effort": "none", "max_tokens": 50_000}, DEEP),
        ("openrouter", None, {"enabled": True}, STANDARD),
    ],
)
def test_the_level_a_responses_body_asks(
    entry: str, model: str | None, reasoning: Any, level: Level | None
) -> None:
    body = {"model": model, "input": "hi"} | ({} if reasoning is None else {"reasoning": reasoning})
    assert responses_level(body, dialect(entry, model)) is level


def test_cap_responses_sets_the_entry_s_effort_and_drops_every_other_knob() -> None:
    body = {"model": "gpt-5.1", "reasoning": {"effort": "high", "max_tokens": 9, "summary": "auto"}}
    out, applied = cap_responses(body, STANDARD, dialect("openai", "gpt-5.1"))
    assert out == {"model": "gpt-5.1", "reasoning": {"summary": "auto", "effort": "medium"}}
    assert applied is STANDARD
    out, applied = cap_responses(
        {"model": "o3", "reasoning": {"effort": "high"}}, STANDARD, dialect("openai", "o3")
    )
    assert out == {"model": "o3"} and applied is None  # (standard: o3's default, no effort)


# -- the native Messages door -----------------------------------------------------------------------

SONNET = dialect("anthropic", "claude-sonnet-4-5").messages
OPUS = dialect("anthropic", "claude-opus-4-7").messages
DEEPSEEK = dialect("deepseek").messages


@pytest.mark.parametrize(
    ("rule", "body", "level"),
    [
        (SONNET, {}, None),
        (SONNET, {"thinking": {"type": "disabled"}}, OFF),
        (SONNET, {"thinking": {"type": "enabled", "budget_tokens": 1024}}, STANDARD),
        (SONNET, {"thinking": {"type": "enabled", "budget_tokens": 200_000}}, DEEP),
        (SONNET, {"thinking": {"type": "enabled", "budget_tokens": 2048}}, DEEP),
        (OPUS, {"thinking": {"type": "adaptive"}}, STANDARD),
        (OPUS, {"output_config": {"effort": "max"}}, DEEP),
        (OPUS, {"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}, STANDARD),
        (OPUS, {"output_config": {"format": {"type": "json_schema"}}}, None),
        (DEEPSEEK, {"thinking": {"type": "enabled"}}, STANDARD),
        (DEEPSEEK, {"thinking": {"type": "enabled", "budget_tokens": 200_000}}, DEEP),
        (DEEPSEEK, {"thinking": {"type": "enabled", "budget_tokens": 8_000}}, STANDARD),
    ],
)
def test_the_level_a_messages_body_asks(rule: Any, body: dict[str, Any], level: Level | None) -> None:
    assert messages_level(body, rule) is level


def test_cap_messages_sends_the_level_s_own_number_never_the_client_s() -> None:
    body = {"model": "claude-sonnet-4-5", "thinking": {"type": "enabled", "budget_tokens": 200_000}}
    out, applied = cap_messages(body, STANDARD, SONNET)
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 1024} and applied is STANDARD
    out, applied = cap_messages(
        {"model": "claude-opus-4-7", "output_config": {"effort": "max", "format": {"type": "x"}}},
        STANDARD,
        OPUS,
    )
    assert out == {
        "model": "claude-opus-4-7",
        "output_config": {"format": {"type": "x"}},
        "thinking": {"type": "adaptive"},
    }
    assert messages_level(out, OPUS) is STANDARD
