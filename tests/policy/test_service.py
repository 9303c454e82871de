"""The thinking policy at work (proxy.policy.service), with the in-process budget store and a
clock the test sets: ceilings announced, budgets refused or turned off when spent and back when the
window rolls on, spend counted from each answer's one reasoning count, and a budget store that
fails letting the request through."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from proxy.core.config.policy_file import parse_policy
from proxy.core.controls import Level
from proxy.core.events import AccessRecord
from proxy.core.usage import ReasoningTokens, TokenUsage
from proxy.policy.service import BudgetExceeded, Decision, ThinkingPolicy
from proxy.policy.store import MemoryBudgets
from proxy.sessions.pricing import Pricing
from proxy.state.base import StoreUnavailable

POLICY = """\
default: {max_level: deep}
keys:
  alice: {max_level: standard}
  bob: {reasoning_tokens: {limit: 100, per: hour}}
  carol: {reasoning_tokens: {limit: 100, per: hour}, on_exhausted: "off", max_level: "off"}
prices:
  "deepseek-*": {input: 1.0, output: 2.0, cached_input: 0.5}
"""
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def policy(store: object | None = None) -> tuple[ThinkingPolicy, Clock]:
    clock = Clock()
    parsed = parse_policy(POLICY, "policy.yaml", ["alice", "bob", "carol", "dave"])
    return ThinkingPolicy(parsed, store or MemoryBudgets(), clock=clock), clock  # type: ignore[arg-type]


def answer(
    client: str, reasoning: int, source: str = "reported", model: str = "deepseek-v4-pro"
) -> AccessRecord:
    record = AccessRecord("POST", "/v1/chat/completions", route="chat", client=client, model=model)
    record.usage = TokenUsage(
        input=1000,
        output=500,
        cached_input=400,
        reasoning=ReasoningTokens(reasoning, source),  # type: ignore[arg-type]
    )
    return record


def decide(thinking: ThinkingPolicy, client: str | None, level: Level | None) -> Decision:
    """The decision's level and rule (what these tests are about; its `ceiling` left out)."""
    decision = asyncio.run(thinking.decide(client, level))
    return Decision(decision.level, decision.rule)


@pytest.mark.parametrize(
    ("client", "asked", "sent", "rule"),
    [
        ("alice", Level.DEEP, Level.STANDARD, "max_level=standard"),
        ("alice", Level.STANDARD, Level.STANDARD, None),
        ("alice", Level.OFF, Level.OFF, None),
        ("alice", None, None, None),  # no level: the upstream's default, untouched
        ("dave", Level.DEEP, Level.DEEP, None),  # the default's ceiling is deep
        ("carol", Level.DEEP, Level.OFF, "max_level=off"),
        ("carol", None, Level.OFF, "max_level=off"),  # a ceiling of off holds without a level too
    ],
)
def test_a_level_above_the_ceiling_is_sent_at_the_ceiling(
    client: str, asked: Level | None, sent: Level | None, rule: str | None
) -> None:
    thinking, _ = policy()
    assert decide(thinking, client, asked) == Decision(sent, rule)


def test_the_note_says_what_was_asked_and_sent() -> None:
    en, zh = Decision(Level.STANDARD, "max_level=standard").note(Level.DEEP)
    assert en == "Thinking policy max_level=standard: asked deep, sent standard" and "standard" in zh


async def spend(thinking: ThinkingPolicy, records: Sequence[AccessRecord]) -> None:
    # As in the app: each answer is priced (proxy.sessions.pricing) before the policy counts it.
    pricing = Pricing(thinking.policy.price_for)
    for record in records:
        record.cost_usd = pricing.cost(record, thinking.clock())
        thinking.spend(record)
    await thinking.drain()


