"""Each answer's cost in USD, once per request, on its access record (`record.cost_usd`): the
policy file's `prices` for the model when it has one, else genai-prices (the pydantic team's
maintained price data, bundled with the pinned version) by the upstream's provider and the model;
None — never 0 — when neither knows the model (docs/sessions.md, "Cost").

genai-prices does no I/O unless its `UpdatePrices` is started, which this module never does: the
prices are those of the installed version. DeepSeek prices by the time of day, so each request is
priced at the time it arrived.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from decimal import Decimal
from urllib.parse import urlsplit

from genai_prices import Usage, calc_price, data_snapshot
from genai_prices.types import TieredPrices

from proxy.core.config.policy_file import Price
from proxy.core.events import AccessRecord, RequestObserver
from proxy.policy.usage_book import cost as table_cost

logger = logging.getLogger("thinkproxy.sessions")

# providers.yaml entry names whose genai-prices id differs (the base URL is tried first: it tells
# most providers apart, e.g. Zhipu's open.bigmodel.cn from Z.ai's api.z.ai).
ENTRY_PROVIDERS = {
    "kimi": "moonshotai",
    "moonshot": "moonshotai",
    "zhipu": "zhipuai",
    "gemini": "google",
    "xai": "x-ai",
}
MAX_LOOKUPS = (
    4096  # (provider entry, base URL host) pairs remembered; a new one past it is looked up each time
)

PriceFor = Callable[[str | None], Price | None]


class Pricing:
    """The price of a finished request: the policy's table (`price_for`, read at each request so
    a reloaded policy applies), then genai-prices."""

    def __init__(self, price_for: PriceFor | None = None) -> None:
        self.price_for = price_for
        self._providers: dict[tuple[str | None, str | None], str | None] = {}
        data_snapshot.get_snapshot()  # the bundled prices loaded now, not by the first request

    def cost(self, record: AccessRecord, started_at: float) -> float | None:
        usage = record.usage
        if usage is None or usage.input is None or usage.output is None:
            return None
        model = record.response_model or record.model
        if self.price_for is not None:
            price = self.price_for(model)
            if price is not None:
                return table_cost(record, price)
        if not model:
            return None
        provider = self.provider_id(record.provider, record.upstream_base_url)
        if provider is None:
            return None
        return library_cost(provider, model, usage.input, usage.cached_input or 0, usage.output, started_at)

    def provider_id(self, entry: str | None, base_url: str | None) -> str | None:
        """genai-prices' id of the upstream: by its base URL, else by the providers.yaml entry's name."""
        key = (entry, base_url)
        if key in self._providers:
            return self._providers[key]
        found = _find_provider(entry, _origin(base_url))
        if len(self._providers) < MAX_LOOKUPS:
            self._providers[key] = found
        return found


def _origin(base_url: str | None) -> str | None:
    if not base_url:
        return None
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}" if parts.netloc else None


def _find_provider(entry: str | None, base_url: str | None) -> str | None:
    snapshot = data_snapshot.get_snapshot()
    if base_url:
        try:
            return snapshot.find_provider(None, None, base_url).id
        except LookupError:
            pass
    if entry:
        try:
            return snapshot.find_provider(None, ENTRY_PROVIDERS.get(entry, entry), None).id
        except LookupError:
            pass
    return None


def library_cost(
    provider: str, model: str, input_tokens: int, cached: int, output: int, started_at: float
) -> float | None:
    """genai-prices' total for the counts (input includes the cached reads), or None when it does
    not know the model (LookupError) or cannot price the counts (ValueError)."""
    cached = min(cached, input_tokens)
    rates = _rates(provider, model, int(started_at // RATE_SECONDS))
    if rates is None:
        return None
    if rates is not TIERED:
        fixed, uncached_rate, cached_rate, output_rate = rates
        return (
            fixed
            + ((input_tokens - cached) * uncached_rate + cached * cached_rate + output * output_rate) / MTOK
        )
    usage = Usage(input_tokens=input_tokens, cache_read_tokens=cached, output_tokens=output)
    try:
        found = calc_price(
            usage,
            model,
            provider_id=provider,
            genai_request_timestamp=datetime.fromtimestamp(started_at, UTC),
        )
    except (LookupError, ValueError):
        return None
    total: Decimal = found.total_price
    return float(total)


# genai-prices takes ~40 µs a call (far more on a busy machine): more than the rest of a request's
# accounting. Its price for a model at a time is linear in the token counts unless the model has
# tiered prices, so the rates are found once per provider, model and minute (DeepSeek's prices
# change with the time of day, on the hour) from three probes of genai-prices itself, and a
# request costs one dict lookup and a sum. Tiered prices go to genai-prices each time.
MTOK = 1_000_000
RATE_SECONDS = 60
MAX_RATES = 4096
TIERED = (-1.0, -1.0, -1.0, -1.0)
Rates = tuple[float, float, float, float]  # fixed, then USD per million uncached, cached, output
_rate_cache: dict[tuple[str, str, int], Rates | None] = {}


def _rates(provider: str, model: str, minute: int) -> Rates | None:
    key = (provider, model, minute)
    if key in _rate_cache:
        return _rate_cache[key]
    found = _probe(provider, model, datetime.fromtimestamp(minute * RATE_SECONDS, UTC))
    if len(_rate_cache) >= MAX_RATES:
        _rate_cache.clear()
    _rate_cache[key] = found
    return found


def _probe(provider: str, model: str, when: datetime) -> Rates | None:
    try:
        _, info = data_snapshot.get_snapshot().find_provider_model(model, None, provider, None)
        prices = info.get_prices(when)
        if any(isinstance(value, TieredPrices) for value in vars(prices).values()):
            return TIERED

        def total(input_tokens: int, cached: int, output: int) -> float:
            usage = Usage(input_tokens=input_tokens, cache_read_tokens=cached, output_tokens=output)
            return float(prices.calc_price(usage)["total_price"])

        fixed = total(0, 0, 0)
        return (
            fixed,
            total(MTOK, 0, 0) - fixed,
            total(MTOK, MTOK, 0) - fixed,
            total(0, 0, MTOK) - fixed,
        )
    except (LookupError, ValueError):
        return None


class CostListener:
    """Puts each answer's cost on its record at the end, before the listeners that read it (the
    policy's usage book, the sessions, the console): proxy.server.app registers it first. One
    observer serves every request (it keeps nothing of one): the request's start, which prices
    it, is its end less its duration."""

    def __init__(self, pricing: Pricing) -> None:
        self.pricing = pricing
        self._observer = _Priced(pricing)

    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> RequestObserver:
        return self._observer


class _Priced(RequestObserver):
    __slots__ = ("pricing",)

    def __init__(self, pricing: Pricing) -> None:
        self.pricing = pricing

    def on_end(self, record: AccessRecord, duration_ms: float) -> None:
        try:
            record.cost_usd = self.pricing.cost(record, time.time() - duration_ms / 1000)
        except Exception:  # a price library's surprise never fails a request's end
            logger.exception("sessions: pricing the request failed")
            record.cost_usd = None
