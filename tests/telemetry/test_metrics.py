"""Prometheus metrics: every metric and label, against the simulated upstream; a real Prometheus
scraping `thinkproxy serve --workers 2`; nothing secret or said in a request shows in /metrics."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.core.events import AccessRecord
from proxy.core.stream.trace_outcome import TraceOutcome
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from proxy.telemetry.facts import note_replay
from proxy.telemetry.metrics import GENAI_DURATION_BUCKETS, GENAI_TOKEN_BUCKETS, Metrics
from tests.helpers import free_port, make_settings, simulated_providers_file, start_serve, worker_pids
from tests.test_observability_doc import dashboard_exprs, doc_promql

SECRET = "sk-metrics-SECRET-31337"
SAID = "Tell me about the tides of Lake Quirinal"  # a request's content, never a metric
ASK = {"model": "deepseek-v4", "messages": [{"role": "user", "content": SAID}]}
STREAM = {**ASK, "stream": True, "stream_options": {"include_usage": True}}
AUTH = {"authorization": f"Bearer {SECRET}"}


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels` (0 when none)."""
    return sum(v for n, got, v in samples(text) if n == name and labels.items() <= got.items())


class ReplaySpy:
    """Stands in for the replay store: notes outcomes the way it does (proxy.telemetry.facts)."""

    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> None:
        if dict(headers).get("x-test-replay") == "yes":
            note_replay(record, "restored", 2)
            note_replay(record, "missing")
        return None


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions()), graceful_s=0.1) as server:
        yield server


def proxy(mock: BackgroundServer, **overrides: Any) -> BackgroundServer:
    base: dict[str, Any] = {
        "upstream_base_url": f"{mock.url}/deepseek/v1",
        "allowed_upstreams": [f"127.0.0.1:{mock.port}"],
    }
    settings = make_settings(**{**base, **overrides})
    return BackgroundServer(create_app(settings, table=simulated_table(mock.port), listeners=[ReplaySpy()]))


