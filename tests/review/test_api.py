"""The reviewers' API answers JSON whatever the store does: a store fault is a 503 with
Retry-After, a malformed or newer-shaped stored review is skipped (and logged), never a 500."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from proxy.core.gateway import parse_client_keys
from proxy.core.review.rules import Decision, HeldCall, ReviewPolicy
from proxy.review.api import ReviewAPI
from proxy.review.hub import MemoryReviewHub, Posted, RedisReviewHub
from proxy.review.service import ReviewService
from tests.realredis import running_redis

REVIEWER = {"Authorization": "Bearer rk-ann"}


class BrokenHub:
    """A store that cannot be reached (or answers too slowly): every call raises."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def wait(
        self, calls: Sequence[HeldCall], timeout: float, opened: asyncio.Event
    ) -> dict[str, Decision]:
        raise self.exc

    async def pending(self) -> list[HeldCall]:
        raise self.exc

    async def get(self, review_id: str) -> HeldCall | None:
        raise self.exc

    async def decide(self, review_id: str, decision: Decision) -> Posted:
        raise self.exc

    async def aclose(self) -> None:
        return None


def client(hub: Any) -> TestClient:
    service = ReviewService(ReviewPolicy(("send_email",)), hub, parse_client_keys(["ann:rk-ann"]), 30.0, 5.0)
    return TestClient(Starlette(routes=ReviewAPI(service, []).routes()), raise_server_exceptions=False)


@pytest.mark.parametrize("exc", [ConnectionError("refused"), TimeoutError(), OSError("reset")])
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/thinkproxy/reviews", None),
        ("GET", "/thinkproxy/reviews/rv_1", None),
        ("POST", "/thinkproxy/reviews/rv_1", {"decision": "approve"}),
    ],
)
def test_a_store_fault_is_a_json_503_with_retry_after(
    exc: BaseException, method: str, path: str, body: dict[str, Any] | None
) -> None:
    with client(BrokenHub(exc)) as c:
        r = c.request(method, path, headers=REVIEWER, json=body)
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/json"
    assert int(r.headers["retry-after"]) >= 1
    error = r.json()["error"]
    assert error["code"] == "review_store_unavailable" and error["message"] and error["type"]


def test_the_api_still_checks_the_key_before_the_store() -> None:
    with client(BrokenHub(ConnectionError())) as c:
        assert c.get("/thinkproxy/reviews").status_code == 401


def test_memory_hub_listing_is_unchanged() -> None:
    with client(MemoryReviewHub()) as c:
        r = c.get("/thinkproxy/reviews", headers=REVIEWER)
    assert r.status_code == 200 and r.json() == {"object": "list", "data": []}


def stored(review_id: str, **extra: Any) -> bytes:
    call = HeldCall(review_id, 0, "call_1", "send_email", '{"to":"a"}', created=1.0, expires=4e9)
    return orjson.dumps({**call.to_json(), **extra})


def test_a_malformed_or_newer_stored_review_is_skipped_or_read_not_a_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("WARNING", logger="thinkproxy.review")
    with running_redis() as redis:
        import redis as redis_sync

        r = redis_sync.Redis.from_url(redis.url)
        prefix = RedisReviewHub.PREFIX
        r.set(prefix + "rv_good", stored("rv_good"))
        r.set(prefix + "rv_newer", stored("rv_newer", reviewer_group="ops"))  # a newer replica's field
        r.set(prefix + "rv_broken", b"{not json")
        r.set(prefix + "rv_wrong", orjson.dumps({"review_id": "rv_wrong", "tool": 3}))
        r.zadd(prefix + "pending", {"rv_good": 4e9, "rv_newer": 4e9, "rv_broken": 4e9, "rv_wrong": 4e9})
        hub = RedisReviewHub(redis.url)
        with client(hub) as c:
            listing = c.get("/thinkproxy/reviews", headers=REVIEWER)
            assert listing.status_code == 200, listing.text
            assert sorted(e["id"] for e in listing.json()["data"]) == ["rv_good", "rv_newer"]
            assert c.get("/thinkproxy/reviews/rv_newer", headers=REVIEWER).json()["tool"] == "send_email"
            broken = c.get("/thinkproxy/reviews/rv_broken", headers=REVIEWER)
            assert broken.status_code == 404 and broken.json()["error"]["code"] == "review_not_found"
    logged = " ".join(rec.getMessage() for rec in caplog.records)
    assert "rv_broken" in logged and "rv_wrong" in logged


def test_redis_down_is_a_503_not_a_traceback() -> None:
    with running_redis() as redis:
        url = redis.url
    with client(RedisReviewHub(url, op_timeout=0.2)) as c:
        for r in (
            c.get("/thinkproxy/reviews", headers=REVIEWER),
            c.get("/thinkproxy/reviews/rv_1", headers=REVIEWER),
            c.post("/thinkproxy/reviews/rv_1", headers=REVIEWER, json={"decision": "reject"}),
        ):
            assert r.status_code == 503 and r.json()["error"]["code"] == "review_store_unavailable"
            assert r.headers["retry-after"]
