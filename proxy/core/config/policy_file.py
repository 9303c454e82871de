"""The thinking policy file (THINKPROXY_POLICY_FILE): what each gateway client key may spend on
thinking. Pure: text in, a validated `Policy` (or one `ConfigError` with a line per fault) out.

    default: {max_level: deep, default_level: standard}
    keys:                       # the names of THINKPROXY_CLIENT_KEYS (`alice:ck-…`)
      alice: {max_level: standard, default_level: auto}
      bob:   {reasoning_tokens: {limit: 200000, per: day}, on_exhausted: refuse}
      carol: {reasoning_tokens: {limit: 50000, per: hour}, on_exhausted: "off"}
    prices:                     # optional, USD per 1M tokens, by model glob (first match wins)
      "deepseek-v4-*": {input: 0.27, output: 1.10, cached_input: 0.07}
    auto:                       # optional: how `auto` chooses (first match wins; built-in rules if none)
      - {when: {contains: ["\\bprove\\b"]}, level: deep}
      - {when: {last_user_chars: {under: 200}, tools: false}, level: "off"}
      - {level: standard}

A key's rule is the default's with the fields the key sets replaced. Every fault is reported as
`<file>:<line>: <where>: <what is wrong>`, the line being the one the fault is on, so that an
operator editing the file finds it without counting; unknown fields are refused (a misspelled
`max_levle` must not silently allow everything), and so is a key no client key is named.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from proxy.core.config.yamlfile import ConfigLoader, load_config
from proxy.core.controls import Level
from proxy.core.errors import ConfigError
from proxy.core.plan.levels import Asked
from proxy.core.policy.auto_rules import (
    MAX_PATTERN_CHARS,
    MAX_PATTERNS,
    MAX_RULES,
    AutoRule,
    make_rule,
)

# The windows a budget is counted in, in seconds.
PERIODS: dict[str, int] = {"minute": 60, "hour": 3_600, "day": 86_400, "week": 604_800}
_ORDER = {Level.OFF: 0, Level.STANDARD: 1, Level.DEEP: 2}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget(_Strict):
    """Reasoning tokens a key may spend in any rolling window of `per`."""

    limit: int = Field(gt=0)
    per: Literal["minute", "hour", "day", "week"]

    @property
    def seconds(self) -> int:
        return PERIODS[self.per]

    def label(self) -> str:
        return f"reasoning_tokens={self.limit}/{self.per}"


class DefaultLevel(StrEnum):
    """What `default_level` may name: a level, or `auto` (the auto rules choose)."""

    OFF = "off"
    STANDARD = "standard"
    DEEP = "deep"
    AUTO = "auto"

    def asked(self) -> Asked:
        return Asked(None, auto=True) if self is DefaultLevel.AUTO else Asked(Level(self.value))


class KeyRule(_Strict):
    """One key's thinking rule. `max_level` caps the level a request would really send (its header's,
    or its body's own knobs': proxy.core.policy.body_level). `default_level` is the level of a
    request that names none (no header, no model suffix, no field of its own: proxy.core.plan.levels).
    `on_exhausted`: `refuse` answers 429 once the budget is spent; `off` sends the request with
    thinking off instead (said in the headers), or refuses it like `refuse` where its model cannot
    turn thinking off (proxy.policy.service)."""

    max_level: Level | None = None
    default_level: DefaultLevel | None = None
    reasoning_tokens: Budget | None = None
    on_exhausted: Literal["refuse", "off"] = "refuse"


class Price(_Strict):
    """USD per 1M tokens. `cached_input`: for input tokens the upstream served from its prompt
    cache (the input price when not given)."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)


class Chars(_Strict):
    """`last_user_chars`: more than `over`, fewer than `under` characters (either or both)."""

    over: int | None = Field(default=None, ge=0)
    under: int | None = Field(default=None, gt=0)


Pattern = Annotated[str, Field(min_length=1, max_length=MAX_PATTERN_CHARS)]
Door = Literal["chat", "responses", "messages"]