def test_a_spent_budget_is_refused_until_the_window_rolls_on() -> None:
    thinking, clock = policy()
    assert decide(thinking, "bob", Level.DEEP) == Decision(Level.DEEP)
    asyncio.run(spend(thinking, [answer("bob", 60)]))
    clock.now += 600
    asyncio.run(spend(thinking, [answer("bob", 40)]))
    with pytest.raises(BudgetExceeded) as caught:
        decide(thinking, "bob", Level.DEEP)
    exc = caught.value
    assert exc.status == 429 and exc.type == exc.code == "reasoning_budget_exceeded"
    assert "'bob'" in exc.message and "100 reasoning tokens per hour" in exc.message
    assert exc.rule == "reasoning_tokens=100/hour; on_exhausted=refuse"
    # The first 60 tokens leave the window an hour after their bucket: then there is room.
    assert T0 % 60 == 0 and exc.retry_after == 3600 - 600
    clock.now += exc.retry_after - 1
    with pytest.raises(BudgetExceeded):
        decide(thinking, "bob", Level.DEEP)
    clock.now += 1
    assert decide(thinking, "bob", Level.DEEP) == Decision(Level.DEEP)
    assert decide(thinking, "alice", Level.DEEP).level is Level.STANDARD  # (other keys unaffected)


def test_a_spent_budget_with_on_exhausted_off_sends_thinking_off() -> None:
    thinking, _ = policy()
    asyncio.run(spend(thinking, [answer("carol", 150)]))
    assert decide(thinking, "carol", Level.STANDARD) == Decision(
        Level.OFF, "reasoning_tokens=100/hour; on_exhausted=off"
    )
    assert decide(thinking, "carol", Level.OFF) == Decision(Level.OFF)  # (nothing to change)


def test_estimated_reasoning_counts_against_the_budget_and_the_book_keeps_them_apart() -> None:
    thinking, _ = policy()
    asyncio.run(spend(thinking, [answer("bob", 70, "estimated"), answer("bob", 50)]))
    with pytest.raises(BudgetExceeded):
        decide(thinking, "bob", None)
    (row,) = thinking.book.rows()
    assert row["client"] == "bob" and row["requests"] == 2
    assert row["reasoning_tokens"] == 50 and row["reasoning_tokens_estimated"] == 70
    # 600 uncached input at 1.0, 400 cached at 0.5, 500 output at 2.0, per million, twice
    assert row["cost_usd"] == pytest.approx(2 * (600 * 1.0 + 400 * 0.5 + 500 * 2.0) / 1e6)


def test_a_model_without_a_price_has_no_cost() -> None:
    thinking, _ = policy()
    asyncio.run(spend(thinking, [answer("dave", 0, model="gpt-5.4")]))
    assert thinking.book.rows()[0]["cost_usd"] is None


def test_each_answer_gets_its_cost_on_its_record() -> None:
    """The console reads a request's cost from its record (proxy.core.events.AccessRecord.cost_usd)."""
    thinking, _ = policy()
    priced, unpriced = answer("bob", 10), answer("dave", 0, model="gpt-5.4")
    asyncio.run(spend(thinking, [priced, unpriced]))
    assert priced.cost_usd == pytest.approx((600 * 1.0 + 400 * 0.5 + 500 * 2.0) / 1e6)
    assert unpriced.cost_usd is None


def test_the_budget_left_for_the_usage_report() -> None:
    thinking, _ = policy()
    asyncio.run(spend(thinking, [answer("bob", 30)]))
    assert asyncio.run(thinking.left("bob")) == {"limit": 100, "per": "hour", "spent": 30, "left": 70}
    assert asyncio.run(thinking.left("alice")) is None


class DownStore(MemoryBudgets):
    name = "down"

    async def counts(self, key: str) -> dict[int, int]:
        raise StoreUnavailable("redis: ConnectionError")

    async def add(self, key: str, bucket: int, tokens: int, ttl: int, stale: Sequence[int]) -> None:
        raise StoreUnavailable("redis: ConnectionError")


