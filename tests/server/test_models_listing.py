"""The merged `GET /v1/models` (a routes file): cached for a short while, per what the client's
request sends upstream (never one tenant's list for another), every list bounded in size and
time, big ones parsed off the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterable
from typing import Any

import orjson
import pytest

from proxy.core.config.routing import RouteTable
from proxy.core.errors import UpstreamUnreachable
from proxy.core.gateway import ClientKey, GatewayAuth
from proxy.core.plan.request import UpstreamRequest
from proxy.server import models_listing
from proxy.server.models_listing import (
    CACHE_TTL_S,
    LISTING_TIMEOUT_S,
    PARSE_INLINE_BYTES,
    PARTIAL_TTL_S,
    ModelsListing,
)
from proxy.server.upstream.common import Upstream, UpstreamResponse
from tests.helpers import make_settings

ROUTES = """
routes:
  - {name: alpha, models: ["alpha-*"], upstream: "http://a.test/v1", api_key_env: A_KEY}
  - {name: beta, prefix: "b/", upstream: "http://b.test/v1", api_key_env: B_KEY}
"""
BYOK = GatewayAuth(None, ())
GATEWAY = GatewayAuth(
    None, (ClientKey("alice", b"ck-alice"), ClientKey("bob", b"ck-bob")), {0: "ka", 1: "kb"}
)


def listing_of(*ids: str) -> bytes:
    return orjson.dumps({"object": "list", "data": [{"id": i, "object": "model"} for i in ids]})


class Answer(UpstreamResponse):
    def __init__(self, status: int, body: bytes, url: str, headers: list[tuple[str, str]]) -> None:
        self.status, self.url, self.headers = status, url, headers
        self._body = body

    async def raw_reader(self) -> AsyncIterator[bytes]:
        for at in range(0, len(self._body), 65536):
            await asyncio.sleep(0)
            yield self._body[at : at + 65536]

    async def aclose(self) -> None:
        pass


class Lists(Upstream):
    """Upstreams by base URL: a body (200), a status (that error), or None (never answers)."""

    def __init__(self, **answers: bytes | int | None) -> None:
        self.answers = {f"http://{host}.test/v1": answer for host, answer in answers.items()}
        self.asked: list[UpstreamRequest] = []

    async def open(self, request: UpstreamRequest) -> UpstreamResponse:
        self.asked.append(request)
        answer = self.answers[request.url.removesuffix("/models")]
        if answer is None:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")
        if isinstance(answer, int):
            return Answer(answer, b'{"error":{}}', request.url, [])
        return Answer(200, answer, request.url, [("content-type", "application/json")])

    async def aclose(self) -> None:
        pass

    def headers_of(self, n: int) -> dict[str, str]:
        return {k.lower(): v for k, v in self.asked[n].headers}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(upstream: Upstream, gateway: GatewayAuth = BYOK, **options: Any) -> ModelsListing:
    return ModelsListing(RouteTable.from_text(ROUTES), upstream, gateway, **options)


def ids(body: bytes) -> list[str]:
    return [m["id"] for m in orjson.loads(body)["data"]]


async def test_the_merged_list_is_kept_for_a_short_while() -> None:
    upstream = Lists(a=listing_of("alpha-1", "other"), b=listing_of("x/y"))
    clock = Clock()
    listing = make(upstream, clock=clock)
    first = await listing.get([])
    assert ids(first.body) == ["alpha-1", "b/x/y"] and first.missing == ()
    clock.now += CACHE_TTL_S - 1
    assert (await listing.get([])).body == first.body
    assert len(upstream.asked) == 2  # each upstream asked once, not per call
    clock.now += 2
    await listing.get([])
    assert len(upstream.asked) == 4


async def test_calls_at_the_same_time_share_one_round_of_asks() -> None:
    upstream = Lists(a=listing_of("alpha-1"), b=listing_of("x"))
    listing = make(upstream)
    answers = await asyncio.gather(*(listing.get([]) for _ in range(20)))
    assert len(upstream.asked) == 2 and len({a.body for a in answers}) == 1


async def test_a_list_with_an_upstream_missing_is_asked_again_sooner() -> None:
    upstream = Lists(a=listing_of("alpha-1"), b=500)
    clock = Clock()
    listing = make(upstream, clock=clock)
    assert (await listing.get([])).missing == ("beta",)
    clock.now += PARTIAL_TTL_S + 1
    upstream.answers["http://b.test/v1"] = listing_of("x")
    again = await listing.get([])
    assert again.missing == () and ids(again.body) == ["alpha-1", "b/x"]
    assert PARTIAL_TTL_S < CACHE_TTL_S


async def test_when_no_upstream_answers_it_is_a_502_and_not_kept() -> None:
    upstream = Lists(a=503, b=503)
    listing = make(upstream)
    for _ in range(2):
        with pytest.raises(UpstreamUnreachable) as caught:
            await listing.get([])
        assert "alpha" in caught.value.message and "beta" in caught.value.message
    assert len(upstream.asked) == 4


async def test_an_oversized_list_is_refused_and_named() -> None:
    big = listing_of(*(f"model-{i}" for i in range(200)))
    upstream = Lists(a=listing_of("alpha-1"), b=big)
    listing = make(upstream, max_bytes=len(big) - 1)
    answer = await listing.get([])
    assert answer.missing == ("beta",) and ids(answer.body) == ["alpha-1"]


async def test_a_list_that_never_comes_is_named_when_the_listing_timeout_ends() -> None:
    upstream = Lists(a=listing_of("alpha-1"), b=None)
    answer = await make(upstream, timeout=0.05).get([])
    assert answer.missing == ("beta",) and ids(answer.body) == ["alpha-1"]


def test_listings_get_a_short_timeout_not_the_read_timeout() -> None:
    table = RouteTable.from_text(ROUTES)
    slow = ModelsListing.from_settings(make_settings(read_timeout=300.0), table, Lists(), BYOK)
    assert slow.timeout == LISTING_TIMEOUT_S < 300.0
    quick = ModelsListing.from_settings(make_settings(read_timeout=2.0), table, Lists(), BYOK)
    assert quick.timeout == 2.0


async def test_big_lists_are_parsed_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []
    merge = models_listing.merged_body

    def watched(*args: Any) -> Any:
        threads.append(threading.get_ident())
        return merge(*args)

    monkeypatch.setattr(models_listing, "merged_body", watched)
    many = [f"alpha-{i:05}" for i in range(PARSE_INLINE_BYTES // 20)]
    big = listing_of(*many)
    assert len(big) > PARSE_INLINE_BYTES
    answer = await make(Lists(a=big, b=listing_of("x"))).get([])
    assert ids(answer.body) == [*many, "b/x"]
    small = await make(Lists(a=listing_of("alpha-1"), b=listing_of("x"))).get([])
    assert ids(small.body) == ["alpha-1", "b/x"]
    loop_thread = threading.get_ident()
    assert threads[0] != loop_thread and threads[1] == loop_thread


def headers(*pairs: tuple[str, str]) -> Iterable[tuple[str, str]]:
    return [("user-agent", "sdk/1"), *pairs]


async def test_clients_whose_listings_differ_upstream_never_share_a_list() -> None:
    """A header other than a credential (an organization, a project) goes along with the listing
    and may change it, so each distinct set of what is sent has its own entry."""
    upstream = Lists(a=listing_of("alpha-1"), b=listing_of("x"))
    listing = make(upstream, BYOK)
    await listing.get(headers(("openai-organization", "org-one"), ("authorization", "Bearer sk-1")))
    await listing.get(headers(("openai-organization", "org-two")))
    assert len(upstream.asked) == 4
    assert upstream.headers_of(2)["openai-organization"] == "org-two"
    # What never goes upstream with a listing (the client's credentials in any form, its request
    # id and trace context) does not split the cache.
    await listing.get(
        headers(
            ("openai-organization", "org-one"),
            ("authorization", "Bearer sk-9"),
            ("x-goog-api-key", "g"),
            ("cookie", "s=1"),
            ("x-request-id", "r2"),
        )
    )
    assert len(upstream.asked) == 4
    for n in range(4):
        assert not {"authorization", "x-goog-api-key", "cookie"} & set(upstream.headers_of(n))


async def test_gateway_tenants_share_the_list_asked_with_the_gateways_keys() -> None:
    upstream = Lists(a=listing_of("alpha-1"), b=listing_of("x"))
    listing = make(upstream, GATEWAY)
    alice = await listing.get(headers(("authorization", "Bearer ck-alice")))
    bob = await listing.get(headers(("authorization", "Bearer ck-bob")))
    assert alice.body == bob.body and len(upstream.asked) == 2
    assert {upstream.headers_of(n)["authorization"] for n in range(2)} == {"Bearer ka", "Bearer kb"}


async def test_the_cache_is_bounded() -> None:
    upstream = Lists(a=listing_of("alpha-1"), b=listing_of("x"))
    listing = make(upstream, BYOK)
    for i in range(models_listing.CACHE_ENTRIES + 10):
        await listing.get(headers(("openai-project", f"p{i}")))
    assert len(listing) == models_listing.CACHE_ENTRIES


async def test_headers_that_cannot_change_a_listing_neither_go_along_nor_split_the_cache() -> None:
    """100 calls with a different `X-Junk` each (or an SDK's retry count) made 200 upstream
    listings and churned every cache entry: only headers that select what an account sees go
    along with a listing, and the cache key is made of exactly those."""
    upstream = Lists(a=listing_of("alpha-1"), b=listing_of("x"))
    listing = make(upstream, BYOK)
    for i in range(100):
        await listing.get(
            headers(
                ("x-junk", f"junk-{i}"),
                ("x-stainless-retry-count", str(i % 3)),
                ("user-agent", f"sdk/{i}"),
                ("x-request-id", f"r{i}"),
                ("traceparent", f"00-{i:032x}-{i:016x}-01"),
            )
        )
    assert len(upstream.asked) == 2 and len(listing) == 1
    for n in range(2):
        sent = upstream.headers_of(n)
        assert not {"x-junk", "x-stainless-retry-count", "x-request-id", "traceparent"} & set(sent)
        assert not sent.get("user-agent", "").startswith("sdk/")


async def test_account_selectors_go_along_with_a_byok_listing_and_key_the_cache() -> None:
    upstream = Lists(a=listing_of("alpha-1"), b=listing_of("x"))
    listing = make(upstream, BYOK)
    selectors = [("OpenAI-Organization", "org-1"), ("openai-project", "p-1"), ("x-goog-user-project", "g-1")]
    await listing.get(headers(*selectors, ("x-junk", "1")))
    sent = upstream.headers_of(0)
    assert {k: sent[k] for k in ("openai-organization", "openai-project", "x-goog-user-project")} == {
        "openai-organization": "org-1",
        "openai-project": "p-1",
        "x-goog-user-project": "g-1",
    }
    # Header names in any case and order are the same listing; another value of one is another.
    await listing.get(
        [("x-goog-user-project", "g-1"), ("OPENAI-PROJECT", "p-1"), ("openai-organization", "org-1")]
    )
    assert len(upstream.asked) == 2
    await listing.get(headers(("openai-project", "p-2")))
    assert len(upstream.asked) == 4 and len(listing) == 2


async def test_gateway_mode_sends_none_of_the_clients_headers_with_a_listing() -> None:
    """The gateway's keys list what the operator's accounts see: a tenant's organization or project
    header would select someone else's account with the operator's key, and would split the cache."""
    upstream = Lists(a=listing_of("alpha-1"), b=listing_of("x"))
    listing = make(upstream, GATEWAY)
    for i in range(10):
        await listing.get(
            headers(
                ("authorization", "Bearer ck-alice"), ("openai-organization", f"org-{i}"), ("x-junk", str(i))
            )
        )
    assert len(upstream.asked) == 2 and len(listing) == 1
    for n in range(2):
        sent = upstream.headers_of(n)
        assert set(sent) <= {"authorization", "accept", "accept-encoding"}, sent


# -- THINKPROXY_MODELS_WITH_LEVELS: each model's `(level)` forms listed too ------------------------------


async def test_with_levels_each_merged_model_is_followed_by_its_suffixed_forms() -> None:
    upstream = Lists(a=listing_of("alpha-1", "alpha-2(deep)"), b=listing_of("x/y"))
    merged = await make(upstream, levels=True).get([])
    assert ids(merged.body) == [
        "alpha-1",
        "alpha-1(off)",
        "alpha-1(standard)",
        "alpha-1(deep)",
        "alpha-1(auto)",
        "alpha-2(deep)",  # (already suffixed: listed as it came)
        "b/x/y",
        "b/x/y(off)",
        "b/x/y(standard)",
        "b/x/y(deep)",
        "b/x/y(auto)",
    ]
    assert ids((await make(upstream).get([])).body) == ["alpha-1", "alpha-2(deep)", "b/x/y"]


async def test_without_routes_the_upstreams_list_gets_the_suffixed_forms() -> None:
    request = UpstreamRequest("GET", "http://a.test/v1/models", [], b"")
    status, body = await models_listing.listed_with_levels(Lists(a=listing_of("m")), request, 1 << 20)
    assert status == 200 and ids(body) == ["m", "m(off)", "m(standard)", "m(deep)", "m(auto)"]
    # An error goes back as it came, with its status.
    status, body = await models_listing.listed_with_levels(Lists(a=401), request, 1 << 20)
    assert (status, body) == (401, b'{"error":{}}')
    with pytest.raises(UpstreamUnreachable, match="larger than 10 bytes"):
        await models_listing.listed_with_levels(Lists(a=listing_of("m")), request, 10)


def test_a_proxy_without_routes_lists_the_suffixed_forms() -> None:
    import httpx

    from proxy.demo import simulated_table
    from proxy.mock import MockOptions, create_mock_app
    from proxy.server.app import create_app
    from proxy.server.serving import BackgroundServer

    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as mock:
        settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1", models_with_levels=True)
        with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as proxy:
            r = httpx.get(f"{proxy.url}/v1/models", headers={"authorization": "Bearer sk-test"})
            asked = httpx.get(f"{mock.url}/_mock/requests/last").json()
    assert r.status_code == 200
    listed = [m["id"] for m in r.json()["data"]]
    assert {"deepseek-v4-pro", "deepseek-v4-pro(deep)", "deepseek-v4-pro(auto)"} <= set(listed)
    # (BYOK: the client's key went with it; the simulated upstream logs it masked)
    assert asked["path"] == "/deepseek/v1/models" and "authorization" in {k.lower() for k in asked["headers"]}
