"""The request plan, driven with values only: no server, no socket, no environment."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.config.providers import ProvidersTable
from proxy.core.config.routing import RouteTable
from proxy.core.controls import Level, ReasoningField, ReasoningVisibility, TraceFormat, TraceMode
from proxy.core.errors import BadRequest, Forbidden, Unauthorized
from proxy.core.gateway import GatewayAuth, parse_client_keys
from proxy.core.plan import chat as plan_chat
from proxy.core.plan import request as plan
from proxy.core.review.rules import refuse_unreviewed_route

DEFAULTS = plan.Defaults(
    None, TraceMode.BRIEF, TraceFormat.COMMENT, ReasoningVisibility.SHOW, ReasoningField.REASONING_CONTENT
)
BYOK = GatewayAuth(None, ())
GATEWAY = GatewayAuth("sk-operator", parse_client_keys(["alice:ck-1"]))
TABLE = ProvidersTable.load()


class Headers(dict[str, str]):
    """Lower-case names, as the plan reads them (starlette's Headers in the server)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__((k.lower(), v) for k, v in pairs)
        self.pairs = pairs

    def items(self) -> Any:
        return list(self.pairs)


def arrival(
    headers: list[tuple[str, str]] | None = None,
    path: str = "/v1/chat/completions",
    query: bytes = b"",
    method: str = "POST",
) -> plan.Arrival:
    return plan.Arrival(method, path, path.encode(), query, Headers(headers or []))


def resolve(requested: str | None) -> str:
    if requested is None:
        return "https://api.deepseek.com/v1"
    if requested != "https://allowed.example/v1":
        raise Forbidden("not allowed")
    return requested


def test_begin_decides_from_headers_alone() -> None:
    intent = plan.begin(arrival([("x-thinking-level", "deep")]), BYOK, resolve, DEFAULTS, routed=False)
    assert intent.controls.level is Level.DEEP and intent.controls.trace is TraceMode.BRIEF
    assert intent.destination is not None and intent.destination.base_url == "https://api.deepseek.com/v1"
    assert intent.vet is None and intent.client is None
    chosen = plan.begin(
        arrival([("x-upstream-base-url", "https://allowed.example/v1")]),
        BYOK,
        resolve,
        DEFAULTS,
        routed=False,
    )
    assert chosen.vet == "https://allowed.example/v1" and chosen.destination is not None
    assert chosen.destination.client_chosen
    assert plan.begin(arrival(), BYOK, resolve, DEFAULTS, routed=True).destination is None  # by model


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ([("x-thinking-level", "bogus")], BadRequest),
        ([("x-trace", "off"), ("x-trace", "off")], BadRequest),
        ([("x_thinking_level", "deep")], BadRequest),
        ([("x-upstream-base-url", "https://evil.example/v1")], Forbidden),
    ],
)
def test_begin_refuses_before_any_body_is_read(
    headers: list[tuple[str, str]], error: type[Exception]
) -> None:
    with pytest.raises(error):
        plan.begin(arrival(headers), BYOK, resolve, DEFAULTS, routed=False)


def test_gateway_mode_names_the_client_and_refuses_strangers() -> None:
    intent = plan.begin(arrival([("authorization", "Bearer ck-1")]), GATEWAY, resolve, DEFAULTS, routed=False)
    assert intent.client == "alice"
    with pytest.raises(Unauthorized):
        plan.begin(arrival([("authorization", "Bearer nope")]), GATEWAY, resolve, DEFAULTS, routed=False)
    with pytest.raises(Forbidden):  # a client-chosen upstream never gets the operator's key
        plan.begin(
            arrival(
                [("authorization", "Bearer ck-1"), ("x-upstream-base-url", "https://allowed.example/v1")]
            ),
            GATEWAY,
            resolve,
            DEFAULTS,
            routed=False,
        )


def chat_plan(
    headers: list[tuple[str, str]], body: dict[str, Any], gateway: GatewayAuth = BYOK, query: bytes = b""
) -> plan_chat.ChatPlan:
    a = arrival(headers, query=query)
    intent = plan.begin(a, gateway, resolve, DEFAULTS, routed=False)
    raw = orjson.dumps(body)
    tgt = plan.target(plan.destination_of(intent, a, raw, body, None), a, raw, body, gateway)
    dialect = plan_chat.chat_dialect(TABLE, tgt)
    return plan_chat.plan_chat(a, tgt, intent, dialect, DEFAULTS, restored=None, gateway_mode=gateway.enabled)


def test_a_chat_plan_sends_the_level_in_the_dialect_and_says_so() -> None:
    body = {"model": "deepseek-v4-pro", "messages": [{"role": "user", "content": "hi"}]}
    p = chat_plan([("x-thinking-level", "deep"), ("authorization", "Bearer sk-client")], body)
    sent = orjson.loads(p.request.content)
    assert sent["thinking"] == {"type": "enabled"} and sent["reasoning_effort"] == "max"
    assert p.request.url == "https://api.deepseek.com/v1/chat/completions"
    assert ("authorization", "Bearer sk-client") in p.request.headers  # BYOK: the client's own key
    assert not any(name == "x-thinking-level" for name, _ in p.request.headers)
    assert ("accept-encoding", "identity") in p.request.headers
    assert p.response_headers == [
        ("x-thinking-level-applied", "deep"),
        ("x-thinking-provider", "deepseek"),
        ("x-thinking-method", "params"),
    ]