def test_a_budget_store_that_fails_lets_requests_through_and_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    thinking, _ = policy(DownStore())
    assert decide(thinking, "bob", Level.DEEP) == Decision(Level.DEEP)
    asyncio.run(spend(thinking, [answer("bob", 500)]))
    assert decide(thinking, "bob", Level.DEEP) == Decision(Level.DEEP)
    assert thinking.store_errors == 3
    assert "the request was let through" in caplog.text
    assert asyncio.run(thinking.left("bob")) == {"limit": 100, "per": "hour", "spent": None, "left": None}


# -- reservations (issue 41, item 6): set aside at admission, settled at the end ---------------------
def bobs(n: int) -> list[AccessRecord]:
    return [AccessRecord("POST", "/v1/chat/completions", route="chat", client="bob") for _ in range(n)]


async def admit_all(thinking: ThinkingPolicy, records: Sequence[AccessRecord]) -> list[AccessRecord]:
    """Every record's admission at once; the admitted ones."""

    async def one(record: AccessRecord) -> AccessRecord | None:
        try:
            await thinking.decide("bob", Level.DEEP, record=record)
        except BudgetExceeded:
            return None
        return record

    return [r for r in await asyncio.gather(*(one(r) for r in records)) if r is not None]


def settle(thinking: ThinkingPolicy, records: Sequence[AccessRecord], reasoning: int) -> None:
    for record in records:
        record.usage = TokenUsage(10, reasoning + 10, None, ReasoningTokens(reasoning, "reported"))
    asyncio.run(spend(thinking, records))


def spent(thinking: ThinkingPolicy) -> int:
    left = asyncio.run(thinking.left("bob"))
    assert left is not None
    return int(left["spent"])


def test_requests_at_once_overshoot_a_budget_by_one_answer_at_most() -> None:
    thinking, _ = policy()  # bob: 100 per hour
    admitted = asyncio.run(admit_all(thinking, bobs(20)))
    assert len(admitted) == 1  # no answer known yet: it sets aside the whole budget (4096 > 100)
    settle(thinking, admitted, 60)
    assert spent(thinking) == 60
    admitted = asyncio.run(admit_all(thinking, bobs(20)))  # each sets aside 60 now: 60 + 60 > 100
    assert len(admitted) == 1
    settle(thinking, admitted, 60)
    assert spent(thinking) == 120 <= 100 + 60  # (without reservations: 20 x 60 = 1200, then 2400)
    assert not asyncio.run(admit_all(thinking, bobs(5)))


def test_what_a_request_set_aside_is_settled_to_what_it_spent() -> None:
    thinking, _ = policy()
    [record] = bobs(1)
    asyncio.run(thinking.decide("bob", Level.DEEP, record=record))
    assert spent(thinking) == 100  # (reserved: the default, capped at the limit)
    settle(thinking, [record], 30)
    assert spent(thinking) == 30
    [failed] = bobs(1)  # a request that ends with no answer (an error, a client gone) spent nothing
    asyncio.run(thinking.decide("bob", Level.DEEP, record=failed))
    asyncio.run(spend(thinking, [failed]))
    assert spent(thinking) == 30


def test_a_refused_request_leaves_nothing_set_aside() -> None:
    thinking, _ = policy()
    asyncio.run(spend(thinking, [answer("bob", 100)]))
    [record] = bobs(1)
    with pytest.raises(BudgetExceeded) as caught:
        asyncio.run(thinking.decide("bob", Level.DEEP, record=record))
    assert spent(thinking) == 100 and caught.value.retry_after == 3600
    asyncio.run(spend(thinking, [record]))  # (its end settles nothing)
    assert spent(thinking) == 100


def test_a_store_that_fails_at_admission_counts_the_answer_at_the_end() -> None:
    class FailsToReserve(MemoryBudgets):
        async def reserve(self, key: str, bucket: int, tokens: int, ttl: int) -> dict[int, int]:
            raise StoreUnavailable("redis: TimeoutError")

    thinking, _ = policy(FailsToReserve())
    [record] = bobs(1)
    assert asyncio.run(thinking.decide("bob", Level.DEEP, record=record)).level is Level.DEEP
    settle(thinking, [record], 40)
    assert spent(thinking) == 40 and thinking.store_errors == 1


