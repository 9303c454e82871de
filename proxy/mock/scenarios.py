"""What the simulated model answers: a deterministic script built from the request body.

Pure: a chat-completions body and a thinking depth in, a `Script` out. No provider shapes here
(that is `dialects`), no I/O. The same body always gives the same text, so tests can assert on it;
only tool-call ids are unique per call, as a real provider's are.

Scenarios, in order of precedence:
1. tool results came back since the user last wrote (the last message is a `role: tool` result,
   or only a harness's `<system-reminder>` follows them) -> a final answer that quotes the
   result(s): one tool call per question, so an agent's session ends;
2. the request has `tools` (and `tool_choice` is not "none") -> brief reasoning, then a tool call
   (two parallel calls when there are several tools and the user asks for two things). Which
   tool: a harmless one, a shell tool run with `echo` first, never one that starts an agent
   (proxy.mock.tool_choice); offered only agent tools, it answers as in 3;
3. otherwise -> a short answer that quotes the first words of the last user message.

An output limit (`cut`: chat's `max_completion_tokens` or `max_tokens`, the Responses API's
`max_output_tokens`) is spent as a model spends it: reasoning first, so a small one leaves no
answer at all (finish_reason `length`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson

from proxy.mock.tool_choice import echo_command, ranked, with_echo

JSON = dict[str, Any]

QUOTE_WORDS = 8
RESULT_CHARS = 80
ARG_TEXT_CHARS = 60


class Depth(Enum):
    """How much the simulated model thinks; each dialect maps its own knobs onto this."""

    NONE = "none"
    STANDARD = "standard"
    DEEP = "deep"


@dataclass(frozen=True)
class ToolCall:
    """One function call the model makes; `arguments` is the JSON text a provider streams."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Script:
    """What the model says, before any provider shaping: reasoning, then content, then tool calls."""

    reasoning: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    truncated: bool = False  # cut at the request's output limit

    @property
    def finish_reason(self) -> str:
        if self.truncated:
            return "length"
        return "tool_calls" if self.tool_calls else "stop"


def answer(body: Mapping[str, Any], depth: Depth) -> Script:
    """The script for one request. `depth` NONE gives an empty reasoning."""
    messages = _messages(body)
    quote = quote_of(last_user_text(messages))
    results = _results_since_the_user_wrote(messages)
    if results:
        return _tool_result_answer(messages, results, quote, depth)
    tools = _function_tools(body)
    if tools and body.get("tool_choice") != "none":
        chosen = _chosen_tools(body, tools, last_user_text(messages))
        if chosen:
            return _tool_call(chosen, last_user_text(messages), quote, depth)
    return Script(reasoning=_reasoning_plain(quote, depth), content=_plain_answer(quote))


def tokens(text: str) -> int:
    """The simulated tokenizer: about four characters a token."""
    return (len(text) + 3) // 4


def output_limit(body: Mapping[str, Any]) -> int | None:
    """A chat request's output limit: `max_completion_tokens`, else `max_tokens` (None: none)."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if type(value) is int and value > 0:
            return value
    return None


def cut(script: Script, limit: int | None) -> tuple[Script, bool]:
    """The script as far as `limit` output tokens reach, and whether it was cut. Reasoning comes
    first, as the model spends its budget; a tool call that does not fit whole is dropped."""
    arguments = sum(tokens(c.name) + tokens(c.arguments) for c in script.tool_calls)
    used = tokens(script.reasoning) + tokens(script.content) + arguments
    if limit is None or used <= limit:
        return script, False
    reasoning = script.reasoning[: limit * 4]
    left = max(0, limit - tokens(reasoning))
    return Script(reasoning=reasoning, content=script.content[: left * 4], truncated=True), True


# --- reading the request -------------------------------------------------------------------


def _messages(body: Mapping[str, Any]) -> list[JSON]:
    raw = body.get("messages")
    if not isinstance(raw, list):
        return []
    return [m for m in raw if isinstance(m, dict)]


def text_of(content: Any) -> str:
    """The text of a message `content`: a string, or a list of parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str))
    return ""


# Context an agent harness adds to the user's turn (Claude Code's `<system-reminder>` blocks): not
# the user's words, so not what the simulated model quotes or puts in a tool's arguments.
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _REMINDER.sub("", text_of(message.get("content"))).strip()
    return ""


