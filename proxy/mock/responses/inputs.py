"""Reading a Responses API request: OpenAI's validation, and the chat-shaped body the scenarios answer.

Pure. `validate` refuses what OpenAI refuses before looking at the content, with its wording:

- `Missing required parameter: 'model'.` (code `missing_required_parameter`; the same words for
  any missing field, e.g. `'tools[0].name'` when a chat-style tool is sent) — quoted in
  github.com/mattermost/mattermost-plugin-agents/issues/476;
- `Invalid value: 'x'. Supported values are: 'low', 'medium', and 'high'.` (code `invalid_value`,
  here for `reasoning.effort`, `reasoning.summary`, roles and item types) — the chat form of it is
  quoted in github.com/stanford-crfm/helm/pull/3501;
- `Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 10
  instead.` (code `integer_below_min_value`) — github.com/vectorize-io/hindsight/issues/58;
- `Invalid type for 'input': expected …, but got … instead.` (code `invalid_type`), OpenAI's
  pattern for a value of the wrong JSON type.

The accepted efforts are openai-python's `Reasoning.effort` (3.57: none … xhigh and max). Input
items the mock understands: messages, `reasoning`, `function_call` / `function_call_output`,
`custom_tool_call` / `custom_tool_call_output`, and `item_reference`; tools of type `function` and
`custom` (other tool types, e.g. `web_search`, are accepted and never called).

`chat_body` maps the conversation onto the chat-completions body `scenarios.answer` and the
dialects' knobs read: messages, tools flattened back into `{"type": "function", "function": …}`
(a custom tool becomes a function taking one string, `input`), `tool_choice`, and
`reasoning.effort` as `reasoning_effort`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.mock.scenarios import JSON, text_of

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
SUMMARIES = ("auto", "concise", "detailed")
# openai-python's shared Reasoning.context (which earlier turns' reasoning items the model is
# shown; gpt-5.6 defaults to all_turns, earlier models to current_turn).
CONTEXTS = ("auto", "current_turn", "all_turns")
ROLES = ("user", "assistant", "system", "developer")
ITEM_TYPES = (
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "item_reference",
)
TOOL_CALLS = ("function_call", "custom_tool_call")
MIN_OUTPUT_TOKENS = 16
_REQUIRED = {
    "message": ("role", "content"),
    "reasoning": ("summary",),
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id", "output"),
    "custom_tool_call": ("call_id", "name", "input"),
    "custom_tool_call_output": ("call_id", "output"),
    "item_reference": ("id",),
}
_CUSTOM_INPUT_SCHEMA = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}


@dataclass(frozen=True)
class Problem:
    """An error OpenAI answers instead of a response: status and the fields of its error body."""

    status: int
    message: str
    param: str | None = None
    code: str | None = None


def missing(param: str) -> Problem:
    return Problem(400, f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


def invalid_value(param: str, value: Any, supported: Sequence[str]) -> Problem:
    listed = ", ".join(f"'{v}'" for v in supported[:-1]) + f", and '{supported[-1]}'"
    message = f"Invalid value: '{value}'. Supported values are: {listed}."
    return Problem(400, message, param, "invalid_value")


def invalid_type(param: str, expected: str, value: Any) -> Problem:
    message = f"Invalid type for '{param}': expected {expected}, but got {_kind(value)} instead."
    return Problem(400, message, param, "invalid_type")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


# --- validation ---------------------------------------------------------------------------------


def validate(body: Any) -> Problem | None:
    """The first thing OpenAI would refuse in this body, or None."""
    if not isinstance(body, dict):
        return Problem(400, "The request body must be a JSON object.")
    checks: tuple[Callable[[Mapping[str, Any]], Problem | None], ...] = (
        _model,
        _input,
        _reasoning,
        _tools,
        _include,
        _max_output_tokens,
        _previous_response_id,
    )
    for check in checks:
        problem = check(body)
        if problem is not None:
            return problem
    return None


def _model(body: Mapping[str, Any]) -> Problem | None:
    model = body.get("model")
    if model is None:
        return missing("model")
    return None if isinstance(model, str) else invalid_type("model", "a string", model)


def _input(body: Mapping[str, Any]) -> Problem | None:
    raw = body.get("input")
    if raw is None or isinstance(raw, str):
        return None
    if not isinstance(raw, list):
        return invalid_type("input", "one of a string or array of input items", raw)
    for index, item in enumerate(raw):
        problem = _item(item, f"input[{index}]")
        if problem is not None:
            return problem
    return None


def item_type(item: Mapping[str, Any]) -> Any:
    """An item's type; a bare `{"role", "content"}` is a message."""
    return item.get("type", "message" if "role" in item else None)


def _item(item: Any, where: str) -> Problem | None:
    if not isinstance(item, dict):
        return invalid_type(where, "an object", item)
    kind = item_type(item)
    if kind is None:
        return missing(f"{where}.type")
    if kind not in ITEM_TYPES:
        return invalid_value(f"{where}.type", kind, ITEM_TYPES)
    for field in _REQUIRED[kind]:
        if item.get(field) is None:
            return missing(f"{where}.{field}")
    if kind == "message" and item["role"] not in ROLES:
        return invalid_value(f"{where}.role", item["role"], ROLES)
    for field in ("call_id", "name", "arguments", "input", "id"):
        if kind != "message" and field in item and not isinstance(item[field], str):
            return invalid_type(f"{where}.{field}", "a string", item[field])
    blob = item.get("encrypted_content")
    if kind == "reasoning" and blob is not None and not isinstance(blob, str):
        return invalid_type(f"{where}.encrypted_content", "a string", blob)
    return None