# -- off where the request's model cannot turn thinking off (issue 41, item 4) -----------------------


def test_max_level_off_is_refused_where_thinking_cannot_be_turned_off() -> None:
    from proxy.policy.service import ThinkingOffUnavailable

    thinking, _ = policy()
    for asked in (Level.DEEP, Level.STANDARD, None):
        with pytest.raises(ThinkingOffUnavailable) as caught:
            asyncio.run(thinking.decide("carol", asked, can_turn_off=False))
        exc = caught.value
        assert exc.status == 403 and exc.type == exc.code == "thinking_off_unavailable"
        assert exc.rule == "max_level=off" and "'carol'" in exc.message
        assert "cannot turn thinking off" in exc.message
    # A ceiling above off needs no off: the same request is capped as ever.
    capped = asyncio.run(thinking.decide("alice", Level.DEEP, can_turn_off=False))
    assert (capped.level, capped.rule) == (Level.STANDARD, "max_level=standard")


def test_a_spent_budget_with_off_is_a_429_where_thinking_cannot_be_turned_off() -> None:
    thinking, _ = policy()
    asyncio.run(spend(thinking, [answer("bob", 150)]))
    parsed = parse_policy(
        "keys:\n  bob: {reasoning_tokens: {limit: 100, per: hour}, on_exhausted: 'off'}\n",
        "policy.yaml",
        ["bob"],
    )
    thinking.policy = parsed
    with pytest.raises(BudgetExceeded) as caught:
        asyncio.run(thinking.decide("bob", Level.STANDARD, can_turn_off=False))
    exc = caught.value
    assert exc.status == 429 and exc.rule == "reasoning_tokens=100/hour; on_exhausted=off"
    assert "cannot turn thinking off" in exc.message and exc.retry_after > 0
    # Where it can, the budget's off is sent, as before.
    off = asyncio.run(thinking.decide("bob", Level.STANDARD, can_turn_off=True))
    assert (off.level, off.rule) == (Level.OFF, "reasoning_tokens=100/hour; on_exhausted=off")


def test_a_request_refused_while_the_budget_is_only_set_aside_is_told_to_retry_soon() -> None:
    from proxy.policy.service import IN_FLIGHT_RETRY_S

    thinking, _ = policy()
    first, second = bobs(2)
    asyncio.run(thinking.decide("bob", Level.DEEP, record=first))  # sets aside the whole 100
    with pytest.raises(BudgetExceeded) as caught:
        asyncio.run(thinking.decide("bob", Level.DEEP, record=second))
    assert caught.value.retry_after == IN_FLIGHT_RETRY_S < 3600  # (not the window's hour)
    settle(thinking, [first], 100)  # really spent now: the window's time
    with pytest.raises(BudgetExceeded) as caught:
        asyncio.run(thinking.decide("bob", Level.DEEP, record=second))
    assert caught.value.retry_after == 3600


def test_a_second_look_at_an_admitted_request_sets_nothing_more_aside() -> None:
    thinking, _ = policy()
    settle(thinking, [answer("bob", 10)], 10)
    [record] = bobs(1)
    for _ in range(2):  # (the second look reads 110 > 100, its own reservation of 100 aside)
        asyncio.run(thinking.decide("bob", Level.DEEP, record=record))
    assert spent(thinking) == 10 + 100  # (the default, capped at the limit: never the 10 answered)
    settle(thinking, [record], 4)
    assert spent(thinking) == 10 + 4


