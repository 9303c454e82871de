"""The route table: loading, first-match routing, prefixes, the 404, route keys, model lists.

The routes file's validation and error wording are tested in tests/core/config/test_routes_file.py."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.config.routing import (
    DEFAULT_ROUTE_NAME,
    Destination,
    RouteTable,
    key_environment,
    listings,
    merge_models,
    replace_model,
    request_model,
    resolve_route_keys,
)
from proxy.core.errors import ConfigError, NotFound

EXAMPLE = """
routes:
  - models: ["deepseek-*"]
    upstream: https://api.deepseek.com/v1
    api_key_env: DEEPSEEK_API_KEY
  - models: ["qwen*", "qwq*"]
    upstream: https://dashscope-intl.aliyuncs.com/compatible-mode/v1/
    api_key_env: DASHSCOPE_API_KEY
  - name: openrouter
    prefix: openrouter/
    upstream: https://openrouter.ai/api/v1
    api_key_env: OPENROUTER_API_KEY
  - name: local
    models: ["*"]
    upstream: http://gpu-box.internal:8000/v1
"""


def table(text: str = EXAMPLE, default: str | None = None) -> RouteTable:
    return RouteTable.from_text(text, source="routes.yaml", default_upstream=default)


@pytest.mark.parametrize(
    ("model", "upstream", "sent"),
    [
        ("deepseek-flash", "https://api.deepseek.com/v1", None),
        ("DeepSeek-Reasoner", "https://api.deepseek.com/v1", None),  # globs ignore case
        ("qwen3-max", "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", None),  # trailing / gone
        ("QwQ-32B", "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", None),
        (
            "openrouter/anthropic/claude-sonnet-4.5",
            "https://openrouter.ai/api/v1",
            "anthropic/claude-sonnet-4.5",
        ),
        ("OpenRouter/x-ai/grok-4", "https://openrouter.ai/api/v1", "x-ai/grok-4"),  # prefix ignores case
        ("openrouter/", "http://gpu-box.internal:8000/v1", None),  # nothing after the prefix: not its model
        ("llama-3.3-70b", "http://gpu-box.internal:8000/v1", None),
        ("qwen3-8b\n", "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", None),  # '*' spans anything
    ],
)
def test_first_matching_route_wins(model: str, upstream: str, sent: str | None) -> None:
    destination = table().destination(model)
    assert destination.base_url == upstream
    assert destination.model == sent
    assert not destination.client_chosen


def test_a_later_route_never_takes_what_an_earlier_one_matched() -> None:
    text = """
routes:
  - {models: ["deepseek-*"], upstream: "https://api.deepseek.com/v1"}
  - {models: ["deepseek-flash"], upstream: "https://other.example/v1"}
"""
    assert table(text).destination("deepseek-flash").base_url == "https://api.deepseek.com/v1"


def test_no_route_is_a_404_naming_the_model_and_the_patterns() -> None:
    text = """
routes:
  - {models: ["deepseek-*"], upstream: "https://api.deepseek.com/v1"}
  - {name: openrouter, prefix: "openrouter/", upstream: "https://openrouter.ai/api/v1"}
