"""Which `contains` patterns of the policy file could backtrack without bound, refused when the
file loads.

Pure. Python's `re` backtracks: a pattern that can match one stretch of text in many ways tries
every way before it gives up, so `(\\w+\\s?)+$` against 22 letters and a `!` takes most of a
second, twice as long per letter more, and holds the event loop while it runs (SCAN_CHARS bounds
the text, not that cost). `risk(pattern)` walks the parsed pattern (`re._parser`, Python 3.11) and
says why it is refused, or None:

- a backreference (`\\1`, `(?P=name)`, `(?(1)…)`): matching one is not bounded by any shape;
- a repeat inside a repeat: an unbounded repeat (`+`, `*`, `{n,}`) within the body of a repeat
  that can run more than once (`(a+)+`, `(\\w+\\s?)+`, `(\\w+\\s){3}`);
- a choice inside an unbounded repeat whose branches can begin with the same character, counting
  what follows the choice in the group and the group's next round (`(a|aa)*`, `(aa?)+`): each
  round can then be cut in two ways. Only choices directly in the repeated group are compared
  (a choice nested in a further group is not), and characters are compared over ASCII, a few
  others and the pattern's own letters.

A possessive repeat (`\\w++`) or an atomic group (`(?>…)`) never gives back what it matched, so
what is inside one is not counted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from re import _parser as sre  # type: ignore[attr-defined]  # (no stub; its shape is 3.11's)
from typing import Any, Final

__all__ = ["risk"]

_UNBOUNDED: Final[int] = sre.MAXREPEAT
_REPEATS: Final = frozenset({"MAX_REPEAT", "MIN_REPEAT"})
_CATEGORIES: Final = {
    "CATEGORY_DIGIT": re.compile(r"\d"),
    "CATEGORY_NOT_DIGIT": re.compile(r"\D"),
    "CATEGORY_SPACE": re.compile(r"\s"),
    "CATEGORY_NOT_SPACE": re.compile(r"\S"),
    "CATEGORY_WORD": re.compile(r"\w"),
    "CATEGORY_NOT_WORD": re.compile(r"\W"),
}
_SAMPLE: Final = frozenset(chr(c) for c in range(128)) | frozenset("\u00a0\u00e9\u00df\u2014\u8bc1")

_NESTED = (
    "a repeat inside a repeat ({inner} within {outer}) can split the same text in too many ways "
    "to try (exponentially many under `+` or `*`); write one repeat (`(\\w+\\s?)+` as "
    "`[\\w\\s]+`) or make the inner one possessive (`\\w++`) or atomic (`(?>\\w+)`)"
)
_BACKREFERENCE = "a backreference's cost is not bounded; match the words themselves instead"
_CHOICE = (
    "{at} inside an unbounded repeat can begin like what follows it, so each round can be cut in "
    "two ways; make the ways begin differently (`(a|aa)*` as `a*`) or the group atomic (`(?>…)`)"
)


def risk(pattern: str) -> str | None:
    """Why `pattern` (one that compiles) could backtrack without bound; None when it cannot."""
    alphabet = frozenset(c.lower() for c in _SAMPLE | frozenset(pattern))
    return _walk(list(sre.parse(pattern)), None, _Scan(pattern, alphabet))


class _Scan:
    """The pattern's text (to quote its parts) and the characters first sets are taken over."""

    def __init__(self, pattern: str, alphabet: frozenset[str]) -> None:
        self.pattern = pattern
        self.alphabet = alphabet


def _walk(items: Sequence[tuple[Any, Any]], outer: str | None, scan: _Scan) -> str | None:
    """The first risk among `items`; `outer` names the repeat (able to run more than once) they
    are inside, if any."""
    for op, av in items:
        name = op.name
        found: str | None = None
        if name in ("GROUPREF", "GROUPREF_EXISTS"):
            return _BACKREFERENCE
        if name in _REPEATS:
            low, high, body = av
            if outer is not None and high == _UNBOUNDED:
                return _NESTED.format(inner=_quantifier(low, high), outer=outer)
            found = _walk(list(body), _quantifier(low, high) if high > 1 else outer, scan)
            if found is None and high == _UNBOUNDED:
                found = _ambiguous_choice(list(body), scan)
        elif name == "POSSESSIVE_REPEAT":
            found = _walk(list(av[2]), None, scan)
        elif name == "ATOMIC_GROUP":
            found = _walk(list(av), None, scan)
        elif name == "SUBPATTERN":
            found = _walk(list(av[3]), outer, scan)
        elif name in ("ASSERT", "ASSERT_NOT"):
            found = _walk(list(av[1]), outer, scan)
        elif name == "BRANCH":
            for branch in av[1]:
                found = found or _walk(list(branch), outer, scan)
        if found is not None:
            return found
    return None


