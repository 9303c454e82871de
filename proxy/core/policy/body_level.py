"""What level of thinking a request body asks with its own knobs, per front door and providers.yaml
entry, and the body capped at a level: what the thinking policy (proxy.policy) judges when no
header names the level, or when the level the header names leaves the client's knobs in place.

Pure. Three readers, one per wire format that reaches an upstream:

- **chat** (`knobs_level`): the knobs are the entry's `conflicts` paths (DeepSeek's `thinking` and
  `reasoning_effort`, DashScope's `enable_thinking` / `thinking_budget`, vLLM's
  `chat_template_kwargs.enable_thinking`, OpenRouter's `reasoning.*`, Gemini's `thinking_config`…);
- **native Responses** (`responses_level`): `reasoning.effort`, `reasoning.max_tokens`,
  `reasoning.enabled`;
- **native Messages** (`messages_level`): `thinking` and `output_config.effort`.

Each knob present reads as a level; the body asks the highest of them (None: it sends none). A knob
whose value is exactly what one of the entry's own levels sends at that path reads as the lowest
such level (Mistral's `reasoning_effort: high` is its standard); otherwise it reads generically:
`none` is off; `minimal`, `low`, `medium` standard; `high`, `xhigh`, `max` deep; a switch on is
standard and off is off; a thinking budget is standard up to the standard level's own number where
the entry's standard sends one at that path (Anthropic's 1,024 `budget_tokens`), else below 16,000
tokens (the Messages bridge's reading: proxy.core.protocols.messages.request.DEEP_BUDGET); 0 is
off, a negative budget ("dynamic") deep. A value the reader does not know — an effort word of a
later API, a knob an operator's copy of the table names — reads as deep: the policy never lets
through a knob it could not judge, it sends the ceiling instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from proxy.core.config.front_door_rules import MESSAGES_LEVEL_FIELDS, MessagesRule
from proxy.core.config.providers import Dialect
from proxy.core.controls import Level
from proxy.core.plan.rewrite import BUDGET_PATHS, conflict_paths, with_budget, without_path
from proxy.core.protocols.messages.native import native_body as messages_native_body
from proxy.core.protocols.messages.request import DEEP_BUDGET
from proxy.core.protocols.responses.request import EFFORT_LEVELS

__all__ = [
    "RESPONSES_KNOBS",
    "budget_number",
    "can_turn_off",
    "cap_messages",
    "cap_responses",
    "chat_asks",
    "highest",
    "knobs_level",
    "messages_can_turn_off",
    "messages_level",
    "responses_can_turn_off",
    "responses_level",
    "strip_knobs",
]

_RANK: Final = {Level.OFF: 0, Level.STANDARD: 1, Level.DEEP: 2}
_SWITCHES: Final = frozenset({"enable_thinking", "enabled", "include_reasoning"})
_NUMBERS: Final = frozenset({"thinking_budget", "budget_tokens", "max_tokens"})
_EFFORT_NAMES: Final = frozenset({"reasoning_effort", "effort", "thinking_level"})
# The knobs of the Responses API's `reasoning` that ask a level (`summary` asks none).
RESPONSES_KNOBS: Final = ("effort", "max_tokens", "enabled")
_ABSENT: Final = object()
# Reads a thinking budget found at one path (bound to the standard level's number there).
Reading = Callable[[Any], Level]


def highest(*levels: Level | None) -> Level | None:
    """The highest of `levels` (None when all are None)."""
    out: Level | None = None
    for level in levels:
        if level is not None and (out is None or _RANK[level] > _RANK[out]):
            out = level
    return out


# --------------------------------------------------------------------------------------------------
# Chat completions (and the bridged doors, which reach the upstream as chat)
# --------------------------------------------------------------------------------------------------


def knobs_level(body: Mapping[str, Any], dialect: Dialect) -> Level | None:
    """The level the body's own thinking knobs (the entry's conflict paths) ask; None: none sent."""
    asked: Level | None = None
    for parts in conflict_paths(dialect.conflicts):
        if parts[0] not in body:
            continue  # (the common case: a body sends none of the entry's knobs, and no call reads it)
        value = _at(body, parts)
        if value is _ABSENT or value is None:
            continue
        asked = highest(asked, _entry_level(dialect, parts, value) or _generic(dialect, parts, value))
    return asked


def chat_asks(
    body: Mapping[str, Any], level: Level | None, dialect: Dialect, budget: int | None = None
) -> Level | None:
    """The level a chat request really asks once rewritten at `level` (proxy.core.plan.rewrite): the
    level's own where the entry applies it (its params replace the client's knobs; `budget`, a
    Messages client's `budget_tokens`, goes in the level's number: proxy.core.plan.rewrite.with_budget),
    else what the client's own knobs ask, since they go as they came."""
    rule = dialect.levels.get(level) if level is not None else None
    if rule is None:
        return knobs_level(body, dialect)
    if rule.params is None or budget is None or level is Level.OFF:
        return level
    sent, param = with_budget(dict(rule.params), budget)
    return level if param is None else highest(level, knobs_level(sent, dialect))


