"""The review gate at the edge: settings → policy and hub, waiting with keep-alives, the audit line.

`ReviewService` exists only when `THINKPROXY_REVIEW_TOOLS` is set. The relay asks it for a
`StreamGate` per streamed chat response and, when the gate holds calls at the end of the stream,
calls `settle_stream`; a non-stream response with a held call is answered by
`completion_producer`, which keeps the connection alive with JSON-insignificant spaces (a JSON
text may start with whitespace) until the decisions are in.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.controls import TraceFormat
from proxy.core.errors import BadRequest, ConfigError
from proxy.core.gateway import ClientKey, parse_client_keys
from proxy.core.review.rules import NO_CLIENT_NAMES, ClientNames, Decision, HeldCall, ReviewPolicy
from proxy.core.stream.gate import StreamGate
from proxy.core.stream.gate_completion import (
    completion_finish,
    completion_held_calls,
    completion_removes,
    release_completion,
)
from proxy.core.stream.gate_rules import review_event
from proxy.core.stream.trace import TraceBuilder
from proxy.review.hub import MemoryReviewHub, RedisReviewHub, ReviewHub
from proxy.settings import Settings

access = logging.getLogger("thinkproxy.access")

Send = Callable[[bytes], Awaitable[None]]
Clock = Callable[[], float]  # ms since the request arrived, the trace's clock
KEEPALIVE = b": keep-alive\n\n"


@dataclass
class ReviewService:
    policy: ReviewPolicy
    hub: ReviewHub
    reviewers: tuple[ClientKey, ...]
    timeout: float
    keepalive: float

    @classmethod
    def from_settings(cls, settings: Settings) -> ReviewService | None:
        patterns = tuple(p for p in settings.review_tools if p)
        if not patterns:
            return None
        reviewers = parse_client_keys(
            (k.get_secret_value() for k in settings.reviewer_keys), "THINKPROXY_REVIEWER_KEYS"
        )
        if not reviewers:
            raise ConfigError(
                "THINKPROXY_REVIEW_TOOLS is set but THINKPROXY_REVIEWER_KEYS is empty: nobody could approve "
                "a held call. Set THINKPROXY_REVIEWER_KEYS (comma-separated, optionally name:key)."
            )
        if settings.review_timeout >= settings.total_timeout:
            raise ConfigError(
                f"THINKPROXY_REVIEW_TIMEOUT ({settings.review_timeout:g} s) must be shorter than "
                f"THINKPROXY_TOTAL_TIMEOUT ({settings.total_timeout:g} s): a held call would otherwise end "
                "as a timed-out exchange instead of a rejected call."
            )
        url = settings.state_url.get_secret_value() if settings.state_url is not None else None
        hub: ReviewHub = RedisReviewHub(url) if url and settings.state != "off" else MemoryReviewHub()
        return cls(ReviewPolicy(patterns), hub, reviewers, settings.review_timeout, settings.review_keepalive)

    @staticmethod
    def check_request(body: dict[str, Any]) -> None:
        """Requests whose tool calls the gate could not see are refused while a policy is set: it
        holds calls of choice 0 in the `tools` shape, so `n` > 1 and the legacy `functions` shape
        would let a covered call through unreviewed."""
        n = body.get("n")
        if n is not None and n != 1:
            raise BadRequest(
                "This proxy holds sensitive tool calls for review (THINKPROXY_REVIEW_TOOLS) and reviews one "
                "choice per response: send n=1 (or leave n out).",
                param="n",
            )
        if body.get("functions") is not None or body.get("function_call") is not None:
            raise BadRequest(
                "This proxy holds sensitive tool calls for review (THINKPROXY_REVIEW_TOOLS): use `tools` and "
                "`tool_choice` instead of the deprecated `functions` / `function_call`.",
                param="functions",
            )

    @staticmethod
    def new_id() -> str:
        return "rv_" + secrets.token_urlsafe(12)

    def stream_gate(
        self,
        trace_format: TraceFormat | None,
        zh: bool,
        max_event_bytes: int,
        names: ClientNames = NO_CLIENT_NAMES,
    ) -> StreamGate:
        """A gate for one streamed answer; `names`: the tools its client knows by other names than
        the upstream's (a Responses client's namespaced tools), matched and shown by those."""
        return StreamGate(
            self.policy,
            new_id=self.new_id,
            trace_format=trace_format,
            zh=zh,
            max_event_bytes=max_event_bytes,
            names=names,
        )

    async def _decide_all(
        self, calls: list[HeldCall], send: Send, alive: Callable[[], None], announce: bytes = b""
    ) -> dict[str, Decision]:
        """Registers the calls, then sends `announce` (the review.request events, so a reviewer can
        already see whatever the client is told about), then waits for every decision, sending a
        keep-alive every `keepalive` seconds meanwhile."""
        opened = asyncio.Event()
        waiting = asyncio.ensure_future(self.hub.wait(calls, self.timeout, opened))
        registered = asyncio.ensure_future(opened.wait())
        try:
            await asyncio.wait([waiting, registered], return_when=asyncio.FIRST_COMPLETED)
            registered.cancel()
            if announce:
                await send(announce)
            while True:
                done, _ = await asyncio.wait([waiting], timeout=self.keepalive)
                if done:
                    return waiting.result()
                alive()
                await send(KEEPALIVE)
        finally:
            registered.cancel()
            if not waiting.done():
                waiting.cancel()  # the client left: its reviews are withdrawn
                await asyncio.gather(waiting, return_exceptions=True)

    async def settle_stream(
        self,
        gate: StreamGate,
        send: Send,
        alive: Callable[[], None],
        extra: dict[str, Any],
        trace: TraceBuilder | None,
        now_ms: Clock,
    ) -> list[tuple[HeldCall, Decision]]:
        """Reviews what the gate holds, then sends what it releases; the trace's `done` (held back
        by the builder, see TraceBuilder.hold_done) ends the stream at the time of the decisions."""
        calls = gate.held_calls(now=time.time(), timeout=self.timeout, extra=extra)
        asked = now_ms()
        if trace is not None:
            for event in gate.review_events(asked):
                trace.note(event, asked)
        decisions = await self._decide_all(calls, send, alive, gate.request_frames(asked)) if calls else {}
        decided = now_ms()
        closing: list[dict[str, Any]] = []
        if trace is not None:
            for event in gate.decision_events(decisions):
                trace.note(event, decided)
            closing = trace.release_done(decided, gate.finish_after(decisions))
        await send(gate.release(decisions, decided, closing))
        return [(c, decisions[c.review_id]) for c in calls]

    def would_hold(self, body: bytes, names: ClientNames = NO_CLIENT_NAMES) -> bool:
        """Whether a non-stream answer (the upstream's bytes) has a call to hold or to remove."""
        return self.held_in_completion(body, {}, new_id=lambda: "", names=names) is not None

    def held_in_completion(
        self,
        body: bytes,
        extra: dict[str, Any],
        new_id: Callable[[], str] | None = None,
        names: ClientNames = NO_CLIENT_NAMES,
    ) -> tuple[dict[str, Any], list[HeldCall]] | None:
        """A non-stream answer's calls to hold, or None when it has none to hold and none the gate
        must remove (or is not JSON). `names` as for `stream_gate`."""
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(parsed, dict):
            return None
        calls = completion_held_calls(
            parsed,
            self.policy,
            new_id=new_id or self.new_id,
            now=time.time(),
            timeout=self.timeout,
            extra=extra,
            names=names,
        )
        return (parsed, calls) if calls or completion_removes(parsed) else None

    async def settle_completion(
        self,
        parsed: dict[str, Any],
        calls: list[HeldCall],
        zh: bool,
        send: Send,
        alive: Callable[[], None],
        trace: TraceBuilder | None,
        now_ms: Clock,
        names: ClientNames = NO_CLIENT_NAMES,
    ) -> list[tuple[HeldCall, Decision]]:
        async def spaces(_: bytes) -> None:
            await send(b" ")  # JSON may start with whitespace: keeps the connection alive

        asked = now_ms()
        if trace is not None:
            for call in calls:
                trace.note(review_event("review.request", call, zh), asked)
        decisions = await self._decide_all(calls, spaces, alive) if calls else {}
        decided = now_ms()
        closing: list[dict[str, Any]] = []
        if trace is not None:
            for call in calls:
                trace.note(review_event("review.decision", call, zh, decisions[call.review_id]), decided)
            closing = trace.release_done(decided, completion_finish(parsed, calls, decisions))
        released = release_completion(
            parsed, calls, decisions, zh, now_ms=decided, closing=closing, names=names
        )
        await send(orjson.dumps(released))
        return [(c, decisions[c.review_id]) for c in calls]


def audit_undecided(decided: list[tuple[HeldCall, Decision]]) -> None:
    """Audit lines for the calls no reviewer decided (timed out, or the review service was down);
    a reviewer's decision is audited where it was posted."""
    for call, decision in decided:
        if decision.reviewer is None:
            audit(call, decision, 200)


def audit(call: HeldCall, decision: Decision, status: int) -> None:
    """One access-log line per decision: who decided what about which call — never its arguments."""
    access.info(
        "review",
        extra={
            "access": {
                "event": "review.decision",
                "review_id": call.review_id,
                "tool": call.tool,
                "decision": decision.verdict.value,
                "reviewer": decision.reviewer,
                "status": status,
            }
        },
    )