def quote_of(text: str, words: int = QUOTE_WORDS) -> str:
    """The first few words of a text, whitespace collapsed, with an ellipsis when cut."""
    parts = text.split()
    head = " ".join(parts[:words])
    return head + "…" if len(parts) > words else head


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _function_tools(body: Mapping[str, Any]) -> list[JSON]:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return []
    found = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            found.append(function)
    return found


# --- the three scenarios -------------------------------------------------------------------


def _plain_answer(quote: str) -> str:
    if not quote:
        return "Hello! This is the simulated upstream. Ask me anything."
    return f'You said: "{quote}". This is a short answer from the simulated upstream.'


def _reasoning_plain(quote: str, depth: Depth) -> str:
    if depth is Depth.NONE:
        return ""
    lines = [
        f'The user wrote: "{quote}".' if quote else "The user sent no text.",
        "They want a short, direct answer.",
    ]
    if depth is Depth.DEEP:
        lines += _DEEP_LINES
    lines.append("I will reply in one or two sentences.")
    return " ".join(lines)


# Deep thinking is visibly longer, so a user can see a level change had an effect.
_DEEP_LINES = [
    "Let me look at this more carefully before answering.",
    "First, what exactly is being asked, and is any part of it ambiguous?",
    "Second, which facts do I need, and am I sure of each of them?",
    "Third, what would a careful expert add or warn about here?",
    "Let me check the answer against the question once more: it is consistent.",
    "I considered the alternatives and none of them fits better.",
]


def _tool_call(chosen: list[JSON], user_text: str, quote: str, depth: Depth) -> Script:
    asks = _split_asks(user_text, len(chosen))
    calls = tuple(
        ToolCall(
            id="call_" + uuid.uuid4().hex[:24],
            name=tool["name"],
            arguments=orjson.dumps(with_echo(tool, arguments_for(tool.get("parameters"), ask), ask)).decode(),
        )
        for tool, ask in zip(chosen, asks, strict=True)
    )
    reasoning = ""
    if depth is not Depth.NONE:
        names = " and ".join(c.name for c in calls)
        lines = [f'The user wants: "{quote}".', f"I have a tool for this: {names}."]
        if depth is Depth.DEEP:
            lines += ["Let me make sure the arguments match the schema before calling it."]
        lines.append("I will call it now and answer once the result is back.")
        reasoning = " ".join(lines)
    return Script(reasoning=reasoning, content="", tool_calls=calls)


def _chosen_tools(body: Mapping[str, Any], tools: list[JSON], user_text: str) -> list[JSON]:
    forced = body.get("tool_choice")
    if isinstance(forced, dict):
        name = (forced.get("function") or {}).get("name")
        named = [t for t in tools if t["name"] == name]
        if named:
            return named[:1]
    callable_ = [dict(tool) for tool in ranked(tools, user_text)]  # (harmless first, no agent tools)
    if len(callable_) >= 2 and _asks_two_things(user_text) and body.get("parallel_tool_calls") is not False:
        return callable_[:2]
    return callable_[:1]


_TWO_ASKS = re.compile(r"\s(?:and|also|then)\s", re.IGNORECASE)


def _asks_two_things(text: str) -> bool:
    return bool(_TWO_ASKS.search(text))


def _split_asks(text: str, count: int) -> list[str]:
    if count == 1:
        return [text]
    parts = _TWO_ASKS.split(text, maxsplit=1)
    return [parts[0], parts[-1]]


def _results_since_the_user_wrote(messages: list[JSON]) -> list[JSON]:
    """The tool results after the user's last own words (a user message that is only a harness's
    `<system-reminder>` is not the user writing): none when the user wrote last."""
    results: list[JSON] = []
    for message in reversed(messages):
        role = message.get("role")
        if role == "tool":
            results.append(message)
        elif role == "user" and _REMINDER.sub("", text_of(message.get("content"))).strip():
            break
    results.reverse()
    return results


