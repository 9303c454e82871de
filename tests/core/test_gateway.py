from __future__ import annotations

import httpx
import pytest

from proxy.core.config.routing import Destination, RouteTable
from proxy.core.errors import ConfigError, Unauthorized
from proxy.core.gateway import GatewayAuth, parse_client_keys, presented_key
from tests.helpers import make_settings


def test_byok_passes_the_client_key_untouched() -> None:
    auth = GatewayAuth.from_settings(make_settings())
    headers = [("authorization", "Bearer sk-client"), ("x-other", "1")]
    auth.authorize(headers)
    assert auth.upstream_headers(headers, Destination("https://api.deepseek.com/v1")) == headers


def test_gateway_requires_a_client_key_and_swaps_in_its_own() -> None:
    auth = GatewayAuth.from_settings(make_settings(upstream_api_key="sk-upstream", client_keys="c1, c2"))
    with pytest.raises(Unauthorized) as info:
        auth.authorize([("authorization", "Bearer nope")])
    assert info.value.status == 401 and "nope" not in info.value.message
    with pytest.raises(Unauthorized):
        auth.authorize([])
    assert auth.authorize([("authorization", "Bearer c2")]) is None  # an unnamed key
    sent = auth.upstream_headers(
        [("authorization", "Bearer c2"), ("x-api-key", "c2")], Destination("https://api.x.ai/v1")
    )
    assert sent == [("authorization", "Bearer sk-upstream")]


def test_gateway_uses_api_key_header_for_azure() -> None:
    auth = GatewayAuth.from_settings(make_settings(upstream_api_key="az", client_keys="c1"))
    sent = auth.upstream_headers(
        [("api-key", "c1")], Destination("https://eu.openai.azure.com/openai/deployments/d")
    )
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


# --- the gateway key never follows a client-chosen upstream (security) ---------------------------


async def test_gateway_refuses_a_client_chosen_upstream_and_sends_it_nothing(proxy_client) -> None:  # type: ignore[no-untyped-def]
    """In gateway mode an allow-listed X-Upstream-Base-URL used to receive the operator's key."""
    seen: list[httpx.Request] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"choices": []})

    client = proxy_client(
        upstream,
        upstream_api_key="sk-operator",
        client_keys="ck-alice",
        allowed_upstreams="attacker.example",
    )
    async with client:
        r = await client.post(
            "/v1/chat/completions",
            headers={
                "authorization": "Bearer ck-alice",
                "x-upstream-base-url": "https://attacker.example/v1",
            },
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
    assert r.status_code == 403
    error = r.json()["error"]
    assert error["param"] == "X-Upstream-Base-URL" and "gateway" in error["message"]
    assert seen == []  # nothing forwarded, so no key went anywhere


def test_named_client_keys_give_their_name_never_the_key() -> None:
    auth = GatewayAuth.from_settings(
        make_settings(client_keys="alice:ck-a1, bob:ck-b2:with:colons, ck-plain")
    )
    assert auth.authorize([("authorization", "Bearer ck-a1")]) == "alice"
    assert auth.authorize([("authorization", "Bearer ck-b2:with:colons")]) == "bob"
    assert auth.authorize([("x-api-key", "ck-plain")]) is None
    with pytest.raises(Unauthorized):
        auth.authorize([("authorization", "Bearer alice")])  # a name is not a key
    assert "ck-a1" not in repr(auth)


@pytest.mark.parametrize(
    ("items", "message"),
    [(["alice:ck-1", "alice:ck-2"], "'alice' is used twice"), (["alice: "], "named 'alice' is empty")],
)
def test_client_key_names_are_checked(items: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_client_keys(items)


def test_client_keys_alone_turn_gateway_mode_on_without_an_upstream_key() -> None:
    """Protecting a keyless upstream (a local server): clients must authenticate, nothing is sent."""
    auth = GatewayAuth.from_settings(make_settings(client_keys="ck-1"))
    with pytest.raises(Unauthorized):
        auth.authorize([("authorization", "Bearer sk-someone")])
    sent = auth.upstream_headers([("authorization", "Bearer ck-1")], Destination("http://10.0.0.5:8000/v1"))
    assert sent == []


ROUTES = """
routes:
  - {models: ["deepseek-*"], upstream: "https://api.deepseek.com/v1", api_key_env: DS_KEY}
  - {prefix: "openrouter/", upstream: "https://openrouter.ai/api/v1", api_key_env: OR_KEY}
  - {models: ["local-*"], upstream: "http://10.0.0.5:8000/v1"}
"""


def test_each_route_sends_its_own_key_and_the_default_the_upstream_key() -> None:
    table = RouteTable.from_text(ROUTES, default_upstream="https://api.x.ai/v1")
    auth = GatewayAuth.from_settings(
        make_settings(upstream_api_key="sk-default", client_keys="ck"), {0: "sk-ds", 1: "sk-or"}
    )
    client = [("authorization", "Bearer ck")]

    def key(model: str) -> list[tuple[str, str]]:
        return auth.upstream_headers(client, table.destination(model))

    assert key("deepseek-flash") == [("authorization", "Bearer sk-ds")]
    assert key("openrouter/x/y") == [("authorization", "Bearer sk-or")]
    assert key("local-llama") == []  # a route without api_key_env sends no key at all
    assert key("grok-4") == [("authorization", "Bearer sk-default")]  # the implicit last route
    chosen = Destination("https://api.deepseek.com/v1", client_chosen=True)
    assert auth.key_for(chosen) is None


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (
            {"client_keys": "alice:k1", "reviewer_keys": "k1", "review_tools": "send_*"},
            ("CLIENT", "REVIEWER"),
        ),
        ({"client_keys": "k1", "admin_keys": "ops:k1"}, ("CLIENT", "ADMIN")),
        ({"reviewer_keys": "k2", "admin_keys": "k2", "review_tools": "x"}, ("REVIEWER", "ADMIN")),
        (
            {"client_keys": "a:k1,b:k2", "reviewer_keys": "r:k3,s:k2", "review_tools": "x"},
            ("CLIENT", "REVIEWER"),
        ),
    ],
)
def test_one_key_in_two_roles_refuses_to_start_naming_the_variables(
    settings: dict[str, str], named: tuple[str, str]
) -> None:
    with pytest.raises(ConfigError) as info:
        GatewayAuth.from_settings(make_settings(**settings))
    message = str(info.value)
    for role in named:
        assert f"THINKPROXY_{role}_KEYS" in message
    assert "k1" not in message.replace("THINKPROXY", "") and "k2" not in message  # keys never printed