class When(_Strict):
    """An auto rule's conditions (proxy.core.policy.auto_rules): all must hold."""

    last_user_chars: Chars | None = None
    contains: list[Pattern] | None = Field(default=None, min_length=1, max_length=MAX_PATTERNS)
    tools: bool | None = None
    model: str | None = Field(default=None, min_length=1)
    door: list[Door] | None = Field(default=None, min_length=1)
    client: str | None = Field(default=None, min_length=1)

    @field_validator("door", mode="before")
    @classmethod
    def _one_door(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class AutoRuleSpec(_Strict):
    when: When | None = None
    level: Level


class _File(_Strict):
    default: KeyRule = KeyRule()
    keys: dict[str, KeyRule] = Field(default_factory=dict)
    prices: dict[str, Price] = Field(default_factory=dict)
    auto: list[AutoRuleSpec] = Field(default_factory=list, max_length=MAX_RULES)


@dataclass(frozen=True, slots=True)
class Policy:
    """A loaded policy: each key's rule (the default's fields where the key sets none), and the
    price table in the file's order."""

    default: KeyRule
    keys: Mapping[str, KeyRule]
    prices: tuple[tuple[str, Price], ...]
    source: str = "policy"
    auto: tuple[AutoRule, ...] = ()  # the file's auto rules (none: the built-in ones)

    def rule_for(self, client: str | None) -> KeyRule:
        rule = self.keys.get(client) if client is not None else None
        return rule if rule is not None else self.default

    def price_for(self, model: str | None) -> Price | None:
        """The first price whose glob matches the model (case-sensitive, as model ids are)."""
        if model:
            for glob, price in self.prices:
                if fnmatch.fnmatchcase(model, glob):
                    return price
        return None

    @property
    def budgets(self) -> dict[str, Budget]:
        """Every named key's budget, for the console and /thinkproxy/usage."""
        out = {name: rule.reasoning_tokens for name, rule in self.keys.items() if rule.reasoning_tokens}
        return {name: budget for name, budget in out.items() if budget is not None}


def above(level: Level, ceiling: Level) -> bool:
    return _ORDER[level] > _ORDER[ceiling]


GATEWAY_ONLY = (
    "THINKPROXY_POLICY_FILE needs gateway mode for per-key rules and budgets: set THINKPROXY_CLIENT_KEYS "
    "(named keys, alice:ck-…); without it (BYOK) only `default` (max_level, default_level) and `auto` apply"
)


def parse_policy(text: str, source: str, client_names: Collection[str], *, gateway: bool = True) -> Policy:
    """The policy in `text` (`source`: the file name for messages); `client_names`: the names of
    the configured client keys, which `keys` must be among. Without gateway mode (`gateway`
    False: BYOK) there are no keys to count budgets for: `keys` and `reasoning_tokens` are refused."""
    document = load_config(text, source, "YAML")
    if document is None:
        document = {}
    lines = _line_index(text)
    if not isinstance(document, dict):
        raise ConfigError(f"{source}:1: the policy file is a mapping (default, keys, prices)")
    faults: list[str] = []
    try:
        parsed = _File.model_validate(document)
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(error["loc"])
            where = ".".join(str(part) for part in loc) or "(file)"
            faults.append(f"{source}:{_line_of(lines, loc)}: {where}: {_message(error)}")
        raise ConfigError("\n".join(faults)) from None
    if not gateway:
        for where, present in (("keys", bool(parsed.keys)), ("default", parsed.default.reasoning_tokens)):
            if present:
                faults.append(f"{source}:{_line_of(lines, (where,))}: {where}: {GATEWAY_ONLY}")
        if faults:
            raise ConfigError("\n".join(faults))
    for name in parsed.keys:
        if name not in client_names:
            known = ", ".join(sorted(client_names)) or "none: set THINKPROXY_CLIENT_KEYS as name:key"
            faults.append(
                f"{source}:{_line_of(lines, ('keys', name))}: keys.{name}: no client key is named "
                f"{name!r} (named client keys: {known})"
            )
    rules: list[AutoRule] = []
    for i, spec in enumerate(parsed.auto):
        when = spec.when.model_dump(exclude_none=True) if spec.when is not None else None
        try:
            rules.append(make_rule(i + 1, spec.level, when))
        except ValueError as exc:
            at = _line_of(lines, ("auto", i, "when", "contains"))
            faults.append(f"{source}:{at}: auto.{i}.when.contains: {exc}")
    if faults:
        raise ConfigError("\n".join(faults))
    merged = {name: _over(parsed.default, rule) for name, rule in parsed.keys.items()}
    return Policy(parsed.default, merged, tuple(parsed.prices.items()), source, tuple(rules))


def _over(default: KeyRule, rule: KeyRule) -> KeyRule:
    """`rule` with the default's value for each field it does not set."""
    fields = {
        name: getattr(default, name) for name in KeyRule.model_fields if name not in rule.model_fields_set
    }
    return rule.model_copy(update=fields)


def _message(error: Any) -> str:
    kind, message = error.get("type"), str(error.get("msg"))
    if kind == "extra_forbidden":
        return (
            "unknown field (allowed: default, keys, prices, auto; per key: max_level, default_level, "
            "reasoning_tokens, on_exhausted; per budget: limit, per; per price: input, output, "
            "cached_input; per auto rule: when, level; per when: last_user_chars, contains, tools, "
            "model, door, client; per last_user_chars: over, under)"
        )
    if kind == "enum" and error["loc"][-1] == "default_level":
        return f"{error.get('input')!r} is not a level: write off, standard, deep or auto"
    if kind == "enum":
        return f"{error.get('input')!r} is not a level: write off, standard or deep"
    if kind == "literal_error" and error["loc"][-1] == "on_exhausted":
        return f"{error.get('input')!r}: write refuse or off"
    return message


def _line_index(text: str) -> dict[tuple[Any, ...], int]:
    """The 1-based line of every mapping key and value in the document, by its path."""
    out: dict[tuple[Any, ...], int] = {}
    try:
        root = yaml.compose(text, Loader=ConfigLoader)
    except yaml.YAMLError:
        return out

    def walk(node: yaml.Node, path: tuple[Any, ...]) -> None:
        out.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = key.value
                out[(*path, name)] = key.start_mark.line + 1
                walk(value, (*path, name))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, i))

    if root is not None:
        walk(root, ())
    return out


def _line_of(lines: Mapping[tuple[Any, ...], int], loc: tuple[Any, ...]) -> int:
    """The line of the deepest part of `loc` the document has (a missing field: its parent's)."""
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1
