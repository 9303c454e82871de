"""The Anthropic Messages front door's request side, bridged: a `POST /v1/messages` body → the
internal chat-completions request, for an upstream that speaks chat completions only.

Pure: values in, values out. `bridge_messages(body)` returns a `BridgedMessages`: the chat body,
the thinking level `thinking` implies (used when no X-Thinking-Level header is sent), whether the
client wants the thinking text shown (`display: omitted` asks for signed blocks without text), the
thinking blocks to restore (still signed: the edge verifies them, proxy.core.protocols.
messages_state), the server tools left out (for X-Thinking-Omitted-Tools) and every field dropped
(for a trace note). Messages and content blocks: proxy.core.protocols.messages.inputs. The table of
what is kept, mapped, dropped and refused: docs/messages.md.

Levels (docs/messages.md, "Levels"): `thinking: {type: disabled}` → off; `{type: enabled,
budget_tokens: N}` → standard below `DEEP_BUDGET` tokens, deep from it on; `{type: adaptive}` →
by `output_config.effort` (low, medium → standard; high, xhigh, max → deep; none → standard: the
model decides how hard to think, as with a level that sends no intensity knob); `{type:
between_tools}` (Anthropic's thinking between tool calls only, `ThinkingConfigBetweenTools` in its
SDKs) the same way: thinking on, its depth by the effort (a chat upstream has no between-tools-only
mode); no `thinking` → no level. `display: omitted`, or Claude Code's beta
`redact-thinking-2026-02-12` (`redacts_thinking`), asks for thinking blocks without their text.
The budget itself is sent where the level's params carry a numeric budget (DashScope's
`thinking_budget`, Anthropic's `budget_tokens`…; proxy.core.plan.rewrite.with_budget), else dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal

from proxy.core import jsonio
from proxy.core.controls import Level
from proxy.core.errors import BadRequest, quoted
from proxy.core.protocols.door_request import present_fields, stream_fields
from proxy.core.protocols.messages.inputs import ThinkingBlock, ThinkingTurn, map_messages

__all__ = [
    "DEEP_BUDGET",
    "EFFORT_LEVELS",
    "BridgedMessages",
    "ThinkingBlock",
    "ThinkingTurn",
    "bridge_messages",
    "chat_headers",
    "estimate_tokens",
    "redacts_thinking",
    "thinking_level",
]

ServerTools = Literal["omit", "refuse"]

# From this many `budget_tokens` on, `thinking: enabled` is the deep level. Claude Code's own
# keywords ask 4,000 ("think"), 10,000 ("think hard") and 31,999 ("ultrathink"): the last is deep,
# the first two standard; 16,000 sits between, a power-of-two-ish round number.
DEEP_BUDGET: Final = 16_000
EFFORT_LEVELS: Final[Mapping[str, Level]] = MappingProxyType(
    {
        "low": Level.STANDARD,
        "medium": Level.STANDARD,
        "high": Level.DEEP,
        "xhigh": Level.DEEP,
        "max": Level.DEEP,
    }
)
# Copied as they are (when not null).
_KEPT: Final = ("model", "temperature", "top_p")
_MAPPED: Final = frozenset(
    {
        "messages",
        "system",
        "tools",
        "tool_choice",
        "max_tokens",
        "stop_sequences",
        "metadata",
        "stream",
        "thinking",
        "output_config",
    }
)
# A client tool is `{name, description, input_schema}` with no type, or type "custom"; any other
# type is one of Anthropic's server tools (web_search_20250305, bash_20250124, text_editor_*,
# computer_*, code_execution_*, web_fetch_*, memory_*, …), which a chat upstream cannot run.
_CLIENT_TOOL_TYPES: Final = (None, "custom")


@dataclass(frozen=True, slots=True)
class BridgedMessages:
    """A Messages request as the internal (chat-completions) request, and what rides beside it."""

    body: dict[str, Any]  # the chat-completions body
    level: Level | None  # implied by `thinking`; None: not sent
    show_thinking: bool  # False: `display: omitted` (signed blocks, empty text)
    thinking: tuple[ThinkingTurn, ...]  # thinking blocks to restore, per assistant message
    omitted_tools: tuple[str, ...]  # server tool types left out (X-Thinking-Omitted-Tools)
    dropped: tuple[str, ...]  # request fields (and notes) not carried upstream
    redacted: int  # redacted_thinking blocks dropped
    budget_tokens: int | None = None  # `thinking.budget_tokens`, sent where the dialect has a budget


def bridge_messages(body: Mapping[str, Any], *, server_tools: ServerTools = "omit") -> BridgedMessages:
    """The internal chat request for a Messages request body (already parsed JSON)."""
    present = present_fields(body)
    dropped: list[str] = []
    mapped = map_messages(present.get("system"), present.get("messages"))
    chat: dict[str, Any] = {k: present[k] for k in _KEPT if k in present}
    chat["messages"] = mapped.messages
    stream_fields(present, chat)
    if "max_tokens" in present:
        if type(present["max_tokens"]) is not int or present["max_tokens"] < 1:
            raise BadRequest("max_tokens must be a positive integer.", param="max_tokens")
        chat["max_tokens"] = present["max_tokens"]
    stops = present.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise BadRequest("stop_sequences must be a list of strings.", param="stop_sequences")
        if stops:
            chat["stop"] = stops
    _metadata(present.get("metadata"), chat, dropped)
    omitted = _tools(present, chat, server_tools, dropped, mapped.loaded_tools)
    output_config = present.get("output_config")
    if output_config is not None and not isinstance(output_config, dict):
        raise BadRequest("output_config must be an object (effort, format).", param="output_config")
    effort = _effort(output_config)
    _format(output_config, chat)
    level, show = _thinking(present.get("thinking"), effort)
    thinking = present.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    budget = budget if level is not None and level is not Level.OFF and type(budget) is int else None
    if mapped.redacted:
        dropped.append(
            f"redacted_thinking ({mapped.redacted} block(s): Anthropic's own, unreadable elsewhere)"
        )
    dropped.extend(k for k in present if k not in _MAPPED and k not in _KEPT)
    return BridgedMessages(
        body=chat,
        level=level,
        show_thinking=show,
        thinking=mapped.thinking,
        omitted_tools=omitted,
        dropped=tuple(dropped),
        redacted=mapped.redacted,
        budget_tokens=budget,
    )


def _metadata(metadata: Any, chat: dict[str, Any], dropped: list[str]) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise BadRequest("metadata must be an object.", param="metadata")
    user = metadata.get("user_id")
    if isinstance(user, str) and user:
        chat["user"] = user
    dropped.extend(f"metadata.{k}" for k, v in metadata.items() if k != "user_id" and v is not None)


def _tools(
    present: Mapping[str, Any],
    chat: dict[str, Any],
    server: ServerTools,
    dropped: list[str],
    loaded: frozenset[str],
) -> tuple[str, ...]:
    """Client tools → chat function tools. A tool with `defer_loading: true` is not in the model's
    context until a `tool_reference` in the history names it (a client-side tool search's answer):
    left out until then, and listed in `dropped`."""
    tools = present.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise BadRequest("tools must be a list of tools.", param="tools")
    functions: list[dict[str, Any]] = []
    omitted: list[str] = []
    deferred: list[str] = []
    for i, tool in enumerate(tools or ()):
        param = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise BadRequest(f"{param} must be an object.", param=param)
        kind = tool.get("type")
        if kind not in _CLIENT_TOOL_TYPES:
            omitted.append(str(kind))
            continue
        name, schema = tool.get("name"), tool.get("input_schema", {"type": "object"})
        if not isinstance(name, str) or not name:
            raise BadRequest(f"{param}.name must be a non-empty string.", param=f"{param}.name")
        if not isinstance(schema, dict):
            raise BadRequest(
                f"{param}.input_schema must be a JSON schema object.", param=f"{param}.input_schema"
            )
        if tool.get("defer_loading") is True and name not in loaded:
            deferred.append(name)
            continue
        function: dict[str, Any] = {"name": name, "parameters": schema}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        functions.append({"type": "function", "function": function})
    if omitted and server == "refuse":
        raise BadRequest(
            f"Server tools cannot run on this upstream (it is bridged to chat completions): "
            f"{', '.join(omitted)}. Leave them out.",
            code="unsupported_tool",
            param="tools",
        )
    if deferred:
        dropped.append(f"tools deferred and not loaded: {', '.join(deferred)}")
    choice, parallel = _tool_choice(present.get("tool_choice"), functions, omitted, dropped)
    if functions:
        chat["tools"] = functions
        if choice is not None:
            chat["tool_choice"] = choice
        if parallel is False:
            chat["parallel_tool_calls"] = False
    elif choice is not None:  # chat refuses tool_choice without tools
        dropped.append("tool_choice (no tools)")
    return tuple(omitted)


def _tool_choice(
    choice: Any, functions: list[dict[str, Any]], omitted: list[str], dropped: list[str]
) -> tuple[Any, bool | None]:
    """Chat's `tool_choice` and `parallel_tool_calls` (False for `disable_parallel_tool_use`)."""
    if choice is None:
        return None, None
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise BadRequest("tool_choice.type must be auto, any, tool or none.", param="tool_choice")
    assert isinstance(choice, dict)
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None and not isinstance(disable, bool):
        raise BadRequest(
            "tool_choice.disable_parallel_tool_use must be true or false.",
            param="tool_choice.disable_parallel_tool_use",
        )
    parallel = False if disable else None
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", None
    name = choice.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest("tool_choice of type tool needs a name.", param="tool_choice.name")
    if not any(f["function"]["name"] == name for f in functions):
        if omitted:  # (a server tool by its name: left out with it; the model chooses)
            dropped.append(f"tool_choice (names {quoted(name)}, not among the tools sent)")
            return None, parallel
        raise BadRequest(
            f"tool_choice names {quoted(name)}, which is not among tools.", param="tool_choice.name"
        )
    return {"type": "function", "function": {"name": name}}, parallel


def _effort(output_config: dict[str, Any] | None) -> str | None:
    effort = output_config.get("effort") if output_config is not None else None
    if effort is not None and effort not in EFFORT_LEVELS:
        raise BadRequest(
            f"output_config.effort {quoted(effort)} is not one of {', '.join(EFFORT_LEVELS)}.",
            param="output_config.effort",
        )
    return effort


def _format(output_config: dict[str, Any] | None, chat: dict[str, Any]) -> None:
    """`output_config.format` ({type: json_schema, schema}) → chat's `response_format`."""
    fmt = output_config.get("format") if output_config is not None else None
    if fmt is None:
        return
    if (
        not isinstance(fmt, dict)
        or fmt.get("type") != "json_schema"
        or not isinstance(fmt.get("schema"), dict)
    ):
        raise BadRequest(
            "output_config.format must be {type: json_schema, schema: {...}}.", param="output_config.format"
        )
    chat["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": fmt["schema"]},
    }


