from __future__ import annotations

import orjson
import pytest

from proxy.core.stream.summaries import (
    MAX_PAIRS,
    is_secret_key,
    output_is_error,
    redact,
    scrub_text,
    summarize_arguments,
    summarize_output,
)

SECRET = "s3cr3t-VALUE-9z"


def args(obj: object) -> str:
    return summarize_arguments(orjson.dumps(obj).decode())


# -- summarize_arguments ---------------------------------------------------------------------------


def test_arguments_as_key_value_pairs() -> None:
    assert args({"city": "Paris", "days": 3}) == "city: Paris, days: 3"


def test_scalars_use_their_json_spelling() -> None:
    assert args({"exact": True, "limit": None, "score": 0.5}) == "exact: true, limit: null, score: 0.5"


def test_long_string_value_is_cut_at_60_chars() -> None:
    summary = args({"query": "x" * 100, "n": 1})
    assert summary == "query: " + "x" * 60 + "…, n: 1"


def test_multiline_value_becomes_one_line() -> None:
    assert args({"text": "line one\n\n  line two"}) == "text: line one line two"


def test_small_nested_values_are_shown_compactly() -> None:
    assert args({"filters": {"year": 2024}, "ids": [1, 2]}) == 'filters: {"year":2024}, ids: [1,2]'


def test_large_nested_values_are_shown_as_their_size() -> None:
    summary = args({"doc": {f"field{i}": "v" * 20 for i in range(3)}, "ids": list(range(50))})
    assert summary == "doc: {3 keys}, ids: [50 items]"


def test_pairs_beyond_the_limit_are_counted() -> None:
    obj = {f"k{i}": i for i in range(MAX_PAIRS + 4)}
    summary = args(obj)
    assert summary.endswith(f"k{MAX_PAIRS - 1}: {MAX_PAIRS - 1} (+4 more)")
    assert f"k{MAX_PAIRS}:" not in summary


@pytest.mark.parametrize("raw", ["", "   ", "{}"])
def test_no_arguments(raw: str) -> None:
    assert summarize_arguments(raw) == "(no arguments)"


def test_top_level_array_and_scalar() -> None:
    assert summarize_arguments("[1, 2, 3]") == "[1,2,3]"
    assert summarize_arguments('"just text"') == "just text"


def test_unparseable_arguments_show_a_prefix_and_the_length() -> None:
    raw = '{"query": "weather in paris", "days": ' + "9" * 30
    summary = summarize_arguments(raw)
    assert summary == '{"query": "weather in paris", "days": 99… (68 chars, not valid JSON)'


def test_unparseable_arguments_never_show_a_secret_value() -> None:
    raw = '{"api_key": "' + SECRET + '", "q": "x"'
    summary = summarize_arguments(raw)
    assert SECRET not in summary
    assert "***" in summary


@pytest.mark.parametrize(
    "key",
    [
        "Authorization",
        "api_key",
        "APIKEY",
        "x-api-key",
        "access_token",
        "client_secret",
        "Password",
        "passwd",
        "Cookie",
        "configurable",
        "aws_credentials",
        "private_key",
    ],
)
def test_secret_keys_are_redacted_at_any_depth(key: str) -> None:
    assert is_secret_key(key)
    top = args({key: SECRET, "city": "Paris"})
    nested = args({"config": {key: SECRET}, "list": [{key: SECRET}]})
    for summary in (top, nested):
        assert SECRET not in summary
    assert top == f"{key}: ***, city: Paris"
    assert nested == f'config: {{"{key}":"***"}}, list: [{{"{key}":"***"}}]'


def test_secret_key_hides_a_whole_structure() -> None:
    assert args({"credentials": {"user": "a", "pass": SECRET}}) == "credentials: ***"


def test_plain_keys_are_not_secret() -> None:
    for key in ("city", "query", "days", "author", "limit"):
        assert not is_secret_key(key)


def test_redact_returns_a_copy() -> None:
    original = {"a": {"token": SECRET}, "b": [1, {"secret": 2}]}
    assert redact(original) == {"a": {"token": "***"}, "b": [1, {"secret": "***"}]}
    assert original["a"] == {"token": SECRET}


def test_summaries_are_deterministic_and_bounded() -> None:
    big = {"blob": "y" * 1_000_000, **{f"k{i}": {"deep": list(range(100))} for i in range(100)}}
    raw = orjson.dumps(big).decode()
    first = summarize_arguments(raw)
    assert first == summarize_arguments(raw)
    assert len(first) < 400
    assert len(summarize_output("z" * 1_000_000)) < 120
    assert len(summarize_arguments("{" + "a" * 1_000_000)) < 120


# -- summarize_output ------------------------------------------------------------------------------


def test_json_array_output_is_counted() -> None:
    assert summarize_output('[{"title": "a"}, {"title": "b"}, {"title": "c"}]') == "3 items"
    assert summarize_output("[1]") == "1 item"
    assert summarize_output("[]") == "0 items"