def test_without_a_level_the_body_goes_byte_for_byte() -> None:
    body = {"model": "deepseek-v4-pro", "messages": [], "n": 1}
    p = chat_plan([], body)
    assert p.request.content == orjson.dumps(body) and p.applied is None and p.level_name == "none"


def test_without_a_level_a_history_field_the_upstream_refuses_still_goes() -> None:
    # Groq answers 400 "property 'reasoning_content' is unsupported": no level is no excuse.
    table = TABLE.with_extra_patterns("groq", ["allowed.example"])
    body = {
        "model": "openai/gpt-oss-120b",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello.", "reasoning_content": "greet"},
            {"role": "user", "content": "again"},
        ],
    }
    a = arrival([("x-upstream-base-url", "https://allowed.example/v1")])
    intent = plan.begin(a, BYOK, resolve, DEFAULTS, routed=False)
    raw = orjson.dumps(body, option=orjson.OPT_INDENT_2)
    tgt = plan.target(plan.destination_of(intent, a, raw, body, None), a, raw, body, BYOK)
    dialect = plan_chat.chat_dialect(table, tgt)
    assert dialect.name == "groq"
    p = plan_chat.plan_chat(a, tgt, intent, dialect, DEFAULTS, restored=None, gateway_mode=False)
    assert orjson.loads(p.request.content)["messages"][1] == {"role": "assistant", "content": "Hello."}
    assert p.applied is None and p.level_name == "none"
    clean = {**body, "messages": [body["messages"][0], body["messages"][2]]}
    raw = orjson.dumps(clean, option=orjson.OPT_INDENT_2)
    tgt = plan.target(plan.destination_of(intent, a, raw, clean, None), a, raw, clean, BYOK)
    p = plan_chat.plan_chat(a, tgt, intent, dialect, DEFAULTS, restored=None, gateway_mode=False)
    assert p.request.content == raw  # nothing to fit: byte for byte, as before


def test_gateway_mode_sends_the_operators_key_and_no_client_credential_even_in_the_query() -> None:
    body = {"model": "deepseek-v4-pro", "messages": []}
    p = chat_plan(
        [("authorization", "Bearer ck-1"), ("cookie", "s=1"), ("x-goog-api-key", "g")],
        body,
        GATEWAY,
        query=b"key=CLIENT&Api-Key=x&keep=1&access_token=t",
    )
    assert p.request.url.endswith("/chat/completions?keep=1")
    names = {name for name, _ in p.request.headers}
    assert ("authorization", "Bearer sk-operator") in p.request.headers
    assert not names & {"cookie", "x-goog-api-key"}


def test_byok_keeps_the_query_as_sent() -> None:
    a = arrival(path="/v1/embeddings", query=b"key=mine&x=%2F")
    intent = plan.begin(a, BYOK, resolve, DEFAULTS, routed=False)
    tgt = plan.target(plan.destination_of(intent, a, b"{}", None, None), a, b"{}", None, BYOK)
    req = plan.passthrough(a, tgt, gateway_mode=False)
    assert req.url == "https://api.deepseek.com/v1/embeddings?key=mine&x=%2F"


def test_a_routes_file_picks_the_destination_by_model_once_the_body_is_read() -> None:
    routes = RouteTable.from_text(
        'routes:\n  - {name: or, prefix: "openrouter/", upstream: "https://openrouter.ai/api/v1"}\n',
        default_upstream="https://api.deepseek.com/v1",
    )
    a = arrival()
    intent = plan.begin(a, BYOK, resolve, DEFAULTS, routed=True)
    body = {"model": "openrouter/qwen/qwq", "messages": []}
    destination = plan.destination_of(intent, a, orjson.dumps(body), body, routes)
    assert destination.route is not None and destination.route.name == "or"
    tgt = plan.target(destination, a, orjson.dumps(body), body, BYOK)
    assert tgt.destination.base_url == "https://openrouter.ai/api/v1"
    assert orjson.loads(tgt.body)["model"] == "qwen/qwq"  # the prefix is the route's, not the model's


def test_observers_forward_headers_replace_the_clients() -> None:
    a = arrival([("traceparent", "client"), ("x-other", "1")])
    intent = plan.begin(a, BYOK, resolve, DEFAULTS, routed=False)
    tgt = plan.target(
        plan.destination_of(intent, a, b"{}", {}, None), a, b"{}", {}, BYOK, [("traceparent", "ours")]
    )
    assert tgt.headers == [("x-other", "1"), ("traceparent", "ours")]


@pytest.mark.parametrize(
    ("method", "path", "body", "refused"),
    [
        ("POST", "/v1/chat/completions/", b"{}", True),  # the gate's own path, spelled otherwise
        ("POST", "/V1//Chat/Completions", b"{}", True),
        ("POST", "/v1/responses", b'{"input": "x"}', True),
        ("POST", "/v1/completions", b"{}", True),
        ("POST", "/v1/embeddings", b'{"input": "x", "tools": [{"type": "function"}]}', True),
        ("POST", "/v1/embeddings", b'not json but "tools"', True),
        ("POST", "/v1/embeddings", b'{"input": "x"}', False),
        ("GET", "/v1/responses/resp_1", b"", False),
        ("DELETE", "/v1/chat/completions/x", b"", False),
    ],
)
def test_review_refuses_pass_through_requests_that_could_make_calls(
    method: str, path: str, body: bytes, refused: bool
) -> None:
    if refused:
        with pytest.raises(Forbidden) as info:
            refuse_unreviewed_route(method, path, body)
        assert info.value.code == "review_not_available" and "/v1/chat/completions" in info.value.message
    else:
        refuse_unreviewed_route(method, path, body)
