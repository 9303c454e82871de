"""Which source names a request's level (proxy.core.plan.levels): the precedence table, `auto`
resolved by the rules, and the headers that say what applied."""

from __future__ import annotations

import pytest

from proxy.core.controls import Level
from proxy.core.plan.levels import Asked, LevelAsk, LevelChoice, Source, decide
from proxy.core.plan.model_suffix import split_model
from proxy.core.policy.auto_rules import Features, make_rule

DEEP, STANDARD, OFF = Level.DEEP, Level.STANDARD, Level.OFF
SUFFIX_OFF = split_model("m(off)")
SUFFIX_AUTO = split_model("m(auto)")


def nothing() -> Features:
    raise AssertionError("the features are read only for auto")


@pytest.mark.parametrize(
    ("header", "suffix", "client", "default", "level", "source"),
    [
        # header > suffix > client field > default > none
        (Asked(DEEP), SUFFIX_OFF, STANDARD, Asked(OFF), DEEP, Source.HEADER),
        (None, SUFFIX_OFF, DEEP, Asked(STANDARD), OFF, Source.SUFFIX),
        (None, None, DEEP, Asked(OFF), DEEP, Source.CLIENT),
        (None, None, None, Asked(STANDARD), STANDARD, Source.DEFAULT),
        (None, None, None, None, None, None),
        (Asked(OFF), None, None, None, OFF, Source.HEADER),
        (None, SUFFIX_OFF, None, None, OFF, Source.SUFFIX),
    ],
)
def test_the_first_source_that_names_a_level_wins(
    header: Asked | None,
    suffix: object,
    client: Level | None,
    default: Asked | None,
    level: Level | None,
    source: Source | None,
) -> None:
    ask = LevelAsk(header, suffix, default)  # type: ignore[arg-type]
    choice = decide(ask, client, nothing)
    assert (choice.level, choice.source, choice.rule) == (level, source, None)
    assert choice.forced is (source in (Source.HEADER, Source.SUFFIX))


RULES = (
    make_rule(1, DEEP, {"contains": ["refactor"]}),
    make_rule(2, OFF, None),
)


@pytest.mark.parametrize(
    ("ask", "source"),
    [
        (LevelAsk(header=Asked(None, auto=True), rules=RULES), Source.HEADER),
        (LevelAsk(suffix=SUFFIX_AUTO, rules=RULES), Source.SUFFIX),
        (LevelAsk(default=Asked(None, auto=True), rules=RULES), Source.DEFAULT),
    ],
)
def test_auto_from_any_source_is_chosen_by_the_rules(ask: LevelAsk, source: Source) -> None:
    choice = decide(ask, None, lambda: Features(last_user="please refactor this"))
    assert choice == LevelChoice(DEEP, source, "auto[1]: contains refactor -> deep")
    choice = decide(ask, None, lambda: Features(last_user="hello"))
    assert choice == LevelChoice(OFF, source, "auto[2]: otherwise -> off")


def test_a_default_auto_does_not_override_the_clients_own_field() -> None:
    ask = LevelAsk(default=Asked(None, auto=True), rules=RULES)
    assert decide(ask, STANDARD, nothing) == LevelChoice(STANDARD, Source.CLIENT)


def test_the_headers_say_the_source_and_the_rule() -> None:
    assert LevelChoice(DEEP, Source.SUFFIX).headers() == [("x-thinking-level-source", "suffix")]
    assert LevelChoice(None, None).headers() == [("x-thinking-level-source", "none")]
    assert LevelChoice(OFF, Source.HEADER, "auto[2]: otherwise -> off").headers() == [
        ("x-thinking-level-source", "header"),
        ("x-thinking-level-rule", "auto[2]: otherwise -> off"),
    ]


def test_the_rule_header_is_printable_ascii_and_bounded() -> None:
    rule = make_rule(1, DEEP, {"contains": ["证明", "a\tb"]}).text
    assert rule == "auto[1]: contains 证明|a\tb -> deep"
    (_, value) = LevelChoice(DEEP, Source.HEADER, rule).headers()[1]
    assert value == "auto[1]: contains \\u8bc1\\u660e|a\\u0009b -> deep"
    long = make_rule(1, DEEP, {"contains": ["x" * 256]}).text
    (_, value) = LevelChoice(DEEP, Source.HEADER, long).headers()[1]
    assert len(value) == 200 and value.endswith("...")
