"""The Responses API front door end to end: a real proxy in front of the simulated upstream, driven
by openai-python and raw HTTP. Bridged (DeepSeek, which enforces its reasoning-replay rule) and
native (OpenAI's Responses API, which enforces its own); levels, events, sealed reasoning, state,
compaction, errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from proxy.core import seal
from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings

EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
TRACE_SCHEMA = jsonschema.Draft202012Validator(
    json.loads((Path(__file__).parents[3] / "docs" / "trace-event.schema.json").read_text())
)
MODEL = "deepseek-v4-pro"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ASK = "What's the weather in Paris? Use get_weather."


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions(default_dialect="deepseek"))) as server:
        yield server


def proxy_for(mock: BackgroundServer, prefix: str = "deepseek", **overrides: Any) -> BackgroundServer:
    settings = make_settings(upstream_base_url=f"{mock.url}/{prefix}/v1", **overrides)
    return BackgroundServer(create_app(settings, table=simulated_table(mock.port)))


def sdk(proxy: BackgroundServer, key: str = "sk-test") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0, timeout=20)


def last_upstream(mock: BackgroundServer) -> dict[str, Any]:
    record: dict[str, Any] = httpx.get(f"{mock.url}/_mock/requests/last").json()
    return record


def sse_events(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The `data:` events (checked against their `event:` names) and the comment lines."""
    events, comments = [], []
    for block in text.split("\n\n"):
        lines = block.splitlines()
        comments += [line for line in lines if line.startswith(":")]
        names = [line[7:] for line in lines if line.startswith("event: ")]
        data = [line[6:] for line in lines if line.startswith("data: ")]
        if data:
            event = json.loads("\n".join(data))
            assert names == [event["type"]], (names, event["type"])
            events.append(event)
    return events, comments


def tool_turn(proxy: BackgroundServer, **extra: Any) -> list[dict[str, Any]]:
    """First turn of a tool loop: the model calls get_weather; the input of the second turn."""
    first = sdk(proxy).responses.create(
        model=MODEL, input=ASK, tools=[WEATHER], reasoning={"effort": "high"}, **extra
    )
    call = next(o for o in first.output if o.type == "function_call")
    return [
        {"role": "user", "content": ASK},
        *(o.model_dump(exclude_none=True) for o in first.output),
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"},
    ]


# -- the stream a Responses client expects --------------------------------------------------------


