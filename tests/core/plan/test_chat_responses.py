"""The plan's choice of the upstream's Responses API for a chat request (issue 29), from the shipped
providers table: `responses_effort` (when, and with which effort) and `plan_responses` (the request
to `/responses` and the headers that say so). Values only, as in tests/core/plan/test_request.py."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.config.providers import ProvidersTable, default_providers_path
from proxy.core.controls import Level, ReasoningField, ReasoningVisibility, TraceFormat, TraceMode
from proxy.core.gateway import GatewayAuth, parse_client_keys
from proxy.core.plan import chat as plan_chat
from proxy.core.plan import request as plan

DEFAULTS = plan.Defaults(
    None, TraceMode.BRIEF, TraceFormat.COMMENT, ReasoningVisibility.SHOW, ReasoningField.REASONING_CONTENT
)
BYOK = GatewayAuth(None, ())
GATEWAY = GatewayAuth("sk-operator", parse_client_keys(["alice:ck-1"]))
TABLE = ProvidersTable.load()
TABLE_TEXT = default_providers_path().read_text()
OPENAI = "https://api.openai.com/v1"
AZURE = "https://x.openai.azure.com/openai/v1"
DEEPSEEK = "https://api.deepseek.com/v1"
OPENROUTER = "https://openrouter.ai/api/v1"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CUSTOM = {"type": "custom", "custom": {"name": "patch"}}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
EFFORT = {Level.STANDARD: "medium", Level.DEEP: "high"}
LEVELS = [None, Level.OFF, Level.STANDARD, Level.DEEP]


class Headers(dict[str, str]):
    """Lower-case names, as the plan reads them (starlette's Headers in the server)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__((k.lower(), v) for k, v in pairs)
        self.pairs = pairs

    def items(self) -> Any:
        return list(self.pairs)


def body(model: str, tools: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"model": model, "messages": ASK, **extra}
    if tools is not None:
        out["tools"] = tools
    return out


def effort_for(base_url: str, parsed: dict[str, Any], level: Level | None) -> str | None:
    dialect = TABLE.match(base_url, parsed["model"])
    return plan_chat.responses_effort(dialect, parsed, level)


# --- responses_effort -----------------------------------------------------------------------------


@pytest.mark.parametrize("base_url", [OPENAI, AZURE])
@pytest.mark.parametrize(
    "model", ["gpt-5.4", "gpt-5.5-mini", "gpt-5.6-luna", "gpt-5.9", "gpt-5.4-2026-03-05"]
)
@pytest.mark.parametrize("level", LEVELS)
def test_gpt_5_4_and_later_with_function_tools_and_a_level_go_over_responses(
    base_url: str, model: str, level: Level | None
) -> None:
    assert effort_for(base_url, body(model, [WEATHER]), level) == EFFORT.get(level)  # type: ignore[arg-type]


@pytest.mark.parametrize("base_url", [OPENAI, AZURE])
@pytest.mark.parametrize("model", ["gpt-5.4", "gpt-5.5-mini", "gpt-5.6-luna"])
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(
    "tools", [None, [], [CUSTOM], ["get_weather"]], ids=["none", "empty", "custom", "junk"]
)
def test_without_function_tools_chat_completions_as_usual(
    base_url: str, model: str, level: Level | None, tools: list[Any] | None
) -> None:
    assert effort_for(base_url, body(model, tools), level) is None


def test_one_function_tool_among_others_is_enough() -> None:
    assert effort_for(OPENAI, body("gpt-5.4", [CUSTOM, WEATHER]), Level.DEEP) == "high"


def test_tools_that_are_not_a_list_are_not_function_tools() -> None:
    assert effort_for(OPENAI, body("gpt-5.4", {"type": "function"}), Level.DEEP) is None  # type: ignore[arg-type]


VISIBLE = ProvidersTable.from_text(
    TABLE_TEXT.replace(
        "chat_tools_with_reasoning: responses",
        "chat_tools_with_reasoning: responses\n        reasoning_visible: responses",
    )
)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("tools", [None, [WEATHER]], ids=["no_tools", "tools"])
def test_reasoning_visible_sends_every_leveled_request_over_responses(
    level: Level | None, tools: list[Any] | None
) -> None:
    parsed = body("gpt-5.4", tools)
    dialect = VISIBLE.match(OPENAI, "gpt-5.4")
    assert dialect.reasoning_visible == "responses"
    assert plan_chat.responses_effort(dialect, parsed, level) == EFFORT.get(level)  # type: ignore[arg-type]
    why = "chat_tools_with_reasoning" if tools else None
    assert plan_chat.over_responses_why(TABLE.match(OPENAI, "gpt-5.4"), parsed) == why
    assert plan_chat.over_responses_why(dialect, parsed) == "reasoning_visible"


def test_reasoning_visible_is_per_entry_and_off_by_default() -> None:
    assert VISIBLE.match(OPENAI, "gpt-5.2").reasoning_visible == "chat"
    assert TABLE.match(OPENAI, "gpt-5.4").reasoning_visible == "chat"
    assert effort_for(OPENAI, body("gpt-5.4"), Level.DEEP) is None


@pytest.mark.parametrize("base_url", [OPENAI, AZURE])
@pytest.mark.parametrize(
    "model", ["gpt-5.2", "gpt-5.1", "gpt-5", "gpt-5-mini", "gpt-4o", "gpt-4.1", "o3", "o4-mini"]
)
@pytest.mark.parametrize("level", LEVELS)
def test_earlier_models_stay_on_chat_completions(base_url: str, model: str, level: Level | None) -> None:
    assert effort_for(base_url, body(model, [WEATHER]), level) is None


@pytest.mark.parametrize(
    ("base_url", "model"),
    [
        (DEEPSEEK, "deepseek-v4-pro"),
        (DEEPSEEK, "gpt-5.4"),
        (OPENROUTER, "openai/gpt-5.4"),
        (OPENROUTER, "gpt-5.4"),
    ],
)
@pytest.mark.parametrize("level", LEVELS)
def test_other_providers_stay_on_chat_completions(base_url: str, model: str, level: Level | None) -> None:
    assert effort_for(base_url, body(model, [WEATHER]), level) is None


def test_the_entry_decides_and_names_the_effort() -> None:
    dialect = TABLE.match(OPENAI, "gpt-5.4")
    assert dialect.name == "openai" and dialect.chat_tools_with_reasoning == "responses"
    assert TABLE.match(AZURE, "gpt-5.4").name == "azure"
    assert TABLE.match(OPENAI, "gpt-5.2").chat_tools_with_reasoning == "chat"


def test_a_table_that_says_chat_keeps_chat_completions() -> None:
    text = TABLE_TEXT.replace("chat_tools_with_reasoning: responses", "chat_tools_with_reasoning: chat")
    dialect = ProvidersTable.from_text(text).match(OPENAI, "gpt-5.4")
    assert plan_chat.responses_effort(dialect, body("gpt-5.4", [WEATHER]), Level.DEEP) is None


def test_the_responses_replay_policy_keeps_reasoning_details_on_tool_call_turns() -> None:
    assert plan_chat.RESPONSES_REPLAY.mode == "tool_calls"
    assert plan_chat.RESPONSES_REPLAY.field == "reasoning_details"


# --- plan_responses ------------------------------------------------------------------------------


def responses_plan(
    base_url: str,
    parsed: dict[str, Any],
    level: str = "standard",
    headers: list[tuple[str, str]] | None = None,
    query: bytes = b"",
    gateway: GatewayAuth = BYOK,
    defaults: plan.Defaults = DEFAULTS,
) -> tuple[plan_chat.ChatPlan, tuple[str, ...]]:
    pairs = [("x-thinking-level", level), *(headers or [("authorization", "Bearer sk-client")])]
    path = "/v1/chat/completions"
    arrival = plan.Arrival("POST", path, path.encode(), query, Headers(pairs))
    intent = plan.begin(arrival, gateway, lambda _: base_url, defaults, routed=False)
    raw = orjson.dumps(parsed)
    tgt = plan.target(plan.destination_of(intent, arrival, raw, parsed, None), arrival, raw, parsed, gateway)
    dialect = plan_chat.chat_dialect(TABLE, tgt)
    effort = plan_chat.responses_effort(dialect, parsed, intent.controls.level)
    assert effort is not None
    return plan_chat.plan_responses(
        arrival, tgt, intent, dialect, defaults, parsed, effort, gateway_mode=gateway.enabled
    )


@pytest.mark.parametrize(
    ("base_url", "url", "provider"),
    [
        (OPENAI, "https://api.openai.com/v1/responses", "openai"),
        (AZURE, "https://x.openai.azure.com/openai/v1/responses", "azure"),
    ],
)
@pytest.mark.parametrize(("level", "effort"), [("standard", "medium"), ("deep", "high")])
def test_the_request_goes_to_responses_and_the_headers_say_so(
    base_url: str, url: str, provider: str, level: str, effort: str
) -> None:
    p, dropped = responses_plan(base_url, body("gpt-5.4", [WEATHER], stream=True), level)
    assert p.request.method == "POST" and p.request.url == url
    assert p.response_headers == [
        ("x-thinking-level-applied", level),
        ("x-thinking-provider", provider),
        ("x-thinking-method", "params"),
        ("x-thinking-upstream-api", "responses"),
    ]
    assert p.applied is Level(level) and p.level_name == level and p.method == "params"
    sent = orjson.loads(p.request.content)
    assert sent["reasoning"] == {"effort": effort, "summary": "auto"}
    assert sent["store"] is False and sent["include"] == ["reasoning.encrypted_content"]
    assert sent["stream"] is True and sent["input"] == [{"role": "user", "content": ASK[0]["content"]}]
    assert sent["tools"][0]["name"] == "get_weather" and "messages" not in sent
    assert dropped == ()


def test_the_headers_go_uncompressed_without_the_controls() -> None:
    p, _ = responses_plan(
        OPENAI,
        body("gpt-5.4", [WEATHER]),
        headers=[
            ("authorization", "Bearer sk-client"),
            ("accept-encoding", "gzip, br"),
            ("content-length", "123"),
            ("x-trace", "off"),
            ("openai-organization", "org-1"),
        ],
    )
    headers = p.request.headers
    names = [name.lower() for name, _ in headers]
    assert ("accept-encoding", "identity") in headers and names.count("accept-encoding") == 1
    assert ("authorization", "Bearer sk-client") in headers and ("openai-organization", "org-1") in headers
    assert not {"x-thinking-level", "x-trace", "content-length", "host"} & set(names)


def test_a_base_url_path_prefix_and_the_query_are_kept() -> None:
    p, _ = responses_plan(AZURE, body("gpt-5.5-mini", [WEATHER]), query=b"api-version=preview")
    assert p.request.url == "https://x.openai.azure.com/openai/v1/responses?api-version=preview"


def test_gateway_mode_sends_the_operators_key_and_no_client_credential() -> None:
    p, _ = responses_plan(
        OPENAI,
        body("gpt-5.4", [WEATHER]),
        headers=[("authorization", "Bearer ck-1")],
        query=b"api-key=client-secret&x=1",
        gateway=GATEWAY,
    )
    assert p.request.url == "https://api.openai.com/v1/responses?x=1"
    assert ("authorization", "Bearer sk-operator") in p.request.headers
    assert not any("ck-1" in value for _, value in p.request.headers)


def test_fields_with_no_responses_equivalent_are_returned_for_the_trace_note() -> None:
    _, dropped = responses_plan(OPENAI, body("gpt-5.4", [WEATHER], n=1, seed=3, stop="END"))
    assert set(dropped) == {"n", "seed", "stop"}


def test_the_reasoning_options_read_no_tags_and_honour_hide() -> None:
    p, _ = responses_plan(OPENAI, body("gpt-5.4", [WEATHER]))
    assert p.reasoning.tags == () and p.reasoning.hide is False
    assert p.reasoning.output_field is ReasoningField.REASONING_CONTENT
    hidden, _ = responses_plan(
        OPENAI, body("gpt-5.4", [WEATHER]), headers=[("authorization", "Bearer k"), ("x-reasoning", "hide")]
    )
    assert hidden.reasoning.hide is True


def test_chinese_is_noted_for_the_trace() -> None:
    p, _ = responses_plan(
        OPENAI, body("gpt-5.4", [WEATHER]), headers=[("authorization", "k"), ("accept-language", "zh-CN")]
    )
    assert p.zh is True
