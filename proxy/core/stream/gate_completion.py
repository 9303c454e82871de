"""The review gate for non-stream responses: which calls of a whole `chat.completion` to hold for
review, and the completion the decisions make of it. Pure: dicts and decisions in, a new dict out.

The calls held are those of the first choice with index 0 that the policy covers; every call the
gate cannot attribute (proxy.core.stream.gate_rules) is removed and the client told why, whatever
its name. A review's `index` is the call's position in the upstream's `tool_calls` list.

Separate from the stream gate (proxy.core.stream.gate): a whole completion is read and rewritten
at once, with none of the stream's holding, framing and renumbering.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from proxy.core.review.rules import (
    NO_CLIENT_NAMES,
    ClientNames,
    Decision,
    HeldCall,
    ReviewPolicy,
    Verdict,
    client_extra,
    rejection_text,
    shown_name,
)
from proxy.core.stream.gate_rules import (
    carried_name,
    choices0,
    decision_for,
    ms,
    refusal,
    retimed,
    review_event,
    texts,
)


def completion_held_calls(
    completion: dict[str, Any],
    policy: ReviewPolicy,
    *,
    new_id: Callable[[], str],
    now: float,
    timeout: float,
    extra: dict[str, Any] | None = None,
    names: ClientNames = NO_CLIENT_NAMES,
) -> list[HeldCall]:
    """The calls of a `chat.completion` (its first choice with index 0) that the policy holds for
    review. Calls anywhere else are removed by `release_completion` (see `completion_removes`).
    `names`: the tools the client knows by other names (proxy.core.review.rules.ClientTool)."""
    held = []
    for position, call in enumerate(_message_calls(completion)):
        if not _plain_call(call):
            continue
        function = call["function"]
        name = function.get("name")
        if not isinstance(name, str) or not policy.covers(name, names):
            continue
        arguments = function.get("arguments")
        call_id = call.get("id")
        held.append(
            HeldCall(
                review_id=new_id(),
                index=position,
                call_id=call_id if isinstance(call_id, str) else "",
                tool=shown_name(name, names),
                arguments=arguments if isinstance(arguments, str) else "",
                created=now,
                expires=now + timeout,
                extra=client_extra(name, names, extra),
            )
        )
    return held


def completion_removes(completion: dict[str, Any]) -> bool:
    """Whether the completion carries a call the gate cannot attribute (it must be rewritten)."""
    return bool(_removed_calls(copy.deepcopy(completion), zh=False))


def release_completion(
    completion: dict[str, Any],
    reviews: list[HeldCall],
    decisions: dict[str, Decision],
    zh: bool,
    *,
    now_ms: float | None = None,
    closing: Sequence[dict[str, Any]] = (),
    names: ClientNames = NO_CLIENT_NAMES,
) -> dict[str, Any]:
    """The completion as the decisions make it (a new dict): calls it cannot attribute removed
    (named to the client as it knows the tool: `names`, as for `completion_held_calls`), review
    events and then `closing` (the trace's `done`, from the trace builder) at `now_ms` ending its
    trace."""
    out: dict[str, Any] = copy.deepcopy(completion)
    verdicts = {c.index: (c, decisions.get(c.review_id, Decision(Verdict.TIMEOUT))) for c in reviews}
    # The calls as the upstream listed them: a review's `index` is a position in this list, which
    # removing the calls the gate cannot read would shift.
    listed = _message_calls(out)
    removed = _removed_calls(out, zh, names)
    choice = _first_message_choice(out)
    if choice is not None:
        message = choice["message"]
        kept = []
        for position, call in enumerate(listed):
            if not _plain_call(call):
                continue  # removed (and told) by _removed_calls
            verdict = verdicts.get(position)
            if verdict is None:
                kept.append(call)
                continue
            _, decision = verdict
            if decision.verdict is Verdict.MODIFY:
                call = {**call, "function": {**call["function"], "arguments": decision.arguments or "{}"}}
            if decision.releases_call:
                kept.append(call)
        refused = [(c, d) for c, d in verdicts.values() if not d.releases_call] + removed
        if refused:
            text = rejection_text(refused, zh)
            content = message.get("content")
            message["content"] = f"{content}\n\n{text}" if isinstance(content, str) and content else text
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
            if refused or choice.get("finish_reason") in ("tool_calls", "function_call"):
                choice["finish_reason"] = "stop"
    trace = out.get("trace")
    if isinstance(trace, list):
        ending = [e for e in trace if isinstance(e, dict) and e.get("type") == "done"]
        events = [e for e in trace if not (isinstance(e, dict) and e.get("type") == "done")]
        last_t = max((e.get("t_ms", 0) for e in trace if isinstance(e, dict)), default=0)
        now = float(now_ms) if now_ms is not None else float(last_t)
        added = [{**review_event("review.request", c, zh), "t_ms": last_t} for c in reviews]
        added += [{**review_event("review.decision", c, zh, d), "t_ms": now} for c, d in verdicts.values()]
        finish = choice.get("finish_reason") if choice is not None else None
        for event in [*ending, *closing]:
            event = {**retimed(event, now, [0]), "finish_reason": finish}
            added.append(event)
        seq = len(events)
        t_floor = 0.0
        for event in events:
            t = event.get("t_ms") if isinstance(event, dict) else None
            if isinstance(t, int | float):
                t_floor = max(t_floor, float(t))
        for event in added:
            t_floor = max(t_floor, float(event["t_ms"]))
            events.append({**event, "seq": seq, "t_ms": ms(t_floor)})
            seq += 1
        out["trace"] = events
    return out


def _plain_call(call: Any) -> bool:
    """A tool call of type `function` the gate can read (anything else is removed)."""
    if (
        not isinstance(call, dict)
        or call.get("type") not in (None, "function")
        or call.get("custom") is not None
    ):
        return False
    function = call.get("function")
    return isinstance(function, dict) and texts(
        call.get("id"), function.get("name"), function.get("arguments")
    )


def _removed_calls(
    completion: dict[str, Any], zh: bool, names: ClientNames = NO_CLIENT_NAMES
) -> list[tuple[HeldCall, Decision]]:
    """Removes, in place, every call outside the first index-0 choice's readable `tool_calls`
    (other choices, a second entry with index 0, the legacy `function_call`, custom calls), each
    named as the client knows the tool (the stream gate's words)."""

    def refused(name: str, why: str) -> tuple[HeldCall, Decision]:
        return refusal(shown_name(name, names), why, zh)

    removed: list[tuple[HeldCall, Decision]] = []
    first = _first_message_choice(completion)
    choices = completion.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        for key in ("message", "delta"):
            message = choice.get(key)
            if not isinstance(message, dict):
                continue
            fc = message.get("function_call")
            if fc is not None:
                del message["function_call"]
                why = "function_call" if choice is first else "choice"
                removed.append(refused(carried_name(fc, legacy=True), why))
            calls = message.get("tool_calls")
            if calls is None:
                continue
            if choice is first and key == "message" and isinstance(calls, list):
                plain = [c for c in calls if _plain_call(c)]
                for call in calls:
                    if not _plain_call(call):
                        removed.append(refused(carried_name(call), "shape"))
                if len(plain) != len(calls):
                    message["tool_calls"] = plain
                continue
            for call in calls if isinstance(calls, list) else [calls]:
                removed.append(refused(carried_name(call), "choice"))
            del message["tool_calls"]
        if choice is not first and choice.get("finish_reason") in ("tool_calls", "function_call"):
            choice["finish_reason"] = "stop"
    return removed


def _first_message_choice(completion: dict[str, Any]) -> dict[str, Any] | None:
    for choice in choices0(completion):
        return choice if isinstance(choice.get("message"), dict) else None
    return None


def _message_calls(completion: dict[str, Any]) -> list[Any]:
    choice = _first_message_choice(completion)
    calls = choice["message"].get("tool_calls") if choice is not None else None
    return list(calls) if isinstance(calls, list) else []


def completion_finish(
    completion: dict[str, Any], reviews: list[HeldCall], decisions: dict[str, Decision]
) -> str | None:
    """The finish reason `release_completion` gives the client (for the trace's `done`)."""
    choice = _first_message_choice(completion)
    if choice is None:
        return None
    refused = {c.index for c in reviews if not decision_for(decisions, c).releases_call}
    left = [c for p, c in enumerate(_message_calls(completion)) if _plain_call(c) and p not in refused]
    reason = choice.get("finish_reason")
    if left:
        return reason if isinstance(reason, str) else None
    if refused or completion_removes(completion) or reason in ("tool_calls", "function_call"):
        return "stop"
    return reason if isinstance(reason, str) else None
