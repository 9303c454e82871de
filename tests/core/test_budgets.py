"""Rolling windows (proxy.core.budgets): what a key spent in the last period, which buckets have
left it, and exactly when a spent budget has room again."""

from __future__ import annotations

import pytest

from proxy.core.budgets import BUCKETS, Window

HOUR = Window(3_600)  # buckets of 60 s


def test_buckets_are_numbered_from_the_epoch() -> None:
    assert HOUR.width == 60 and HOUR.bucket(0) == 0 and HOUR.bucket(59.9) == 0 and HOUR.bucket(60) == 1
    assert HOUR.bucket(1_700_000_000) == 1_700_000_000 // 60


def test_the_window_rolls_a_bucket_at_a_time() -> None:
    now = 100 * 60 + 30  # bucket 100
    counts = {40: 5, 41: 7, 100: 3, 70: 1}
    assert HOUR.spent(counts, now) == 7 + 3 + 1  # buckets 41..100
    assert HOUR.stale(counts, now) == [40]
    assert HOUR.spent(counts, now + 60) == 3 + 1  # bucket 41 has left


@pytest.mark.parametrize(
    ("counts", "limit", "resets"),
    [
        ({41: 7, 100: 3}, 10, (41 + BUCKETS) * 60),  # bucket 41 leaving brings it to 3 < 10
        ({41: 2, 50: 5, 100: 6}, 10, (50 + BUCKETS) * 60),  # 41 leaving is not enough
        ({100: 30}, 10, (100 + BUCKETS) * 60),  # all in the current bucket
    ],
)
def test_reset_is_when_enough_old_buckets_have_left(
    counts: dict[int, int], limit: int, resets: float
) -> None:
    now = 100 * 60 + 30
    assert HOUR.spent(counts, now) >= limit
    assert HOUR.reset_at(counts, now, limit) == resets
    assert HOUR.spent(counts, resets) < limit and HOUR.spent(counts, resets - 0.001) >= limit


def test_reset_is_now_when_there_is_room() -> None:
    assert HOUR.reset_at({100: 3}, 6030, 10) == 6030


def test_buckets_outlive_the_window_by_one_width() -> None:
    assert HOUR.ttl >= 3_600 + 60
