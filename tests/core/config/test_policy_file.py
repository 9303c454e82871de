"""The policy file (proxy.core.config.policy_file): what it accepts, the rule each key gets (the
default's fields where the key sets none), prices by model glob, and one line per fault naming
the line it is on."""

from __future__ import annotations

import pytest

from proxy.core.config.policy_file import Budget, DefaultLevel, KeyRule, above, parse_policy
from proxy.core.controls import Level
from proxy.core.errors import ConfigError
from proxy.core.plan.levels import Asked
from proxy.core.policy.auto_rules import Features

NAMES = ["alice", "bob", "carol", "dave"]
EXAMPLE = """\
default: {max_level: deep}
keys:
  alice: {max_level: standard}
  bob:   {reasoning_tokens: {limit: 200000, per: day}, on_exhausted: refuse}
  carol: {reasoning_tokens: {limit: 50000, per: hour}, on_exhausted: "off"}
prices:
  "deepseek-v4-*": {input: 0.27, output: 1.10, cached_input: 0.07}
  "*": {input: 1, output: 2}
"""


def test_the_example_of_the_docs() -> None:
    policy = parse_policy(EXAMPLE, "policy.yaml", NAMES)
    assert policy.rule_for("alice") == KeyRule(max_level=Level.STANDARD)
    bob = policy.rule_for("bob")
    assert bob.max_level is Level.DEEP and bob.reasoning_tokens == Budget(limit=200_000, per="day")
    assert bob.on_exhausted == "refuse" and policy.rule_for("carol").on_exhausted == "off"
    assert policy.rule_for("dave") == policy.rule_for(None) == KeyRule(max_level=Level.DEEP)
    assert policy.budgets == {
        "bob": Budget(limit=200_000, per="day"),
        "carol": Budget(limit=50_000, per="hour"),
    }
    assert policy.price_for("deepseek-v4-flash") is not None
    assert policy.price_for("deepseek-v4-flash").cached_input == 0.07  # type: ignore[union-attr]
    assert policy.price_for("gpt-5.4").input == 1  # type: ignore[union-attr]  # (first match wins)
    assert policy.price_for(None) is None


def test_a_key_sets_what_it_names_and_inherits_the_rest() -> None:
    text = "default: {max_level: standard, reasoning_tokens: {limit: 10, per: minute}, on_exhausted: 'off'}\n"
    text += "keys:\n  alice: {max_level: deep}\n  bob: {on_exhausted: refuse}\n"
    policy = parse_policy(text, "p.yaml", NAMES)
    alice = policy.rule_for("alice")
    assert alice.max_level is Level.DEEP and alice.reasoning_tokens == Budget(limit=10, per="minute")
    assert alice.on_exhausted == "off" and policy.rule_for("bob").on_exhausted == "refuse"