def _tool_result_answer(messages: list[JSON], results: list[JSON], quote: str, depth: Depth) -> Script:
    names = _call_names(messages)
    said = [
        f"The {names.get(str(m.get('tool_call_id')), 'tool')} tool returned: "
        f'"{_clip(text_of(m.get("content")), RESULT_CHARS)}".'
        for m in results
    ]
    reasoning = ""
    if depth is not Depth.NONE:
        lines = ["The tool result is back.", "I will summarise it for the user."]
        if depth is Depth.DEEP:
            lines.insert(1, "Let me check that the result really answers the question.")
        reasoning = " ".join(lines)
    tail = f' That answers "{quote}".' if quote else ""
    return Script(reasoning=reasoning, content=" ".join(said) + tail)


def _call_names(messages: list[JSON]) -> dict[str, str]:
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                function = call.get("function") or {}
                names[str(call.get("id"))] = str(function.get("name", "tool"))
    return names


# --- plausible arguments from a JSON schema ------------------------------------------------

_TEXT_NAMES = ("query", "q", "search", "question", "prompt", "text", "input", "keyword", "topic", "message")
_FIXED_STRINGS = (
    (("location", "city", "place", "address", "region"), "Paris"),
    (("url", "uri", "link", "href"), "https://example.com"),
    (("email",), "user@example.com"),
    (("date", "day"), "2025-01-01"),
    (("lang", "language", "locale"), "en"),
    (("unit",), "celsius"),
    (("id",), "1"),
)


def arguments_for(schema: Any, user_text: str) -> JSON:
    """Arguments that satisfy a tool's (simple) parameters schema, using the user's words for free
    text, never for a string named like a command, code or a path (CODE_STRING, PATH_STRING).
    Function arguments are always an object, whatever the schema says."""
    return _object_for(schema if isinstance(schema, dict) else {}, user_text, depth=0)


def _value_for(name: str, schema: JSON, user_text: str, depth: int) -> Any:
    if "default" in schema and not _is_text_name(name):
        return schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options and isinstance(options[0], dict):
            return _value_for(name, options[0], user_text, depth)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        return _object_for(schema, user_text, depth)
    if kind == "array":
        items = schema.get("items")
        return [_value_for(name, items if isinstance(items, dict) else {}, user_text, depth + 1)]
    if kind == "integer":
        return int(schema.get("minimum", 3))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string_for(name, user_text)


def _object_for(schema: JSON, user_text: str, depth: int) -> JSON:
    properties = schema.get("properties")
    if depth > 4 or not isinstance(properties, dict) or not properties:
        return {}
    required = [p for p in schema.get("required", []) if p in properties] or list(properties)[:1]
    return {
        p: _value_for(p, properties[p] if isinstance(properties[p], dict) else {}, user_text, depth + 1)
        for p in required
    }


_WORD_BREAK = re.compile(r"[_\-\s.]+|(?<=[a-z0-9])(?=[A-Z])")


def _name_words(name: str) -> set[str]:
    """`search_query`, `searchQuery` and `search-query` all give {"search", "query"}."""
    return {w.lower() for w in _WORD_BREAK.split(name) if w}


def _is_text_name(name: str) -> bool:
    return bool(_name_words(name) & set(_TEXT_NAMES))


# A string named like one of these is run or opened by the agent: never the user's words (an
# unknown shell's `script`, a runner's `code`, an `input_path`), a fixed harmless value instead.
_CODE_NAMES = ("command", "cmd", "script", "code", "shell", "bash")
_DIR_NAMES = ("dir", "directory", "folder", "cwd")
_PATH_NAMES = ("path", "file", "filename")
CODE_STRING = echo_command("")
DIR_STRING = "."
PATH_STRING = "README.md"


def _named_like(words: set[str], names: tuple[str, ...], prefix: bool = True) -> bool:
    """`cmdline`, `shellcmd`, `sourceCode`, `workdir` and `file_path` are named like a command, a
    directory or a path (a directory and a path by how the name ends: `direction` is neither)."""
    return any(w.endswith(n) or (prefix and w.startswith(n)) for w in words for n in names)


def _string_for(name: str, user_text: str) -> str:
    words = _name_words(name)
    if _named_like(words, _CODE_NAMES):
        return CODE_STRING
    if _named_like(words, _DIR_NAMES, prefix=False):
        return DIR_STRING
    if _named_like(words, _PATH_NAMES, prefix=False):
        return PATH_STRING
    if not words & set(_TEXT_NAMES):
        for keys, value in _FIXED_STRINGS:
            if words & set(keys):
                return value
    return _clip(user_text, ARG_TEXT_CHARS) or "example"
