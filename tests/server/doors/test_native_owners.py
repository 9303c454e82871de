"""Stored responses of a native Responses upstream in gateway mode (proxy.server.doors.native_owners):
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
from proxy.server.doors.native_owners import NativeOwners, split_records_warning
from proxy.server.serving import BackgroundServer
from proxy.server.tenancy import DoorSecrets
from proxy.state.memory import MemoryStore
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


def created(proxy: BackgroundServer, stream: bool, headers: dict[str, str] = ALICE) -> tuple[str, list[str]]:
    """A response created by `headers`' tenant: its id and its output items' ids."""
    r = httpx.post(f"{proxy.url}/v1/responses", json={**BODY, "stream": stream}, headers=headers)
    assert r.status_code == 200, r.text
    if not stream:
        return str(r.json()["id"]), [str(item["id"]) for item in r.json()["output"]]
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    items = [str(e["item"]["id"]) for e in events if e["type"] == "response.output_item.added"]
    return str(events[0]["response"]["id"]), items


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_another_tenants_output_items_cannot_be_referenced(mock: BackgroundServer, stream: bool) -> None:
    """An `item_reference` (or a reasoning item sent without its blob, which the upstream looks up
    by id) to another tenant's output item is refused as the upstream refuses an unknown item."""
    with gateway(mock) as proxy:
        _, items = created(proxy, stream)
        assert items
        asked = upstream_count(mock)
        for item_id in items:
            for item in ({"type": "item_reference", "id": item_id}, {"id": item_id}):
                body = {**BODY, "input": [{"role": "user", "content": "Go on."}, item]}
                r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers=BOB)
                assert r.status_code == 404, r.text
                assert r.json()["error"]["message"] == f"Item with id '{item_id}' not found."
                assert r.json()["error"]["param"] == "input"
        reasoning = next(i for i in items if i.startswith("rs_"))
        blobless = {**BODY, "input": [{"type": "reasoning", "id": reasoning, "summary": []}]}
        r = httpx.post(f"{proxy.url}/v1/responses", json=blobless, headers=BOB)
        assert r.status_code == 404
        assert upstream_count(mock) == asked  # none of it reached the upstream
        # Its creator references them (the upstream resolves them).
        references = [{"type": "item_reference", "id": i} for i in items]
        mine = {**BODY, "input": [*references, {"role": "user", "content": "Go on."}]}
        r = httpx.post(f"{proxy.url}/v1/responses", json=mine, headers=ALICE)
        assert r.status_code == 200, r.text
        assert httpx.get(f"{mock.url}/_mock/requests/last").json()["body"]["input"][0]["id"] == items[0]


def test_an_item_id_the_proxy_never_relayed_is_refused(mock: BackgroundServer) -> None:
    with gateway(mock) as proxy:
        asked = upstream_count(mock)
        body = {**BODY, "input": [{"type": "item_reference", "id": "msg_someone_elses"}]}
        r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers=ALICE)
        assert r.status_code == 404
        assert r.json()["error"]["message"] == "Item with id 'msg_someone_elses' not found."
        assert upstream_count(mock) == asked


def test_conversations_are_refused_in_gateway_mode(mock: BackgroundServer) -> None:
    """A conversation object lives in the shared account under no tenant: `conversation` and the
    `/v1/conversations` routes are refused, and nothing reaches the upstream."""
    with gateway(mock) as proxy:
        asked = upstream_count(mock)
        r = httpx.post(f"{proxy.url}/v1/responses", json={**BODY, "conversation": "conv_x"}, headers=ALICE)
        assert r.status_code == 400
        error = r.json()["error"]
        assert error["param"] == "conversation" and error["code"] == "conversation_not_supported"
        assert "gateway mode" in error["message"]
        for method, path in (
            ("POST", ""),
            ("GET", "/conv_x"),
            ("DELETE", "/conv_x"),
            ("GET", "/conv_x/items"),
        ):
            r = httpx.request(method, f"{proxy.url}/v1/conversations{path}", headers=ALICE)
            assert r.status_code == 403, (method, path, r.text)
            assert r.json()["error"]["code"] == "conversations_not_served"
        r = httpx.get(f"{proxy.url}/v1/conversations/conv_x", headers={"authorization": "Bearer nope"})
        assert r.status_code == 401  # (who asks is checked first)
        assert upstream_count(mock) == asked


def test_byok_mode_passes_conversations_on(mock: BackgroundServer) -> None:
    settings = make_settings(upstream_base_url=f"{mock.url}/openai/v1")
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as proxy:
        r = httpx.get(f"{proxy.url}/v1/conversations/conv_x", headers=ALICE)
    assert r.status_code == 404 and "conversations_not_served" not in r.text  # (the mock's own 404)


async def test_a_record_is_kept_alive_by_its_use() -> None:
    """An owner record is renewed each time it is used: a conversation in use never expires."""
    now = [0.0]
    store = MemoryStore(ttl=100, clock=lambda: now[0])
    settings = make_settings(client_keys=["ck-alice"], upstream_api_key="sk-operator")
    owners = NativeOwners(store, DoorSecrets.of(settings, None), gateway=True)
    tenants = owners.tenants(ALICE.items())
    await owners.record(tenants.current, "resp_1")
    now[0] = 60
    assert await owners.owns(tenants, "resp_1")
    now[0] = 130  # past the first write's TTL, within the use's
    assert await owners.owns(tenants, "resp_1")
    now[0] = 300
    assert not await owners.owns(tenants, "resp_1")


def test_serve_warns_when_records_would_be_split_between_workers() -> None:
    """The memory store is one process's: with several workers a record is found only by the
    worker that wrote it."""
    split = make_settings(client_keys=["ck-alice"], upstream_api_key="sk-operator", workers=4)
    warning = split_records_warning(split)
    assert warning is not None and "THINKPROXY_STATE_URL" in warning and "4 workers" in warning
    shared = make_settings(
        client_keys=["ck-alice"],
        upstream_api_key="sk-operator",
        workers=4,
        state_url="redis://localhost:6379/0",
    )
    assert split_records_warning(shared) is None
    assert split_records_warning(make_settings(workers=4)) is None  # BYOK: nothing recorded
    assert split_records_warning(make_settings(client_keys=["ck-alice"], upstream_api_key="sk-o")) is None
