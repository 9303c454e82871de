from __future__ import annotations

import pytest

from proxy.errors import ConfigError, Unauthorized
from proxy.gateway import GatewayAuth, presented_key
from tests.helpers import make_settings


def test_byok_passes_the_client_key_untouched() -> None:
    auth = GatewayAuth.from_settings(make_settings())
    headers = [("authorization", "Bearer sk-client"), ("x-other", "1")]
    auth.authorize(headers)
    assert auth.upstream_headers(headers, "https://api.deepseek.com/v1") == headers


def test_gateway_requires_a_client_key_and_swaps_in_its_own() -> None:
    auth = GatewayAuth.from_settings(make_settings(upstream_api_key="sk-upstream", client_keys="c1, c2"))
    with pytest.raises(Unauthorized) as info:
        auth.authorize([("authorization", "Bearer nope")])
    assert info.value.status == 401 and "nope" not in info.value.message
    with pytest.raises(Unauthorized):
        auth.authorize([])
    auth.authorize([("authorization", "Bearer c2")])
    sent = auth.upstream_headers([("authorization", "Bearer c2"), ("x-api-key", "c2")], "https://api.x.ai/v1")
    assert sent == [("authorization", "Bearer sk-upstream")]


def test_gateway_uses_api_key_header_for_azure() -> None:
    auth = GatewayAuth.from_settings(make_settings(upstream_api_key="az", client_keys="c1"))
    sent = auth.upstream_headers([("api-key", "c1")], "https://eu.openai.azure.com/openai/deployments/d")
    assert sent == [("api-key", "az")]


def test_gateway_without_client_keys_refuses_to_start() -> None:
    with pytest.raises(ConfigError, match="THINKPROXY_CLIENT_KEYS"):
        GatewayAuth.from_settings(make_settings(upstream_api_key="sk-upstream"))


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ([("Authorization", "Bearer abc")], "abc"),
        ([("authorization", "bearer  abc ")], "abc"),
        ([("api-key", "k")], "k"),
        ([("x-api-key", "k2")], "k2"),
        ([("x-other", "1")], None),
    ],
)
def test_presented_key(headers: list[tuple[str, str]], key: str | None) -> None:
    assert presented_key(headers) == key
