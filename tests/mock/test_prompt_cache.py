"""The simulated DeepSeek's context caching: a request repeating an earlier request's leading
messages (same model) reports that prefix as cache hits, in whole units of 64 tokens."""

from __future__ import annotations

from proxy.mock.prompt_cache import UNIT, PromptCache

LONG = "x" * 1000  # 250 simulated tokens


def body(*contents: str, model: str = "deepseek-v4-pro") -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": c} for c in contents]}


def test_a_repeated_prefix_is_a_cache_hit_in_units_of_64_tokens() -> None:
    cache = PromptCache()
    assert cache.hit(body(LONG, "first question")) == 0
    # The loop's next request: the same messages, then more.
    hit = cache.hit(body(LONG, "first question", "and a follow-up"))
    prefix = 3 + (4 + 250) + (4 + 4)  # count_tokens' way: base, then 4 + text per message
    assert hit == prefix // UNIT * UNIT and hit > 0


def test_no_hit_for_another_model_a_changed_first_message_or_a_short_prefix() -> None:
    cache = PromptCache()
    cache.hit(body(LONG, "q"))
    assert cache.hit(body(LONG, "q", model="deepseek-flash")) == 0
    assert cache.hit(body("changed " + LONG, "q")) == 0
    short = PromptCache()
    short.hit(body("hi"))
    assert short.hit(body("hi", "again")) == 0  # (under one unit)
