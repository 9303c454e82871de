"""Rolling-window arithmetic for reasoning-token budgets (proxy.policy keeps the counts). Pure.

A budget of `limit` tokens per `period` is counted in BUCKETS buckets of period/BUCKETS seconds
each: what a key spent "in the last day" is the sum of the buckets of the last day, so the window
rolls forward one bucket (e.g. 24 minutes for a day) at a time instead of resetting at midnight,
when every key would get its whole budget back at once. Buckets are numbered from the Unix epoch,
so every replica sharing a store (Redis) puts a token in the same bucket.

The reset time a refusal names is exact for these buckets: the moment enough of the oldest buckets
have left the window for the spend to fall below the limit.

Reservations (concurrent requests): a request admitted sets aside an estimate of what it will
spend, added to the current bucket at once and in the same atomic step as the check
(`Window.admits` reads the counts that step returned), and the difference (actual - reserved) is
added to that bucket when it ends. Requests in flight together thus see each other: once what is
spent and reserved reaches the limit, nobody else is admitted. The estimate (`Peaks.reservation`)
is the largest of: the key's last few answers, DEFAULT_RESERVATION, and the request's own output
cap (`output_cap`: it cannot write more); never above the limit. Cheap answers never lower it below
the default, so a key cannot warm up with tiny answers and then have a burst admitted at a token
each. A reservation left by a process that died is spend like any other: it leaves the window with
its bucket.

Past half the limit (what is spent and set aside before a request), a worker admits a key's request
only when none of that key's is in flight in it (`admits(alone=...)`). So one worker has at most
`in_flight_bound(limit)` requests of a key in flight at once: those admitted below half (each sets
aside at least min(limit, DEFAULT_RESERVATION)) and one more. The spend of a window passes the limit
by less than what the requests in flight at the last admission spend: at most that many answers
per worker, each within its own output cap when it names one.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BUCKETS = 60
# What a key with no answer counted yet (in this process) sets aside per request: a long thinking
# answer's reasoning. A budget smaller than this admits one such request at a time at first.
DEFAULT_RESERVATION = 4_096
# How many of a key's recent answers the reservation looks back on.
PEAK_ANSWERS = 16
# A request's own numbers that bound what it writes (its output, or its thinking): the largest is
# set aside for it. (`max_tokens`: chat, completions, Messages; `max_output_tokens`: Responses;
# `max_completion_tokens`: chat; `thinking_budget`: DashScope's; Anthropic's and OpenRouter's budgets.)
_CAP_FIELDS = ("max_tokens", "max_output_tokens", "max_completion_tokens", "thinking_budget")
_NESTED_CAPS = (("thinking", "budget_tokens"), ("reasoning", "max_tokens"))


def output_cap(body: Mapping[str, Any]) -> int | None:
    """The largest output or thinking cap a request body names (None: it names none)."""
    largest: int | None = None  # (no lists: read for every budgeted request)
    for name in _CAP_FIELDS:
        n = body.get(name)
        if type(n) is int and n > 0 and (largest is None or n > largest):
            largest = n
    for holder, name in _NESTED_CAPS:
        inner = body.get(holder)
        if inner is not None and isinstance(inner, Mapping):  # (absent: no ABC check)
            n = inner.get(name)
            if type(n) is int and n > 0 and (largest is None or n > largest):
                largest = n
    return largest


def in_flight_bound(limit: int) -> int:
    """How many requests of a key one worker has in flight at most: those admitted below half the
    limit, each setting aside at least min(limit, DEFAULT_RESERVATION), and one past it."""
    return math.ceil(limit / (2 * min(limit, DEFAULT_RESERVATION))) + 1


@dataclass(frozen=True, slots=True)
class Window:
    period: int  # seconds

    @property
    def width(self) -> float:
        return self.period / BUCKETS

    # (`bucket`'s arithmetic is spelled out in each method: these run several times per budgeted
    # request, and a call or a range less each is measurable there.)
    def bucket(self, now: float) -> int:
        return int(now // (self.period / BUCKETS))

    def live(self, now: float) -> range:
        """The buckets in the window at `now`: the current one and the BUCKETS - 1 before it."""
        current = int(now // (self.period / BUCKETS))
        return range(current - BUCKETS + 1, current + 1)

    def spent(self, counts: Mapping[int, int], now: float) -> int:
        current = int(now // (self.period / BUCKETS))
        first = current - BUCKETS + 1
        total = 0
        for bucket, tokens in counts.items():
            if first <= bucket <= current:
                total += tokens
        return total

    def stale(self, counts: Mapping[int, int], now: float) -> list[int]:
        """Buckets that have left the window (a store may delete them)."""
        first = int(now // (self.period / BUCKETS)) - BUCKETS + 1
        return [bucket for bucket in counts if bucket < first]

    def reset_at(self, counts: Mapping[int, int], now: float, limit: int) -> float:
        """When the spend falls below `limit` again if nothing more is spent (`now` when it is
        below already): the moment the last of the oldest buckets that must go has left."""
        spent = self.spent(counts, now)
        if spent < limit:
            return now
        for bucket in self.live(now):  # oldest first: each leaves when bucket + BUCKETS begins
            spent -= counts.get(bucket, 0)
            if spent < limit:
                return (bucket + BUCKETS) * self.width
        raise AssertionError("unreachable: an empty window spends nothing")  # (limit > 0)

    def admits(
        self, counts: Mapping[int, int], now: float, *, limit: int, reserved: int, alone: bool = True
    ) -> bool:
        """Whether a request whose reservation `reserved` is already in `counts` (the counts the
        atomic reserve returned) is admitted: what was spent and reserved before it is below the
        limit, and, past half the limit, only when it is `alone` (no other request of its key in
        flight in this worker)."""
        before = self.spent(counts, now) - reserved
        return before < limit and (alone or 2 * before < limit)

    def settlement(
        self, counts: Mapping[int, int], now: float, bucket: int, reserved: int, difference: int
    ) -> tuple[int, int, list[int]] | None:
        """What settling a reservation of `reserved` tokens set aside in `bucket` adds, `difference`
        being actual - reserved, given the key's `counts`: (bucket, tokens, the stale buckets to
        delete), or None when nothing is to be added. Where the reservation's bucket has left the
        window (whether or not the store still has it), what was spent goes in the current bucket."""
        current = int(now // (self.period / BUCKETS))
        first = current - BUCKETS + 1
        stale = [old for old in counts if old < first]
        if bucket < first:
            spent = difference + reserved
            return (current, spent, stale) if spent > 0 else None
        return bucket, difference, stale

    @property
    def ttl(self) -> int:
        """How long a bucket must be kept: the window, and one bucket's width more."""
        return int(self.period + self.width) + 1


@functools.cache
def window_for(seconds: int) -> Window:
    """The window of a budget's period: one object per period (a handful), not one per call."""
    return Window(seconds)


class Peaks:
    """Each budget key's last `keep` reasoning counts, for the reservation of its next request.
    Bounded: keys are client keys of the policy file, and each keeps `keep` numbers."""

    __slots__ = ("_recent", "keep")

    def __init__(self, keep: int = PEAK_ANSWERS) -> None:
        self.keep = keep
        self._recent: dict[str, deque[int]] = {}

    def add(self, key: str, tokens: int) -> None:
        recent = self._recent.get(key)
        if recent is None:
            recent = self._recent[key] = deque(maxlen=self.keep)
        recent.append(tokens)

    def reservation(self, key: str, limit: int, asked: int | None = None) -> int:
        """What a request of `key` sets aside: the largest of its recent answers, DEFAULT_RESERVATION
        and `asked` (the request's own output cap); never above `limit`."""
        recent = self._recent.get(key)
        estimate = max(DEFAULT_RESERVATION, max(recent) if recent else 0, asked or 0)
        return min(estimate, limit)
