"""The `contains` patterns refused because they could backtrack without bound, and ordinary ones
accepted (the refusal itself: test_auto_rules, and the file's line: test_policy_file)."""

from __future__ import annotations

import pytest

from proxy.core.policy.auto_rules import BUILT_IN
from proxy.core.policy.pattern_cost import risk


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"(\w+\s?)+$", "a repeat inside a repeat (`+` within `+`)"),
        (r"(a+)+", "a repeat inside a repeat (`+` within `+`)"),
        (r"(?:[a-z]+,)*", "a repeat inside a repeat (`+` within `*`)"),
        (r"(\w+\s){3}", "a repeat inside a repeat (`+` within `{3}`)"),
        (r"(.*a){12}", "a repeat inside a repeat (`*` within `{12}`)"),
        (r"(a|aa)*b", "a choice (`|`) inside an unbounded repeat can begin like what follows it"),
        (r"(x|xx)+y", "a choice (`|`) inside an unbounded repeat"),
        (r"(aa?)+", "an optional part (`?`) inside an unbounded repeat"),
        (r"(a)\1", "a backreference"),
        (r"(?P<w>\w)(?P=w)", "a backreference"),
        (r"(?P<x>a)(?(x)b|c)", "a backreference"),
        (r"(?=(a+)+)", "a repeat inside a repeat"),  # (inside a lookahead too)
    ],
)
def test_patterns_that_can_backtrack_without_bound_are_named(pattern: str, why: str) -> None:
    found = risk(pattern)
    assert found is not None and found.startswith(why)


@pytest.mark.parametrize(
    "pattern",
    [
        r"\bprove\b",
        "root cause",
        r"\b(debug|prove|proof|derive|refactor)",
        r"\w+",
        r"(foo|bar)+",
        r"(x|xy)+z",  # (the choice's ways begin differently: y, or the next round's x)
        r"(ab?)*",
        r"(\d{1,3}\.){3}\d{1,3}",  # (bounded inside bounded)
        r"(?:\w++\s?)+",  # (possessive: never gives back)
        r"(?>\w+\s?)+",  # (atomic)
        r"(\w|-)+",
        r"[\w\s]+$",
        "证明",
    ],
)
def test_ordinary_patterns_pass(pattern: str) -> None:
    assert risk(pattern) is None


def test_the_built_in_rules_pass() -> None:
    for rule in BUILT_IN:
        for pattern in rule.contains:
            assert risk(pattern.pattern) is None