def scrape(server: BackgroundServer) -> str:
    r = httpx.get(f"{server.url}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return r.text


def chat(server: BackgroundServer, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, headers={**AUTH, **headers}, timeout=20)


def usage_of(stream_text: str) -> dict[str, Any]:
    """The `usage` of a stream's last chunk that carries one."""
    chunks = [orjson.loads(line[6:]) for line in stream_text.splitlines() if line.startswith("data: {")]
    usage: dict[str, Any] = [c["usage"] for c in chunks if c.get("usage")][-1]
    return usage


def genai_of(labels: dict[str, str]) -> dict[str, str]:
    """The provider and model labels of a GenAI label set (token counters carry no operation)."""
    return {k: v for k, v in labels.items() if k != "gen_ai_operation_name"}


def deep_reasoning_tokens(mock: BackgroundServer) -> int:
    """The reasoning tokens the simulated DeepSeek reports for one deep answer to ASK."""
    body = {**ASK, "reasoning_effort": "max", "thinking": {"type": "enabled"}}
    usage = httpx.post(f"{mock.url}/deepseek/v1/chat/completions", json=body).json()["usage"]
    tokens: int = usage["completion_tokens_details"]["reasoning_tokens"]
    return tokens


def test_a_deep_stream_counts_request_ttft_thinking_tokens_and_genai_histograms(
    mock: BackgroundServer,
) -> None:
    with proxy(mock) as p:
        r = chat(p, STREAM, **{"x-thinking-level": "deep"})
        assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
        text = scrape(p)
    labels = {"route": "chat", "provider": "deepseek", "level": "deep", "method": "params", "status": "200"}
    assert value(text, "thinkproxy_requests_total", **labels, client="") == 1  # BYOK: no key name
    assert value(text, "thinkproxy_time_to_first_token_seconds_count", provider="deepseek", level="deep") == 1
    assert value(text, "thinkproxy_reasoning_seconds_count", provider="deepseek", level="deep") == 1
    assert value(text, "thinkproxy_reasoning_seconds_sum", provider="deepseek", level="deep") >= 0
    genai = {
        "gen_ai_operation_name": "chat",
        "gen_ai_provider_name": "deepseek",
        "gen_ai_request_model": "deepseek-v4",
    }
    reported = usage_of(r.text)["completion_tokens_details"]["reasoning_tokens"]
    reasoning = {"client": "", "level": "deep", "source": "reported"}
    assert value(text, "thinkproxy_reasoning_tokens_total", **genai_of(genai), **reasoning) == reported > 0
    assert value(text, "thinkproxy_reasoning_starved_total") == 0
    assert value(text, "gen_ai_client_operation_duration_seconds_count", **genai, error_type="") == 1
    assert value(text, "gen_ai_client_token_usage_count", **genai, gen_ai_token_type="input") == 1
    assert value(text, "gen_ai_client_token_usage_count", **genai, gen_ai_token_type="output") == 1
    assert value(text, "thinkproxy_upstream_errors_total") == 0
    assert value(text, "thinkproxy_active_streams") == 0


def test_histograms_use_the_genai_conventions_bucket_boundaries(mock: BackgroundServer) -> None:
    with proxy(mock) as p:
        chat(p, ASK)
        text = scrape(p)

    def bounds(name: str) -> list[float]:
        found = {float(got["le"]) for n, got, _ in samples(text) if n == name + "_bucket"}
        return sorted(found - {float("inf")})

    assert bounds("gen_ai_client_operation_duration_seconds") == list(GENAI_DURATION_BUCKETS)
    assert GENAI_DURATION_BUCKETS == (
        0.01,
        0.02,
        0.04,
        0.08,
        0.16,
        0.32,
        0.64,
        1.28,
        2.56,
        5.12,
        10.24,
        20.48,
        40.96,
        81.92,
    )
    assert bounds("gen_ai_client_token_usage") == list(GENAI_TOKEN_BUCKETS)
    assert (
        GENAI_TOKEN_BUCKETS[0] == 1 and GENAI_TOKEN_BUCKETS[-1] == 67108864 and len(GENAI_TOKEN_BUCKETS) == 14
    )


def test_upstream_429_is_counted_with_its_status_and_as_a_4xx_upstream_error(mock: BackgroundServer) -> None:
    with proxy(mock) as p:
        for stream in (False, True):
            r = chat(p, {**ASK, "stream": stream}, **{"x-mock-fault": "429", "x-thinking-level": "standard"})
            assert r.status_code == 429
        text = scrape(p)
    assert value(text, "thinkproxy_requests_total", route="chat", provider="deepseek", status="429") == 2
    assert value(text, "thinkproxy_upstream_errors_total", provider="deepseek", kind="4xx") == 2
    assert value(text, "gen_ai_client_operation_duration_seconds_count", error_type="429") == 2
    assert value(text, "thinkproxy_time_to_first_token_seconds_count") == 0  # no stream was relayed


def test_mid_stream_failure_is_a_200_with_a_truncated_upstream_error(mock: BackgroundServer) -> None:
    with proxy(mock) as p:
        r = chat(p, STREAM, **{"x-mock-fault": "disconnect"})
        assert r.status_code == 200 and '"error"' in r.text
        text = scrape(p)
    assert value(text, "thinkproxy_requests_total", route="chat", status="200") == 1
    assert value(text, "thinkproxy_upstream_errors_total", provider="deepseek", kind="truncated") == 1
    assert (
        value(text, "gen_ai_client_operation_duration_seconds_count", error_type="upstream_protocol_error")
        == 1
    )
    assert value(text, "thinkproxy_active_streams") == 0


def test_timeout_and_connect_failures_are_their_own_kinds(mock: BackgroundServer) -> None:
    with proxy(mock, read_timeout=0.3) as p:
        r = chat(p, STREAM, **{"x-mock-fault": "stall", "x-mock-stall-s": "5"})
        assert r.status_code == 200 and "upstream_timeout" in r.text
        closed = f"http://127.0.0.1:{free_port()}/v1"
        with proxy(mock, upstream_base_url=closed) as unreachable:
            assert chat(unreachable, ASK).status_code == 502
            gone = scrape(unreachable)
        text = scrape(p)
    assert value(text, "thinkproxy_upstream_errors_total", provider="deepseek", kind="timeout") == 1
    assert value(gone, "thinkproxy_upstream_errors_total", kind="connect") == 1
    assert value(gone, "thinkproxy_requests_total", status="502") == 1


def test_a_prompted_level_is_counted_with_method_prompt_and_its_thinking_time(mock: BackgroundServer) -> None:
    with proxy(mock) as p:
        r = chat(
            p,
            {"model": "gpt-4o-mini", "messages": ASK["messages"], "stream": True},
            **{"x-thinking-level": "standard", "x-upstream-base-url": f"{mock.url}/prompted/v1"},
        )
        assert r.status_code == 200 and r.headers["x-thinking-method"] == "prompt"
        text = scrape(p)
    labels = {"provider": "openai", "level": "standard", "method": "prompt", "status": "200"}
    assert value(text, "thinkproxy_requests_total", route="chat", **labels) == 1
    assert value(text, "thinkproxy_reasoning_seconds_count", provider="openai", level="standard") == 1
    assert (
        value(text, "thinkproxy_time_to_first_token_seconds_count", provider="openai", level="standard") == 1
    )


def test_passthrough_and_refused_requests_count_with_none_labels(mock: BackgroundServer) -> None:
    with proxy(mock) as p:
        assert httpx.get(f"{p.url}/v1/models", headers=AUTH).status_code == 200
        assert httpx.post(f"{p.url}/v1/chat/completions", content=b"{", headers=AUTH).status_code == 400
        text = scrape(p)
    none = {"provider": "none", "level": "none", "method": "none"}
    assert value(text, "thinkproxy_requests_total", route="passthrough", status="200", **none) == 1
    assert value(text, "thinkproxy_requests_total", route="chat", status="400", **none) == 1
    assert value(text, "gen_ai_client_operation_duration_seconds_count") == 0  # no operation happened


def test_active_streams_counts_a_stream_while_it_is_relayed(mock: BackgroundServer) -> None:
    with proxy(mock) as p:
        assert value(scrape(p), "thinkproxy_active_streams") == 0
        with httpx.stream(
            "POST", f"{p.url}/v1/chat/completions", json=STREAM, headers={"x-mock-pace-ms": "50"}, timeout=20
        ) as r:
            pieces = r.iter_raw()
            next(pieces)
            assert value(scrape(p), "thinkproxy_active_streams") == 1
            for _ in pieces:
                pass
        assert value(scrape(p), "thinkproxy_active_streams") == 0


def test_a_client_leaving_mid_stream_ends_its_active_stream(mock: BackgroundServer) -> None:
    with proxy(mock) as p:
        with httpx.stream(
            "POST", f"{p.url}/v1/chat/completions", json=STREAM, headers={"x-mock-pace-ms": "100"}, timeout=20
        ) as r:
            pieces = r.iter_raw()  # (kept: a dropped iterator would close the response at once)
            next(pieces)
            assert value(scrape(p), "thinkproxy_active_streams") == 1
        # The client hung up; the proxy notices, closes the upstream and ends the request.
        assert wait_for(lambda: value(scrape(p), "thinkproxy_active_streams") == 0, timeout_s=15)
        text = scrape(p)
    assert value(text, "thinkproxy_requests_total", status="200") == 1  # the status it got
    duration = "gen_ai_client_operation_duration_seconds_count"
    assert value(text, duration, error_type="client_disconnected") == 1


@pytest.mark.parametrize("stream", [True, False])
def test_a_named_client_keys_answers_are_counted_under_its_name(mock: BackgroundServer, stream: bool) -> None:
    """Gateway mode: the key's name labels its requests, reasoning tokens and starved answers; a
    small max_tokens that the reasoning uses up is a starved answer (finish_reason length)."""
    keys = {"upstream_api_key": "sk-upstream", "client_keys": [f"alice:{SECRET}", "ck-unnamed-key"]}
    with proxy(mock, **keys) as p:
        body = {**(STREAM if stream else ASK), "max_tokens": 8}
        assert chat(p, body, **{"x-thinking-level": "deep"}).status_code == 200
        assert (
            httpx.post(
                f"{p.url}/v1/chat/completions", json=ASK, headers={"authorization": "Bearer ck-unnamed-key"}
            ).status_code
            == 200
        )
        text = scrape(p)
    assert value(text, "thinkproxy_requests_total", client="alice", status="200") == 1
    assert value(text, "thinkproxy_requests_total", client="", status="200") == 1  # the unnamed key
    genai = {"gen_ai_provider_name": "deepseek", "gen_ai_request_model": "deepseek-v4"}
    assert value(text, "thinkproxy_reasoning_tokens_total", client="alice", level="deep", **genai) == 8
    assert value(text, "thinkproxy_reasoning_starved_total", client="alice", **genai) == 1
    assert value(text, "thinkproxy_reasoning_starved_total", client="") == 0
    assert SECRET not in text and "ck-unnamed-key" not in text


def test_a_non_stream_answer_counts_tokens_but_no_time_to_first_token(mock: BackgroundServer) -> None:
    with proxy(mock) as p:
        assert chat(p, ASK, **{"x-thinking-level": "deep"}).status_code == 200
        text = scrape(p)
    assert value(text, "gen_ai_client_token_usage_count", gen_ai_token_type="input") == 1
    assert value(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="output") > 0
    assert value(text, "thinkproxy_reasoning_tokens_total", gen_ai_provider_name="deepseek") > 0
    assert value(text, "thinkproxy_reasoning_seconds_count", provider="deepseek", level="deep") == 1
    assert value(text, "thinkproxy_time_to_first_token_seconds_count") == 0


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_asking_for_no_trace_is_counted_all_the_same(mock: BackgroundServer, stream: bool) -> None:
    # The metrics read what the trace builder saw: one is kept, shown to nobody, with X-Trace: off.
    with proxy(mock) as p:
        r = chat(p, STREAM if stream else ASK, **{"x-thinking-level": "deep", "x-trace": "off"})
        assert r.status_code == 200 and "trace" not in r.text
        text = scrape(p)
    assert value(text, "gen_ai_client_token_usage_count", gen_ai_token_type="output") == 1
    assert value(text, "thinkproxy_reasoning_tokens_total", gen_ai_provider_name="deepseek") > 0
    assert value(text, "thinkproxy_reasoning_seconds_count", provider="deepseek", level="deep") == 1
    assert value(text, "thinkproxy_time_to_first_token_seconds_count") == (1 if stream else 0)


def test_replay_outcomes_noted_by_the_replay_store_are_counted(mock: BackgroundServer) -> None:
    with proxy(mock) as p:
        chat(p, ASK, **{"x-test-replay": "yes"})
        chat(p, ASK)
        text = scrape(p)
    assert value(text, "thinkproxy_replay_total", outcome="restored") == 2
    assert value(text, "thinkproxy_replay_total", outcome="missing") == 1
    assert value(text, "thinkproxy_replay_total", outcome="placeholder") == 0


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_the_replay_stores_own_outcomes_are_counted(mock: BackgroundServer) -> None:
    asked = {"role": "user", "content": "What is the weather in Paris?"}
    with proxy(mock) as p:
        # DeepSeek: a tool loop whose client drops reasoning_content; the store puts it back.
        first = chat(p, {"model": "deepseek-flash", "messages": [asked], "tools": [WEATHER]}).json()
        calls = first["choices"][0]["message"]["tool_calls"]
        history = [
            asked,
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": "rain"},
        ]
        again = chat(p, {"model": "deepseek-flash", "messages": history})
        assert again.headers["x-thinking-replay"] == "restored=1, placeholder=0, missing=0"
        # Kimi: a turn the store never saw gets the documented placeholder.
        unseen = [{**history[1], "tool_calls": [{**calls[0], "id": "call_elsewhere"}]}]
        unseen = [asked, *unseen, {"role": "tool", "tool_call_id": "call_elsewhere", "content": "rain"}]
        kimi = chat(
            p, {"model": "kimi-k2.5", "messages": unseen}, **{"x-upstream-base-url": f"{mock.url}/kimi/v1"}
        )
        assert kimi.headers["x-thinking-replay"] == "restored=0, placeholder=1, missing=0"
        text = scrape(p)
    assert value(text, "thinkproxy_replay_total", outcome="restored") == 1
    assert value(text, "thinkproxy_replay_total", outcome="placeholder") == 1


def test_model_label_is_bounded_the_rest_is_other(mock: BackgroundServer) -> None:
    with proxy(mock, metrics_max_models=2) as p:
        for model in ("model-a", "model-b", "model-c", "model-d", "model-a"):
            assert chat(p, {**ASK, "model": model}).status_code == 200
        text = scrape(p)
    seen = {
        got["gen_ai_request_model"]: v for n, got, v in samples(text) if n.endswith("duration_seconds_count")
    }
    assert seen == {"model-a": 2, "model-b": 1, "other": 2}


def finished(metrics: Metrics, n: int, stream: bool = False) -> None:
    """`n` chat requests ending, as the metrics listener sees them."""
    answer = TraceOutcome(usage={"prompt_tokens": 7}, ttft_ms=120.0, reasoning_ms=80.0)
    for _ in range(n):
        record = AccessRecord("POST", "/v1/chat/completions", status=200, provider="deepseek")
        record.route, record.level, record.model, record.stream = "chat", "deep", "deepseek-v4", stream
        observer = metrics.listener().start(record, [])
        if stream:
            observer.on_stream()
        record.outcome = answer
        observer.on_end(record, 250.0)


def test_a_finished_request_is_read_from_the_builders_outcome() -> None:
    metrics = Metrics(max_models=10)
    finished(metrics, 3, stream=True)
    text = metrics.exposition().decode()
    assert value(text, "thinkproxy_requests_total", provider="deepseek", level="deep", status="200") == 3
    assert value(text, "thinkproxy_time_to_first_token_seconds_count", provider="deepseek") == 3
    assert value(text, "thinkproxy_time_to_first_token_seconds_sum") == pytest.approx(0.36)
    assert value(text, "thinkproxy_reasoning_seconds_sum", level="deep") == pytest.approx(0.24)
    assert value(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="input") == 21
    assert value(text, "gen_ai_client_operation_duration_seconds_sum") == pytest.approx(0.75)
    assert value(text, "thinkproxy_active_streams") == 0  # each stream counted while it lasted
    finished(metrics, 2)
    text = metrics.exposition().decode()
    assert value(text, "thinkproxy_requests_total") == 5
    assert value(text, "thinkproxy_time_to_first_token_seconds_count") == 3  # (not streams)


def test_metrics_off_serves_no_endpoint(mock: BackgroundServer) -> None:
    with proxy(mock, metrics=False) as p:
        assert chat(p, ASK).status_code == 200
        assert httpx.get(f"{p.url}/metrics").status_code == 404


def test_no_key_or_content_in_metrics(mock: BackgroundServer) -> None:
    with proxy(mock, upstream_api_key=SECRET + "-upstream", client_keys=[SECRET]) as p:
        chat(p, STREAM, **{"x-thinking-level": "deep"})
        chat(p, ASK, **{"x-mock-fault": "429"})
        chat(p, STREAM, **{"x-mock-fault": "disconnect"})
        httpx.post(
            f"{p.url}/v1/chat/completions", json=ASK, headers={"authorization": "Bearer ck-wrong-5150"}
        )
        text = scrape(p)
    assert value(text, "thinkproxy_requests_total") == 4
    for needle in (SECRET, "ck-wrong-5150", "Quirinal", "tides", "Bearer"):
        assert needle not in text


# -- a real Prometheus scraping two workers ---------------------------------------------------------

PROMETHEUS = shutil.which("prometheus")


def wait_for(check: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        threading.Event().wait(0.25)


def multiproc_dir_of(pid: int) -> str | None:
    for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if entry.startswith(b"PROMETHEUS_MULTIPROC_DIR="):
            return entry.split(b"=", 1)[1].decode()
    return None


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Any]:
    if PROMETHEUS is None:
        pytest.skip(
            "the prometheus binary is not installed (Debian package `prometheus`; .ci/run installs it)"
        )
    procs: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> str:
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: thinkproxy\n    static_configs: [{{targets: ['{target}']}}]\n"
        )
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        assert wait_for(ready), "prometheus did not become ready"
        return url

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=20)