@pytest.mark.parametrize("text", ["", "# nothing\n", "default: {}\n", "keys: {}\n"])
def test_an_empty_policy_allows_everything(text: str) -> None:
    policy = parse_policy(text, "p.yaml", NAMES)
    assert policy.rule_for("alice") == KeyRule() and policy.prices == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("keys:\n  alice: {max_level: high}\n", "p.yaml:2: keys.alice.max_level: 'high' is not a level"),
        (
            "default: {max_level: deep}\nkeys:\n  bob:\n    reasoning_tokens: {limit: 0, per: day}\n",
            "p.yaml:4: keys.bob.reasoning_tokens.limit: Input should be greater than 0",
        ),
        (
            "keys:\n  bob:\n    reasoning_tokens:\n      limit: 5\n      per: month\n",
            "p.yaml:5: keys.bob.reasoning_tokens.per: Input should be 'minute', 'hour', 'day' or 'week'",
        ),
        (
            "keys:\n  carol: {on_exhausted: never}\n",
            "p.yaml:2: keys.carol.on_exhausted: 'never': write refuse or off",
        ),
        ("keys:\n  alice:\n    max_levle: off\n", "p.yaml:3: keys.alice.max_levle: unknown field"),
        ("defaults: {}\n", "p.yaml:1: defaults: unknown field"),
        ("keys:\n  mallory: {max_level: off}\n", "p.yaml:2: keys.mallory: no client key is named 'mallory'"),
        (
            'prices:\n  "gpt-*": {input: -1, output: 1}\n',
            "p.yaml:2: prices.gpt-*.input: Input should be greater",
        ),
        ("- a\n", "p.yaml:1: the policy file is a mapping"),
    ],
)
def test_a_fault_is_one_line_naming_its_line(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_policy(text, "p.yaml", NAMES)
    assert str(caught.value).startswith(expected), str(caught.value)


def test_every_fault_is_reported_at_once() -> None:
    text = "keys:\n  alice: {max_level: high}\n  bob: {on_exhausted: never}\n"
    with pytest.raises(ConfigError) as caught:
        parse_policy(text, "p.yaml", NAMES)
    lines = str(caught.value).splitlines()
    assert [line.split(":")[1] for line in lines] == ["2", "3"]


def test_bad_yaml_and_duplicate_keys_are_refused_with_where() -> None:
    with pytest.raises(ConfigError, match=r"p\.yaml: not valid YAML"):
        parse_policy("keys: [\n", "p.yaml", NAMES)
    with pytest.raises(ConfigError, match="duplicate key 'alice'"):
        parse_policy("keys:\n  alice: {}\n  alice: {}\n", "p.yaml", NAMES)


def test_unknown_keys_list_the_named_client_keys() -> None:
    with pytest.raises(ConfigError, match=r"named client keys: alice, bob\)"):
        parse_policy("keys:\n  eve: {}\n", "p.yaml", ["bob", "alice"])


def test_levels_are_ordered() -> None:
    assert above(Level.DEEP, Level.STANDARD) and above(Level.STANDARD, Level.OFF)
    assert not above(Level.STANDARD, Level.STANDARD) and not above(Level.OFF, Level.DEEP)


# -- default_level and the auto rules (issue 45) -----------------------------------------------------

LEVELS = """\
default: {max_level: deep, default_level: standard}
keys:
  alice: {default_level: auto}
  bob:   {max_level: standard}
auto:
  - when: {contains: ["\\\\bprove\\\\b", "refactor"], door: messages}
    level: deep
  - when: {last_user_chars: {under: 200}, tools: false, model: "kimi-*", client: codex}
    level: "off"
  - level: standard
"""


def test_default_level_in_default_and_per_key() -> None:
    policy = parse_policy(LEVELS, "policy.yaml", NAMES)
    assert policy.rule_for("alice").default_level == DefaultLevel.AUTO
    assert policy.rule_for("alice").max_level is Level.DEEP  # (the default's, inherited)
    assert policy.rule_for("bob").default_level == DefaultLevel.STANDARD  # (inherited)
    assert policy.rule_for(None).default_level == DefaultLevel.STANDARD  # (BYOK: the default's)
    assert DefaultLevel.AUTO.asked() == Asked(None, auto=True)
    assert DefaultLevel.DEEP.asked() == Asked(Level.DEEP)


def test_the_auto_rules_are_compiled_in_order() -> None:
    rules = parse_policy(LEVELS, "policy.yaml", NAMES).auto
    assert [rule.level for rule in rules] == [Level.DEEP, Level.OFF, Level.STANDARD]
    assert rules[0].text == r"auto[1]: contains \bprove\b|refactor, door messages -> deep"
    assert rules[0].holds(Features("Prove it", door="messages"))
    assert not rules[0].holds(Features("Prove it", door="chat"))
    assert rules[1].text == (
        "auto[2]: last_user_chars under 200, tools false, model kimi-*, client codex -> off"
    )
    assert rules[2].text == "auto[3]: otherwise -> standard"
    assert parse_policy("default: {}", "policy.yaml", NAMES).auto == ()  # (the built-in ones apply)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "default: {default_level: high}",
            "policy.yaml:1: default.default_level: 'high' is not a level: write off, standard, deep or auto",
        ),
        (
            "auto:\n  - {level: auto}",
            "policy.yaml:2: auto.0.level: 'auto' is not a level: write off, standard or deep",
        ),
        (
            "auto:\n  - level: deep\n    when: {contains: ['(unclosed']}",
            "policy.yaml:3: auto.0.when.contains: '(unclosed' is not a regular expression "
            "(missing ), unterminated subpattern at position 0)",
        ),
        (
            "auto:\n  - level: deep\n    when: {contains: ['(\\w+\\s?)+$']}",
            "policy.yaml:3: auto.0.when.contains: '(\\\\w+\\\\s?)+$' could take unbounded time on a "
            "message: a repeat inside a repeat (`+` within `+`) can split the same text in too many "
            "ways to try (exponentially many under `+` or `*`); write one repeat (`(\\w+\\s?)+` as "
            "`[\\w\\s]+`) or make the inner one possessive (`\\w++`) or atomic (`(?>\\w+)`)",
        ),
        (
            "auto:\n  - level: deep\n    when: {door: [chat, websocket]}",
            "policy.yaml:3: auto.0.when.door.1: Input should be 'chat', 'responses' or 'messages'",
        ),
        (
            "auto:\n  - level: deep\n    when: {last_user_chars: {over: -1}}",
            "policy.yaml:3: auto.0.when.last_user_chars.over: Input should be greater than or equal to 0",
        ),
        (
            "auto:\n  - level: deep\n    when: {last_words: 3}",
            "policy.yaml:3: auto.0.when.last_words: unknown field",
        ),
        (
            "auto:\n  - level: deep\n    when: {contains: ['" + "a" * 300 + "']}",
            "policy.yaml:3: auto.0.when.contains.0: String should have at most 256 characters",
        ),
    ],
)
def test_a_bad_level_or_rule_is_one_line_naming_its_line(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_policy(text, "policy.yaml", NAMES)
    assert str(caught.value).startswith(expected), str(caught.value)


def test_the_rules_are_bounded_in_number() -> None:
    text = "auto:\n" + "".join("  - {level: deep}\n" for _ in range(65))
    with pytest.raises(ConfigError, match="auto: List should have at most 64 items"):
        parse_policy(text, "policy.yaml", NAMES)


def test_without_gateway_mode_only_the_default_and_the_auto_rules() -> None:
    byok = "default: {max_level: deep, default_level: auto}\nauto:\n  - {level: standard}\n"
    policy = parse_policy(byok, "policy.yaml", [], gateway=False)
    assert policy.rule_for(None).default_level == DefaultLevel.AUTO and len(policy.auto) == 1
    with pytest.raises(ConfigError) as caught:
        parse_policy(EXAMPLE, "policy.yaml", [], gateway=False)
    assert str(caught.value).startswith(
        "policy.yaml:2: keys: THINKPROXY_POLICY_FILE needs gateway mode for per-key rules and budgets"
    )
    with pytest.raises(ConfigError, match=r"policy\.yaml:1: default: THINKPROXY_POLICY_FILE needs gateway"):
        parse_policy("default: {reasoning_tokens: {limit: 5, per: day}}", "policy.yaml", [], gateway=False)
