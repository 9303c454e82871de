"""Counters, histograms and a gauge for one process, cheaper to update than prometheus-client's.

prometheus-client keeps every value behind its own lock and every histogram bucket in a value
object of its own, and checks on each `observe` that the metric is a child: ~1.2 µs an
observation in a warm loop, more in a server where they are out of the CPU caches between two
requests. The proxy updates its instruments only from the event loop's thread, so none of that is
needed: here a counter child is a float, a histogram child a list of bucket counts and a sum
(~0.3 µs an observation). Exposition stays prometheus-client's: `Instruments` is a collector
registered in a `CollectorRegistry`, and `generate_latest` writes the same text a
prometheus-client Counter, Histogram or Gauge of the same name would (`_total`, cumulative
`_bucket`s with `le`, `_count`, `_sum`, `_created`).

Not thread-safe by design: update and collect from one thread (the server's event loop). Several
worker processes use prometheus-client's own multiprocess mode instead (proxy.telemetry.metrics).
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import TypeVar

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


def created_series_enabled() -> bool:
    """prometheus-client's own switch (PROMETHEUS_DISABLE_CREATED_SERIES), honoured the same way."""
    return os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in ("true", "1", "t")


class CounterChild:
    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up: inc() takes a non-negative amount")
        self.value += amount


class HistogramChild:
    """Bucket counts (not cumulative: one bucket per observation, summed at collection) and a sum."""

    __slots__ = ("_bounds", "counts", "created", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds  # ends with +Inf, so every value has a bucket
        self.counts = [0] * len(bounds)
        self.total = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        # A value equal to a bound belongs to that bucket (`le`: less than or equal).
        self.counts[bisect_left(self._bounds, value)] += 1
        self.total += value


class GaugeChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class _Family:
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)

    def _check(self, values: tuple[str, ...]) -> None:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes {len(self.labelnames)} label values, got {len(values)}")


class Counter(_Family):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, documentation, labelnames)
        self.children: dict[tuple[str, ...], CounterChild] = {}

    def labels(self, *values: str) -> CounterChild:
        child = self.children.get(values)
        if child is None:
            self._check(values)
            child = self.children[values] = CounterChild()
        return child

    def metric(self, created: bool) -> Metric:
        family = Metric(self.name, self.documentation, "counter")
        for values, child in self.children.items():
            labels = dict(zip(self.labelnames, values, strict=True))
            family.add_sample(self.name + "_total", labels, child.value)
            if created:
                family.add_sample(self.name + "_created", labels, child.created)
        return family


class Histogram(_Family):
    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str] = (), *, buckets: Sequence[float]
    ) -> None:
        super().__init__(name, documentation, labelnames)
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != float("inf"):
            bounds.append(float("inf"))
        self.bounds = tuple(bounds)
        self._le = tuple(floatToGoString(b) for b in self.bounds)  # type: ignore[no-untyped-call]
        self.children: dict[tuple[str, ...], HistogramChild] = {}

    def labels(self, *values: str) -> HistogramChild:
        child = self.children.get(values)
        if child is None:
            self._check(values)
            child = self.children[values] = HistogramChild(self.bounds)
        return child

    def metric(self, created: bool) -> Metric:
        family = Metric(self.name, self.documentation, "histogram")
        for values, child in self.children.items():
            labels = dict(zip(self.labelnames, values, strict=True))
            cumulative = 0
            for le, count in zip(self._le, child.counts, strict=True):
                cumulative += count
                family.add_sample(self.name + "_bucket", {**labels, "le": le}, cumulative)
            family.add_sample(self.name + "_count", labels, cumulative)
            family.add_sample(self.name + "_sum", labels, child.total)
            if created:
                family.add_sample(self.name + "_created", labels, child.created)
        return family


class Gauge(_Family):
    """A gauge without labels (all the proxy needs)."""

    def __init__(self, name: str, documentation: str) -> None:
        super().__init__(name, documentation, ())
        self.child = GaugeChild()

    def inc(self, amount: float = 1.0) -> None:
        self.child.inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self.child.dec(amount)

    def metric(self, created: bool) -> Metric:
        family = Metric(self.name, self.documentation, "gauge")
        family.add_sample(self.name, {}, self.child.value)
        return family


Instrument = Counter | Histogram | Gauge
AnyInstrument = TypeVar("AnyInstrument", Counter, Histogram, Gauge)


class Instruments(Collector):
    """The instruments of one process, as one prometheus-client collector (in creation order)."""

    def __init__(self) -> None:
        self._instruments: list[Instrument] = []

    def counter(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> Counter:
        return self._add(Counter(name, documentation, labelnames))

    def histogram(
        self, name: str, documentation: str, labelnames: Sequence[str] = (), *, buckets: Sequence[float]
    ) -> Histogram:
        return self._add(Histogram(name, documentation, labelnames, buckets=buckets))

    def gauge(self, name: str, documentation: str) -> Gauge:
        return self._add(Gauge(name, documentation))

    def _add(self, instrument: AnyInstrument) -> AnyInstrument:
        if any(existing.name == instrument.name for existing in self._instruments):
            raise ValueError(f"an instrument named {instrument.name} already exists")
        self._instruments.append(instrument)
        return instrument

    def collect(self) -> Iterator[Metric]:
        created = created_series_enabled()
        for instrument in self._instruments:
            yield instrument.metric(created)
