"""One finished request's facts as the sessions API lists them (docs/sessions.md, "Per-request
facts"), and what a trace tells of it. Pure: the access record and a few numbers in, a JSON-ready
dict out. Only names, counts and times — never reasoning text, prompts, tool arguments or keys.
Every string a client or upstream chose is cut, so what a session keeps per request is bounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proxy.core.events import AccessRecord

MAX_TEXT = 128  # any string a client or upstream chose (model, error, tool names)
MAX_TOOLS = 16  # tool names listed per request (all are counted)
MAX_NOTE = 200  # the auto rule's description
LEVEL_KEYS = ("off", "standard", "deep")
NO_LEVEL = "default"  # no level applied: the upstream's default


def clip(value: object, limit: int = MAX_TEXT) -> str | None:
    if not isinstance(value, str):
        return None
    return value if len(value) <= limit else value[:limit] + "…"


def door_of(record: AccessRecord) -> str:
    """chat, responses, messages, websocket (a Responses WebSocket's turns) or passthrough."""
    return "websocket" if record.transport == "websocket" else record.route


def level_key(level: str | None) -> str:
    return level if level in LEVEL_KEYS else NO_LEVEL


def tokens_of(record: AccessRecord) -> dict[str, Any] | None:
    usage = record.usage
    if usage is None:
        return None
    reasoning = usage.reasoning
    return {
        "input": usage.input,
        "cached": usage.cached_input,
        "reasoning": reasoning.value if reasoning is not None else None,
        "reasoning_source": reasoning.source if reasoning is not None else None,
        "output": usage.output,
    }


def request_facts(
    record: AccessRecord,
    *,
    at_ms: int,
    total_ms: float,
    client: str,
    changes: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """The request's facts (docs/sessions.md). TTFT and thinking time are null, not 0, when the
    answer was not streamed (nothing timed them). Its trace summary (finish reason, tool calls,
    times, a starved answer) comes from the trace's outcome, read at the end: no trace event is
    watched."""
    outcome = record.outcome
    streamed = record.stream and outcome is not None
    tools = outcome.tools if outcome is not None else ()
    return {
        "id": clip(record.request_id) or "",
        "at": at_ms,
        "door": door_of(record),
        "client": client,
        "key": record.client,
        "provider": record.provider,
        "model": clip(record.response_model or record.model),
        "model_suffix": clip(record.model_suffix),
        "level_requested": record.level_requested,
        "level": record.level if record.level in LEVEL_KEYS else None,  # (the record says "none")
        "level_source": record.level_source,
        "level_rule": clip(record.level_rule, MAX_NOTE),
        "stream": record.stream,
        "status": record.status,
        "error": clip(record.error),
        "tokens": tokens_of(record),
        "cost_usd": record.cost_usd,
        "ttft_ms": outcome.ttft_ms if streamed and outcome is not None else None,
        "thinking_ms": outcome.reasoning_ms if streamed and outcome is not None else None,
        "total_ms": round(total_ms, 1),
        "finish_reason": clip(outcome.finish_reason) if outcome is not None else None,
        "tool_calls": len(tools),
        "tools": tool_names(tools),
        "reasoning_starved": outcome.starved if outcome is not None else False,
        "changes": changes or [],
    }


def tool_names(tools: Sequence[str]) -> list[str]:
    """The distinct names, in order, at most MAX_TOOLS, each cut."""
    names: list[str] = []
    for name in tools:
        short = clip(name)
        if short is not None and short not in names:
            names.append(short)
            if len(names) == MAX_TOOLS:
                break
    return names
