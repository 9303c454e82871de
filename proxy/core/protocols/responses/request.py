"""The Responses front door's request side, bridged: a `POST /v1/responses` body → the internal
chat-completions request, for an upstream that speaks chat completions only (issue 28, item 1).

Pure: values in, values out (no I/O, no settings; the edge passes the hosted-tools policy in).
`bridge_request(body, hosted_tools=…)` returns a `BridgedRequest`: the chat body, the thinking
level `reasoning.effort` implies (used when no X-Thinking-Level header is sent), the summary wish
for the encoder, the reasoning items to restore (still sealed: the edge opens `encrypted_content`
and puts the reasoning back per the replay rules), the hosted tools left out (for
X-Thinking-Omitted-Tools), the reverse map of tool names (for the encoder), what the edge itself
handles (`store`, `previous_response_id`, `include`) and every field dropped (for a trace note).

Items and content: proxy.core.protocols.responses.inputs. Tools and tool_choice:
proxy.core.protocols.responses.tools. The kept / mapped / dropped table: docs/responses.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal

from proxy.core.controls import Level
from proxy.core.errors import BadRequest, quoted
from proxy.core.protocols.door_request import present_fields, stream_fields
from proxy.core.protocols.responses.inputs import ReasoningItem, RestoreTurn, map_input
from proxy.core.protocols.responses.tools import (
    SEPARATOR,
    HostedTools,
    ToolName,
    flat_name,
    map_tool_choice,
    map_tools,
)

__all__ = [
    "DROPPED_FIELDS",
    "EDGE_FIELDS",
    "EFFORT_LEVELS",
    "SEPARATOR",
    "BridgedRequest",
    "HostedTools",
    "ReasoningItem",
    "RestoreTurn",
    "SummaryWish",
    "ToolName",
    "bridge_request",
    "flat_name",
]

SummaryWish = Literal["auto", "concise", "detailed"]

# `reasoning.effort` → the thinking level, when the request sends no X-Thinking-Level header.
EFFORT_LEVELS: Final[Mapping[str, Level]] = MappingProxyType(
    {
        "none": Level.OFF,
        "minimal": Level.STANDARD,
        "low": Level.STANDARD,
        "medium": Level.STANDARD,
        "high": Level.DEEP,
        "xhigh": Level.DEEP,
        "max": Level.DEEP,
    }
)
_SUMMARIES: Final = ("auto", "concise", "detailed")

# Copied as they are (when not null): same meaning on chat (the penalties: Open Responses' fields).
_KEPT: Final = ("model", "temperature", "top_p", "presence_penalty", "frequency_penalty", "user")
# Mapped here, item by item (see docs/responses.md).
_MAPPED: Final = frozenset(
    {
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "max_output_tokens",
        "reasoning",
        "safety_identifier",
        "stream",
    }
)
# Read by the edge, never sent upstream: the state store, stored-item expansion, what to include.
EDGE_FIELDS: Final = frozenset({"store", "previous_response_id", "include"})
# Every field the bridge reads: any other one is dropped (and named).
_KNOWN: Final = _MAPPED | EDGE_FIELDS | frozenset(_KEPT)
# Server-side state the bridge cannot stand in for: dropping them would lose the conversation.
_REFUSED: Final = {
    "conversation": "send the conversation's items in input (or use previous_response_id)",
    "prompt": "send the prompt template's text as instructions and input",
}
# Dropped, and listed in `dropped` for the trace (each one's reason: docs/responses.md). A field
# not named anywhere here is dropped and listed too.
DROPPED_FIELDS: Final = frozenset(
    {
        "metadata",
        "truncation",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "background",
        "background_options",
        "service_tier",
        "max_tool_calls",
        "top_logprobs",
        "stream_options",
        "context_management",
        "moderation",
        "access_programs",
        "image",
    }
)


@dataclass(frozen=True, slots=True)
class BridgedRequest:
    """A Responses request as the internal (chat-completions) request, and what rides beside it."""

    body: dict[str, Any]  # the chat-completions body
    level: Level | None  # implied by reasoning.effort; None: not sent
    summary: SummaryWish | None  # reasoning.summary, for the encoder
    reasoning: tuple[RestoreTurn, ...]  # reasoning items to restore, per assistant message
    omitted_tools: tuple[str, ...]  # hosted tool types left out (X-Thinking-Omitted-Tools)
    tool_names: Mapping[str, ToolName]  # chat function name → the Responses tool it stands for
    dropped: tuple[str, ...]  # request fields (and notes) not carried upstream
    store: bool  # default true, as OpenAI
    previous_response_id: str | None
    include: tuple[str, ...]

    @property
    def wants_encrypted_reasoning(self) -> bool:
        return "reasoning.encrypted_content" in self.include


def bridge_request(body: Mapping[str, Any], *, hosted_tools: HostedTools = "omit") -> BridgedRequest:
    """The internal chat request for a Responses request body (already parsed JSON)."""
    present = present_fields(body)
    for name, what in _REFUSED.items():
        if name in present:
            raise BadRequest(
                f"{name} is not supported on this upstream: it is bridged to chat completions and "
                f"holds no server-side {name}s; {what}.",
                code="unsupported_parameter",
                param=name,
            )
    dropped: list[str] = []
    mapped = map_input(present.get("input"), present.get("instructions"))
    chat: dict[str, Any] = {k: present[k] for k in _KEPT if k in present}
    chat["messages"] = mapped.messages
    if "user" not in chat and isinstance(present.get("safety_identifier"), str):
        chat["user"] = present["safety_identifier"]
    elif "safety_identifier" in present:
        dropped.append("safety_identifier")
    stream_fields(present, chat)
    if "max_output_tokens" in present:
        chat["max_completion_tokens"] = present["max_output_tokens"]
    omitted, tool_names = _tools(present, chat, hosted_tools, dropped)
    _text(present.get("text"), chat, dropped)
    level, summary = _reasoning(present.get("reasoning"), dropped)
    dropped.extend(f"input[{i}] (reasoning with no assistant item after it)" for i in mapped.stray_reasoning)
    dropped.extend(k for k in present if k not in _KNOWN)
    return BridgedRequest(
        body=chat,
        level=level,
        summary=summary,
        reasoning=mapped.restore,
        omitted_tools=omitted,
        tool_names=tool_names,
        dropped=tuple(dropped),
        store=_store(present.get("store", True)),
        previous_response_id=_optional_string(present, "previous_response_id"),
        include=_include(present.get("include")),
    )


def _tools(
    present: Mapping[str, Any], chat: dict[str, Any], hosted: HostedTools, dropped: list[str]
) -> tuple[tuple[str, ...], Mapping[str, ToolName]]:
    tools = map_tools(present.get("tools"), hosted)
    choice = map_tool_choice(present.get("tool_choice"), tools)
    if choice.dropped:
        dropped.append(choice.dropped)
    chat_tools = [t for t in tools.tools if choice.allowed is None or t["function"]["name"] in choice.allowed]
    parallel = present.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise BadRequest("parallel_tool_calls must be true or false.", param="parallel_tool_calls")
    if chat_tools:
        chat["tools"] = chat_tools
        if choice.choice is not None:
            chat["tool_choice"] = choice.choice
        if parallel is not None:
            chat["parallel_tool_calls"] = parallel
    else:
        # Chat refuses tool_choice and parallel_tool_calls without tools.
        reason = "no function tools left" if tools.tools or tools.omitted else "no tools"
        if choice.choice is not None:
            dropped.append(f"tool_choice ({reason})")
        if parallel is not None:
            dropped.append(f"parallel_tool_calls ({reason})")
    return tools.omitted, MappingProxyType(dict(tools.names))


def _text(text: Any, chat: dict[str, Any], dropped: list[str]) -> None:
    """`text.format` → `response_format`; `text.verbosity` (and anything else in text) is dropped."""
    if text is None:
        return
    if not isinstance(text, dict):
        raise BadRequest("text must be an object (format, verbosity).", param="text")
    dropped.extend(f"text.{k}" for k, v in text.items() if k != "format" and v is not None)
    fmt = text.get("format")
    if fmt is None:
        return
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind in ("text", "json_object"):
        chat["response_format"] = {"type": kind}
    elif kind == "json_schema":
        name, schema = fmt.get("name"), fmt.get("schema")
        if not isinstance(name, str) or not name or not isinstance(schema, dict):
            raise BadRequest(
                "text.format of type json_schema needs a name (string) and a schema (object).",
                param="text.format",
            )
        spec: dict[str, Any] = {"name": name, "schema": schema}
        for key in ("description", "strict"):
            if fmt.get(key) is not None:
                spec[key] = fmt[key]
        chat["response_format"] = {"type": "json_schema", "json_schema": spec}
    else:
        raise BadRequest(
            "text.format.type must be text, json_object or json_schema.", param="text.format.type"
        )


def _reasoning(reasoning: Any, dropped: list[str]) -> tuple[Level | None, SummaryWish | None]:
    """The level `reasoning.effort` implies and the `reasoning.summary` wish."""
    if reasoning is None:
        return None, None
    if not isinstance(reasoning, dict):
        raise BadRequest("reasoning must be an object (effort, summary).", param="reasoning")
    effort = reasoning.get("effort")
    level = None
    if effort is not None:
        if not isinstance(effort, str) or effort not in EFFORT_LEVELS:
            raise BadRequest(
                f"reasoning.effort {quoted(effort)} is not one of {', '.join(EFFORT_LEVELS)}.",
                param="reasoning.effort",
            )
        level = EFFORT_LEVELS[effort]
    summary = reasoning.get("summary")
    if summary is None:
        summary = reasoning.get("generate_summary")  # its deprecated name
    if summary is not None and summary not in _SUMMARIES:
        raise BadRequest(
            f"reasoning.summary {quoted(summary)} is not one of {', '.join(_SUMMARIES)}.",
            param="reasoning.summary",
        )
    known = ("effort", "summary", "generate_summary")
    dropped.extend(f"reasoning.{k}" for k, v in reasoning.items() if k not in known and v is not None)
    wish: SummaryWish | None = summary
    return level, wish


def _store(value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadRequest("store must be true or false.", param="store")
    return value


def _optional_string(present: Mapping[str, Any], key: str) -> str | None:
    value = present.get(key)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{key} must be a string.", param=key)
    return value


def _include(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest("include must be a list of strings.", param="include")
    return tuple(value)
