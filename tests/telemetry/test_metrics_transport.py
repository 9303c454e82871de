"""The transport a request came over (`http`, or `websocket`: a Responses WebSocket's turn), in the
metrics' `transport` label and the span's `thinkproxy.transport`, read from AccessRecord.transport;
in one process and in prometheus-client's multiprocess mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from proxy.core.events import AccessRecord
from proxy.core.stream.trace_outcome import TraceOutcome
from proxy.telemetry.metrics import Metrics
from proxy.telemetry.otel import span_attributes


def finished(transport: str | None) -> AccessRecord:
    """A streamed Responses request that ended, over `transport` (None: the record's default)."""
    record = AccessRecord(
        method="POST", path="/v1/responses", route="responses", provider="deepseek", model="deepseek-flash",
        status=200, upstream_status=200, level="deep", stream=True,
    )  # fmt: skip
    if transport is not None:
        record.transport = transport
    record.outcome = TraceOutcome({"prompt_tokens": 3}, 40.0, None, False)
    return record


def counts(text: str, name: str) -> dict[str, float]:
    """The samples of `name` added up by their `transport` label."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                transport = sample.labels["transport"]
                found[transport] = found.get(transport, 0.0) + sample.value
    return found


def test_requests_and_time_to_first_token_are_labelled_by_transport() -> None:
    metrics = Metrics(max_models=10)
    metrics.count(finished(None), 5.0)  # (a record is HTTP's unless a socket's turn says otherwise)
    metrics.count(finished("websocket"), 5.0)
    metrics.count(finished("websocket"), 5.0)
    text = metrics.exposition().decode()
    assert counts(text, "thinkproxy_requests_total") == {"http": 1, "websocket": 2}
    assert counts(text, "thinkproxy_time_to_first_token_seconds_count") == {"http": 1, "websocket": 2}


def test_the_transport_label_in_multiprocess_mode(tmp_path: Path) -> None:
    # (prometheus-client picks its value store when first imported: a fresh interpreter)
    program = (
        "from proxy.telemetry.metrics import Metrics\n"
        "from tests.telemetry.test_metrics_transport import finished\n"
        f"metrics = Metrics(max_models=10, multiprocess_dir={str(tmp_path)!r})\n"
        "metrics.count(finished(None), 5.0)\n"
        "metrics.count(finished('websocket'), 5.0)\n"
        "print(metrics.exposition().decode())\n"
    )
    environ = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    root = Path(__file__).parent.parent.parent
    done = subprocess.run(
        [sys.executable, "-c", program], env=environ, cwd=root, capture_output=True, text=True, check=True
    )
    assert counts(done.stdout, "thinkproxy_requests_total") == {"http": 1, "websocket": 1}
    assert counts(done.stdout, "thinkproxy_time_to_first_token_seconds_count") == {"http": 1, "websocket": 1}


def test_the_span_says_its_transport() -> None:
    assert span_attributes(finished(None), None)["thinkproxy.transport"] == "http"
    assert span_attributes(finished("websocket"), None)["thinkproxy.transport"] == "websocket"
