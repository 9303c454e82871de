"""What the console shows of one request: a summary built from its access record and trace.

Pure: values in, a JSON-ready dict out. Only what the access log and the trace already carry —
never reasoning text, prompts, tool payloads or keys (trace events are summaries themselves; see
proxy.core.stream.trace). Every list is bounded so one request cannot grow the console's memory, and so is
every string: an upstream chooses tool-call ids, names, finish reasons, usage and error text, and
a client the model and path, at any length (docs/console.md, "Memory").
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from proxy.core.sessions.facts import tokens_of  # (the sessions' reading: one shape for both)

if TYPE_CHECKING:
    from proxy.core.events import AccessRecord
    from proxy.core.usage import TokenUsage

MAX_EVENTS = 200  # trace events kept per request (a long agent turn is cut, and says so)
MAX_TOOLS = 64  # tool calls listed per request
MAX_TEXT = 128  # every string a client or upstream chose (model, path, ids, names, finish reason, error)
MAX_SUMMARY = 512  # text the proxy wrote itself, already short (an event's message, its summaries)
MAX_ITEMS = 16  # entries kept of an object or list an upstream nested in an event (usage details)
MAX_DEPTH = 3  # levels of such nesting kept; deeper values are left out
_PROSE = frozenset({"message", "input_summary", "output_summary"})
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
    usage: TokenUsage | None  # the answer's one token reading (proxy.core.usage)
    client: str | None  # the gateway client key's name (configured, never a key)
    cost_usd: float | None  # the policy's price table, else genai-prices (proxy.sessions.pricing)
    reasoning_starved: bool  # the reasoning used the output limit and left no answer
    # Issue 44's facts: where the request came in, the level's story, its agent session.
    transport: str  # http or websocket
    level_source: str | None
    level_rule: str | None
    model_suffix: str | None
    session: str | None  # the session's id as /thinkproxy/sessions shows it (proxy.sessions)
    client_kind: str | None  # the kind of client (docs/sessions.md), `client` being the key's name
    changes: Sequence[Mapping[str, Any]] | None  # what the proxy changed in the body (names only)
    thinking_dropped: int  # thinking blocks a native upstream dropped (its input_transformations)

    @classmethod
    def of(cls, r: AccessRecord) -> RecordFacts:
        # Cut here, not only when summarized: the ring keeps these for as long as it keeps the request.
        starved = r.outcome is not None and r.outcome.starved
        notes = r.notes
        changes = notes.get("changes")
        return cls(
            r.method, clip(r.path) or "", r.route, r.stream, r.provider, clip(r.model or r.response_model),
            r.level_requested, r.level, r.thinking_method, r.status, r.upstream_status, clip(r.error),
            r.usage, r.client, r.cost_usd, starved, r.transport, r.level_source,
            clip(r.level_rule, MAX_SUMMARY), clip(r.model_suffix), clip(notes.get("session"), 2 * MAX_TEXT),
            clip(notes.get("client_kind")),
            changes if isinstance(changes, list) else None,
            notes.get("thinking_dropped", 0),
        )  # fmt: skip


def clip(value: object, limit: int = MAX_TEXT) -> str | None:
    if not isinstance(value, str):
        return None
    # A value cut already (a kept event's) is the same object again, not an equal copy: the ring
    # would otherwise hold each tool name twice.
    if len(value) <= limit or (len(value) == limit + 1 and value[-1] == "…"):
        return value
    return value[:limit] + "…"


def bounded_event(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """The trace event as the console keeps it: the event itself when every value is within the
    bounds (the usual case, no copy), else a copy with long strings cut and nested values bounded.
    Never changed in place: the same event object goes to the client's own stream."""
    changed: dict[str, Any] | None = None
    for key, value in event.items():
        fixed = _bounded(value, MAX_SUMMARY if key in _PROSE else MAX_TEXT, MAX_DEPTH)
        if fixed is not value:
            if changed is None:
                changed = {}
            changed[key] = fixed
    return event if changed is None else {**event, **changed}


def _bounded(value: Any, limit: int, depth: int) -> Any:
    kind = type(value)
    if kind is str:
        return value if len(value) <= limit else value[:limit] + "…"
    if kind is int or kind is float or kind is bool or value is None:
        return value
    if depth <= 0:
        return None
    if kind is dict:
        out: dict[str, Any] = {}
        same = len(value) <= MAX_ITEMS
        for i, (key, item) in enumerate(value.items()):
            if i == MAX_ITEMS:
                break
            short = _bounded(key, MAX_TEXT, 1) if type(key) is str else str(key)[:MAX_TEXT]
            fixed = _bounded(item, MAX_TEXT, depth - 1)
            same = same and short is key and fixed is item
            out[short] = fixed
        return value if same else out
    if kind is list or kind is tuple:
        items = [_bounded(item, MAX_TEXT, depth - 1) for item in value[:MAX_ITEMS]]
        same = kind is list and len(value) <= MAX_ITEMS
        same = same and all(a is b for a, b in zip(items, value, strict=True))
        return value if same else items
    return None  # not JSON: never produced by the trace builder, not kept if it were


def held_bytes(value: Any) -> int:
    """What `value` holds in memory, counted from above: each str, dict, list and tuple in it by
    sys.getsizeof (one shared by two places counted twice), an int or float as 32 bytes, None and
    booleans (shared singletons) as nothing. For the console's bounded values, so the recursion is
    shallow (MAX_DEPTH under an event)."""
    kind = type(value)
    if kind is str:
        return _sizeof(value)
    if kind is dict:
        return _sizeof(value) + sum(map(held_bytes, value)) + _values_held(value.values())
    if kind is list or isinstance(value, tuple):  # (a NamedTuple too)
        return _sizeof(value) + _values_held(value)
    if value is None or kind is bool:
        return 0
    if kind is int or kind is float:
        return 32
    if isinstance(value, Mapping):
        return _sizeof(value) + sum(map(held_bytes, value)) + _values_held(value.values())
    return 32