def _thinking(thinking: Any, effort: str | None) -> tuple[Level | None, bool]:
    """The level `thinking` implies, and whether the thinking text is shown."""
    if thinking is None:
        return None, True
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind not in ("enabled", "disabled", "adaptive", "between_tools"):
        raise BadRequest(
            "thinking.type must be enabled, disabled, adaptive or between_tools.", param="thinking.type"
        )
    assert isinstance(thinking, dict)
    display = thinking.get("display")
    if display is not None and display not in ("summarized", "omitted"):
        raise BadRequest("thinking.display must be summarized or omitted.", param="thinking.display")
    show = display != "omitted"
    if kind == "disabled":
        return Level.OFF, show
    if kind in ("adaptive", "between_tools"):
        return (EFFORT_LEVELS[effort] if effort is not None else Level.STANDARD), show
    budget = thinking.get("budget_tokens")
    if budget is None:
        return Level.STANDARD, show
    if type(budget) is not int or budget < 1:
        raise BadRequest("thinking.budget_tokens must be a positive integer.", param="thinking.budget_tokens")
    return (Level.DEEP if budget >= DEEP_BUDGET else Level.STANDARD), show


def thinking_level(body: Mapping[str, Any]) -> Level | None:
    """The level a request's own `thinking` (with `output_config.effort`) asks for, as the bridge
    reads it; None when it sends none, or one the bridge would refuse (a native upstream judges
    its own fields)."""
    config = body.get("output_config")
    try:
        return _thinking(body.get("thinking"), _effort(config if isinstance(config, dict) else None))[0]
    except BadRequest:
        return None


