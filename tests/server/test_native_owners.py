"""Stored responses of a native Responses upstream in gateway mode (proxy.server.native_owners):
every tenant reaches the upstream with the operator's one key, so the upstream cannot tell them
apart; the proxy records which tenant created each response id it relayed and refuses the others
as the upstream refuses an unknown id."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

ALICE = {"authorization": "Bearer ck-alice"}
BOB = {"authorization": "Bearer ck-bob"}
BODY = {"model": "gpt-5.4", "input": "My name is Ada.", "reasoning": {"effort": "low"}}


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="openai"))) as server:
        yield server


def gateway(mock: BackgroundServer, **overrides: Any) -> BackgroundServer:
    settings = make_settings(
        upstream_base_url=f"{mock.url}/openai/v1",
        client_keys=["ck-alice", "ck-bob"],
        upstream_api_key="sk-operator",
        **overrides,
    )
    return BackgroundServer(create_app(settings, table=simulated_table(mock.port)))


def upstream_count(mock: BackgroundServer) -> int:
    return len(httpx.get(f"{mock.url}/_mock/requests").json())


def created_id(proxy: BackgroundServer, stream: bool) -> str:
    r = httpx.post(f"{proxy.url}/v1/responses", json={**BODY, "stream": stream}, headers=ALICE)
    assert r.status_code == 200, r.text
    if not stream:
        return str(r.json()["id"])
    first = next(line for line in r.text.splitlines() if line.startswith("data: "))
    event = json.loads(first[6:])
    assert event["type"] == "response.created"
    return str(event["response"]["id"])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_another_tenant_cannot_read_delete_or_continue_a_response(
    mock: BackgroundServer, stream: bool
) -> None:
    with gateway(mock) as proxy:
        response_id = created_id(proxy, stream)
        asked = upstream_count(mock)
        for method, part in (("GET", ""), ("DELETE", ""), ("GET", "/input_items"), ("POST", "/cancel")):
            r = httpx.request(method, f"{proxy.url}/v1/responses/{response_id}{part}", headers=BOB)
            assert r.status_code == 404
            assert r.json()["error"]["message"] == f"Response with id '{response_id}' not found."
        follow = {**BODY, "input": "What is my name?", "previous_response_id": response_id}
        r = httpx.post(f"{proxy.url}/v1/responses", json=follow, headers=BOB)
        assert r.status_code == 400
        assert r.json()["error"]["code"] == "previous_response_not_found"
        assert r.json()["error"]["param"] == "previous_response_id"
        assert upstream_count(mock) == asked  # none of it reached the upstream
        # The tenant that created it continues it (and reads it: forwarded to the upstream).
        r = httpx.post(f"{proxy.url}/v1/responses", json=follow, headers=ALICE)
        assert r.status_code == 200, r.text
        sent = httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]
        assert sent["previous_response_id"] == response_id
        forwarded = httpx.get(f"{proxy.url}/v1/responses/{response_id}", headers=ALICE)
        assert f"Response with id '{response_id}' not found." not in forwarded.text  # not refused


def test_an_id_the_proxy_never_relayed_is_refused(mock: BackgroundServer) -> None:
    with gateway(mock) as proxy:
        r = httpx.get(f"{proxy.url}/v1/responses/resp_someone_elses", headers=ALICE)
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"


def test_with_the_state_store_off_the_refusal_names_the_setting(mock: BackgroundServer) -> None:
    with gateway(mock, state="off") as proxy:
        response_id = created_id(proxy, False)
        r = httpx.get(f"{proxy.url}/v1/responses/{response_id}", headers=ALICE)
    assert r.status_code == 404 and "THINKPROXY_STATE" in r.json()["error"]["message"]


def test_byok_mode_leaves_ownership_to_the_upstream(mock: BackgroundServer) -> None:
    """Each client's own key reaches the upstream: it answers for its ids itself."""
    settings = make_settings(upstream_base_url=f"{mock.url}/openai/v1")
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as proxy:
        r = httpx.post(f"{proxy.url}/v1/responses", json=BODY, headers=ALICE)
        follow = {**BODY, "input": "x", "previous_response_id": r.json()["id"]}
        r = httpx.post(f"{proxy.url}/v1/responses", json=follow, headers=BOB)
    assert r.status_code == 200
