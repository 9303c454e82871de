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


# -- reservations: what a request sets aside at admission (issue 41, item 6) -----------------------
def test_a_key_with_no_answers_yet_reserves_the_default_never_above_its_limit() -> None:
    from proxy.core.budgets import DEFAULT_RESERVATION, Peaks

    peaks = Peaks()
    assert peaks.reservation("bob:day", 1_000_000) == DEFAULT_RESERVATION
    assert peaks.reservation("bob:day", 1_000) == 1_000


def test_the_reservation_follows_the_largest_recent_answer() -> None:
    from proxy.core.budgets import Peaks

    peaks = Peaks(keep=3)
    for tokens in (600, 2_000, 10):
        peaks.add("bob:day", tokens)
    assert peaks.reservation("bob:day", 1_000_000) == 2_000
    peaks.add("bob:day", 20)  # the three most recent: 2000, 10, 20
    assert peaks.reservation("bob:day", 1_000_000) == 2_000
    peaks.add("bob:day", 30)  # 10, 20, 30: the big one is old news
    assert peaks.reservation("bob:day", 1_000_000) == 30
    peaks.add("bob:day", 0)
    assert peaks.reservation("bob:day", 1_000_000) == 30 and peaks.reservation("carol:day", 50) == 50
    peaks.add("dave:day", 0)
    assert peaks.reservation("dave:day", 1_000) == 1  # (an answer that spent nothing still holds a token)


def test_a_request_is_admitted_when_what_came_before_its_reservation_left_room() -> None:
    now = 100 * 60
    # bucket 100 holds 400 spent and this request's 300: before it, 400 < 1000
    assert HOUR.admits({100: 700}, now, limit=1_000, reserved=300)
    assert not HOUR.admits({99: 600, 100: 700}, now, limit=1_000, reserved=300)  # 1000 before it
    assert HOUR.admits({30: 5_000, 100: 300}, now, limit=1_000, reserved=300)  # (bucket 30 has left)