def test_distinct_keys_per_role_start() -> None:
    GatewayAuth.from_settings(
        make_settings(client_keys="a:c1", reviewer_keys="r:r1", admin_keys="o:a1", review_tools="x")
    )


async def test_serve_refuses_a_client_key_that_is_a_reviewer_key() -> None:
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "THINKPROXY_UPSTREAM_BASE_URL": "https://api.deepseek.com/v1",
        "THINKPROXY_UPSTREAM_API_KEY": "sk-upstream",
        "THINKPROXY_CLIENT_KEYS": "alice:same-key",
        "THINKPROXY_REVIEWER_KEYS": "bob:same-key",
        "THINKPROXY_REVIEW_TOOLS": "send_email",
    }
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "serve"], env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 2
    assert b"THINKPROXY_CLIENT_KEYS" in done.stderr and b"THINKPROXY_REVIEWER_KEYS" in done.stderr
    assert b"same-key" not in done.stderr and b"Traceback" not in done.stderr


CREDENTIALS = [
    ("authorization", "Bearer ck-1"),
    ("cookie", "session=secret-cookie"),
    ("x-goog-api-key", "secret-goog"),
    ("x-api-key", "secret-x"),
    ("api-key", "secret-azure"),
    ("proxy-authorization", "Basic c2VjcmV0"),
]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/models", None),
        ("POST", "/v1/chat/completions", b'{"model": "m", "messages": []}'),
        ("POST", "/v1/embeddings", b'{"model": "m", "input": "x"}'),
    ],
)
async def test_gateway_mode_forwards_no_client_credential_of_any_kind(
    proxy_client,
    method: str,
    path: str,
    body: bytes | None,  # type: ignore[no-untyped-def]
) -> None:
    seen: list[httpx.Request] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"object": "list", "data": [], "choices": []})

    client = proxy_client(upstream, upstream_api_key="sk-upstream", client_keys="ck-1")
    async with client:
        r = await client.request(method, path, content=body, headers=CREDENTIALS)
    assert r.status_code == 200
    (sent,) = seen
    assert sent.headers["authorization"] == "Bearer sk-upstream"
    for name, value in CREDENTIALS:
        if name != "authorization":
            assert name not in sent.headers, name
        assert value.split()[-1] not in str(sent.headers.raw), name


async def test_byok_still_forwards_the_clients_own_headers(proxy_client) -> None:  # type: ignore[no-untyped-def]
    seen: list[httpx.Request] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"object": "list", "data": []})

    async with proxy_client(upstream) as client:
        await client.get("/v1/models", headers=CREDENTIALS[:3])
    assert seen[0].headers["cookie"] == "session=secret-cookie"
    assert seen[0].headers["x-goog-api-key"] == "secret-goog"


def test_session_scope_labels_every_key_apart_and_none_as_a_name() -> None:
    """Sessions are kept per key: a named key's name, an unnamed key's place in the list (`_2`),
    which no name can equal (names start with a letter or digit), and never anything of the key."""
    auth = GatewayAuth.from_settings(
        make_settings(upstream_api_key="sk-up", client_keys=["alice:ck-a", "ck-u1", "ck-u2"])
    )

    def scope(key: str) -> str | None:
        return auth.session_scope([("authorization", f"Bearer {key}")])

    assert (scope("ck-a"), scope("ck-u1"), scope("ck-u2"), scope("nope")) == ("alice", "_2", "_3", "_refused")
    assert GatewayAuth.from_settings(make_settings()).session_scope([("authorization", "Bearer x")]) is None
    # The labels' premise: `_2:ck-x` is no name `_2`, it is an unnamed key (that key, whole).
    assert parse_client_keys(["_2:ck-x"])[0].name is None