# Request headers of Anthropic's API: meaningless to a chat upstream, never forwarded there.
ANTHROPIC_HEADERS: Final = frozenset(
    {"anthropic-version", "anthropic-beta", "anthropic-dangerous-direct-browser-access"}
)


# Claude Code's beta: thinking blocks come back with empty text, even with `display: summarized`
# (the signature still carries the reasoning to the next turn).
REDACT_THINKING_BETA: Final = "redact-thinking-2026-02-12"


def redacts_thinking(headers: list[tuple[str, str]]) -> bool:
    """Whether the client sent the `redact-thinking-2026-02-12` beta (in any `anthropic-beta`)."""
    return any(
        name.lower() == "anthropic-beta"
        and REDACT_THINKING_BETA in (part.strip() for part in value.split(","))
        for name, value in headers
    )


def chat_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The headers for a chat upstream: Anthropic's own left out, and the key an Anthropic SDK sends
    as `x-api-key` sent as `Authorization: Bearer` (what chat-completions APIs read) when the client
    sent no Authorization itself."""
    names = {name.lower() for name, _ in headers}
    out: list[tuple[str, str]] = []
    for name, value in headers:
        low = name.lower()
        if low in ANTHROPIC_HEADERS:
            continue
        if low == "x-api-key":
            if "authorization" not in names:
                out.append(("authorization", f"Bearer {value.strip()}"))
            continue
        out.append((name, value))
    return out


def estimate_tokens(chat: Mapping[str, Any]) -> int:
    """`/v1/messages/count_tokens`: an estimate, not a tokenizer's count. The mapped chat request's
    messages and tools as compact JSON, one token per 4 bytes (rounded up), plus 3 per message
    (role and separators). English text runs ~4 characters a token on the common BPE vocabularies;
    code and non-Latin scripts run denser, so this undercounts them."""
    messages = chat.get("messages") or []
    size = len(jsonio.dumps(messages)) + len(jsonio.dumps(chat.get("tools") or []))
    return (size + 3) // 4 + 3 * len(messages)
