"""The thinking policy at each door (proxy.policy.service decides): what a request would really
send is judged before it goes, and what the decision changes is applied to the body.

"What it would really send" is the level the header (or the default) names where the entry
applies it, and otherwise what the body's own knobs ask, since they then go as they came
(proxy.core.policy.body_level reads them: chat's `thinking` / `reasoning_effort` / …, the Responses API's
`reasoning`, the Messages API's `thinking` / `output_config.effort`). A body above the key's
ceiling is sent at the ceiling: its knobs replaced by the entry's own for that level (or removed,
where the entry has none for it), a numeric budget capped at that level's number; the answer's
`X-Thinking-Policy` names the rule only then, when the body sent is at that level. Where the rule
needs thinking off and the entry cannot turn it off, the service refuses before anything is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from proxy.core.config.front_door_rules import MessagesRule
from proxy.core.config.providers import Dialect
from proxy.core.controls import Level
from proxy.core.events import AccessRecord
from proxy.core.plan import request as plan
from proxy.core.policy.body_level import (
    budget_number,
    can_turn_off,
    cap_messages,
    cap_responses,
    chat_asks,
    highest,
    knobs_level,
    messages_can_turn_off,
    messages_level,
    responses_can_turn_off,
    responses_level,
    strip_knobs,
)
from proxy.core.policy.budgets import output_cap
from proxy.policy.refusals import RuleRefusal
from proxy.policy.service import HEADER as POLICY_HEADER
from proxy.policy.service import BudgetExceeded, Decision, ThinkingPolicy

Body = dict[str, Any]


async def decide(
    thinking: ThinkingPolicy,
    level: Level | None,
    record: AccessRecord,
    *,
    can_turn_off: bool = True,
    asks: int | None = None,
) -> Decision:
    """The policy's decision for this key and the level the request would send; `X-Thinking-Policy`
    on the response when it changed the level or refused (a spent budget also says when to retry).
    `asks`: the request's own output cap, which its budget's reservation sets aside when larger
    (proxy.core.policy.budgets)."""
    try:
        decision = await thinking.decide(
            record.client, level, can_turn_off=can_turn_off, record=record, asks=asks
        )
    except (BudgetExceeded, RuleRefusal) as exc:
        _refused(record, exc)
        raise
    if decision.rule is not None:
        record.response_headers.append((POLICY_HEADER, decision.rule))
    return decision


async def admit(
    thinking: ThinkingPolicy,
    record: AccessRecord,
    asks: int | None,
    level: Level | None,
    *,
    can_turn_off: bool,
) -> None:
    """A request relayed as it came, admitted by the policy (ThinkingPolicy.admit); its refusal
    names the rule in `X-Thinking-Policy` (a spent budget also says when to retry)."""
    try:
        await thinking.admit(record, asks, level=level, can_turn_off=can_turn_off)
    except (BudgetExceeded, RuleRefusal) as exc:
        _refused(record, exc)
        raise


def _refused(record: AccessRecord, exc: BudgetExceeded | RuleRefusal) -> None:
    """A refusal's `X-Thinking-Policy` (the rule), and a spent budget's `Retry-After`."""
    record.response_headers.append((POLICY_HEADER, exc.rule))
    if isinstance(exc, BudgetExceeded):
        record.response_headers.append(("retry-after", str(exc.retry_after)))


@dataclass(frozen=True, slots=True)
class ChatJudgement:
    """A chat request as the policy lets it go: its intent (the level, a Messages client's budget),
    its target (the body without the client's knobs when the level changed), and the trace note
    (English, Chinese, rule) that says so (None: nothing changed)."""

    intent: plan.Intent
    target: plan.Target
    note: tuple[str, str, str] | None


async def judge_chat(
    thinking: ThinkingPolicy, intent: plan.Intent, tgt: plan.Target, dialect: Dialect, record: AccessRecord
) -> ChatJudgement:
    assert tgt.parsed is not None
    controls = intent.controls
    asked = chat_asks(tgt.parsed, controls.level, dialect, intent.budget_tokens)
    cap, budget = output_cap(tgt.parsed), intent.budget_tokens
    asks = budget if cap is None else cap if budget is None else max(cap, budget)
    decision = await decide(thinking, asked, record, can_turn_off=can_turn_off(dialect), asks=asks)
    if decision.rule is None or decision.level is None:
        return ChatJudgement(intent, tgt, None)
    level = decision.level
    # The entry's params for the level replace the client's knobs (proxy.core.plan.rewrite); where it
    # has none for that level, the knobs must not go as they came either: the upstream's default.
    body = strip_knobs(tgt.parsed, dialect)
    if body is not tgt.parsed:
        tgt = plan.Target(tgt.destination, None, body, tgt.headers)  # (serialized once, when read)
    budget, cap = intent.budget_tokens, budget_number(dialect, level)
    budget = None if budget is None or cap is None else min(budget, cap)
    intent = replace(intent, controls=replace(controls, level=level), budget_tokens=budget)
    return ChatJudgement(intent, tgt, (*decision.note(asked), decision.rule))


async def judge_responses(
    thinking: ThinkingPolicy,
    body: Body,
    planned: tuple[Body | None, Level | None],
    dialect: Dialect,
    record: AccessRecord,
) -> tuple[Body | None, Level | None]:
    """A native Responses request: `planned` is the body the door would send (None: `body` as it
    came) and its level applied; the same, or the body capped at the key's ceiling."""
    sent = planned[0] if planned[0] is not None else body
    asked = responses_level(sent, dialect)
    off = responses_can_turn_off(dialect)
    decision = await decide(thinking, asked, record, can_turn_off=off, asks=output_cap(sent))
    if decision.rule is None or decision.level is None:
        return planned
    return cap_responses(body, decision.level, dialect)


async def judge_messages(
    thinking: ThinkingPolicy,
    body: Body,
    planned: tuple[Body | None, Level | None],
    rule: MessagesRule,
    record: AccessRecord,
) -> tuple[Body | None, Level | None]:
    """A native Messages request, as `judge_responses`: the client's `budget_tokens` never exceeds
    the capped level's own number (it is read as the level above)."""
    sent = planned[0] if planned[0] is not None else body
    asked = messages_level(sent, rule)
    off = messages_can_turn_off(rule)
    decision = await decide(thinking, asked, record, can_turn_off=off, asks=output_cap(sent))
    if decision.rule is None or decision.level is None:
        return planned
    return cap_messages(body, decision.level, rule)


def relayed_asks(body: Mapping[str, Any], path: str, dialect: Dialect) -> tuple[Level | None, bool]:
    """A request relayed as it came (its body never rewritten): the level its own knobs ask (the
    chat knobs of its entry; on a Responses path its `reasoning` too), and whether it is off as
    it goes without knobs (its entry's off sends nothing: the model does not think unless asked)."""
    level = knobs_level(body, dialect)
    if path.startswith("/v1/responses"):
        level = highest(level, responses_level(body, dialect))
    off = dialect.levels.get(Level.OFF)
    return level, off is not None and off.params is not None and not off.params
