"""What both review paths (the stream gate, proxy.core.stream.gate, and non-stream completions,
proxy.core.stream.gate_completion) share: which tool calls they can attribute, what the client is
told about the calls they remove, and the review events they add to the trace.

The gate fails closed. A call is attributable only as a `tool_calls` entry of choice 0 (every
entry with index 0 counts as choice 0, as SDKs merge them), of type `function`, whose id, name
and arguments are strings (or absent), and, streamed, as a fragment with an integer `index`
whose name does not change once complete. Anything else that could carry a call (a choice with
another index, the legacy `function_call`, a fragment without an index, a custom tool call, a
name, arguments or id of another type, a late rename) is removed before it reaches the client,
whatever its name, and the client is told the call was not made. A value that is not a string is
one the reviewer would not see (it is shown "" or nothing) while the client gets it: the JS SDK
appends it to the text it has (`"{}" + ["x"]` is `"{}x"`).

Separate so that each path's module holds only its own mechanics, and these rules, which decide
what is safe, are read and changed in one place.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from proxy.core.review.rules import Decision, HeldCall, Verdict

# Why a call was removed without a review, as the client is told.
WHY = {
    "choice": ("it came in a choice the client did not ask for", "它出现在客户端未请求的选项中"),
    "function_call": ("it came in the legacy function_call form", "它使用了旧的 function_call 形式"),
    "shape": ("it came in a form the review gate cannot check", "它的形式无法被审核"),
    "renamed": ("its name changed after it was complete", "它的名称在完成后被更改"),
}


def review_event(kind: str, call: HeldCall, zh: bool, decision: Decision | None = None) -> dict[str, Any]:
    """A `review.request` / `review.decision` trace event (seq and t_ms are set by the caller)."""
    event: dict[str, Any] = {"type": kind, "id": call.review_id, "tool": call.tool, "call_id": call.call_id}
    if decision is None:
        event["message"] = f"等待人工审核：{call.tool}" if zh else f"Waiting for a reviewer: {call.tool}"
        event["input_summary"] = call.summary
        event["expires"] = call.expires
    else:
        event["decision"] = decision.verdict.value
        if decision.comment:
            event["comment"] = decision.comment
        verdict_zh = {
            "approve": "已批准",
            "modify": "已修改",
            "reject": "已拒绝",
            "timeout": "审核超时",
            "refused": "未审核，已拒绝",
        }
        event["message"] = (
            f"{call.tool}：{verdict_zh[decision.verdict.value]}"
            if zh
            else f"{call.tool}: {decision.verdict.value}"
        )
    return event


def decision_for(decisions: dict[str, Decision], call: HeldCall) -> Decision:
    return decisions.get(call.review_id, Decision(Verdict.TIMEOUT))


def retimed(event: dict[str, Any], now_ms: float, kept: list[int]) -> dict[str, Any]:
    """A closing event at `now_ms`: a `done` made before the hold ended is brought up to it."""
    event = {**event}
    if event.get("type") == "done":
        total = event.get("total_ms")
        if not isinstance(total, int | float) or total < now_ms:
            event["total_ms"] = ms(now_ms)
            event["message"] = _done_message(now_ms, event.get("message"))
        if not kept:
            event["finish_reason"] = "stop"
        event["t_ms"] = max(now_ms, float(event.get("t_ms") or 0))
    return event


def _done_message(at_ms: float, before: Any) -> str:
    zh = isinstance(before, str) and before.startswith("完成")
    if at_ms < 1000:
        return f"完成，用时 {round(at_ms)} 毫秒" if zh else f"Done in {round(at_ms)} ms"
    return f"完成，用时 {at_ms / 1000:.1f} 秒" if zh else f"Done in {at_ms / 1000:.1f} s"


def ms(value: float) -> int | float:
    tenths = round(value * 10)
    return tenths // 10 if tenths % 10 == 0 else tenths / 10


def texts(*values: Any) -> bool:
    """Whether each of a call's id, name and arguments is a string or absent. Any other value is
    one the reviewer would not see (it is shown "" or nothing) while the client gets it: the JS SDK
    appends it to the text it has (`"{}" + ["x"]` is `"{}x"`)."""
    return all(value is None or isinstance(value, str) for value in values)


def is_zero(choice: dict[str, Any]) -> bool:
    index = choice.get("index", 0)
    return type(index) is int and index == 0


def index_of(fragment: Any) -> Any:
    return fragment.get("index") if isinstance(fragment, dict) else None


def choices0(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    """Every entry of choice 0 (SDKs merge entries with the same index)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return []
    return [c for c in choices if isinstance(c, dict) and is_zero(c)]


def call_fragments(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for choice in choices0(chunk):
        delta = choice.get("delta")
        fragments = delta.get("tool_calls") if isinstance(delta, dict) else None
        if isinstance(fragments, list):
            out += [f for f in fragments if isinstance(f, dict)]
    return out


def finish_reason(chunk: dict[str, Any]) -> str | None:
    for choice in choices0(chunk):
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            return reason
    return None


def set_finish_reason(chunk: dict[str, Any], reason: str) -> None:
    for choice in choices0(chunk):
        if choice.get("finish_reason") is not None:
            choice["finish_reason"] = reason


def refusal(name: str, why: str, zh: bool) -> tuple[HeldCall, Decision]:
    en, zh_text = WHY[why]
    call = HeldCall(review_id="", index=-1, call_id="", tool=name, arguments="")
    return call, Decision(Verdict.REFUSED, comment=zh_text if zh else en)


def carried_name(carrier: Any, legacy: bool = False) -> str:
    """The tool name a call (or call fragment) carries, if any."""
    if not isinstance(carrier, dict):
        return ""
    body = carrier if legacy else (carrier.get("function") or carrier.get("custom"))
    name = body.get("name") if isinstance(body, dict) else None
    return name if isinstance(name, str) else ""


# -- reading as the client reads ---------------------------------------------------------------------


def read_object(data: bytes) -> dict[str, Any] | None:
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        # What a client's own JSON reader accepts (lone surrogates, NaN) must be read here too.
        try:
            parsed = json.loads(data)
        except (ValueError, RecursionError):
            return None
    return parsed if isinstance(parsed, dict) else None


def is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, RecursionError):
        return False
    return True
