"""A non-stream chat answer, read once: its reasoning normalized (and hidden when asked), its turns
captured for the replay store, its reasoning tallied, its trace added; written back once, or
returned as it came when nothing in it changed.

Pure. The stream's counterpart is proxy.core.stream.pipeline.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from proxy.core import jsonio
from proxy.core.errors import UnreadableAnswer
from proxy.core.stream import harmony
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.trace import TraceBuilder
from proxy.core.usage import ReasoningTally, tally_completion


def process_completion(
    body: bytes,
    *,
    reasoning: ReasoningOptions,
    trace: TraceBuilder | None,
    request_body: dict[str, Any] | None,
    now_ms: float,
    capture: TurnCollector | None = None,
    tally: ReasoningTally | None = None,
) -> bytes:
    """A non-stream 2xx answer: normalize `choices[].message`, add the `trace` array; with a
    `tally`, count the reasoning text and write the estimate into `usage` (proxy.core.usage).

    Anything that is not a JSON object is returned as it came; an unchanged answer with no trace
    keeps its original bytes. When reasoning is hidden, an answer that cannot be parsed and
    written back without it raises `UnreadableAnswer` (a 502) instead: hiding fails closed.
    """
    try:
        parsed = jsonio.loads(body)
    except orjson.JSONDecodeError:
        if not reasoning.hide:
            return body
        parsed = jsonio.loads_lenient(body)  # lone surrogates; None when not JSON at all
    if not isinstance(parsed, dict):
        if reasoning.hide:
            raise _unreadable()
        return body
    # Normalize with reasoning visible first so the trace knows whether the model reasoned, then
    # hide it. The hide pass must not parse tags again: content is tag-free by then, and with
    # implicit_open a second parse would take the answer itself for reasoning.
    changed = harmony.normalize_completion(
        parsed, replace(reasoning, hide=False) if reasoning.hide else reasoning
    )
    had_reasoning = _has_reasoning(parsed)
    if capture is not None:
        capture.completion(parsed)
    if tally is not None:
        changed = tally_completion(parsed, tally) or changed
    if reasoning.hide:
        hide_only = replace(reasoning, tags=(), implicit_open=False, harmony=False)
        changed = harmony.normalize_completion(parsed, hide_only) or changed
    if trace is not None:
        events = trace.begin(request_body, now_ms)
        events += trace.on_completion(parsed, had_reasoning, now_ms)
        if events:  # a builder that only feeds listeners (client trace off) shows nothing
            parsed["trace"] = events
            changed = True
    if not changed:
        return body
    try:
        return jsonio.dumps(parsed)
    except ValueError:  # nested deeper than anything writes: only the original bytes remain
        if reasoning.hide:
            raise _unreadable() from None
        return body


def _unreadable() -> UnreadableAnswer:
    return UnreadableAnswer(
        "The upstream's answer could not be parsed to remove its reasoning, so it was withheld "
        "(X-Reasoning: hide). Retry, or send X-Reasoning: show to receive it as it came."
    )


def _has_reasoning(completion: dict[str, Any]) -> bool:
    choices = completion.get("choices")
    if not isinstance(choices, list):
        return False
    for choice in choices:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and (
            message.get("reasoning_content") or message.get("reasoning") or message.get("reasoning_details")
        ):
            return True
    return False