def query(prometheus_url: str, promql: str) -> float | None:
    r = httpx.get(f"{prometheus_url}/api/v1/query", params={"query": promql}, timeout=5)
    result = r.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def test_real_prometheus_scrapes_two_workers_and_sums_them(
    mock: BackgroundServer, prometheus: Any, tmp_path: Path
) -> None:
    providers = simulated_providers_file(tmp_path, mock.port)
    server, base = start_serve(
        mock,
        "--workers",
        "2",
        "--providers",
        str(providers),
        ready_path="/metrics",
        THINKPROXY_ALLOWED_UPSTREAMS=f"127.0.0.1:{mock.port}",
    )
    try:
        workers = worker_pids(server.pid, 2)
        assert len(workers) == 2, "serve did not start two workers"
        directory = multiproc_dir_of(workers[0])
        assert directory is not None and Path(directory).is_dir()
        assert os.environ.get("PROMETHEUS_MULTIPROC_DIR") != directory  # the proxy's own directory

        def send(body: dict[str, Any], **headers: str) -> int:
            # A fresh connection each time, so both workers answer some of them.
            extra = {"connection": "close", **AUTH, **headers}
            return httpx.post(f"{base}/v1/chat/completions", json=body, headers=extra, timeout=20).status_code

        def only(worker: int) -> Any:
            """The other worker paused (SIGSTOP): this one accepts every connection meanwhile, so
            each worker surely counts some requests (the kernel's choice is not the test's)."""
            return paused([pid for pid in workers if pid != worker])

        with only(workers[0]):
            statuses = [send(STREAM, **{"x-thinking-level": "deep"}) for _ in range(6)]
        with only(workers[1]):
            statuses.append(send(ASK, **{"x-mock-fault": "429"}))
            statuses.append(send(STREAM, **{"x-mock-fault": "disconnect"}))
            prompted = {**STREAM, "model": "gpt-4o-mini"}
            upstream = {"x-upstream-base-url": f"{mock.url}/prompted/v1", "x-thinking-level": "deep"}
            statuses.append(send(prompted, **upstream))
        assert statuses == [200] * 6 + [429, 200, 200]
        files = {p.name for p in Path(directory).iterdir()}
        assert {f"counter_{pid}.db" for pid in workers} <= files  # both workers counted requests

        # Every worker answers /metrics with the sum over both.
        for _ in range(4):
            text = httpx.get(f"{base}/metrics", headers={"connection": "close"}).text
            assert value(text, "thinkproxy_requests_total") == 9

        url = prometheus(base.removeprefix("http://"))
        total = wait_for(lambda: query(url, "sum(thinkproxy_requests_total)") == 9)
        assert total, f"prometheus saw {query(url, 'sum(thinkproxy_requests_total)')} requests, expected 9"
        deep = "thinkproxy_requests_total" + '{provider="deepseek",level="deep",method="params",status="200"}'
        assert query(url, f"sum({deep})") == 6
        assert query(url, 'sum(thinkproxy_upstream_errors_total{provider="deepseek",kind="4xx"})') == 1
        assert query(url, 'sum(thinkproxy_upstream_errors_total{provider="deepseek",kind="truncated"})') == 1
        assert (
            query(url, 'sum(thinkproxy_requests_total{method="prompt",provider="openai",level="deep"})') == 1
        )
        assert query(url, 'sum(thinkproxy_time_to_first_token_seconds_count{provider="deepseek"})') == 7
        assert query(url, 'sum(thinkproxy_reasoning_seconds_count{level="deep"})') == 7
        # The deep DeepSeek streams report reasoning tokens (one worker counted them all); prompted
        # thinking (plain output to the upstream) and the truncated stream (no usage came) are
        # estimated from their reasoning text (the other worker's). No client key: client="".
        reported = 'sum(thinkproxy_reasoning_tokens_total{source="reported",level="deep",client=""})'
        assert query(url, reported) == 6 * deep_reasoning_tokens(mock)
        estimated = query(url, 'sum(thinkproxy_reasoning_tokens_total{source="estimated"})')
        assert estimated and estimated == value(text, "thinkproxy_reasoning_tokens_total", source="estimated")
        assert query(url, 'sum(thinkproxy_requests_total{client=""})') == 9
        assert query(url, 'sum(gen_ai_client_operation_duration_seconds_count{error_type="429"})') == 1
        assert query(url, 'sum(gen_ai_client_token_usage_count{gen_ai_token_type="input"})') == 7
        assert query(url, "sum(thinkproxy_active_streams)") == 0
        # The documented queries and the Grafana dashboard's are valid PromQL with data behind them.
        for expr in dashboard_exprs() + doc_promql():
            promql = expr.replace("$__rate_interval", "1m").replace("$provider", ".*")
            answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()
            assert answer["status"] == "success", (promql, answer)
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
    assert not Path(directory).exists()  # the proxy removed its directory on the way out


