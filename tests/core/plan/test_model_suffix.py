"""The `model(level)` suffix: what is taken off the name, and what is left alone."""

from __future__ import annotations

import pytest

from proxy.core.controls import Level
from proxy.core.plan.model_suffix import LEVEL_WORDS, ModelSuffix, split_model


@pytest.mark.parametrize(
    ("model", "base", "word", "level"),
    [
        ("deepseek-v4-pro(deep)", "deepseek-v4-pro", "deep", Level.DEEP),
        ("deepseek-v4-pro(off)", "deepseek-v4-pro", "off", Level.OFF),
        ("gpt-5(standard)", "gpt-5", "standard", Level.STANDARD),
        # The effort words, read as the Responses door reads reasoning.effort.
        ("gpt-5(none)", "gpt-5", "none", Level.OFF),
        ("gpt-5(minimal)", "gpt-5", "minimal", Level.STANDARD),
        ("gpt-5(low)", "gpt-5", "low", Level.STANDARD),
        ("gpt-5(medium)", "gpt-5", "medium", Level.STANDARD),
        ("gpt-5(high)", "gpt-5", "high", Level.DEEP),
        ("gpt-5(xhigh)", "gpt-5", "xhigh", Level.DEEP),
        ("gpt-5(max)", "gpt-5", "max", Level.DEEP),
        # Case and spaces around the word or before the parenthesis.
        ("Kimi-K3(DEEP)", "Kimi-K3", "DEEP", Level.DEEP),
        ("kimi-k3 ( high )", "kimi-k3", " high ", Level.DEEP),
        # Ollama's name:tag keeps its tag; a provider prefix stays.
        ("qwen3:8b(deep)", "qwen3:8b", "deep", Level.DEEP),
        ("openrouter/qwen/qwen3-max(low)", "openrouter/qwen/qwen3-max", "low", Level.STANDARD),
        # Parentheses inside the name: only the last pair, at the end, is the suffix.
        ("my(v2)-model(deep)", "my(v2)-model", "deep", Level.DEEP),
        ("model(deep)(off)", "model(deep)", "off", Level.OFF),
    ],
)
def test_a_level_word_at_the_end_is_taken_off(model: str, base: str, word: str, level: Level) -> None:
    assert split_model(model) == ModelSuffix(base, word, level)


def test_auto_names_no_level_of_its_own() -> None:
    found = split_model("deepseek-v4-pro(auto)")
    assert found is not None and found.auto and found.level is None and found.model == "deepseek-v4-pro"


@pytest.mark.parametrize(
    "model",
    [
        "deepseek-v4-pro",
        "qwen3:8b",  # Ollama's tag is never read as a level
        "llama(8b)",  # parentheses, but not a level word
        "my-model(v2)",
        "model()",  # empty: ignored
        "model(8192)",  # a budget number is not a level word
        "model(deep",  # not closed
        "model(deep) ",  # not at the end
        "model(deep)-x",
        "(deep)",  # all suffix: no model left
        " (deep)",
        "model(dee p)",
        "",
    ],
)
def test_anything_else_is_left_alone(model: str) -> None:
    assert split_model(model) is None


@pytest.mark.parametrize("value", [None, 3, ["m(deep)"], {"model": "m(deep)"}])
def test_a_model_that_is_not_text_is_left_alone(value: object) -> None:
    assert split_model(value) is None


def test_the_words_are_the_levels_auto_and_the_effort_words() -> None:
    assert set(LEVEL_WORDS) == {
        "off",
        "standard",
        "deep",
        "auto",
        "none",
        "minimal",
        "low",
        "medium",
        "high",
        "xhigh",
        "max",
    }
