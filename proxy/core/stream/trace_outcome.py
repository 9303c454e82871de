"""What a finished answer showed, for the listeners, and the trace's one warning about it.

Pure. `TraceOutcome` is what the trace builder (proxy.core.stream.trace) hands the listeners at
the end: the upstream's usage, the times, and whether the reasoning starved the answer.

**The reasoning ate the answer**: a thinking model spends its output limit (`max_tokens`,
`max_completion_tokens`, the Responses API's `max_output_tokens`, the Messages API's
`max_tokens`: all of them count reasoning) on reasoning first. A limit the reasoning uses up
ends the answer with `finish_reason: length` and nothing said: no text, no tool call. The client
sees an empty answer and is billed for the reasoning. The trace says so with a `warning` event
(code `reasoning_starved`, docs/trace-events.md), the metrics count it and the console marks it.
Reasoning is known by its text (seen by the builder) or, for a model that reasons without
showing it (OpenAI's), by a reasoning count above 0 in the usage.

**The reasoning came as the answer**: a model that always reasons (providers.yaml `reasoning.always`:
Kimi K3) at times writes its chain of thought into `content` with no reasoning field at all
(MoonshotAI/Kimi-K3#45), and no marker tells where the reasoning stops. The proxy does not guess:
the text goes to the client as it came, and the trace says so with a `warning` (code
`reasoning_in_content`) that the metrics count.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from proxy.core.usage import count, reported_reasoning

STARVED: Final = "reasoning_starved"
IN_CONTENT: Final = "reasoning_in_content"
_ADVICE: Final = "Raise max_tokens or lower the thinking level."


class TraceOutcome(NamedTuple):
    """What a finished response showed, for telemetry (none of its content): the upstream's
    usage as it came, the times of the trace (ms): to the first token, and spent thinking (None
    when the model did not reason), and whether the reasoning used the whole output limit and
    left no answer (`starved`), and whether a model that always reasons answered without any
    (`reasoning_in_content`); and, for the sessions (proxy.sessions), its finish reason and the
    names of the tool calls it made (in order)."""

    usage: dict[str, Any] | None
    ttft_ms: float | None
    reasoning_ms: float | None
    starved: bool = False
    reasoning_in_content: bool = False  # a model that always reasons answered with none (see above)
    finish_reason: str | None = None
    tools: tuple[str, ...] = ()


def output_limit(request_body: Any) -> int | None:
    """A chat request's output limit: `max_completion_tokens`, else `max_tokens` (the front doors'
    limits arrive as one of these); None when it sets none."""
    if not isinstance(request_body, dict):
        return None
    for key in ("max_completion_tokens", "max_tokens"):
        value = count(request_body.get(key))
        if value:
            return value
    return None


def starved_warning(
    finish_reason: str | None,
    reasoned: bool,
    answered: bool,
    usage: dict[str, Any] | None,
    max_tokens: int | None,
    zh: bool,
) -> tuple[str, dict[str, Any]] | None:
    """The `warning` event's message and fields when the answer ended at its output limit after
    reasoning, with nothing said (`answered`: text or a tool call came); else None."""
    if finish_reason != "length" or answered:
        return None
    reasoning = reported_reasoning(usage)[0] if usage is not None else None
    if not reasoned and not reasoning:
        return None
    fields: dict[str, Any] = {"code": STARVED}
    if reasoning is not None:
        fields["reasoning_tokens"] = reasoning
    if max_tokens is not None:
        fields["max_tokens"] = max_tokens
    if zh:
        spent = f"推理用了 {reasoning} 个 Token，" if reasoning else "推理"
        limit = f"（max_tokens {max_tokens}）" if max_tokens is not None else ""
        return f"{spent}用尽了输出上限{limit}，没有留下回答：请调高 max_tokens，或降低思考级别。", fields
    spent = f"{reasoning} reasoning tokens" if reasoning else "The reasoning"
    limit = f" (max_tokens {max_tokens})" if max_tokens is not None else ""
    return f"{spent} used up the output limit{limit}: no answer was left. {_ADVICE}", fields


def in_content_warning(
    expected: bool, reasoned: bool, answered_text: bool, zh: bool
) -> tuple[str, dict[str, Any]] | None:
    """The `warning` event's message and fields when a model that always reasons (`expected`)
    answered with text and no reasoning at all; else None."""
    if not expected or reasoned or not answered_text:
        return None
    if zh:
        return "该模型总是先推理，但这次回答里没有推理内容：推理可能混在了正文里，已原样转发。", {
            "code": IN_CONTENT
        }
    return (
        "This model always reasons, but the answer came with no reasoning: it may be in the text, "
        "which is forwarded as it came.",
        {"code": IN_CONTENT},
    )
