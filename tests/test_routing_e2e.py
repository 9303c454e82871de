"""One proxy, many upstreams, over real sockets: a routes file in front of several simulated providers
at once (DeepSeek, DashScope, OpenRouter by prefix, a self-hosted vLLM), every route at every level,
the 404, the merged /v1/models with a failing upstream, per-route keys in gateway mode, and the
start-up checks of `thinkproxy serve` / `check`."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.cli import main
from proxy.core.config.providers import ProvidersTable
from proxy.mock import MockOptions, create_mock_app
from proxy.mock.dialects import REGISTRY
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

ASK = [{"role": "user", "content": "Why do tides happen twice a day?"}]
KEYS = {"DS_KEY": "sk-deepseek-0001", "QW_KEY": "sk-dashscope-0002", "OR_KEY": "sk-openrouter-0003"}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(chunk_chars=5))) as server:
        yield server


def routes_text(mock: BackgroundServer, *, broken: bool = False) -> str:
    base = mock.url
    text = f"""
routes:
  - {{name: deepseek, models: ["deepseek-*"], upstream: "{base}/deepseek/v1", api_key_env: DS_KEY}}
  - {{name: dashscope, models: ["qwen3-*", "qwq-*"], upstream: "{base}/qwen/v1", api_key_env: QW_KEY}}
  - {{name: openrouter, prefix: "openrouter/", upstream: "{base}/openrouter/v1", api_key_env: OR_KEY}}