"""
    with pytest.raises(NotFound) as info:
        table(text).destination("gpt-5")
    err = info.value
    assert err.status == 404 and err.code == "model_not_found" and err.param == "model"
    assert "'gpt-5'" in err.message
    assert "deepseek-*" in err.message and "openrouter/*" in err.message
    with pytest.raises(NotFound, match="names no model"):
        table(text).destination(None)
    with pytest.raises(NotFound, match="names no model"):
        table(text).destination(["deepseek-flash"])


def test_the_configured_upstream_is_the_implicit_last_route() -> None:
    text = "routes:\n  - {models: ['deepseek-*'], upstream: 'https://api.deepseek.com/v1'}\n"
    routes = table(text, default="https://api.x.ai/v1/")
    last = routes.routes[-1]
    assert last.implicit and last.name == DEFAULT_ROUTE_NAME and last.upstream == "https://api.x.ai/v1"
    assert routes.destination("grok-4") == Destination("https://api.x.ai/v1", last, None)
    assert routes.destination("deepseek-flash").base_url == "https://api.deepseek.com/v1"
    # a request that names no model (e.g. GET /v1/files) goes to the configured upstream
    assert routes.destination(None) == Destination("https://api.x.ai/v1", last, None)


def test_an_invalid_file_is_refused_with_the_schemas_wording() -> None:
    # The table is built only from a file proxy.core.config.routes_file accepted; its messages pass through.
    with pytest.raises(ConfigError, match=r"^routes\.yaml: routes\[0\], field 'upstream': is required"):
        table("routes:\n  - {models: [a]}\n")


def test_load_reads_a_file_and_reports_a_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text(EXAMPLE, encoding="utf-8")
    assert len(RouteTable.load(path).routes) == 4
    with pytest.raises(ConfigError, match="cannot read the routes file"):
        RouteTable.load(tmp_path / "missing.yaml")


def test_route_keys_come_from_the_environment_and_gateway_mode_needs_them() -> None:
    routes = table()
    env = {"DEEPSEEK_API_KEY": "sk-ds", "DASHSCOPE_API_KEY": "sk-qw", "OPENROUTER_API_KEY": " sk-or "}
    assert resolve_route_keys(routes, env, gateway=True) == {0: "sk-ds", 1: "sk-qw", 2: "sk-or"}
    # BYOK: the client's key goes upstream, unset variables do not matter
    assert resolve_route_keys(routes, {}, gateway=False) == {}
    with pytest.raises(ConfigError) as info:
        resolve_route_keys(routes, {"DEEPSEEK_API_KEY": "sk-ds", "DASHSCOPE_API_KEY": ""}, gateway=True)
    message = str(info.value)
    assert "routes[1] (dashscope-intl.aliyuncs.com), field 'api_key_env'" in message
    assert "DASHSCOPE_API_KEY is unset or empty" in message
    assert "routes[2] (openrouter), field 'api_key_env'" in message
    assert "sk-ds" not in message


@pytest.mark.parametrize(
    ("path", "body", "model"),
    [
        ("/v1/embeddings", b'{"model": "text-embedding-3-small", "input": "x"}', "text-embedding-3-small"),
        ("/v1/models/openrouter%2Fx%2Fy", b"", "openrouter/x/y"),
        ("/v1/models/deepseek-flash", b"", "deepseek-flash"),
        ("/v1/embeddings", b'{"input": "x"}', None),
        ("/v1/embeddings", b'{"model": 3}', None),
        ("/v1/files", b"--boundary\r\n", None),
        ("/v1/embeddings", b"{not json", None),
        ("/v1/embeddings", b"[1]", None),
    ],
)
def test_request_model_of_other_endpoints(path: str, body: bytes, model: str | None) -> None:
    assert request_model(path, body) == model


def test_listings_ask_each_upstream_once() -> None:
    text = """
routes:
  - {name: a, models: ["qwen*"], upstream: "http://gpu.internal:8000/v1"}
  - {name: b, models: ["llama*"], upstream: "http://gpu.internal:8000/v1"}
  - {name: c, prefix: "or/", upstream: "https://openrouter.ai/api/v1", api_key_env: K}
"""
    wanted = listings(table(text))
    assert [(w.upstream, w.name) for w in wanted] == [
        ("http://gpu.internal:8000/v1", "a+b"),
        ("https://openrouter.ai/api/v1", "c"),
    ]


def test_merged_models_list_what_each_route_would_take() -> None:
    text = """
routes:
  - {name: ds, models: ["deepseek-*"], upstream: "https://api.deepseek.com/v1"}
  - {name: or, prefix: "openrouter/", upstream: "https://openrouter.ai/api/v1"}
  - {name: dead, models: ["mistral-*"], upstream: "https://api.mistral.ai/v1"}
