"""The routes file's schema: every fault names the file, the route and the field, in the words of
someone editing YAML; any text or structure either loads or is one such ConfigError."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.config.routes_file import parse_routes
from proxy.core.errors import ConfigError

BAD = [
    ("routes:\n  - {models: ['a'], upstream: 'https://x.example', colour: red}\n", "routes[0]", "colour"),
    ("routes:\n  - {models: ['a'], upstream: 'ftp://x.example'}\n", "routes[0]", "'upstream'"),
    ("routes:\n  - {models: ['a'], upstream: 'not a url'}\n", "routes[0]", "'upstream'"),
    ("routes:\n  - {models: ['a'], upstream: 'https://u:p@x.example/v1'}\n", "routes[0]", "credentials"),
    ("routes:\n  - {models: ['a'], upstream: 'https://x.example/v1?key=1'}\n", "routes[0]", "query"),
    ("routes:\n  - {models: ['a'], upstream: 'https://x.example:99999'}\n", "routes[0]", "'upstream'"),
    ("routes:\n  - {upstream: 'https://x.example'}\n", "routes[0]", "either 'models' (globs) or 'prefix'"),
    (
        "routes:\n  - {models: [a], prefix: p/, upstream: 'https://x.example'}\n",
        "routes[0]",
        "not both",
    ),
    ("routes:\n  - {models: [], upstream: 'https://x.example'}\n", "field 'models'", "at least one glob"),
    ("routes:\n  - {prefix: '/', upstream: 'https://x.example'}\n", "field 'prefix'", "empty prefix"),
    ("routes:\n  - {prefix: 'a*/', upstream: 'https://x.example'}\n", "field 'prefix'", "literal"),
    (
        "routes:\n  - {models: [a], upstream: 'https://x.example', api_key_env: 'sk-123'}\n",
        "field 'api_key_env'",
        "never the key",
    ),
    ("routes:\n  - {models: [a], upstream: 'https://x.example', name: 'a b'}\n", "field 'name'", "names use"),
    (
        "routes:\n  - {models: [a], upstream: 'https://ok.example'}\n  - {models: [b]}\n",
        "routes[1]",
        "'upstream'",
    ),
    ("routes: []\n", "field 'routes'", "at least 1"),
    ("routes:\n  - {models: [a], upstream: 'http://a b/v1'}\n", "field 'upstream'", "not a host name"),
    (
        "routes:\n  - {models: [a], upstream: 'http://ü.example/v1'}\n",
        "field 'upstream'",
        "not a host name",
    ),
    (
        "routes:\n  - {name: x, models: [a], upstream: 'https://a.example'}\n"
        "  - {name: x, models: [b], upstream: 'https://b.example'}\n",
        "routes[1] (x), field 'name'",
        "already the name of routes[0]",
    ),
    ("routes:\n  - {models: [a], upstream: 'https://x.example'}\nextra: 1\n", "'extra'", "unknown key"),
    ("- {models: [a], upstream: 'https://x.example'}\n", "routes.yaml", "mapping with a 'routes' list"),
    ("routes: [\n", "routes.yaml", "not valid YAML"),
]


@pytest.mark.parametrize(("text", "where", "what"), BAD)
def test_invalid_files_name_the_route_and_the_field(text: str, where: str, what: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_routes(text)
    message = str(info.value)
    assert message.startswith("routes.yaml: ")
    assert where in message and what in message


def test_the_route_is_named_by_its_name_or_upstream_in_errors() -> None:
    text = "routes:\n  - {name: ds, models: [a], upstream: 'https://x.example', extra: 1}\n"
    with pytest.raises(ConfigError, match=r"routes\[0\] \(ds\), field 'extra': unknown key"):
        parse_routes(text)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(text=st.text(max_size=300))
def test_any_routes_text_loads_or_is_a_config_error(text: str) -> None:
    try:
        parse_routes(text)
    except ConfigError as exc:
        assert str(exc).startswith("routes.yaml")


_VALUES = st.one_of(
    st.text(max_size=40),
    st.integers(),
    st.none(),
    st.lists(st.text(max_size=12), max_size=3),
    st.sampled_from(["https://api.example.com/v1", "http://10.0.0.5:8000/v1", "openrouter/", "KEY_ENV"]),
)
_ROUTE = st.dictionaries(
    st.sampled_from(["name", "models", "prefix", "upstream", "api_key_env", "extra"]), _VALUES, max_size=5
)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(routes=st.lists(_ROUTE, max_size=4))
def test_any_routes_structure_loads_or_names_the_route_at_fault(routes: list[dict[str, object]]) -> None:
    text = yaml.safe_dump({"routes": routes})
    try:
        loaded = parse_routes(text)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("routes.yaml: ")
        assert "routes[" in message or "field 'routes'" in message
        return
    assert len(loaded) == len(routes)
    for route in loaded:
        assert route.upstream.startswith(("http://", "https://")) and (route.models or route.prefix)


def test_a_key_written_twice_in_a_route_is_an_error_not_the_last_one_silently() -> None:
    # The routes file reads like providers.yaml (proxy.core.config.yamlfile): a repeated key is a mistake.
    text = (
        "routes:\n  - models: [a]\n    upstream: 'https://one.example'\n    upstream: 'https://two.example'\n"
    )
    with pytest.raises(ConfigError, match=r"routes\.yaml: not valid YAML: .*duplicate key 'upstream'"):
        parse_routes(text)


def test_models_given_as_a_string_explains_itself_in_the_files_terms() -> None:
    text = 'routes:\n  - {name: ds, models: "deepseek-*", upstream: "https://api.deepseek.com/v1"}\n'
    with pytest.raises(ConfigError) as info:
        parse_routes(text, "routes.yaml")
    message = str(info.value)
    assert message.splitlines() == [
        "routes.yaml: routes[0] (ds), field 'models': must be a list of model globs, not the single "
        "string 'deepseek-*': write models: ['deepseek-*'] (or one '- glob' line per glob)"
    ]
    wrong_types = "routes:\n  - {name: ds, models: [1], upstream: 5}\n"
    with pytest.raises(ConfigError) as info:
        parse_routes(wrong_types, "routes.yaml")
    assert "must be a text value" in str(info.value)
    assert "tuple" not in str(info.value) and "at least 1 item" not in str(info.value)
