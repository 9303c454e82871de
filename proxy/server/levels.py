"""The thinking level's sources at the edge: the model's `(level)` suffix taken off the body
before anything reads the model, the key's `default_level` and the policy file's auto rules added
to what the headers said, and the choice (proxy.core.plan.levels.decide) recorded where the access
record, the console and the client see it (`X-Thinking-Level-Source`, `X-Thinking-Level-Rule`).

Every door calls these: chat completions and the bridged doors in Proxy.run_chat (`settle_chat`),
the native doors in proxy.server.doors.native.forward_native (`choose`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from proxy.core.body_splice import splice
from proxy.core.config.providers import Dialect
from proxy.core.controls import Level
from proxy.core.events import AccessRecord
from proxy.core.plan import request as plan
from proxy.core.plan.levels import LevelAsk, LevelChoice, Source, decide
from proxy.core.plan.model_suffix import ModelSuffix, split_model
from proxy.core.policy.auto_rules import Features, client_kind, features_of
from proxy.core.policy.body_level import knobs_level
from proxy.policy.service import ThinkingPolicy

__all__ = ["ask_for", "choose", "settle_chat", "take_suffix"]


def take_suffix(
    parsed: dict[str, Any] | None, body: bytes, record: AccessRecord
) -> tuple[bytes, ModelSuffix | None]:
    """The body with the model's level suffix taken off (`parsed` changed in place), every other
    byte as it came (proxy.core.body_splice: a native upstream may bind reasoning to the exact
    bytes of the history), and the suffix (the record keeps the word as written)."""
    suffix = split_model(parsed.get("model")) if parsed is not None else None
    if parsed is None or suffix is None:
        return body, None
    before = dict(parsed)
    parsed["model"] = suffix.model
    record.model_suffix = suffix.word
    return splice(body, before, parsed), suffix


def ask_for(intent: plan.Intent, suffix: ModelSuffix | None, thinking: ThinkingPolicy | None) -> LevelAsk:
    """The request's level sources before its body's own field: the headers' (plan.begin), the
    suffix, and the key's `default_level` (over the setting's) with the file's auto rules."""
    ask = intent.ask
    default, rules = ask.default, ask.rules
    if thinking is not None:
        policy = thinking.policy
        own = policy.rule_for(intent.client).default_level
        if own is not None:
            default = own.asked()
        if policy.auto:
            rules = policy.auto
    return LevelAsk(ask.header, suffix, default, rules)


def choose(
    ask: LevelAsk,
    client: Level | None,
    features: Callable[[], Features],
    record: AccessRecord,
    held: Callable[[], tuple[Level, str] | None] | None = None,
) -> LevelChoice:
    """The level by its sources (`client`: what the body's own field asks), on the record and in
    the response headers. `held`: when `auto` chose, the level and rule of the turn this request
    continues, if it must keep them (proxy.server.doors.held_levels); they replace the choice."""
    choice = decide(ask, client, features)
    kept = held() if held is not None and choice.rule is not None else None
    if kept is not None:
        choice = LevelChoice(kept[0], choice.source, kept[1])
    record.level_requested = choice.level.value if choice.level is not None else None
    record.level_source = choice.source.value if choice.source is not None else None
    record.level_rule = choice.rule
    record.response_headers.extend(choice.headers())
    return choice


def settle_chat(
    intent: plan.Intent,
    parsed: dict[str, Any],
    dialect: Dialect,
    record: AccessRecord,
    headers: Iterable[tuple[str, str]],
    *,
    bridged: bool,
    client_level: Level | None = None,
) -> plan.Intent:
    """A chat request's level (chat completions, or a bridged door's chat body: `client_level` is
    what the door's own field asked, its `budget_tokens` on the intent). The client's field stands
    as it came on chat completions (the level None: its knobs go untouched); a bridged door's is
    applied as its level."""
    client = client_level if bridged else knobs_level(parsed, dialect)

    def features() -> Features:  # (only `auto` reads them: the client's kind is found then)
        return features_of("chat", record.route, parsed, record.model or "", client_kind(headers))

    choice = choose(intent.ask, client, features, record)
    if choice.source is Source.CLIENT:
        level, budget = (client_level if bridged else None), intent.budget_tokens
    else:
        level, budget = choice.level, None
    if level is intent.controls.level and budget == intent.budget_tokens:
        return intent  # (the common case: the level the headers already named; no copies made)
    return replace(intent, controls=replace(intent.controls, level=level), budget_tokens=budget)
