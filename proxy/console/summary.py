"""What the console shows of one request: a summary built from its access record and trace.

Pure: values in, a JSON-ready dict out. Only what the access log and the trace already carry —
never reasoning text, prompts, tool payloads or keys (trace events are summaries themselves; see
proxy.trace). Every list is bounded so one request cannot grow the console's memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from proxy.access_log import AccessRecord

MAX_EVENTS = 200  # trace events kept per request (a long agent turn is cut, and says so)
MAX_TOOLS = 64  # tool calls listed per request
MAX_TEXT = 128  # client-controlled text (the model name) is cut to this
# Token counts worth showing from `usage`; anything else a provider adds there is left out.
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


class RecordFacts(NamedTuple):
    """What a summary reads of a finished request's access record, kept instead of the record
    (which also holds the request's messages, never kept by the console)."""

    method: str
    path: str
    route: str
    stream: bool
    provider: str | None
    model: str | None
    level_requested: str | None
    level: str | None
    thinking_method: str | None
    status: int
    upstream_status: int | None
    error: str | None

    @classmethod
    def of(cls, r: AccessRecord) -> RecordFacts:
        return cls(
            r.method, r.path, r.route, r.stream, r.provider, r.model, r.level_requested, r.level,
            r.thinking_method, r.status, r.upstream_status, r.error,
        )  # fmt: skip


def clip(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + "…"


def tool_entry(event: Mapping[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": event.get("name", "")}
    if "title" in event:
        tool["title"] = event["title"]
    return tool


def usage_of(done: Mapping[str, Any] | None) -> dict[str, int] | None:
    usage = done.get("usage") if done else None
    if not isinstance(usage, dict):
        return None
    counts = {k: v for k in USAGE_KEYS if isinstance(v := usage.get(k), int) and not isinstance(v, bool)}
    return counts or None


def summarize(
    record: AccessRecord | RecordFacts,
    *,
    request_id: str,
    replica: str,
    started_at_ms: int,
    events: Sequence[Mapping[str, Any]],
    events_dropped: int,
    tools: Sequence[Mapping[str, Any]],
    done: Mapping[str, Any] | None,
    duration_ms: float | None,
) -> dict[str, Any]:
    """One request as the console lists it; `duration_ms` None = still in flight."""
    return {
        "id": request_id,
        "replica": replica,
        "started_at": started_at_ms,
        "in_flight": duration_ms is None,
        "method": record.method,
        "path": record.path,
        "route": record.route,
        "stream": record.stream,
        "provider": record.provider,
        "model": clip(record.model),
        "level_requested": record.level_requested,
        "level": record.level,
        "thinking_method": record.thinking_method,
        "status": record.status if duration_ms is not None else None,
        "upstream_status": record.upstream_status,
        "error": record.error,
        "ttft_ms": done.get("ttft_ms") if done else None,
        "reasoning_ms": done.get("reasoning_ms") if done else None,
        "total_ms": round(duration_ms, 1) if duration_ms is not None else None,
        "finish_reason": done.get("finish_reason") if done else None,
        "usage": usage_of(done),
        "tool_calls": list(tools),
        "events": list(events),
        "events_dropped": events_dropped,
    }