def test_stream_events_parse_in_order_with_the_trace_as_comments(mock: BackgroundServer) -> None:
    with proxy_for(mock, trace="detailed") as proxy:
        body = {
            "model": MODEL,
            "input": ASK,
            "tools": [WEATHER],
            "stream": True,
            "reasoning": {"effort": "high"},
        }
        r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers={"authorization": "Bearer k"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-thinking-level-applied"] == "deep" and r.headers["x-thinking-provider"] == "deepseek"
    events, comments = sse_events(r.text)
    parsed = [EVENT.validate_python(e) for e in events]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert "response.reasoning_text.delta" in types and "response.function_call_arguments.done" in types
    assert all(t.startswith("response.") for t in types)
    assert "[DONE]" not in r.text
    assert comments and all(c.startswith(": trace {") for c in comments)
    final = Response.model_validate(events[-1]["response"])
    assert [o.type for o in final.output] == ["reasoning", "function_call"]
    assert final.output[0].encrypted_content and final.output[0].encrypted_content.startswith("tp1.")
    assert final.usage is not None and final.usage.output_tokens_details.reasoning_tokens > 0


def test_a_summary_request_streams_the_reasoning_as_summary_events(mock: BackgroundServer) -> None:
    with proxy_for(mock) as proxy:
        events = []
        with sdk(proxy).responses.stream(
            model=MODEL, input="Think about 2+2.", reasoning={"effort": "high", "summary": "auto"}
        ) as stream:
            events = [e.type for e in stream]
            final = stream.get_final_response()
    assert "response.reasoning_summary_text.delta" in events and "response.reasoning_text.delta" not in events
    assert final.output[0].type == "reasoning" and final.output[0].summary
    assert final.output_text


@pytest.mark.parametrize(
    ("effort", "header", "applied", "upstream_thinking"),
    [
        ("none", None, "off", "disabled"),
        ("high", None, "deep", "enabled"),
        ("none", "deep", "deep", "enabled"),
    ],
)
def test_the_level_comes_from_reasoning_effort_unless_the_header_says(
    mock: BackgroundServer, effort: str, header: str | None, applied: str, upstream_thinking: str
) -> None:
    headers = {"authorization": "Bearer k", **({"x-thinking-level": header} if header else {})}
    body = {"model": MODEL, "input": "hi", "reasoning": {"effort": effort}}
    with proxy_for(mock) as proxy:
        r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["x-thinking-level-applied"] == applied
    sent = last_upstream(mock)["body"]
    assert sent["thinking"]["type"] == upstream_thinking
    assert "reasoning" not in sent and "input" not in sent  # the chat dialect's own knob only


# -- reasoning through the client, with no server state ---------------------------------------------


def test_a_tool_loop_works_with_the_state_store_off(mock: BackgroundServer) -> None:
    with proxy_for(mock, state="off") as proxy:
        second = tool_turn(proxy, store=False)
        answer = sdk(proxy).responses.create(
            model=MODEL, input=second, tools=[WEATHER], reasoning={"effort": "high"}, store=False
        )
    assert answer.status == "completed" and "sunny" in answer.output_text
    assistant = [m for m in last_upstream(mock)["body"]["messages"] if m["role"] == "assistant"]
    assert assistant[0]["reasoning_content"]  # put back from the sealed encrypted_content
    assert "tp1." not in json.dumps(last_upstream(mock)["body"])  # a blob never goes upstream


def without_blob(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reasoning items as a client that keeps only their ids would send them."""
    return [
        {"type": "reasoning", "id": i["id"], "summary": []} if i.get("type") == "reasoning" else i
        for i in items
    ]


def tampered(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for item in items:
        if item.get("type") == "reasoning":
            blob = item["encrypted_content"]
            item = {
                **item,
                "content": None,
                "encrypted_content": blob[:-4] + ("AAAA" if blob[-4:] != "AAAA" else "BBBB"),
            }
        out.append(item)
    return out


@pytest.mark.parametrize("spoil", [without_blob, tampered], ids=["dropped", "tampered"])
def test_a_blob_that_does_not_verify_counts_as_missing(mock: BackgroundServer, spoil: Any) -> None:
    with proxy_for(mock, state="off") as proxy:
        second = spoil(tool_turn(proxy, store=False))
        body = {
            "model": MODEL,
            "input": second,
            "tools": [WEATHER],
            "reasoning": {"effort": "high"},
            "store": False,
        }
        r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers={"authorization": "Bearer sk-test"})
        sent = json.dumps(httpx.get(f"{mock.url}/_mock/requests").json())
    # DeepSeek's own 400, unchanged: the proxy neither forwarded the blob nor made reasoning up.
    assert r.status_code == 400
    assert (
        r.json()["error"]["message"]
        == "The reasoning_content in the thinking mode must be passed back to the API."
    )
    assert "tp1." not in sent


def test_another_tenants_blob_is_not_restored(mock: BackgroundServer) -> None:
    with proxy_for(mock, state="off") as proxy:
        second = tool_turn(proxy, store=False)  # sealed for the tenant of key sk-test
        other = sdk(proxy, key="sk-other")
        with pytest.raises(openai.BadRequestError, match="must be passed back"):
            other.responses.create(
                model=MODEL, input=second, tools=[WEATHER], reasoning={"effort": "high"}, store=False
            )


# -- stored responses ------------------------------------------------------------------------------


def test_previous_response_id_get_and_delete_per_tenant(mock: BackgroundServer) -> None:
    with proxy_for(mock) as proxy:
        client = sdk(proxy)
        first = client.responses.create(model=MODEL, input="My name is Ada.")
        follow = client.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id)
        sent = last_upstream(mock)["body"]["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "user"]
        assert sent[0]["content"] == "My name is Ada."
        assert client.responses.retrieve(follow.id).output_text == follow.output_text
        other = sdk(proxy, key="sk-other")
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve(first.id)
        with pytest.raises(openai.BadRequestError, match="not found"):
            other.responses.create(model=MODEL, input="x", previous_response_id=first.id)
        r = httpx.delete(f"{proxy.url}/v1/responses/{first.id}", headers={"authorization": "Bearer sk-test"})
        assert r.json() == {"id": first.id, "object": "response", "deleted": True}
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)


def test_previous_response_id_with_the_state_store_off_names_the_setting(mock: BackgroundServer) -> None:
    with (
        proxy_for(mock, state="off") as proxy,
        pytest.raises(openai.BadRequestError, match="THINKPROXY_STATE=off"),
    ):
        sdk(proxy).responses.create(model=MODEL, input="x", previous_response_id="resp_1")


def test_an_item_reference_is_resolved_from_the_store(mock: BackgroundServer) -> None:
    """The AI SDK sends reasoning back only as an item_reference by id (store on, its default)."""
    with proxy_for(mock) as proxy:
        second = tool_turn(proxy)
        second = [
            {"type": "item_reference", "id": i["id"]} if i.get("type") == "reasoning" else i for i in second
        ]
        answer = sdk(proxy).responses.create(
            model=MODEL, input=second, tools=[WEATHER], reasoning={"effort": "high"}
        )
    assert answer.status == "completed"
    assistant = [m for m in last_upstream(mock)["body"]["messages"] if m["role"] == "assistant"]
    assert assistant[0]["reasoning_content"]


# -- tools ------------------------------------------------------------------------------------------


def test_hosted_tools_are_left_out_and_announced_or_refused(mock: BackgroundServer) -> None:
    body = {"model": MODEL, "input": ASK, "tools": [WEATHER, {"type": "web_search"}], "stream": True}
    with proxy_for(mock, trace="brief") as proxy:
        r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers={"authorization": "Bearer k"})
    assert r.status_code == 200 and r.headers["x-thinking-omitted-tools"] == "web_search"
    _, comments = sse_events(r.text)
    notes = [json.loads(c[len(": trace ") :]) for c in comments if '"type":"note"' in c]
    assert notes and notes[0]["code"] == "omitted_tools" and notes[0]["tools"] == ["web_search"]
    for comment in comments:
        TRACE_SCHEMA.validate(json.loads(comment[len(": trace ") :]))
    assert [t["function"]["name"] for t in last_upstream(mock)["body"]["tools"]] == ["get_weather"]
    with proxy_for(mock, responses_hosted_tools="refuse") as proxy:
        r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers={"authorization": "Bearer k"})
    assert r.status_code == 400 and "web_search" in r.json()["error"]["message"]


def test_a_custom_tool_call_comes_back_as_a_custom_tool_call(mock: BackgroundServer) -> None:
    tool = {"type": "custom", "name": "apply_patch", "description": "Apply a patch."}
    with proxy_for(mock) as proxy:
        answer = sdk(proxy).responses.create(
            model=MODEL, input="Use apply_patch to fix the typo.", tools=[tool]
        )
    calls = [o for o in answer.output if o.type == "custom_tool_call"]
    assert calls and calls[0].name == "apply_patch" and isinstance(calls[0].input, str)


# -- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_error_before_the_answer_is_relayed_unchanged(
    mock: BackgroundServer, stream: bool
) -> None:
    body = {"model": MODEL, "input": "hi", "stream": stream}
    headers = {"authorization": "Bearer k", "x-mock-fault": "429"}
    with proxy_for(mock) as proxy:
        r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers=headers)
    direct = httpx.post(
        f"{mock.url}/deepseek/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        headers=headers,
    )
    assert r.status_code == direct.status_code == 429
    assert r.json() == direct.json()


def test_a_stream_cut_upstream_ends_failed_never_completed(mock: BackgroundServer) -> None:
    body = {"model": MODEL, "input": "Tell me a long story.", "stream": True}
    headers = {"authorization": "Bearer k", "x-mock-fault": "disconnect"}
    with proxy_for(mock) as proxy:
        r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers=headers)
    events, _ = sse_events(r.text)
    assert events[-1]["type"] == "response.failed"
    assert not any(e["type"] == "response.completed" for e in events)
    EVENT.validate_python(events[-1])


# -- compaction --------------------------------------------------------------------------------------


def test_compaction_round_trip(mock: BackgroundServer) -> None:
    with proxy_for(mock, state="off") as proxy:
        client = sdk(proxy)
        compacted = client.responses.compact(
            model=MODEL,
            input=[{"role": "user", "content": "Fix main.py"}, {"role": "assistant", "content": "Done."}],
        )
        assert compacted.object == "response.compaction"
        item = compacted.output[-1]
        assert item.type == "compaction" and item.encrypted_content.startswith("tp1.")
        summary_request = last_upstream(mock)["body"]["messages"]
        assert (
            "tools" not in last_upstream(mock)["body"] and "handoff summary" in summary_request[-1]["content"]
        )
        client.responses.create(
            model=MODEL,
            input=[
                {"type": "compaction", "id": item.id, "encrypted_content": item.encrypted_content},
                {"role": "user", "content": "Next?"},
            ],
            store=False,
        )
    sent = last_upstream(mock)["body"]["messages"]
    assert (
        sent[0]["role"] == "user" and "Compact the conversation" in sent[0]["content"]
    )  # the mock echoes the prompt
    assert sent[-1]["content"] == "Next?"


def test_a_trailing_compaction_trigger_answers_one_compaction_item(mock: BackgroundServer) -> None:
    with (
        proxy_for(mock) as proxy,
        sdk(proxy).responses.stream(
            model=MODEL, input=[{"role": "user", "content": "hi"}, {"type": "compaction_trigger"}]
        ) as stream,
    ):
        types = [e.type for e in stream]
        final = stream.get_final_response()
    assert [o.type for o in final.output] == ["compaction"]
    assert "response.output_text.delta" not in types


# -- native upstreams --------------------------------------------------------------------------------


def test_native_upstreams_get_the_level_as_reasoning_effort_and_answer_untouched(
    mock: BackgroundServer,
) -> None:
    body = {
        "model": "gpt-5.4",
        "input": "hi",
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
    }
    headers = {"authorization": "Bearer k", "x-thinking-level": "deep"}
    with proxy_for(mock, prefix="openai") as proxy:
        r = httpx.post(f"{proxy.url}/v1/responses", json=body, headers=headers)
    sent = last_upstream(mock)
    assert sent["path"] == "/openai/v1/responses"
    assert sent["body"]["reasoning"] == {"effort": "high", "summary": "auto"}
    assert r.status_code == 200 and r.headers["x-thinking-level-applied"] == "deep"
    reasoning = r.json()["output"][0]
    assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"].startswith(
        "gAAAA"
    )  # OpenAI's own


def test_a_native_upstreams_rule_is_its_own(mock: BackgroundServer) -> None:
    """OpenAI refuses a function_call replayed with store=false without its reasoning item: the
    proxy forwards natively and relays that 400 as it came."""
    tools = [WEATHER]
    first = {
        "model": "gpt-5.4",
        "input": ASK,
        "tools": tools,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "medium"},
    }
    headers = {"authorization": "Bearer k"}
    with proxy_for(mock, prefix="openai") as proxy:
        out = httpx.post(f"{proxy.url}/v1/responses", json=first, headers=headers).json()["output"]
        call = next(o for o in out if o["type"] == "function_call")
        second = {
            **first,
            "input": [
                {"role": "user", "content": ASK},
                call,
                {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"},
            ],
        }
        refused = httpx.post(f"{proxy.url}/v1/responses", json=second, headers=headers)
        second["input"].insert(1, next(o for o in out if o["type"] == "reasoning"))
        accepted = httpx.post(f"{proxy.url}/v1/responses", json=second, headers=headers)
    assert refused.status_code == 400 and "required 'reasoning' item" in refused.json()["error"]["message"]
    assert accepted.status_code == 200


def test_metrics_count_the_responses_route_with_its_usage(mock: BackgroundServer) -> None:
    with proxy_for(mock) as proxy:
        sdk(proxy).responses.create(model=MODEL, input="hi", reasoning={"effort": "high"})
        text = httpx.get(f"{proxy.url}/metrics").text
    requests = [line for line in text.splitlines() if line.startswith("thinkproxy_requests_total{")]
    assert any('route="responses"' in line and 'level="deep"' in line for line in requests), requests
    assert (
        'gen_ai_client_token_usage_count{gen_ai_operation_name="chat",gen_ai_provider_name="deepseek"' in text
    )


def test_an_input_that_is_neither_text_nor_items_is_a_400(mock: BackgroundServer) -> None:
    with proxy_for(mock) as proxy:
        r = httpx.post(
            f"{proxy.url}/v1/responses",
            json={"model": MODEL, "input": {"role": "user"}},
            headers={"authorization": "Bearer k"},
        )
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"


def test_reasoning_too_large_to_seal_inline_goes_through_the_state_store(
    mock: BackgroundServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A payload over the inline cap is kept in the state store and the blob seals its key; the
    loop works with the client echoing only that (the cap made tiny here, in-process)."""
    monkeypatch.setattr(seal, "INLINE_CAP", 16)
    with proxy_for(mock) as proxy:
        second = tool_turn(proxy, store=False)
        (reasoning,) = (i for i in second if i.get("type") == "reasoning")
        assert len(reasoning["encrypted_content"]) < 200  # a reference, not the payload
        answer = sdk(proxy).responses.create(
            model=MODEL,
            input=without_text(second),
            tools=[WEATHER],
            reasoning={"effort": "high"},
            store=False,
        )
    assert answer.status == "completed"
    assistant = [m for m in last_upstream(mock)["body"]["messages"] if m["role"] == "assistant"]
    assert assistant[0]["reasoning_content"]


def without_text(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reasoning items with only their blob (so only the blob can restore the reasoning)."""
    return [
        {"type": "reasoning", "summary": [], "encrypted_content": i["encrypted_content"]}
        if i.get("type") == "reasoning"
        else i
        for i in items
    ]
