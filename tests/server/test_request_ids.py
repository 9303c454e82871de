"""X-Request-Id: the client's or a new one, on every response, upstream and in the access log; the
upstream's own id comes back as X-Upstream-Request-Id."""

from __future__ import annotations

import logging
import re

import httpx
import pytest

from proxy.core.events import AccessRecord
from proxy.server.request_ids import rename_upstream_request_id, take_request_id
from tests.helpers import Recorder

CHAT = {"model": "deepseek-flash", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "model": "deepseek-flash",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
}


def answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=COMPLETION, headers={"x-request-id": "upstream-77"})


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [r.access for r in caplog.records if r.name == "thinkproxy.access"]  # type: ignore[attr-defined]


async def test_a_request_without_an_id_gets_one_returned_forwarded_and_logged(
    proxy_client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="thinkproxy.access")
    rec = Recorder(answer)
    client = proxy_client(rec)
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    rid = r.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", rid)
    assert rec.requests[0].headers["x-request-id"] == rid
    assert r.headers["x-upstream-request-id"] == "upstream-77"
    [line] = access_lines(caplog)
    assert line["request_id"] == rid and line["upstream_request_id"] == "upstream-77"
    again = await client.post("/v1/chat/completions", json=CHAT)
    assert again.headers["x-request-id"] != rid


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models"])
async def test_the_clients_id_is_kept_forwarded_once_and_returned(proxy_client, path: str) -> None:
    rec = Recorder(answer)
    client = proxy_client(rec)
    mine = "Root=1-67891233-abcdef012345678912345678;Parent=53995c3f42cd8ad8"
    if path.endswith("completions"):
        r = await client.post(path, json=CHAT, headers={"x-request-id": mine})
    else:
        r = await client.get(path, headers={"x-request-id": mine})
    assert r.status_code == 200 and r.headers.get_list("x-request-id") == [mine]
    assert rec.requests[0].headers.get_list("x-request-id") == [mine]


@pytest.mark.parametrize("bad", ["", "has space", "x" * 201, "naïve"])
async def test_an_unusable_id_is_a_400_naming_the_header(proxy_client, bad: str) -> None:
    rec = Recorder(answer)
    client = proxy_client(rec)
    r = await client.post("/v1/chat/completions", json=CHAT, headers={"x-request-id": bad.encode()})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "X-Request-Id" and error["code"] == "invalid_request_id"
    assert "200 visible ASCII" in error["message"]
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])  # a fresh id, even on this error
    assert rec.requests == []


async def test_proxy_errors_and_upstream_errors_carry_the_id(proxy_client) -> None:
    rec = Recorder(lambda req: httpx.Response(429, json={"error": {"message": "slow down"}}))
    client = proxy_client(rec)
    r = await client.post("/v1/chat/completions", json=CHAT, headers={"x-request-id": "mine-1"})
    assert r.status_code == 429 and r.headers["x-request-id"] == "mine-1"
    r = await client.post("/v1/chat/completions", content=b"{", headers={"x-request-id": "mine-2"})
    assert r.status_code == 400 and r.headers["x-request-id"] == "mine-2"


def test_take_request_id_returns_the_error_instead_of_raising() -> None:
    record = AccessRecord(method="POST", path="/v1/chat/completions")
    error = take_request_id(record, "bad id")
    assert error is not None and error.status == 400
    assert record.request_id and ("x-request-id", record.request_id) in record.response_headers
    assert ("x-request-id", record.request_id) in record.forward_headers


def test_upstream_id_is_renamed_and_other_headers_kept() -> None:
    record = AccessRecord(method="GET", path="/v1/models")
    headers = [("Content-Type", "application/json"), ("X-Request-Id", "abc"), ("x-ratelimit-limit", "5")]
    assert rename_upstream_request_id(headers, record) == [
        ("Content-Type", "application/json"),
        ("x-upstream-request-id", "abc"),
        ("x-ratelimit-limit", "5"),
    ]
    assert record.upstream_request_id == "abc"
    untouched = [("content-type", "text/plain")]
    assert rename_upstream_request_id(untouched, record) is untouched