def request_held(
    facts: RecordFacts,
    events: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    done: Mapping[str, Any] | None,
) -> int:
    """What a finished request holds in the console's ring, counted from above (held_bytes): its
    facts, kept events, the tool calls and `done` of the events not kept, and the summary made
    from them when the ring is read (kept with it: a dict, its lists, a dict per tool call)."""
    # Of the facts, only the strings a client or upstream chose vary (cut: RecordFacts.of); the
    # rest are short names from the configuration or the HTTP method, within _FACTS_BYTES.
    total = _SUMMARY_BYTES + _FACTS_BYTES + 8 * (len(events) + len(tools))
    for text in (facts.path, facts.model, facts.error, facts.session, facts.level_rule):
        if text is not None:
            total += _sizeof(text)
    listed = 0
    # Once per request, on every request: one call per event, none per value (_values_held).
    for event in events:
        # The event's own keys are the trace builder's literal names, shared by every event; a
        # nested object's keys, which an upstream chose, are counted (held_bytes).
        total += _sizeof(event) + _values_held(event.values())
        if event["type"] == "tool_call.start":
            listed += 1
    if tools:
        total += held_bytes(tools)
    if facts.changes:
        total += held_bytes(facts.changes)
    if done is not None:
        total += _sizeof(done) + _values_held(done.values())
    return total + _TOOL_ENTRY_BYTES * min(listed, MAX_TOOLS)


# The summary dict (summarize: ~28 keys, its `usage`), with the object that holds a request in the
# ring; and the dict of each tool call it lists (its strings are the event's: see clip).
_SUMMARY_BYTES = 2048
_TOOL_ENTRY_BYTES = 232
_FACTS_BYTES = 1536  # the facts' tuple (23 slots), their short strings, the token reading, the cost


def _values_held(values: Iterable[Any]) -> int:
    # held_bytes, with the usual leaves (strings, numbers, None) counted without a call each.
    total = 0
    for item in values:
        kind = type(item)
        if kind is str:
            total += _sizeof(item)
        elif kind is int or kind is float:
            total += 32
        elif item is not None and kind is not bool:
            total += held_bytes(item)
    return total


_sizeof = sys.getsizeof


def tool_entry(event: Mapping[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": clip(event.get("name")) or ""}
    if "title" in event:
        tool["title"] = clip(event["title"], MAX_SUMMARY)
    return tool


def usage_of(done: Mapping[str, Any] | None, tokens: TokenUsage | None = None) -> dict[str, Any] | None:
    """The counts shown: the upstream's usage as the `done` event carried it, and from the
    request's one reading (once it ended) the cached input tokens and the reasoning tokens with
    their source (`reported`, or `estimated` by the proxy)."""
    usage = done.get("usage") if done else None
    counts: dict[str, Any] = {}
    if isinstance(usage, dict):
        counts = {k: v for k in USAGE_KEYS if isinstance(v := usage.get(k), int) and not isinstance(v, bool)}
    if tokens is not None:
        if tokens.cached_input is not None:
            counts["cached_tokens"] = tokens.cached_input
        if tokens.reasoning is not None:
            counts["reasoning_tokens"] = tokens.reasoning.value
            counts["reasoning_tokens_source"] = tokens.reasoning.source
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
    """One request as the console lists it; `duration_ms` None = still in flight. Thinking time
    (`reasoning_ms`, `thinking_ms`) and TTFT are null, not 0, when the answer was not streamed:
    nothing timed them."""
    facts = record if isinstance(record, RecordFacts) else None
    timed = done if done is not None and record.stream else None
    return {
        "id": request_id,
        "replica": replica,
        "started_at": started_at_ms,
        "in_flight": duration_ms is None,
        "method": record.method,
        "path": clip(record.path),
        "route": record.route,
        "stream": record.stream,
        "provider": record.provider,
        "model": clip(record.model),
        "level_requested": record.level_requested,
        "level": record.level,
        "thinking_method": record.thinking_method,
        "status": record.status if duration_ms is not None else None,
        "upstream_status": record.upstream_status,
        "error": clip(record.error),
        "door": "websocket" if record.transport == "websocket" else record.route,
        "session": facts.session if facts is not None else None,
        "client_kind": facts.client_kind if facts is not None else None,
        "level_source": record.level_source,
        "level_rule": facts.level_rule if facts is not None else None,
        "model_suffix": facts.model_suffix if facts is not None else None,
        "ttft_ms": timed.get("ttft_ms") if timed else None,
        "reasoning_ms": timed.get("reasoning_ms") if timed else None,
        "thinking_ms": (timed.get("reasoning_ms") or None) if timed else None,  # 0: it did not reason
        "total_ms": round(duration_ms, 1) if duration_ms is not None else None,
        "finish_reason": clip(done.get("finish_reason")) if done else None,
        "usage": usage_of(done, record.usage),
        "tokens": tokens_of(record.usage),
        "changes": list(facts.changes) if facts is not None and facts.changes else [],
        "client": record.client,
        "cost_usd": record.cost_usd,
        # (Known once the answer ended: a request in flight has no facts yet.)
        "reasoning_starved": record.reasoning_starved if isinstance(record, RecordFacts) else False,
        "thinking_dropped": record.thinking_dropped if isinstance(record, RecordFacts) else 0,
        "tool_calls": list(tools),
        "events": list(events),
        "events_dropped": events_dropped,
    }