@contextlib.contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def ended(metrics: Metrics, model: str, upstream_status: int | None = 200) -> None:
    """One chat request for `model` ending; `upstream_status` None: refused before any upstream."""
    record = AccessRecord("POST", "/v1/chat/completions", status=upstream_status or 404, provider="deepseek")
    record.route, record.model, record.upstream_status = "chat", model, upstream_status
    metrics.listener().start(record, []).on_end(record, 10.0)


def model_counts(metrics: Metrics) -> dict[str, float]:
    counts: dict[str, float] = {}
    for n, got, v in samples(metrics.exposition().decode()):
        if n == "gen_ai_client_operation_duration_seconds_count":  # (one series per error type)
            counts[got["gen_ai_request_model"]] = counts.get(got["gen_ai_request_model"], 0) + v
    return counts


def test_junk_model_names_never_take_the_labels_of_real_models() -> None:
    metrics = Metrics(max_models=3, known_models=["deepseek-v4"])
    for i in range(100):
        ended(metrics, f"junk-{i}", upstream_status=404)  # the upstream has no such model
        ended(metrics, f"junk-{i}-x", upstream_status=None)  # no route takes it
    ended(metrics, "deepseek-v4")
    ended(metrics, "DeepSeek-V4", upstream_status=429)  # a configured name: its label from the start
    ended(metrics, "qwen3-max")  # served: it takes a free label
    ended(metrics, "qwen3-max", upstream_status=500)  # and keeps it for its failures
    assert model_counts(metrics) == {"other": 200, "deepseek-v4": 2, "qwen3-max": 2}