def _quantifier(low: int, high: int) -> str:
    if high == _UNBOUNDED:
        return {0: "`*`", 1: "`+`"}.get(low, f"`{{{low},}}`")
    if low == high:
        return f"`{{{low}}}`"
    return "`?`" if (low, high) == (0, 1) else f"`{{{low},{high}}}`"


def _ambiguous_choice(body: list[tuple[Any, Any]], scan: _Scan) -> str | None:
    """A choice directly in an unbounded repeat's group whose ways on can begin alike."""
    while len(body) == 1 and body[0][0].name == "SUBPATTERN":
        body = list(body[0][1][3])
    for i, (op, av) in enumerate(body):
        rest = body[i + 1 :] + body  # (what follows: the rest of the group, then its next round)
        if op.name == "BRANCH":
            ways = [list(branch) + rest for branch in av[1]]
            at = "a choice (`|`)"
        elif op.name in _REPEATS and av[0] < av[1]:
            ways = [list(av[2]) + rest, rest]  # (one round more, or on)
            at = f"an optional part ({_quantifier(av[0], av[1])})"
        else:
            continue
        seen: set[str] = set()
        for way in ways:
            first = _first(way, scan)
            if seen & first:
                return _CHOICE.format(at=at)
            seen |= first
    return None


def _first(items: list[tuple[Any, Any]], scan: _Scan) -> frozenset[str]:
    """The characters (lower case) a match of `items` can begin with."""
    return _first_and_empty(items, scan)[0]


def _first_of(name: str, av: Any, scan: _Scan) -> tuple[frozenset[str], bool]:
    """One item's first characters, and whether it can match nothing."""
    if name == "LITERAL":
        return frozenset({chr(av).lower()}), False
    if name == "NOT_LITERAL":
        return scan.alphabet - {chr(av).lower()}, False
    if name == "ANY":
        return scan.alphabet, False
    if name == "IN":
        return frozenset(c for c in scan.alphabet if _in_set(av, c) or _in_set(av, c.upper()[:1])), False
    if name in ("AT", "ASSERT", "ASSERT_NOT"):
        return frozenset(), True
    if name == "SUBPATTERN":
        return _first_and_empty(list(av[3]), scan)
    if name == "ATOMIC_GROUP":
        return _first_and_empty(list(av), scan)
    if name in _REPEATS or name == "POSSESSIVE_REPEAT":
        first, empty = _first_and_empty(list(av[2]), scan)
        return first, empty or av[0] == 0
    if name == "BRANCH":
        parts = [_first_and_empty(list(branch), scan) for branch in av[1]]
        return frozenset().union(*(p[0] for p in parts)), any(p[1] for p in parts)
    return scan.alphabet, True  # (anything else: assume the worst)


def _first_and_empty(items: list[tuple[Any, Any]], scan: _Scan) -> tuple[frozenset[str], bool]:
    out: set[str] = set()
    for op, av in items:
        first, empty = _first_of(op.name, av, scan)
        out |= first
        if not empty:
            return frozenset(out), False
    return frozenset(out), True


def _in_set(items: Sequence[tuple[Any, Any]], char: str) -> bool:
    """Whether a character set (`[…]`, `\\w`) holds `char`."""
    negate = False
    hit = False
    code = ord(char)
    for op, av in items:
        name = op.name
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            hit = hit or av == code
        elif name == "RANGE":
            hit = hit or av[0] <= code <= av[1]
        elif name == "CATEGORY":
            pattern = _CATEGORIES.get(av.name)
            hit = hit or pattern is None or pattern.match(char) is not None
        else:
            hit = True  # (anything else: assume it holds)
    return hit != negate
