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
        assert pricing.cost(record, at) == float(expected)
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
    assert Pricing().cost(record, OFF_PEAK) == float(expected)


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
