"""proxy.core.usage: one reading of an answer's token counts, and the reasoning estimate."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from proxy.core.usage import (
    ESTIMATED,
    ESTIMATED_MARKER,
    REPORTED,
    ReasoningTally,
    ReasoningTokens,
    TokenUsage,
    account,
    cached_input,
    estimate_tokens,
    fill_final_usage,
    fill_reasoning,
    tally_completion,
    text_tokens,
)

# -- the estimator ---------------------------------------------------------------------------------


def test_english_text_is_about_three_tenths_of_a_token_a_character() -> None:
    text = "Let me think about the weather in Paris before I answer. " * 10  # 570 characters
    assert text_tokens(text) == round(len(text) * 0.3)


def test_chinese_text_is_about_six_tenths_of_a_token_a_character() -> None:
    text = "我们先想一想巴黎的天气再回答" * 10  # 140 characters, three UTF-8 bytes each
    assert text_tokens(text) == round(len(text) * 0.6)


def test_mixed_text_counts_each_script_at_its_own_rate() -> None:
    english, chinese = "abcdefghij", "中文中文中文中文中文"
    assert text_tokens(english + chinese) == round(10 * 0.3 + 10 * 0.6)
    assert estimate_tokens(20, 20) == 9


def test_any_reasoning_text_is_at_least_one_token_and_none_is_unknown() -> None:
    assert text_tokens("a") == 1
    assert ReasoningTally().estimate() is None


def test_the_tally_counts_what_the_stream_tells_it_across_choices() -> None:
    tally = ReasoningTally()
    for index, piece in enumerate(["Let me ", "think ", "中文"]):
        tally(index % 2, piece)
    assert tally.estimate() == text_tokens("Let me think 中文")


def test_a_lone_surrogate_in_reasoning_text_is_counted_not_an_error() -> None:
    tally = ReasoningTally()
    tally.add("a\ud800b")
    assert tally.estimate() == 1


def test_a_following_tally_reads_the_texts_it_follows_each_time_it_is_asked() -> None:
    texts = ["Let me ", "think"]
    tally = ReasoningTally()
    tally.follow(lambda: texts)
    assert tally.estimate() == text_tokens("Let me think")
    texts.append(" more about it")
    assert tally.estimate() == text_tokens("Let me think more about it")


def test_a_following_tally_counts_as_one_told_each_piece() -> None:
    pieces = ["Let me ", "思考一下", "", "a\ud800b", " — done"]
    told = ReasoningTally()
    for piece in pieces:
        told.add(piece)
    following = ReasoningTally()
    following.follow(lambda: pieces)
    assert following.estimate() == told.estimate() is not None
    nothing = ReasoningTally()
    nothing.follow(list)
    assert nothing.estimate() is None


# -- cached input tokens ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "cached"),
    [
        ({"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 64}}, 64),  # OpenAI
        (
            {"prompt_tokens": 100, "prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36},
            64,
        ),  # DeepSeek
        ({"prompt_tokens": 100, "cached_tokens": 64}, 64),  # Kimi
        ({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 64}}, 64),  # Responses
        ({"input_tokens": 36, "cache_read_input_tokens": 64}, 64),  # Anthropic
        # DeepSeek may send both shapes, one of them empty: the count above zero wins.
        ({"prompt_tokens_details": {"cached_tokens": 0}, "prompt_cache_hit_tokens": 64}, 64),
        ({"prompt_tokens_details": {"cached_tokens": 0}, "prompt_cache_hit_tokens": 0}, 0),
        ({"prompt_tokens": 100}, None),  # nothing said about the cache
        ({"prompt_tokens_details": None, "prompt_cache_hit_tokens": True}, None),  # not counts
    ],
)
def test_cached_input_tokens_in_every_shape(usage: dict[str, Any], cached: int | None) -> None:
    assert cached_input(usage) == cached
    assert account(usage).cached_input == cached


# -- the one reasoning count -----------------------------------------------------------------------


def test_the_upstreams_count_is_used_as_reported() -> None:
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 50,
        "completion_tokens_details": {"reasoning_tokens": 40},
    }
    assert account(usage, estimate=7) == TokenUsage(10, 50, None, ReasoningTokens(40, REPORTED))


def test_a_responses_usage_is_read_too() -> None:
    usage = {"input_tokens": 10, "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 40}}
    assert account(usage) == TokenUsage(10, 50, None, ReasoningTokens(40, REPORTED))


def test_no_count_reported_means_the_estimate_is_used() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 50}
    assert account(usage, estimate=31).reasoning == ReasoningTokens(31, ESTIMATED)


def test_a_reported_zero_beside_reasoning_text_is_a_placeholder() -> None:
    usage = {"completion_tokens": 50, "completion_tokens_details": {"reasoning_tokens": 0}}
    assert account(usage, estimate=31).reasoning == ReasoningTokens(31, ESTIMATED)
    # Without reasoning text a reported zero is the count.
    assert account(usage, estimate=None).reasoning == ReasoningTokens(0, REPORTED)


def test_the_proxys_own_marker_says_the_count_is_an_estimate() -> None:
    usage = {"completion_tokens_details": {"reasoning_tokens": 31, ESTIMATED_MARKER: True}}
    assert account(usage, estimate=31).reasoning == ReasoningTokens(31, ESTIMATED)


def test_without_usage_the_estimate_still_counts_and_without_text_nothing_is_known() -> None:
    assert account(None, estimate=12) == TokenUsage(reasoning=ReasoningTokens(12, ESTIMATED))
    assert account(None) == TokenUsage()
    assert account({"prompt_tokens": 3}).reasoning is None


def test_junk_in_usage_is_no_count() -> None:
    junk = {"prompt_tokens": "12", "completion_tokens": True, "completion_tokens_details": 3}
    assert account(junk) == TokenUsage()
    assert account({}) == TokenUsage() and account([1]) == TokenUsage()
    assert account({"completion_tokens_details": {"reasoning_tokens": -1}}).reasoning is None


def test_an_estimate_never_claims_more_than_the_output_tokens() -> None:
    usage: dict[str, Any] = {"completion_tokens": 20}
    assert account(usage, estimate=31).reasoning == ReasoningTokens(20, ESTIMATED)
    assert fill_reasoning(usage, 31)
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 20
    assert account({"output_tokens": 5}, estimate=31).reasoning == ReasoningTokens(5, ESTIMATED)


# -- what the client gets --------------------------------------------------------------------------


def test_the_estimate_is_written_beside_the_counts_never_into_them() -> None:
    usage: dict[str, Any] = {"prompt_tokens": 10, "completion_tokens": 50, "total_tokens": 60}
    assert fill_reasoning(usage, 31)
    assert usage == {
        "prompt_tokens": 10,
        "completion_tokens": 50,
        "total_tokens": 60,
        "completion_tokens_details": {"reasoning_tokens": 31, ESTIMATED_MARKER: True},
    }


def test_null_details_and_a_placeholder_zero_get_the_estimate_other_details_stay() -> None:
    usage: dict[str, Any] = {"completion_tokens_details": None}
    assert fill_reasoning(usage, 5)
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 5, ESTIMATED_MARKER: True}
    usage = {"completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}}
    assert fill_reasoning(usage, 5)
    assert usage["completion_tokens_details"] == {
        "reasoning_tokens": 5,
        "audio_tokens": 0,
        ESTIMATED_MARKER: True,
    }


def test_a_reported_count_no_estimate_or_an_odd_shape_is_left_as_it_came() -> None:
    for usage, estimate in (
        ({"completion_tokens_details": {"reasoning_tokens": 40}}, 31),
        ({"completion_tokens": 50}, None),
        ({"completion_tokens_details": "n/a"}, 31),
    ):
        before = copy.deepcopy(usage)
        assert not fill_reasoning(usage, estimate)
        assert usage == before


def test_a_repeated_usage_is_written_once_and_kept_up_to_date() -> None:
    usage: dict[str, Any] = {}
    assert fill_reasoning(usage, 5)
    assert not fill_reasoning(usage, 5)
    assert fill_reasoning(usage, 6)
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 6


def _tally(text: str) -> ReasoningTally:
    tally = ReasoningTally()
    tally.add(text)
    return tally


def test_only_the_chunk_that_ends_the_answer_gets_the_estimate() -> None:
    tally = _tally("Let me think about it.")
    usage_only = {"choices": [], "usage": {"completion_tokens": 9}}
    on_finish = {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"completion_tokens": 9},
    }
    midway = {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}], "usage": {}}
    assert fill_final_usage(usage_only, tally)
    assert fill_final_usage(on_finish, tally)
    assert not fill_final_usage(midway, tally)
    assert midway["usage"] == {}
    assert not fill_final_usage({"choices": [], "usage": [1]}, tally)


def test_a_completion_is_tallied_over_every_choice_and_its_usage_filled() -> None:
    body: dict[str, Any] = {
        "choices": [
            {"index": 0, "message": {"reasoning_content": "Let me think.", "content": "Hi"}},
            {"index": 1, "message": {"reasoning": "中文", "content": "Hi"}},
        ],
        "usage": {"completion_tokens": 9},
    }
    tally = ReasoningTally()
    assert tally_completion(body, tally)
    assert tally.estimate() == text_tokens("Let me think.中文")
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == tally.estimate()
    # No usage in the answer: none is invented, but the tally still counted.
    bare = {"choices": [{"message": {"reasoning_content": "Hm."}}]}
    other = ReasoningTally()
    assert not tally_completion(bare, other)
    assert "usage" not in bare
    assert other.estimate() == 1