"""
    routes = table(text, default="http://gpu.internal:8000/v1")
    ds, op, dead, local = listings(routes)

    def items(*ids: str) -> list[dict[str, object]]:
        return [{"id": i, "object": "model", "owned_by": "x"} for i in ids]

    payload, missing = merge_models(
        routes,
        [
            (ds, items("deepseek-flash", "deepseek-v4-pro", "other-model")),
            (op, items("anthropic/claude-sonnet-4.5", "deepseek/deepseek-v3.2")),
            (dead, None),
            (local, items("deepseek-flash", "Qwen/Qwen3-8B")),  # deepseek-flash is the first route's
        ],
    )
    ids = [m["id"] for m in payload["data"]]
    assert ids == [
        "deepseek-flash",
        "deepseek-v4-pro",
        "openrouter/anthropic/claude-sonnet-4.5",
        "openrouter/deepseek/deepseek-v3.2",
        "Qwen/Qwen3-8B",
    ]
    assert payload["object"] == "list"
    assert payload["data"][2] == {
        "id": "openrouter/anthropic/claude-sonnet-4.5",
        "object": "model",
        "owned_by": "x",
    }
    assert missing == ["dead"]


def test_route_keys_may_live_in_a_dotenv_file_the_environment_wins(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "DEEPSEEK_API_KEY=sk-from-file\nDASHSCOPE_API_KEY=sk-file-qw\nEMPTY=\n", encoding="utf-8"
    )
    environ = key_environment({"DASHSCOPE_API_KEY": "sk-from-env"}, env_file)
    assert environ["DEEPSEEK_API_KEY"] == "sk-from-file" and environ["DASHSCOPE_API_KEY"] == "sk-from-env"
    assert key_environment({"A": "1"}, tmp_path / "missing.env") == {"A": "1"}


def test_destinations_are_cached_per_model_and_long_names_are_not_kept() -> None:
    routes = table()
    first = routes.destination("deepseek-flash")
    assert routes.destination("deepseek-flash") is first
    long_name = "openrouter/" + "x" * 10_000
    assert routes.destination(long_name).model == "x" * 10_000
    assert long_name not in routes._cache
    with pytest.raises(NotFound):
        table("routes:\n  - {models: ['a*'], upstream: 'https://a.example'}\n").destination("b" * 10_000)


def test_replace_model_in_parsed_and_raw_bodies() -> None:
    parsed = {"model": "openrouter/x/y", "messages": []}
    assert orjson.loads(replace_model(parsed, b"", "x/y")) == {"model": "x/y", "messages": []}
    assert orjson.loads(replace_model(None, b'{"model": "or/e", "input": "hi"}', "e")) == {
        "model": "e",
        "input": "hi",
    }
    assert replace_model(None, b"", "e") == b""  # GET /v1/models/{id}: nothing in the body
    assert replace_model(None, b"[1]", "e") == b"[1]"


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(model=st.one_of(st.text(), st.none(), st.integers(), st.lists(st.text(), max_size=2)))
def test_any_model_value_gets_a_route_that_takes_it_or_the_404(model: object) -> None:
    routes = table()
    try:
        destination = routes.destination(model)
    except NotFound as exc:
        assert exc.status == 404 and exc.code == "model_not_found"
        return
    assert isinstance(model, str) and destination.route is not None
    assert destination.route.upstream_model(model) == (destination.model or model)
    first = routes.match(model)
    assert first is not None and first[0] is destination.route


def test_replace_model_keeps_every_other_byte_as_it_came() -> None:
    """A native upstream may bind reasoning to the exact bytes of the history (Anthropic's preserved
    thinking): only the model is written anew."""
    raw = b'{ "model" : "anthropic/claude-fable-5-1",\n  "system": "Caf\\u00e9",  "max_tokens": 1e3 }'
    parsed = json.loads(raw)
    out = replace_model(parsed, raw, "claude-fable-5-1")
    assert out == b'{ "model" : "claude-fable-5-1",\n  "system": "Caf\\u00e9",  "max_tokens": 1e3 }'
    assert replace_model(None, raw, "claude-fable-5-1") == out
