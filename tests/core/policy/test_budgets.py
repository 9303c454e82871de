"""Rolling windows (proxy.core.policy.budgets): what a key spent in the last period, which buckets have
left it, and exactly when a spent budget has room again."""

from __future__ import annotations

import pytest

from proxy.core.policy.budgets import BUCKETS, Window

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
    from proxy.core.policy.budgets import DEFAULT_RESERVATION, Peaks

    peaks = Peaks()
    assert peaks.reservation("bob:day", 1_000_000) == DEFAULT_RESERVATION
    assert peaks.reservation("bob:day", 1_000) == 1_000


def test_the_reservation_follows_the_largest_recent_answer_never_below_the_default() -> None:
    from proxy.core.policy.budgets import DEFAULT_RESERVATION, Peaks

    peaks = Peaks(keep=3)
    for tokens in (6_000, 20_000, 10):
        peaks.add("bob:day", tokens)
    assert peaks.reservation("bob:day", 1_000_000) == 20_000
    peaks.add("bob:day", 20)  # the three most recent: 20000, 10, 20
    assert peaks.reservation("bob:day", 1_000_000) == 20_000
    peaks.add("bob:day", 9_000)  # 10, 20, 9000: the big one is old news
    assert peaks.reservation("bob:day", 1_000_000) == 9_000
    peaks.add("bob:day", 0)
    peaks.add("bob:day", 0)
    peaks.add("bob:day", 5)
    # Cheap answers never lower it below the default: a burst of deep requests could follow.
    assert peaks.reservation("bob:day", 1_000_000) == DEFAULT_RESERVATION
    assert peaks.reservation("bob:day", 1_000) == 1_000 and peaks.reservation("carol:day", 50) == 50


def test_a_request_that_names_its_output_cap_sets_it_aside_never_above_the_limit() -> None:
    from proxy.core.policy.budgets import DEFAULT_RESERVATION, Peaks

    peaks = Peaks()
    assert peaks.reservation("bob:day", 1_000_000, asked=32_000) == 32_000
    assert peaks.reservation("bob:day", 1_000_000, asked=100) == DEFAULT_RESERVATION
    assert peaks.reservation("bob:day", 10_000, asked=32_000) == 10_000


@pytest.mark.parametrize(
    ("body", "cap"),
    [
        ({"model": "m", "max_tokens": 8_000}, 8_000),
        ({"max_output_tokens": 9_000, "reasoning": {"max_tokens": 2_000}}, 9_000),
        ({"max_completion_tokens": 700}, 700),
        ({"max_tokens": 4_000, "thinking": {"type": "enabled", "budget_tokens": 16_000}}, 16_000),
        ({"thinking_budget": 3_000}, 3_000),
        ({"model": "m", "max_tokens": "lots", "thinking": "on"}, None),
        ({"max_tokens": True}, None),
        ({"max_tokens": -1}, None),
        ({}, None),
    ],
)
def test_a_request_s_own_output_cap(body: dict[str, object], cap: int | None) -> None:
    from proxy.core.policy.budgets import output_cap

    assert output_cap(body) == cap


def test_past_half_the_limit_a_worker_admits_a_key_s_request_only_alone() -> None:
    now = 100 * 60
    # 400 spent, this request's 300 in bucket 100: before it 400 < 500, admitted even with company
    assert HOUR.admits({100: 700}, now, limit=1_000, reserved=300, alone=False)
    # 600 before it: past half, admitted alone only
    assert HOUR.admits({100: 900}, now, limit=1_000, reserved=300, alone=True)
    assert not HOUR.admits({100: 900}, now, limit=1_000, reserved=300, alone=False)


@pytest.mark.parametrize(("limit", "bound"), [(100, 2), (4_096, 2), (10_000, 3), (1_000_000, 124)])
def test_how_many_of_a_key_s_requests_a_worker_has_in_flight_at_most(limit: int, bound: int) -> None:
    from proxy.core.policy.budgets import in_flight_bound

    assert in_flight_bound(limit) == bound


def test_a_request_is_admitted_when_what_came_before_its_reservation_left_room() -> None:
    now = 100 * 60
    # bucket 100 holds 400 spent and this request's 300: before it, 400 < 1000
    assert HOUR.admits({100: 700}, now, limit=1_000, reserved=300)
    assert not HOUR.admits({99: 600, 100: 700}, now, limit=1_000, reserved=300)  # 1000 before it
    assert HOUR.admits({30: 5_000, 100: 300}, now, limit=1_000, reserved=300)  # (bucket 30 has left)