def strip_knobs(body: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    """`body` without any of the entry's thinking knobs (a copy when one was there; a parent left
    empty goes too)."""
    out = body
    for keys in conflict_paths(dialect.conflicts):
        if keys[0] in out:
            out = without_path(out, keys)
    return out


def can_turn_off(dialect: Dialect) -> bool:
    """Whether the entry can send a request with thinking off: it has an `off` level (providers.yaml
    leaves `off` out where the model cannot stop thinking, or no documented knob does it)."""
    return Level.OFF in dialect.levels


def budget_number(dialect: Dialect, level: Level) -> int | None:
    """The numeric thinking budget the entry's `level` sends (Anthropic's `budget_tokens`,
    SiliconFlow's `thinking_budget`…); None where it sends none."""
    rule = dialect.levels.get(level)
    for path in BUDGET_PATHS if rule is not None and rule.params else ():
        number = _at(rule.params, list(path)) if rule is not None else None
        if type(number) is int:
            return number
    return None


def _entry_level(dialect: Dialect, parts: Sequence[str], value: Any) -> Level | None:
    """The lowest of the entry's levels that sends exactly `value` at this path."""
    for level in (Level.OFF, Level.STANDARD, Level.DEEP):
        rule = dialect.levels.get(level)
        if rule is not None and rule.params and _at(rule.params, parts) == value:
            return level
    return None


def _generic(dialect: Dialect, parts: Sequence[str], value: Any) -> Level | None:
    name = parts[-1]
    standard = dialect.levels.get(Level.STANDARD)
    params: Mapping[str, Any] = (standard.params or {}) if standard is not None else {}
    if name == "thinking":
        return _thinking(value, lambda n: _number(n, _at(params, [*parts, "budget_tokens"])))
    if name == "reasoning":
        return _reasoning(value, lambda n: _number(n, _at(params, [*parts, "max_tokens"])))
    if name in _SWITCHES:
        return _switch(value)
    if name in _NUMBERS:
        return _number(value, _at(params, parts))
    if name in _EFFORT_NAMES:
        return _effort(value)
    if name == "think":  # Ollama: a switch, or an effort word
        return _switch(value) if isinstance(value, bool) else _effort(value)
    if name == "thinking_config":  # Gemini's (extra_body.google.thinking_config)
        return _thinking_config(value, lambda n: _number(n, _at(params, [*parts, "thinking_budget"])))
    return Level.DEEP  # a knob named by the table that no reader knows: never judged lower


def _thinking(value: Any, number: Reading) -> Level:
    """`thinking` as DeepSeek, Kimi, GLM, Ark and Anthropic take it: `{type, budget_tokens}`,
    or a bare switch."""
    if isinstance(value, bool):
        return _switch(value)
    if isinstance(value, str):
        return _kind(value)
    if not isinstance(value, Mapping):
        return Level.DEEP
    kind = _kind(value.get("type", "enabled"))
    if kind is Level.OFF:
        return Level.OFF
    budget = value.get("budget_tokens")
    return kind if budget is None else highest(kind, number(budget)) or kind


def _kind(kind: Any) -> Level:
    if kind == "disabled":
        return Level.OFF
    if kind in ("enabled", "adaptive", "auto"):
        return Level.STANDARD
    return Level.DEEP


def _reasoning(value: Any, number: Reading) -> Level | None:
    """OpenRouter's (and the Responses API's) `reasoning`: `{effort, max_tokens, enabled}`."""
    if isinstance(value, str):
        return _effort(value)
    if not isinstance(value, Mapping):
        return Level.DEEP
    levels: list[Level | None] = []
    if value.get("effort") is not None:
        levels.append(_effort(value["effort"]))
    if value.get("max_tokens") is not None:
        levels.append(number(value["max_tokens"]))
    if not levels and value.get("enabled") is not None:
        levels.append(_switch(value["enabled"]))
    return highest(*levels)


def _thinking_config(value: Any, number: Reading) -> Level | None:
    if not isinstance(value, Mapping):
        return Level.DEEP
    levels: list[Level | None] = []
    if value.get("thinking_budget") is not None:
        levels.append(number(value["thinking_budget"]))
    if value.get("thinking_level") is not None:
        levels.append(_effort(value["thinking_level"]))
    return highest(*levels)


def _switch(value: Any) -> Level:
    if value is True:
        return Level.STANDARD
    if value is False:
        return Level.OFF
    return Level.DEEP


def _effort(value: Any) -> Level:
    found = EFFORT_LEVELS.get(value) if isinstance(value, str) else None
    return found if found is not None else Level.DEEP


def _number(value: Any, standard: Any) -> Level:
    """A thinking budget: standard up to the standard level's own number at that path (where it
    sends one), else below DEEP_BUDGET; 0 is off; a negative ("dynamic") or non-integer one deep."""
    if type(value) is not int or value < 0:
        return Level.DEEP
    if value == 0:
        return Level.OFF
    limit = standard if type(standard) is int else DEEP_BUDGET - 1
    return Level.STANDARD if value <= limit else Level.DEEP


# --------------------------------------------------------------------------------------------------
# The native Responses door
# --------------------------------------------------------------------------------------------------


def responses_level(body: Mapping[str, Any], dialect: Dialect) -> Level | None:
    """The level a Responses request's `reasoning` asks (the entry's own effort words first)."""
    reasoning = body.get("reasoning")
    if reasoning is None:
        return None
    if isinstance(reasoning, Mapping):
        effort = reasoning.get("effort")
        if isinstance(effort, str):
            for level in (Level.OFF, Level.STANDARD, Level.DEEP):
                if dialect.responses.effort_for(level) == effort:
                    rest = {k: v for k, v in reasoning.items() if k != "effort"}
                    return highest(level, _reasoning(rest, _budget_reading))
    return _reasoning(reasoning, _budget_reading)


def _budget_reading(value: Any) -> Level:
    return _number(value, None)


def responses_can_turn_off(dialect: Dialect) -> bool:
    """Whether a native Responses request can go with thinking off: the entry has an effort for off
    (`none`), or its off level sends nothing (a model that does not think unless asked)."""
    if dialect.responses.effort_for(Level.OFF) is not None:
        return True
    off = dialect.levels.get(Level.OFF)
    return off is not None and off.params == {}


def cap_responses(
    body: Mapping[str, Any], level: Level, dialect: Dialect
) -> tuple[dict[str, Any], Level | None]:
    """A Responses request sent at `level`: every reasoning knob removed, then the entry's effort
    for `level` set (none where it has none: the upstream's default). The level applied (None:
    no effort sent)."""
    reasoning = body.get("reasoning")
    kept = (
        {k: v for k, v in reasoning.items() if k not in RESPONSES_KNOBS}
        if isinstance(reasoning, Mapping)
        else {}
    )
    effort = dialect.responses.effort_for(level)
    if effort is not None:
        kept["effort"] = effort
    out = {k: v for k, v in body.items() if k != "reasoning"}
    if kept:
        out["reasoning"] = kept
    return out, level if effort is not None else None


# --------------------------------------------------------------------------------------------------
# The native Messages door
# --------------------------------------------------------------------------------------------------


def messages_level(body: Mapping[str, Any], rule: MessagesRule) -> Level | None:
    """The level a Messages request's `thinking` and `output_config.effort` ask, read against the
    entry's Messages levels (`rule.levels`)."""
    asked: Level | None = None
    standard = rule.fields_for(Level.STANDARD) or {}
    for path in MESSAGES_LEVEL_FIELDS:
        parts = path.split(".")
        value = _at(body, parts)
        if value is _ABSENT or value is None:
            continue
        level = _messages_entry_level(rule, parts, value)
        if level is None:
            if parts[0] == "thinking":
                level = _thinking(value, lambda n: _number(n, _at(standard, ["thinking", "budget_tokens"])))
            else:
                level = _effort(value)
        asked = highest(asked, level)
    return asked


def _messages_entry_level(rule: MessagesRule, parts: list[str], value: Any) -> Level | None:
    for level in (Level.OFF, Level.STANDARD, Level.DEEP):
        fields = rule.fields_for(level)
        if fields and _at(fields, parts) == value:
            return level
    return None


def messages_can_turn_off(rule: MessagesRule) -> bool:
    return rule.fields_for(Level.OFF) is not None


def cap_messages(
    body: Mapping[str, Any], level: Level, rule: MessagesRule
) -> tuple[dict[str, Any], Level | None]:
    """A Messages request sent at `level`: the client's `thinking` and `output_config.effort`
    replaced by the entry's fields for it, its number included (never the client's budget). The
    level applied (None: the entry gives no fields for it, so none are sent)."""
    bare = {k: v for k, v in body.items() if k != "thinking"}
    out, applied = messages_native_body(bare, level, rule, header=True)
    return (out if out is not None else bare), applied


# --------------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------------


def _at(data: Any, parts: Sequence[str]) -> Any:
    node = data
    for key in parts:
        # (`type is dict` first: a parsed body's objects are dicts, and the ABC check costs more)
        if not (type(node) is dict or isinstance(node, Mapping)) or key not in node:
            return _ABSENT
        node = node[key]
    return node