def test_cheap_answers_then_a_burst_at_once_stay_within_the_documented_bound() -> None:
    # A key whose last answers were cheap still sets aside the default per request, and once half
    # the limit is spent or set aside a worker admits one of its requests at a time: a burst of 50
    # deep requests after three 10-token answers is not all admitted (docs/policy.md, "Budgets").
    from proxy.core.policy.budgets import in_flight_bound

    limit = 10_000
    parsed = parse_policy(
        f"keys:\n  bob: {{reasoning_tokens: {{limit: {limit}, per: hour}}}}\n", "policy.yaml", ["bob"]
    )
    thinking = ThinkingPolicy(parsed, MemoryBudgets(), clock=Clock())
    for _ in range(3):
        [record] = bobs(1)
        asyncio.run(thinking.decide("bob", Level.DEEP, record=record))
        settle(thinking, [record], 10)
    assert spent(thinking) == 30
    admitted = asyncio.run(admit_all(thinking, bobs(50)))
    assert 1 <= len(admitted) <= in_flight_bound(limit) == 3  # (without the bound: all 50)
    settle(thinking, admitted, 3_000)
    assert spent(thinking) == 30 + 3_000 * len(admitted) < limit + in_flight_bound(limit) * 3_000


def test_a_request_sets_aside_its_own_output_cap() -> None:
    thinking, _ = policy()  # bob: 100 per hour
    parsed = parse_policy(
        "keys:\n  bob: {reasoning_tokens: {limit: 100000, per: hour}}\n", "policy.yaml", ["bob"]
    )
    thinking.policy = parsed
    [record] = bobs(1)
    asyncio.run(thinking.decide("bob", Level.DEEP, record=record, asks=32_000))
    assert spent(thinking) == 32_000  # (not the default 4,096: it may write 32,000)
    [relayed] = bobs(1)
    asyncio.run(thinking.admit(relayed, asks=200_000))
    assert spent(thinking) == 32_000 + 100_000  # (its cap, never above the limit)


def test_a_reservation_whose_bucket_the_store_deleted_counts_what_was_spent_now() -> None:
    from proxy.core.policy.budgets import Window

    thinking, clock = policy()  # bob: 100 per hour
    [record] = bobs(1)
    asyncio.run(thinking.decide("bob", Level.DEEP, record=record))
    reserved_in = Window(3_600).bucket(clock.now)
    clock.now += 2 * 3_600  # a long answer: its bucket left the window, and the store dropped it
    asyncio.run(thinking.store.add("bob:hour", Window(3_600).bucket(clock.now), 0, 3_700, [reserved_in]))
    settle(thinking, [record], 30)
    assert spent(thinking) == 30  # (not lost in a bucket no window reads)


def test_a_body_relayed_as_it_came_above_the_ceiling_is_refused_with_the_rule() -> None:
    from proxy.policy.service import LevelAboveCeiling, ThinkingOffUnavailable

    thinking, _ = policy()  # alice: max_level standard; carol: max_level off
    record = AccessRecord("POST", "/v1/completions", route="passthrough", client="alice")
    with pytest.raises(LevelAboveCeiling) as caught:
        asyncio.run(thinking.admit(record, level=Level.DEEP, can_turn_off=True))
    exc = caught.value
    assert exc.status == 403 and exc.code == exc.type == "thinking_level_above_ceiling"
    assert exc.rule == "max_level=standard" and "'alice'" in exc.message and "deep" in exc.message
    asyncio.run(thinking.admit(record, level=Level.STANDARD, can_turn_off=True))  # at the ceiling: goes
    asyncio.run(thinking.admit(record, level=None, can_turn_off=False))  # no knobs: goes
    carol = AccessRecord("POST", "/v1/completions", route="passthrough", client="carol")
    asyncio.run(thinking.admit(carol, level=None, can_turn_off=True))  # (no knob, and its model can be off)
    with pytest.raises(ThinkingOffUnavailable):  # its model thinks unless told not to
        asyncio.run(thinking.admit(carol, level=None, can_turn_off=False))
    with pytest.raises(LevelAboveCeiling):
        asyncio.run(thinking.admit(carol, level=Level.STANDARD, can_turn_off=True))