def test_json_object_output_lists_its_keys() -> None:
    assert summarize_output('{"temperature": 21, "unit": "C", "api_key": "x"}') == (
        "keys: temperature, unit, api_key"
    )


def test_many_keys_are_counted() -> None:
    content = orjson.dumps({f"k{i}": i for i in range(12)}).decode()
    assert summarize_output(content) == "keys: k0, k1, k2, k3, k4, k5, k6, k7 (+4 more)"


def test_error_object_shows_its_message() -> None:
    assert (
        summarize_output('{"error": {"message": "city not found", "code": 404}}') == "error: city not found"
    )
    assert summarize_output('{"error": "quota exceeded"}') == "error: quota exceeded"


def test_short_text_is_shown_whole() -> None:
    assert summarize_output("  Sunny,\n21 °C  ") == "Sunny, 21 °C"


def test_long_text_is_cut_with_its_length() -> None:
    text = "The quick brown fox jumps. " * 60
    summary = summarize_output(text)
    assert summary.endswith(f"… ({len(text):,} chars)")
    assert summary.startswith("The quick brown fox jumps.")
    assert len(summary) <= 80 + len(f"… ({len(text):,} chars)")
    assert f"{len(text):,}" == "1,620"


def test_text_output_has_secret_pairs_scrubbed() -> None:
    summary = summarize_output(f"connected with password={SECRET} as admin")
    assert SECRET not in summary
    assert summary == "connected with password=*** as admin"


def test_content_parts_are_summarized_by_their_text() -> None:
    parts = [{"type": "text", "text": '["a", "b"]'}]
    assert summarize_output(parts) == "2 items"
    with_image = [{"type": "text", "text": "caption"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert summarize_output(with_image) == "caption (+1 non-text part)"
    assert summarize_output([{"type": "image_url", "image_url": {"url": "x"}}]) == "1 part"


@pytest.mark.parametrize("content", [None, "", "   ", []])
def test_empty_output(content: str | list[object] | None) -> None:
    assert summarize_output(content) == "empty"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"error": "not found"}', True),
        ('{"error": {"message": "x"}}', True),
        ('{"error": null, "data": 1}', False),
        ('{"isError": true, "content": []}', True),
        ('{"status": "failed"}', True),
        ('{"status": "ok"}', False),
        ("Error: connection refused", True),
        ("error 500 from backend", True),
        ("Traceback (most recent call last):\n  File", True),
        ("Errors are rare here", False),
        ("Sunny", False),
        ("[1, 2]", False),
        ([{"type": "text", "text": "Error: boom"}], True),
        (None, False),
    ],
)
def test_output_is_error(content: str | list[object] | None, expected: bool) -> None:
    assert output_is_error(content) is expected


def test_scrub_text_masks_bearer_credentials() -> None:
    scrubbed = scrub_text(f"Authorization: Bearer {SECRET} sent; retry with Bearer abcdefghijkl")
    assert SECRET not in scrubbed
    assert "abcdefghijkl" not in scrubbed


def test_token_counts_are_not_secrets_but_tokens_are() -> None:
    from proxy.core.stream.summaries import is_secret_key

    for key in ("max_tokens", "max_completion_tokens", "num_tokens", "total_tokens", "reasoning_tokens"):
        assert not is_secret_key(key), key
    for key in ("token", "access_token", "refresh_token", "github_token", "tokens_secret", "x-auth-token"):
        assert is_secret_key(key), key
    assert summarize_arguments('{"query": "q", "max_tokens": 256}') == "query: q, max_tokens: 256"


def test_values_nested_past_what_the_encoder_writes_are_shown_by_size() -> None:
    deep = '{"a": ' + "[" * 300 + "]" * 300 + ', "b": {"c": ' + '{"d": ' * 40 + "1" + "}" * 40 + "}}"
    assert summarize_arguments(deep) == "a: [1 item], b: {1 key}"
    assert summarize_arguments('{"a": ' + "[" * 30 + "]" * 30 + "}") == "a: " + "[" * 30 + "]" * 30


def test_arguments_nested_deeper_than_the_parser_reads_are_not_called_invalid() -> None:
    summary = summarize_arguments("[" * 2000 + "]" * 2000)
    assert summary.endswith("(4,000 chars, nested too deeply to summarize)")


def test_a_head_of_longer_arguments_says_so_and_scrubs_secrets() -> None:
    head = '{"api_key": "sk-live-123456789", "content": "' + "x" * 100
    summary = summarize_arguments(head, total_chars=3_000_000)
    assert summary.endswith("(3,000,000 chars, too long to summarize)")
    assert "sk-live" not in summary
    assert summarize_arguments('{"a": 1}', total_chars=8) == "a: 1"