def _reasoning(body: Mapping[str, Any]) -> Problem | None:
    reasoning = body.get("reasoning")
    if reasoning is None:
        return None
    if not isinstance(reasoning, dict):
        return invalid_type("reasoning", "an object", reasoning)
    effort, summary = reasoning.get("effort"), reasoning.get("summary")
    if effort is not None and effort not in EFFORTS:
        return invalid_value("reasoning.effort", effort, EFFORTS)
    if summary is not None and summary not in SUMMARIES:
        return invalid_value("reasoning.summary", summary, SUMMARIES)
    context = reasoning.get("context")
    if context is not None and context not in CONTEXTS:
        return invalid_value("reasoning.context", context, CONTEXTS)
    return None


def _tools(body: Mapping[str, Any]) -> Problem | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        return invalid_type("tools", "an array", tools)
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            return invalid_type(f"tools[{index}]", "an object", tool)
        if tool.get("type") is None:
            return missing(f"tools[{index}].type")
        if tool["type"] in ("function", "custom") and not isinstance(tool.get("name"), str):
            return missing(f"tools[{index}].name")
    return None


def _include(body: Mapping[str, Any]) -> Problem | None:
    include = body.get("include")
    if include is None or (isinstance(include, list) and all(isinstance(i, str) for i in include)):
        return None
    return invalid_type("include", "an array of strings", include)


def _max_output_tokens(body: Mapping[str, Any]) -> Problem | None:
    limit = body.get("max_output_tokens")
    if limit is None:
        return None
    if not isinstance(limit, int) or isinstance(limit, bool):
        return invalid_type("max_output_tokens", "an integer", limit)
    if limit < MIN_OUTPUT_TOKENS:
        message = (
            "Invalid 'max_output_tokens': integer below minimum value. "
            f"Expected a value >= {MIN_OUTPUT_TOKENS}, but got {limit} instead."
        )
        return Problem(400, message, "max_output_tokens", "integer_below_min_value")
    return None


def _previous_response_id(body: Mapping[str, Any]) -> Problem | None:
    previous = body.get("previous_response_id")
    if previous is None or isinstance(previous, str):
        return None
    return invalid_type("previous_response_id", "a string", previous)


# --- reading a valid request --------------------------------------------------------------------


def input_items(body: Mapping[str, Any]) -> list[JSON]:
    """The request's `input` as items (a string is one user message)."""
    raw = body.get("input")
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    return [dict(item) for item in raw] if isinstance(raw, list) else []


def effort(body: Mapping[str, Any]) -> str | None:
    reasoning = body.get("reasoning")
    value = reasoning.get("effort") if isinstance(reasoning, dict) else None
    return value if isinstance(value, str) else None


def summary(body: Mapping[str, Any]) -> str | None:
    reasoning = body.get("reasoning")
    value = reasoning.get("summary") if isinstance(reasoning, dict) else None
    return value if isinstance(value, str) else None


def includes(body: Mapping[str, Any], what: str) -> bool:
    include = body.get("include")
    return isinstance(include, list) and what in include


def custom_tool_names(body: Mapping[str, Any]) -> frozenset[str]:
    tools = body.get("tools")
    return frozenset(t["name"] for t in tools or () if isinstance(t, dict) and t.get("type") == "custom")


# --- the chat-shaped body -----------------------------------------------------------------------


def chat_body(body: Mapping[str, Any], items: Sequence[Mapping[str, Any]]) -> JSON:
    """The chat-completions body with the same conversation, tools and knobs (see the module doc)."""
    chat: JSON = {"model": body["model"], "messages": _messages(body.get("instructions"), items)}
    tools = [t for t in (_chat_tool(t) for t in body.get("tools") or ()) if t is not None]
    if tools:
        chat["tools"] = tools
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        chat["tool_choice"] = choice
    if "parallel_tool_calls" in body:
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    if effort(body) is not None:
        chat["reasoning_effort"] = effort(body)
    return chat


def _messages(instructions: Any, items: Sequence[Mapping[str, Any]]) -> list[JSON]:
    messages: list[JSON] = []
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    for item in items:
        kind = item_type(item)
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": text_of(item["content"])})
        elif kind in TOOL_CALLS:
            _add_call(messages, _chat_call(item))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item["output"]
            content = output if isinstance(output, str) else text_of(output)
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": content})
    return messages


def _chat_call(item: Mapping[str, Any]) -> JSON:
    if item_type(item) == "custom_tool_call":
        arguments = orjson.dumps({"input": item["input"]}).decode()
    else:
        arguments = item["arguments"]
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": item["name"], "arguments": arguments},
    }


def _add_call(messages: list[JSON], call: JSON) -> None:
    """Calls in a row are one assistant message, as a chat history holds them."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
        last["tool_calls"].append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _chat_tool(tool: Any) -> JSON | None:
    if not isinstance(tool, dict) or tool.get("type") not in ("function", "custom"):
        return None  # hosted tools (web_search, file_search, …): accepted, never called
    function: JSON = {"name": tool["name"]}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    if tool["type"] == "custom":
        function["parameters"] = _CUSTOM_INPUT_SCHEMA
    elif isinstance(tool.get("parameters"), dict):
        function["parameters"] = tool["parameters"]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom") and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return None  # allowed_tools, hosted tool types: the model chooses as with "auto"


def custom_input(arguments: str) -> str:
    """The free-text input of a custom tool call the scenarios wrote as `{"input": …}`."""
    value = orjson.loads(arguments).get("input", "")
    return value if isinstance(value, str) else orjson.dumps(value).decode()
