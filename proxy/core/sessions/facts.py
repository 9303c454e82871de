"""One finished request's facts as the sessions API lists them (docs/sessions.md, "Per-request
facts"), and what a trace tells of it. Pure: the access record and a few numbers in, a JSON-ready
dict out. Only names, counts and times — never reasoning text, prompts, tool arguments or keys.
Every string a client or upstream chose is cut, so what a session keeps per request is bounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from proxy.core.usage import TokenUsage

if TYPE_CHECKING:
    from proxy.core.events import AccessRecord

MAX_TEXT = 128  # any string a client or upstream chose (model, error, tool names)
MAX_TOOLS = 16  # tool names listed per request
MAX_TOOL_CALLS = 256  # tool calls counted per request (an answer rarely makes more than a few)
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


class RequestFacts(NamedTuple):
    """One finished request's facts, as a session keeps them: values only (the strings a client or
    upstream chose already cut). Their JSON (`as_dict`, docs/sessions.md) is made when they are
    read, not per request."""

    id: str
    at: int
    door: str
    client: str
    key: str | None
    provider: str | None
    model: str | None
    model_suffix: str | None
    level_requested: str | None
    level: str | None
    level_source: str | None
    level_rule: str | None
    stream: bool
    status: int
    error: str | None
    usage: TokenUsage | None
    cost_usd: float | None
    ttft_ms: float | None
    thinking_ms: float | None
    total_ms: float
    finish_reason: str | None
    tools: tuple[str, ...]
    reasoning_starved: bool
    changes: list[dict[str, Any]] | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "door": self.door,
            "client": self.client,
            "key": self.key,
            "provider": self.provider,
            "model": self.model,
            "model_suffix": self.model_suffix,
            "level_requested": self.level_requested,
            "level": self.level,
            "level_source": self.level_source,
            "level_rule": self.level_rule,
            "stream": self.stream,
            "status": self.status,
            "error": self.error,
            "tokens": tokens_of(self.usage),
            "cost_usd": self.cost_usd,
            "ttft_ms": self.ttft_ms,
            "thinking_ms": self.thinking_ms,
            "total_ms": self.total_ms,
            "finish_reason": self.finish_reason,
            "tool_calls": len(self.tools),
            "tools": tool_names(self.tools),
            "reasoning_starved": self.reasoning_starved,
            "changes": self.changes or [],
        }

    def held(self) -> int:
        """About what the facts hold in memory (counted from above): the tuple and its values,
        the strings a client or upstream chose by their length, the changes by their entries."""
        total = FACTS_BYTES + 8 * len(self.tools)
        for text in (self.id, self.model, self.model_suffix, self.level_rule, self.error, self.finish_reason):
            if text is not None:
                total += 49 + len(text)
        for name in self.tools:
            total += 49 + len(name)
        if self.changes:
            total += CHANGE_BYTES * len(self.changes)
        return total


# The tuple (24 slots), its numbers, the token reading (shared with the record) and the short
# names from the configuration; and each change entry (a small dict of short strings).
FACTS_BYTES = 640
CHANGE_BYTES = 400


def tokens_of(usage: TokenUsage | None) -> dict[str, Any] | None:
    """The request's one token reading as the sessions and the console's rows show it."""
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
) -> RequestFacts:
    """The request's facts (docs/sessions.md). TTFT and thinking time are null, not 0, when the
    answer was not streamed (nothing timed them). Its trace summary (finish reason, tool calls,
    times, a starved answer) comes from the trace's outcome, read at the end: no trace event is
    watched."""
    outcome = record.outcome
    if outcome is not None:
        streamed = record.stream
        ttft, thinking = (outcome.ttft_ms, outcome.reasoning_ms) if streamed else (None, None)
        finish, tools, starved = clip(outcome.finish_reason), outcome.tools, outcome.starved
    else:
        ttft = thinking = finish = None
        tools, starved = (), False
    return RequestFacts(
        clip(record.request_id) or "", at_ms, door_of(record), client, record.client, record.provider,
        clip(record.response_model or record.model), clip(record.model_suffix), record.level_requested,
        record.level if record.level in LEVEL_KEYS else None,  # (the record says "none")
        record.level_source, clip(record.level_rule, MAX_NOTE), record.stream, record.status,
        clip(record.error), record.usage, record.cost_usd, ttft, thinking, round(total_ms, 1), finish,
        tools[:MAX_TOOL_CALLS], starved, changes,
    )  # fmt: skip


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
