"""Each answer's cost: the policy's prices first, then genai-prices by the upstream's provider and
the model, priced at the request's time; null (never 0) when neither knows the model."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from genai_prices import Usage, calc_price

from proxy.core.config.policy_file import Price
from proxy.core.events import AccessRecord
from proxy.core.usage import TokenUsage
from proxy.sessions.pricing import Pricing

PEAK = datetime(2026, 12, 7, 2, 0, tzinfo=UTC).timestamp()  # DeepSeek's daytime price (Beijing)
OFF_PEAK = datetime(2026, 12, 7, 20, 0, tzinfo=UTC).timestamp()


def answered(model: str, provider: str | None, base_url: str | None, **usage: int) -> AccessRecord:
    record = AccessRecord(method="POST", path="/v1/chat/completions", route="chat", model=model)
    record.provider, record.upstream_base_url = provider, base_url
    record.usage = TokenUsage(input=usage["input"], output=usage["output"], cached_input=usage.get("cached"))
    return record


def test_genai_prices_by_provider_entry_with_cache_reads_and_the_time_of_day() -> None:
    record = answered(
        "deepseek-v4-pro",
        "deepseek",
        "http://127.0.0.1:9/deepseek/v1",
        input=1_000_000,
        cached=800_000,
        output=100_000,
    )
    pricing = Pricing()
    for at in (PEAK, OFF_PEAK):
        expected = calc_price(
            Usage(input_tokens=1_000_000, cache_read_tokens=800_000, output_tokens=100_000),
            "deepseek-v4-pro",
            provider_id="deepseek",
            genai_request_timestamp=datetime.fromtimestamp(at, UTC),
        ).total_price
        assert pricing.cost(record, at) == pytest.approx(float(expected), rel=1e-12)
    assert pricing.cost(record, PEAK) != pricing.cost(record, OFF_PEAK)


@pytest.mark.parametrize(
    ("entry", "base_url", "model", "provider"),
    [
        ("kimi", "https://api.moonshot.cn/v1", "kimi-k2.6", "moonshotai"),
        ("zhipu", "https://open.bigmodel.cn/api/paas/v4", "glm-5.2", "zhipuai"),
        ("my-glm", "https://api.z.ai/api/paas/v4", "glm-5.2", "zai"),
        ("gemini", "http://127.0.0.1:9/gemini", "gemini-2.5-flash", "google"),
    ],
)
def test_the_provider_from_the_base_url_else_the_entry(
    entry: str, base_url: str, model: str, provider: str
) -> None:
    record = answered(model, entry, base_url, input=1000, output=1000)
    expected = calc_price(
        Usage(input_tokens=1000, output_tokens=1000),
        model,
        provider_id=provider,
        genai_request_timestamp=datetime.fromtimestamp(OFF_PEAK, UTC),
    ).total_price
    assert Pricing().cost(record, OFF_PEAK) == pytest.approx(float(expected), rel=1e-12)


def test_unknown_model_or_provider_is_null_never_zero() -> None:
    pricing = Pricing()
    assert pricing.cost(answered("my-local-model", "openai", None, input=10, output=10), OFF_PEAK) is None
    assert (
        pricing.cost(
            answered("llama3.2:3b", "ollama", "http://127.0.0.1:11434/v1", input=10, output=10), OFF_PEAK
        )
        is None
    )
    assert (
        pricing.cost(
            answered(
                "qwen3-max",
                "dashscope",
                "https://dashscope.aliyuncs.com/compatible-mode/v1",
                input=10,
                output=10,
            ),
            OFF_PEAK,
        )
        is None
    )
    no_counts = answered("deepseek-v4-pro", "deepseek", None, input=0, output=0)
    no_counts.usage = TokenUsage(input=None, output=None)
    assert pricing.cost(no_counts, OFF_PEAK) is None


def test_the_policy_prices_override_per_model() -> None:
    price = Price(input=1.0, output=2.0, cached_input=0.5)
    pricing = Pricing(lambda model: price if model == "qwen3-max" else None)
    record = answered("qwen3-max", "dashscope", None, input=1_000_000, cached=500_000, output=1_000_000)
    assert pricing.cost(record, OFF_PEAK) == pytest.approx(0.5 + 0.25 + 2.0)
    # Other models still get genai-prices.
    assert pricing.cost(answered("deepseek-v4-pro", "deepseek", None, input=1000, output=1000), OFF_PEAK)


@pytest.mark.parametrize(
    ("provider", "model"),
    [
        ("deepseek", "deepseek-v4-pro"),
        ("deepseek", "deepseek-flash"),
        ("openai", "gpt-5.4"),
        ("openai", "gpt-5.2-20251211"),
        ("anthropic", "claude-sonnet-4-20250514"),
        ("anthropic", "claude-opus-5-5"),
        ("moonshotai", "kimi-k2.6"),
        ("google", "gemini-2.5-pro"),  # (tiered by input size: priced by genai-prices each time)
        ("google", "gemini-2.5-flash"),
        ("zai", "glm-5.2"),
        ("minimax", "MiniMax-M2.7"),
        ("groq", "openai/gpt-oss-120b"),
    ],
)
@pytest.mark.parametrize("counts", [(1000, 0, 10), (250_000, 200_000, 4000), (3, 3, 0)])
@pytest.mark.parametrize("at", [PEAK, OFF_PEAK])
def test_the_remembered_rates_price_exactly_as_genai_prices(
    provider: str, model: str, counts: tuple[int, int, int], at: float
) -> None:
    """The rates found once per model and minute give genai-prices' own figure for any counts."""
    input_tokens, cached, output = counts
    expected = calc_price(
        Usage(input_tokens=input_tokens, cache_read_tokens=cached, output_tokens=output),
        model,
        provider_id=provider,
        genai_request_timestamp=datetime.fromtimestamp(at, UTC),
    ).total_price
    record = answered(model, provider, None, input=input_tokens, cached=cached, output=output)
    assert Pricing().cost(record, at) == pytest.approx(float(expected), rel=1e-12, abs=1e-15)