def test_configured_models_keep_their_label_when_every_other_one_is_taken() -> None:
    metrics = Metrics(max_models=2, known_models=["m-known"])
    for model in ("a", "b", "c", "m-known"):
        ended(metrics, model)
    assert model_counts(metrics) == {"a": 1, "b": 1, "other": 1, "m-known": 1}
    labels = {got.get("gen_ai_request_model") for _, got, _ in samples(metrics.exposition().decode())}
    assert len(labels - {None}) <= 2 + 1 + 1  # /metrics stays bounded: the slots, configured, other


def test_known_models_are_the_names_written_in_routes_and_providers_yaml(tmp_path: Path) -> None:
    from proxy.core.config.providers import ProvidersTable
    from proxy.core.config.routing import RouteTable
    from proxy.telemetry.facts import configured_models

    routes = RouteTable.from_text(
        'routes:\n  - {models: ["deepseek-v4", "deepseek-r*"], upstream: "https://api.deepseek.com/v1"}\n'
        '  - {prefix: "or/", upstream: "https://openrouter.ai/api/v1"}\n',
        default_upstream="https://example.test/v1",
    )
    table = ProvidersTable.load()
    names = configured_models(table, routes)
    assert {"deepseek-v4", "mistral-small-latest"} <= names  # (the one literal override in providers.yaml)
    assert not any(c in name for name in names for c in "*?[")
    assert configured_models(table, None) == names - {"deepseek-v4"}


def test_the_app_labels_the_models_its_configuration_names(mock: BackgroundServer, tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(f'routes:\n  - {{models: ["named-model", "*"], upstream: "{mock.url}/deepseek/v1"}}\n')
    with proxy(mock, metrics_max_models=1, routes_file=path) as p:
        for model in ("first-one", "second-one", "named-model"):
            assert chat(p, {**ASK, "model": model}).status_code == 200
        text = scrape(p)
    seen = {
        got["gen_ai_request_model"]: v for n, got, v in samples(text) if n.endswith("duration_seconds_count")
    }
    assert seen == {"first-one": 1, "other": 1, "named-model": 1}
