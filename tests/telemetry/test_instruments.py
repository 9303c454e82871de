"""The proxy's own instruments: the same exposition as prometheus-client's for the same updates."""

from __future__ import annotations

import math

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from proxy.telemetry.instruments import Instruments

BUCKETS = (0.01, 0.02, 0.04, 1.0, 4.0)
# On a bound (a bucket's `le` includes it), between bounds, below the first, above the last (+Inf),
# zero and a negative value (prometheus-client takes both).
OBSERVED = (0.01, 0.015, 0.005, 1.0, 3.999, 4.0, 4.000001, 1e9, 0.0, -2.5)


def both() -> tuple[str, str]:
    """The same updates, applied to prometheus-client's instruments and to the proxy's."""
    theirs = CollectorRegistry()
    counter = prometheus_client.Counter("t_requests", "Requests.", ["route", "status"], registry=theirs)
    histogram = prometheus_client.Histogram("t_seconds", "Seconds.", ["p"], buckets=BUCKETS, registry=theirs)
    gauge = prometheus_client.Gauge("t_active", "Active.", registry=theirs)
    store = Instruments()
    ours = CollectorRegistry()
    ours.register(store)
    my_counter = store.counter("t_requests", "Requests.", ["route", "status"])
    my_histogram = store.histogram("t_seconds", "Seconds.", ["p"], buckets=BUCKETS)
    my_gauge = store.gauge("t_active", "Active.")
    for labels, amount in ((("chat", "200"), 1.0), (("chat", "200"), 2.5), (("passthrough", "404"), 1.0)):
        counter.labels(*labels).inc(amount)
        my_counter.labels(*labels).inc(amount)
    for i, seconds in enumerate(OBSERVED):
        p = "a" if i % 3 else "b"
        histogram.labels(p).observe(seconds)
        my_histogram.labels(p).observe(seconds)
    for change in (1, 1, -1, 1):
        (gauge.inc if change > 0 else gauge.dec)()
        (my_gauge.inc if change > 0 else my_gauge.dec)()
    return generate_latest(theirs).decode(), generate_latest(ours).decode()


def without_created(text: str) -> list[str]:
    return [line for line in text.splitlines() if "_created" not in line]


def created_series(text: str) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {
        (s.name, tuple(sorted(s.labels.items())))
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.endswith("_created")
    }


def test_the_exposition_is_prometheus_clients_for_the_same_updates() -> None:
    theirs, ours = both()
    assert without_created(ours) == without_created(theirs)
    assert created_series(ours) == created_series(theirs) != set()


def test_a_value_on_a_bound_is_in_that_bucket_and_everything_is_in_inf() -> None:
    store = Instruments()
    histogram = store.histogram("h", "H.", buckets=(1.0, 2.0))
    for value in (1.0, 2.0, 2.5, math.inf):
        histogram.labels().observe(value)
    text = generate_latest(registry(store)).decode()
    assert 'h_bucket{le="1.0"} 1.0' in text
    assert 'h_bucket{le="2.0"} 2.0' in text
    assert 'h_bucket{le="+Inf"} 4.0' in text
    assert "h_count 4.0" in text


def test_created_series_follow_prometheus_clients_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Instruments()
    store.counter("c", "C.").labels().inc()
    store.histogram("h", "H.", buckets=(1.0,)).labels().observe(0.5)
    monkeypatch.setenv("PROMETHEUS_DISABLE_CREATED_SERIES", "True")
    assert "_created" not in generate_latest(registry(store)).decode()
    monkeypatch.delenv("PROMETHEUS_DISABLE_CREATED_SERIES")
    assert created_series(generate_latest(registry(store)).decode()) == {("c_created", ()), ("h_created", ())}


def test_misuse_is_refused_as_prometheus_client_refuses_it() -> None:
    store = Instruments()
    counter = store.counter("c", "C.", ["route"])
    with pytest.raises(ValueError, match="takes 1 label values, got 2"):
        counter.labels("chat", "extra")
    with pytest.raises(ValueError, match="only goes up"):
        counter.labels("chat").inc(-1)
    with pytest.raises(ValueError, match="already exists"):
        store.histogram("c", "Again.", buckets=(1.0,))


def registry(store: Instruments) -> CollectorRegistry:
    collected = CollectorRegistry()
    collected.register(store)
    return collected
