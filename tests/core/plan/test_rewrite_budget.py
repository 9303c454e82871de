"""A client's numeric thinking budget (the Messages API's `budget_tokens`): sent in place of the
number the level's params carry (rewrite.with_budget, plan_chat), never invented for a dialect
whose level carries none, and said in X-Thinking-Budget-Applied."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.config.providers import ProvidersTable
from proxy.core.controls import Level, ReasoningField, ReasoningVisibility, TraceFormat, TraceMode
from proxy.core.gateway import GatewayAuth
from proxy.core.plan import chat as plan_chat
from proxy.core.plan import request as plan
from proxy.core.plan.rewrite import with_budget

DEFAULTS = plan.Defaults(
    None, TraceMode.BRIEF, TraceFormat.COMMENT, ReasoningVisibility.SHOW, ReasoningField.REASONING_CONTENT
)
TABLE = ProvidersTable.load()


class Headers(dict[str, str]):
    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__((k.lower(), v) for k, v in pairs)
        self.pairs = pairs

    def items(self) -> Any:
        return list(self.pairs)


def planned(base_url: str, model: str, level: Level, budget: int | None) -> plan_chat.ChatPlan:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40000}
    headers = Headers([("x-thinking-level", level.value)])
    arrival = plan.Arrival("POST", "/v1/chat/completions", b"/v1/chat/completions", b"", headers)
    intent = plan.begin(arrival, GatewayAuth(None, ()), lambda _: base_url, DEFAULTS, routed=False)
    intent.budget_tokens = budget
    raw = orjson.dumps(body)
    tgt = plan.target(
        plan.destination_of(intent, arrival, raw, body, None), arrival, raw, body, GatewayAuth(None, ())
    )
    dialect = plan_chat.chat_dialect(TABLE, tgt)
    return plan_chat.plan_chat(arrival, tgt, intent, dialect, DEFAULTS, restored=None, gateway_mode=False)


@pytest.mark.parametrize(
    ("base_url", "model", "level", "param", "path"),
    [
        (
            "https://api.anthropic.com/v1",
            "claude-sonnet-4-5",
            Level.STANDARD,
            "thinking.budget_tokens",
            ("thinking", "budget_tokens"),
        ),
        (
            "https://api.anthropic.com/v1",
            "claude-sonnet-4-5",
            Level.DEEP,
            "thinking.budget_tokens",
            ("thinking", "budget_tokens"),
        ),
        (
            "https://api.siliconflow.cn/v1",
            "Qwen/Qwen3-32B",
            Level.DEEP,
            "thinking_budget",
            ("thinking_budget",),
        ),
    ],
)
def test_the_clients_budget_replaces_the_levels_number(
    base_url: str, model: str, level: Level, param: str, path: tuple[str, ...]
) -> None:
    p = planned(base_url, model, level, 5000)
    sent = orjson.loads(p.request.content)
    value: Any = sent
    for key in path:
        value = value[key]
    assert value == 5000
    assert ("x-thinking-budget-applied", f"{param}=5000") in p.response_headers
    assert ("x-thinking-level-applied", level.value) in p.response_headers


@pytest.mark.parametrize(
    ("base_url", "model", "level"),
    [
        ("https://api.deepseek.com/v1", "deepseek-v4-pro", Level.DEEP),  # a switch and an effort only
        ("https://api.siliconflow.cn/v1", "Qwen/Qwen3-32B", Level.STANDARD),  # the switch alone
        ("https://api.anthropic.com/v1", "claude-sonnet-4-5", Level.OFF),
    ],
)
def test_no_number_is_invented_where_the_level_carries_none(base_url: str, model: str, level: Level) -> None:
    with_budget_plan = planned(base_url, model, level, 5000)
    without = planned(base_url, model, level, None)
    assert with_budget_plan.request.content == without.request.content
    assert not any(name == "x-thinking-budget-applied" for name, _ in with_budget_plan.response_headers)


def test_with_budget_copies_what_it_changes() -> None:
    body = {"model": "m", "thinking": {"type": "enabled", "budget_tokens": 1024}, "n": 1}
    out, param = with_budget(body, 9000)
    assert param == "thinking.budget_tokens" and out["thinking"] == {"type": "enabled", "budget_tokens": 9000}
    assert body["thinking"]["budget_tokens"] == 1024 and out["n"] == 1
    assert with_budget({"model": "m", "thinking_budget": "x"}, 5) == (
        {"model": "m", "thinking_budget": "x"},
        None,
    )
    assert with_budget({"reasoning": {"max_tokens": 100}}, 7) == (
        {"reasoning": {"max_tokens": 7}},
        "reasoning.max_tokens",
    )
