"""Human review of tool calls, end to end: the official OpenAI SDK → proxy (uvicorn) → simulated
upstream, with a reviewer deciding over the reviewers' API while the client waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.demo import simulated_table
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from tests.helpers import make_settings
from tests.realredis import running_redis

REVIEWER = {"Authorization": "Bearer rk-ann"}
EMAIL_TOOL = {
    "type": "function",
    "function": {
        "name": "send_email",
        "description": "Send an email",
        "parameters": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "body"],
        },
    },
}
ASK = [{"role": "user", "content": "Email the report to the team"}]


@pytest.fixture(scope="module")
def mock() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions())) as server:
        yield server


def proxy_settings(mock: BackgroundServer, **overrides: Any) -> Any:
    base: dict[str, Any] = {
        "upstream_base_url": f"{mock.url}/deepseek/v1",
        "trace": "brief",
        "review_tools": ["send_email", "delete_*"],
        "reviewer_keys": ["ann:rk-ann"],
        "review_timeout": 20.0,
    }
    base.update(overrides)
    return make_settings(**base)


@pytest.fixture(scope="module")
def proxy(mock: BackgroundServer) -> Iterator[BackgroundServer]:
    app = create_app(proxy_settings(mock), table=simulated_table(mock.port))
    with BackgroundServer(app) as server:
        yield server


def sdk(server: BackgroundServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-client", max_retries=0, timeout=30)


@dataclass
class Call:
    """A client call running on its own thread while the test plays the reviewer."""

    result: Any = None
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def join(self) -> Any:
        assert self.thread is not None
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the client never got its answer"
        if self.error is not None:
            raise self.error
        return self.result


def in_background(fn: Callable[[], Any]) -> Call:
    call = Call()

    def run() -> None:
        try:
            call.result = fn()
        except BaseException as exc:
            call.error = exc

    call.thread = threading.Thread(target=run, daemon=True)
    call.thread.start()
    return call


def ask(server: BackgroundServer, *, stream: bool) -> Call:
    client = sdk(server)

    def run() -> Any:
        if not stream:
            return client.chat.completions.create(model="deepseek-v4", messages=ASK, tools=[EMAIL_TOOL])
        chunks = list(
            client.chat.completions.create(model="deepseek-v4", messages=ASK, tools=[EMAIL_TOOL], stream=True)
        )
        return chunks

    return in_background(run)


def pending(
    server: BackgroundServer, want: int = 1, headers: dict[str, str] = REVIEWER
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = httpx.get(f"{server.url}/thinkproxy/reviews", headers=headers)
        assert r.status_code == 200, r.text
        data: list[dict[str, Any]] = r.json()["data"]
        if len(data) >= want:
            return data
        time.sleep(0.05)
    raise AssertionError("no pending review appeared")


def decide(
    server: BackgroundServer, review_id: str, body: dict[str, Any], headers: dict[str, str] = REVIEWER
) -> httpx.Response:
    return httpx.post(f"{server.url}/thinkproxy/reviews/{review_id}", json=body, headers=headers)


def streamed(chunks: list[Any]) -> tuple[str, dict[int, dict[str, str]], str | None]:
    content, calls, finish = "", {}, None
    for chunk in chunks:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for f in choice.delta.tool_calls or []:
            entry = calls.setdefault(f.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += f.id or ""
            entry["name"] += (f.function.name or "") if f.function else ""
            entry["arguments"] += (f.function.arguments or "") if f.function else ""
        finish = choice.finish_reason or finish
    return content, calls, finish


@pytest.mark.parametrize("stream", [False, True])
def test_approve_releases_the_call_unchanged(proxy: BackgroundServer, stream: bool) -> None:
    call = ask(proxy, stream=stream)
    (review,) = pending(proxy)
    assert review["tool"] == "send_email" and review["summary"] and "arguments" not in review
    detail = httpx.get(f"{proxy.url}/thinkproxy/reviews/{review['id']}", headers=REVIEWER).json()
    original = orjson.loads(detail["arguments"])
    assert decide(proxy, review["id"], {"decision": "approve"}).json()["decision"] == "approve"
    result = call.join()
    if stream:
        _, calls, finish = streamed(result)
        assert finish == "tool_calls" and calls[0]["name"] == "send_email"
        assert orjson.loads(calls[0]["arguments"]) == original
    else:
        message = result.choices[0].message
        assert result.choices[0].finish_reason == "tool_calls"
        assert orjson.loads(message.tool_calls[0].function.arguments) == original


@pytest.mark.parametrize("stream", [False, True])
def test_modify_releases_the_reviewers_arguments(proxy: BackgroundServer, stream: bool) -> None:
    call = ask(proxy, stream=stream)
    (review,) = pending(proxy)
    changed = {"to": "team@example.com", "body": "edited by a reviewer"}
    assert decide(proxy, review["id"], {"decision": "modify", "arguments": changed}).status_code == 200
    result = call.join()
    if stream:
        _, calls, finish = streamed(result)
        assert finish == "tool_calls" and orjson.loads(calls[0]["arguments"]) == changed
    else:
        assert result.choices[0].finish_reason == "tool_calls"
        assert orjson.loads(result.choices[0].message.tool_calls[0].function.arguments) == changed


@pytest.mark.parametrize("stream", [False, True])
def test_reject_ends_with_text_and_stop(proxy: BackgroundServer, stream: bool) -> None:
    call = ask(proxy, stream=stream)
    (review,) = pending(proxy)
    assert (
        decide(proxy, review["id"], {"decision": "reject", "comment": "not to the whole team"}).status_code
        == 200
    )
    result = call.join()
    expected = "The call to send_email was rejected by a reviewer: not to the whole team."
    if stream:
        content, calls, finish = streamed(result)
        assert calls == {} and finish == "stop" and content.endswith(expected)
    else:
        message = result.choices[0].message
        assert result.choices[0].finish_reason == "stop" and not message.tool_calls
        assert message.content.endswith(expected)


@pytest.mark.parametrize("stream", [False, True])
def test_timeout_is_a_rejection(mock: BackgroundServer, stream: bool) -> None:
    app = create_app(proxy_settings(mock, review_timeout=0.5), table=simulated_table(mock.port))
    with BackgroundServer(app) as server:
        result = ask(server, stream=stream).join()
    if stream:
        content, calls, finish = streamed(result)
        assert calls == {} and finish == "stop" and content.endswith("the review timed out.")
    else:
        assert result.choices[0].finish_reason == "stop"
        assert result.choices[0].message.content.endswith("the review timed out.")


def test_keep_alives_flow_while_a_call_waits(mock: BackgroundServer) -> None:
    app = create_app(proxy_settings(mock, review_keepalive=0.1), table=simulated_table(mock.port))
    with BackgroundServer(app) as server:
        body = {"model": "deepseek-v4", "messages": ASK, "tools": [EMAIL_TOOL], "stream": True}

        seen = threading.Event()

        def read() -> bytes:
            got = b""
            with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=30) as r:
                for piece in r.iter_raw():
                    got += piece
                    if b": keep-alive\n\n" in got:
                        seen.set()
            return got

        call = in_background(read)
        (review,) = pending(server)
        assert seen.wait(20), "no keep-alive reached the client while the call waited"
        decide(server, review["id"], {"decision": "approve"})
        raw = call.join()
    assert b": keep-alive\n\n" in raw
    assert b"review.request" in raw and b"review.decision" in raw
    assert raw.endswith(b"data: [DONE]\n\n")


def test_wrong_keys_double_decision_unknown_id_and_malformed_decision(proxy: BackgroundServer) -> None:
    call = ask(proxy, stream=True)
    (review,) = pending(proxy)
    url = f"{proxy.url}/thinkproxy/reviews"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer sk-client"}).status_code == 401
    bad = decide(proxy, review["id"], {"decision": "modify"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "arguments"
    assert [r["id"] for r in pending(proxy)] == [review["id"]]  # still pending
    assert decide(proxy, "rv_nope", {"decision": "approve"}).status_code == 404
    assert decide(proxy, review["id"], {"decision": "approve"}).status_code == 200
    second = decide(proxy, review["id"], {"decision": "reject"})
    assert second.status_code == 409 and second.json()["error"]["code"] == "review_already_decided"
    call.join()


def test_client_keys_are_not_reviewer_keys_in_gateway_mode(mock: BackgroundServer) -> None:
    settings = proxy_settings(mock, upstream_api_key="sk-upstream", client_keys=["ck-alice"])
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as server:
        r = httpx.get(f"{server.url}/thinkproxy/reviews", headers={"Authorization": "Bearer ck-alice"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "not_a_reviewer"
        assert httpx.get(f"{server.url}/thinkproxy/reviews", headers=REVIEWER).status_code == 200


def test_a_client_that_leaves_withdraws_its_reviews(proxy: BackgroundServer) -> None:
    body = {"model": "deepseek-v4", "messages": ASK, "tools": [EMAIL_TOOL], "stream": True}
    seen = b""
    with httpx.stream("POST", f"{proxy.url}/v1/chat/completions", json=body, timeout=30) as r:
        for piece in r.iter_raw():
            seen += piece
            if b"review.request" in seen:
                (review,) = pending(proxy)  # reviewers see it before the client is told of it
                break  # then the client leaves
    # The client has gone: the review disappears and a late decision finds nothing.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and pending_count(proxy):
        time.sleep(0.05)
    assert pending_count(proxy) == 0
    assert decide(proxy, review["id"], {"decision": "approve"}).status_code == 404


def pending_count(server: BackgroundServer) -> int:
    return len(httpx.get(f"{server.url}/thinkproxy/reviews", headers=REVIEWER).json()["data"])


def test_refuses_to_start_without_reviewer_keys(mock: BackgroundServer) -> None:
    from proxy.core.errors import ConfigError

    with pytest.raises(ConfigError, match="THINKPROXY_REVIEWER_KEYS"):
        create_app(proxy_settings(mock, reviewer_keys=[]))


@pytest.mark.parametrize("stream", [False, True])
def test_a_decision_on_one_replica_releases_the_stream_held_by_another(
    mock: BackgroundServer, stream: bool
) -> None:
    with running_redis() as redis:
        settings = proxy_settings(mock, state_url=redis.url)
        table = simulated_table(mock.port)
        with (
            BackgroundServer(create_app(settings, table=table)) as a,
            BackgroundServer(create_app(settings, table=table)) as b,
        ):
            call = ask(a, stream=stream)
            (review,) = pending(b)  # replica b lists what replica a holds
            assert decide(b, review["id"], {"decision": "reject", "comment": "via b"}).status_code == 200
            assert decide(a, review["id"], {"decision": "approve"}).status_code == 409
            result = call.join()
    if stream:
        content, calls, finish = streamed(result)
        assert calls == {} and finish == "stop" and content.endswith("rejected by a reviewer: via b.")
    else:
        assert result.choices[0].message.content.endswith("rejected by a reviewer: via b.")


def test_redis_down_fails_closed(mock: BackgroundServer) -> None:
    with running_redis() as redis:
        url = redis.url
    # Redis has stopped: a held call cannot be reviewed, so it is refused, never released.
    settings = proxy_settings(mock, state_url=url)
    with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as server:
        result = ask(server, stream=True).join()
    content, calls, finish = streamed(result)
    assert calls == {} and finish == "stop"
    assert content.endswith("The call to send_email was not made: the review service is unavailable.")


def test_each_decision_is_one_audit_line_without_arguments(
    proxy: BackgroundServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="thinkproxy.access")
    call = ask(proxy, stream=False)
    (review,) = pending(proxy)
    arguments = httpx.get(f"{proxy.url}/thinkproxy/reviews/{review['id']}", headers=REVIEWER).json()[
        "arguments"
    ]
    decide(proxy, review["id"], {"decision": "reject", "comment": "secret plans"})
    call.join()
    lines = [r for r in caplog.records if getattr(r, "access", {}).get("event") == "review.decision"]
    assert len(lines) == 1
    fields = lines[0].access  # type: ignore[attr-defined]
    assert fields["review_id"] == review["id"] and fields["tool"] == "send_email"
    assert fields["decision"] == "reject" and fields["reviewer"] == "ann"
    text = repr(fields)
    assert arguments not in text and "secret plans" not in text


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 2}, "n"),
        ({"functions": [EMAIL_TOOL["function"]]}, "functions"),
        ({"function_call": "auto"}, "functions"),
    ],
)
def test_requests_the_gate_could_not_see_into_are_refused(
    proxy: BackgroundServer, mock: BackgroundServer, extra: dict[str, Any], param: str
) -> None:
    marker = f"refused-{param}-{len(extra)}-{sorted(extra)[0]}"
    body = {"model": "deepseek-v4", "messages": [{"role": "user", "content": marker}], **extra}
    r = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert marker not in httpx.get(f"{mock.url}/_mock/requests").text  # nothing forwarded


def test_a_review_timeout_at_or_over_the_total_timeout_refuses_to_start(mock: BackgroundServer) -> None:
    from proxy.core.errors import ConfigError

    with pytest.raises(ConfigError, match="THINKPROXY_REVIEW_TIMEOUT"):
        create_app(proxy_settings(mock, review_timeout=60.0, total_timeout=60.0))


RESPONSES_EMAIL_TOOL = {"type": "function", **EMAIL_TOOL["function"]}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("verdict", ["approve", "reject"])
def test_a_responses_function_call_is_withheld_until_decided(
    proxy: BackgroundServer, stream: bool, verdict: str
) -> None:
    """The Responses front door runs the chat path, gate included: a covered function_call item
    reaches a Responses client only once a reviewer approved it."""
    client = sdk(proxy)

    def run() -> Any:
        kwargs: dict[str, Any] = {
            "model": "deepseek-v4",
            "input": ASK[0]["content"],
            "tools": [RESPONSES_EMAIL_TOOL],
        }
        if not stream:
            return client.responses.create(**kwargs)
        with client.responses.stream(**kwargs) as events:
            for _ in events:
                pass
            return events.get_final_response()

    call = in_background(run)
    (review,) = pending(proxy)
    assert review["tool"] == "send_email"
    assert call.thread is not None and call.thread.is_alive()  # held: the client has no answer yet
    assert decide(proxy, review["id"], {"decision": verdict, "comment": "no"}).status_code == 200
    response = call.join()
    calls = [o for o in response.output if o.type == "function_call"]
    if verdict == "approve":
        assert [c.name for c in calls] == ["send_email"] and response.status == "completed"
    else:
        assert calls == [] and "rejected by a reviewer" in response.output_text


@pytest.mark.parametrize("stream", [False, True])
def test_a_namespaced_responses_tool_is_held_by_the_name_its_client_runs(
    proxy: BackgroundServer, stream: bool
) -> None:
    """`send_email` inside namespace `mail` is `mail__send_email` to a chat upstream: the
    `send_email` pattern still holds it, and the reviewer is shown `mail.send_email`."""
    namespace = {"type": "namespace", "name": "mail", "description": "Mail", "tools": [RESPONSES_EMAIL_TOOL]}
    body = {"model": "deepseek-v4", "input": ASK[0]["content"], "tools": [namespace], "stream": stream}

    def run() -> Any:
        r = httpx.post(f"{proxy.url}/v1/responses", json=body, timeout=30)
        assert r.status_code == 200, r.text
        if not stream:
            return r.json()
        for line in r.text.splitlines():
            if line.startswith("data: ") and '"response.completed"' in line:
                return orjson.loads(line[6:])["response"]
        raise AssertionError(r.text)

    call = in_background(run)
    (review,) = pending(proxy)
    assert (review["tool"], review["upstream_tool"]) == ("mail.send_email", "mail__send_email")
    assert call.thread is not None and call.thread.is_alive()  # held: the client has no answer yet
    assert decide(proxy, review["id"], {"decision": "approve"}).status_code == 200
    calls = [o for o in call.join()["output"] if o["type"] == "function_call"]
    assert [(c["namespace"], c["name"]) for c in calls] == [("mail", "send_email")]


MESSAGES_EMAIL_TOOL = {
    "name": EMAIL_TOOL["function"]["name"],
    "description": EMAIL_TOOL["function"]["description"],
    "input_schema": EMAIL_TOOL["function"]["parameters"],
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("verdict", ["approve", "reject"])
def test_a_messages_tool_use_block_is_withheld_until_decided(
    proxy: BackgroundServer, stream: bool, verdict: str
) -> None:
    """The Messages front door runs the chat path, gate included: a covered tool_use block reaches
    an Anthropic client only once a reviewer approved it."""
    import anthropic

    client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0, timeout=30)

    def run() -> Any:
        kwargs: dict[str, Any] = {
            "model": "deepseek-v4",
            "max_tokens": 256,
            "messages": [{"role": "user", "content": ASK[0]["content"]}],
            "tools": [MESSAGES_EMAIL_TOOL],
        }
        if not stream:
            return client.messages.create(**kwargs)
        with client.messages.stream(**kwargs) as events:
            for _ in events:
                pass
            return events.get_final_message()

    call = in_background(run)
    (review,) = pending(proxy)
    assert review["tool"] == "send_email"
    assert call.thread is not None and call.thread.is_alive()  # held: the client has no answer yet
    assert decide(proxy, review["id"], {"decision": verdict, "comment": "no"}).status_code == 200
    message = call.join()
    uses = [b for b in message.content if b.type == "tool_use"]
    if verdict == "approve":
        assert [u.name for u in uses] == ["send_email"] and message.stop_reason == "tool_use"
    else:
        texts = "".join(b.text for b in message.content if b.type == "text")
        assert uses == [] and "rejected by a reviewer" in texts and message.stop_reason == "end_turn"