"""
    if broken:  # an upstream that answers 404 to everything
        text += f'  - {{name: broken, models: ["mistral-*"], upstream: "{base}/no-such-dialect/v1"}}\n'
    return text + f'  - {{name: local, models: ["*/*"], upstream: "{base}/vllm/v1"}}\n'


def table_for(mock: BackgroundServer) -> ProvidersTable:
    """The shipped table, with the simulated providers' paths read as the real providers' hosts (the
    vLLM path needs nothing: loopback is the self-hosted entry's)."""
    table = ProvidersTable.load()
    for entry, path in (("deepseek", "deepseek"), ("dashscope", "qwen"), ("openrouter", "openrouter")):
        table = table.with_extra_patterns(entry, [f"127.0.0.1:{mock.port}/{path}"])
    return table


def proxy_for(
    mock: BackgroundServer,
    tmp_path: Path,
    *,
    broken: bool = False,
    environ: dict[str, str] | None = None,
    **overrides: Any,
) -> BackgroundServer:
    path = tmp_path / "routes.yaml"
    path.write_text(routes_text(mock, broken=broken), encoding="utf-8")
    settings = make_settings(upstream_base_url=None, routes_file=path, **overrides)
    return BackgroundServer(create_app(settings, table=table_for(mock), environ=environ or {}))


def last_upstream(mock: BackgroundServer) -> dict[str, Any]:
    record: dict[str, Any] = httpx.get(f"{mock.url}/_mock/requests/last").json()
    return record


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [rec.__dict__["access"] for rec in caplog.records if "access" in rec.__dict__]


def stream_texts(response: httpx.Response) -> tuple[str, str]:
    """(reasoning_content, content) of a streamed answer as the client gets it."""
    reasoning = content = ""
    for line in response.text.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in orjson.loads(line[6:]).get("choices", []):
            delta = choice.get("delta") or {}
            reasoning += delta.get("reasoning_content") or ""
            content += delta.get("content") or ""
    return reasoning, content


# (route, model the client asks for, dialect path, model the upstream gets, {level: knobs sent})
ROUTED = [
    (
        "deepseek",
        "deepseek-v4",
        "deepseek",
        "deepseek-v4",
        {
            "off": {"thinking": {"type": "disabled"}},
            "standard": {"thinking": {"type": "enabled"}},
            "deep": {"thinking": {"type": "enabled"}, "reasoning_effort": "max"},
        },
    ),
    (
        "dashscope",
        "qwen3-max",
        "qwen",
        "qwen3-max",
        {
            "off": {"enable_thinking": False},
            "standard": {"enable_thinking": True},
            "deep": {"enable_thinking": True},
        },
    ),
    (
        "openrouter",
        "openrouter/anthropic/claude-sonnet-4.5",
        "openrouter",
        "anthropic/claude-sonnet-4.5",
        {
            "off": {"reasoning": {"effort": "none"}},
            "standard": {"reasoning": {"enabled": True}},
            "deep": {"reasoning": {"effort": "high"}},
        },
    ),
    (
        "local",
        "Qwen/Qwen3-8B",
        "vllm",
        "Qwen/Qwen3-8B",
        {
            "off": {"chat_template_kwargs": {"enable_thinking": False}},
            "standard": {"chat_template_kwargs": {"enable_thinking": True}},
            "deep": {"chat_template_kwargs": {"enable_thinking": True}},
        },
    ),
]
PROVIDER = {
    "deepseek": "deepseek",
    "dashscope": "dashscope",
    "openrouter": "openrouter",
    "local": "self-hosted",
}


def test_every_route_at_every_level_reaches_its_own_provider_in_its_dialect(
    mock: BackgroundServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy.access")
    with proxy_for(mock, tmp_path) as proxy:
        for route, model, path, sent_model, knobs in ROUTED:
            for level, expected in knobs.items():
                r = httpx.post(
                    f"{proxy.url}/v1/chat/completions",
                    json={"model": model, "messages": ASK, "stream": True},
                    headers={"X-Thinking-Level": level, "authorization": "Bearer sk-client"},
                    timeout=20,
                )
                assert r.status_code == 200, (route, level, r.text)
                assert r.headers["x-thinking-provider"] == PROVIDER[route]
                assert r.headers["x-thinking-level-applied"] == level
                seen = last_upstream(mock)
                assert seen["path"] == f"/{path}/v1/chat/completions", (route, level)
                body = seen["body"]
                assert body["model"] == sent_model
                assert {k: body.get(k) for k in expected} == expected, (route, level)
                # BYOK: the client's own key goes to whichever route the model picks
                assert seen["headers"]["authorization"] == "Bearer sk-…ient"
                reasoning, content = stream_texts(r)
                assert content and "<think>" not in content and "</think>" not in content
                assert bool(reasoning) is (level != "off"), (route, level)
    routes = [line["upstream_route"] for line in access_lines(caplog)]
    assert routes == [route for route, *_ in ROUTED for _ in range(3)]


def test_a_model_no_route_takes_is_a_404_and_nothing_is_forwarded(
    mock: BackgroundServer, tmp_path: Path
) -> None:
    httpx.delete(f"{mock.url}/_mock/requests")
    with proxy_for(mock, tmp_path) as proxy:
        for stream in (False, True):
            r = httpx.post(
                f"{proxy.url}/v1/chat/completions",
                json={"model": "gpt-5", "messages": ASK, "stream": stream},
                headers={"X-Thinking-Level": "deep"},
            )
            assert r.status_code == 404
            error = r.json()["error"]
            assert error["code"] == "model_not_found" and error["param"] == "model"
            assert "'gpt-5'" in error["message"]
            for pattern in ("deepseek-*", "qwen3-*", "openrouter/*", "*/*"):
                assert pattern in error["message"]
        # other endpoints route by their body's model too
        r = httpx.post(f"{proxy.url}/v1/embeddings", json={"model": "text-embedding-3-small", "input": "x"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert httpx.get(f"{mock.url}/_mock/requests").json() == []


def test_other_endpoints_follow_the_route_of_their_model(mock: BackgroundServer, tmp_path: Path) -> None:
    with proxy_for(mock, tmp_path) as proxy:
        r = httpx.post(f"{proxy.url}/v1/embeddings", json={"model": "openrouter/openai/text-3", "input": "x"})
    assert r.status_code == 200
    seen = last_upstream(mock)
    assert seen["path"] == "/openrouter/v1/embeddings" and seen["body"]["model"] == "openai/text-3"


def test_models_are_merged_and_a_failing_upstream_is_named(mock: BackgroundServer, tmp_path: Path) -> None:
    with proxy_for(mock, tmp_path, broken=True) as proxy:
        r = httpx.get(f"{proxy.url}/v1/models", headers={"authorization": "Bearer sk-client"})
    assert r.status_code == 200
    assert r.headers["x-thinking-models-missing"] == "broken"
    assert len(r.headers["x-request-id"]) == 32  # the merged list has its request id like any answer
    ids = [m["id"] for m in r.json()["data"]]
    expected = [
        *REGISTRY["deepseek"].models,  # deepseek-* lists both
        "qwen3-max",
        "qwq-plus",  # qwen-plus is not routed to DashScope by qwen3-* / qwq-*, so it is not listed
        *(f"openrouter/{m}" for m in REGISTRY["openrouter"].models),
        # */* takes every id with a slash, except those an earlier route takes: a request for
        # deepseek-ai/DeepSeek-V3.1 would go to the deepseek-* route, so it is not listed here
        *(m for m in REGISTRY["vllm"].models if not m.startswith("deepseek-")),
    ]
    assert ids == expected
    assert r.json()["object"] == "list"
    # BYOK: the client's key is not sent to every upstream just to list models
    listed = httpx.get(f"{mock.url}/_mock/requests").json()[-5:]
    assert {rec["path"] for rec in listed} >= {"/deepseek/v1/models", "/vllm/v1/models"}
    assert all("authorization" not in rec["headers"] for rec in listed)


def test_models_when_every_upstream_fails_is_a_502(mock: BackgroundServer, tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(f'routes:\n  - {{name: gone, models: ["*"], upstream: "{mock.url}/nope/v1"}}\n')
    settings = make_settings(upstream_base_url=None, routes_file=path)
    with BackgroundServer(create_app(settings, environ={})) as proxy:
        r = httpx.get(f"{proxy.url}/v1/models")
    assert r.status_code == 502
    assert "gone" in r.json()["error"]["message"]


def test_gateway_mode_sends_each_route_its_own_key_and_logs_the_client_name(
    mock: BackgroundServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy.access")
    gateway = {"client_keys": "alice:ck-alice-secret,bob:ck-bob-secret", "environ": KEYS}
    with proxy_for(mock, tmp_path, **gateway) as proxy:  # type: ignore[arg-type]
        sent = {}
        for model in ("deepseek-v4", "qwen3-max", "openrouter/z-ai/glm-4.5", "Qwen/Qwen3-8B"):
            r = httpx.post(
                f"{proxy.url}/v1/chat/completions",
                json={"model": model, "messages": ASK},
                headers={"authorization": "Bearer ck-alice-secret"},
            )
            assert r.status_code == 200, r.text
            sent[model] = last_upstream(mock)["headers"].get("authorization")
        r = httpx.get(f"{proxy.url}/v1/models", headers={"authorization": "Bearer ck-bob-secret"})
        assert r.status_code == 200 and "x-thinking-models-missing" not in r.headers
        listed = {
            rec["path"]: rec["headers"].get("authorization")
            for rec in httpx.get(f"{mock.url}/_mock/requests").json()[-4:]
        }
        refused = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "deepseek-v4", "messages": ASK},
            headers={"authorization": "Bearer sk-deepseek-0001"},  # an upstream key is no client key
        )
        assert refused.status_code == 401
    assert sent == {
        "deepseek-v4": "Bearer sk-…0001",
        "qwen3-max": "Bearer sk-…0002",
        "openrouter/z-ai/glm-4.5": "Bearer sk-…0003",
        "Qwen/Qwen3-8B": None,  # the local route names no key variable: nothing is sent
    }
    assert listed == {
        "/deepseek/v1/models": "Bearer sk-…0001",
        "/qwen/v1/models": "Bearer sk-…0002",
        "/openrouter/v1/models": "Bearer sk-…0003",
        "/vllm/v1/models": None,
    }
    lines = access_lines(caplog)
    assert [line["client"] for line in lines] == ["alice"] * 4 + ["bob", None]
    text = caplog.text + repr(lines)
    assert "ck-alice-secret" not in text and "sk-deepseek-0001" not in text


def test_gateway_mode_refuses_an_allow_listed_client_upstream(mock: BackgroundServer, tmp_path: Path) -> None:
    httpx.delete(f"{mock.url}/_mock/requests")
    overrides = {"client_keys": "alice:ck-a", "allowed_upstreams": f"127.0.0.1:{mock.port}", "environ": KEYS}
    with proxy_for(mock, tmp_path, **overrides) as proxy:  # type: ignore[arg-type]
        r = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "deepseek-v4", "messages": ASK},
            headers={"authorization": "Bearer ck-a", "x-upstream-base-url": f"{mock.url}/deepseek/v1"},
        )
    assert r.status_code == 403 and r.json()["error"]["param"] == "X-Upstream-Base-URL"
    assert httpx.get(f"{mock.url}/_mock/requests").json() == []


# --- start-up: serve and check stop on an invalid routes file ----------------------------------


@pytest.mark.parametrize(
    ("route", "env", "message"),
    [
        (
            '{models: ["a*"], upstream: "https://x.example/v1", colour: red}',
            {},
            "routes[0] (https://x.example/v1), field 'colour': unknown key",
        ),
        ('{models: ["a*"], upstream: "x.example/v1"}', {}, "routes[0] (x.example/v1), field 'upstream'"),
        (
            '{upstream: "https://x.example/v1"}',
            {},
            "routes[0] (https://x.example/v1): a route needs either 'models'",
        ),
        (
            '{name: ds, models: ["a*"], upstream: "https://x.example/v1", api_key_env: TP_TEST_UNSET_KEY}',
            {"THINKPROXY_CLIENT_KEYS": "alice:ck-1"},
            "routes[0] (ds), field 'api_key_env': the variable TP_TEST_UNSET_KEY is unset",
        ),
    ],
)
def test_serve_and_check_stop_on_an_invalid_routes_file(
    route: str,
    env: dict[str, str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(f"routes:\n  - {route}\n", encoding="utf-8")
    for name in (
        "THINKPROXY_UPSTREAM_BASE_URL",
        "THINKPROXY_ROUTES_FILE",
        "THINKPROXY_CLIENT_KEYS",
        "TP_TEST_UNSET_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("THINKPROXY_ROUTES_FILE", str(path))  # (serve writes it too; restored after)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)  # no .env file
    assert main(["serve", "--port", "0"]) == 2
    assert message in capsys.readouterr().err
    assert main(["check"]) == 1
    assert message in capsys.readouterr().err


def test_check_lists_each_route_with_the_entry_its_upstream_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("THINKPROXY_ROUTES_FILE", "THINKPROXY_CLIENT_KEYS", "THINKPROXY_UPSTREAM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "routes.yaml"
    path.write_text(
        'routes:\n  - {name: ds, models: ["deepseek-*"], upstream: "https://api.deepseek.com/v1"}\n'
        '  - {name: local, models: ["*"], upstream: "http://10.0.0.5:8000/v1"}\n',
        encoding="utf-8",
    )
    assert main(["check", "--routes", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{path}: OK (2 routes)" in out
    assert (
        "ds (routes[0]; models ['deepseek-*']) -> https://api.deepseek.com/v1; provider entry deepseek" in out
    )
    assert "provider entry self-hosted" in out
