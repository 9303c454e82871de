"""Rolling-window arithmetic for reasoning-token budgets (proxy.policy keeps the counts). Pure.

A budget of `limit` tokens per `period` is counted in BUCKETS buckets of period/BUCKETS seconds
each: what a key spent "in the last day" is the sum of the buckets of the last day, so the window
rolls forward one bucket (e.g. 24 minutes for a day) at a time instead of resetting at midnight,
when every key would get its whole budget back at once. Buckets are numbered from the Unix epoch,
so every replica sharing a store (Redis) puts a token in the same bucket.

The reset time a refusal names is exact for these buckets: the moment enough of the oldest buckets
have left the window for the spend to fall below the limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

BUCKETS = 60


@dataclass(frozen=True, slots=True)
class Window:
    period: int  # seconds

    @property
    def width(self) -> float:
        return self.period / BUCKETS

    def bucket(self, now: float) -> int:
        return int(now // self.width)

    def live(self, now: float) -> range:
        """The buckets in the window at `now`: the current one and the BUCKETS - 1 before it."""
        current = self.bucket(now)
        return range(current - BUCKETS + 1, current + 1)

    def spent(self, counts: Mapping[int, int], now: float) -> int:
        live = self.live(now)
        return sum(tokens for bucket, tokens in counts.items() if bucket in live)

    def stale(self, counts: Mapping[int, int], now: float) -> list[int]:
        """Buckets that have left the window (a store may delete them)."""
        first = self.live(now).start
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

    @property
    def ttl(self) -> int:
        """How long a bucket must be kept: the window, and one bucket's width more."""
        return int(self.period + self.width) + 1
