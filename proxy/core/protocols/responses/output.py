"""The Responses API's output objects, built from values: output items, their content parts, the
usage and the `Response` object (what proxy.core.protocols.responses.events streams).

Pure. Shapes follow the openai-python types (`openai.types.responses`, checked against 3.57):
`ResponseReasoningItem`, `ResponseOutputMessage` + `ResponseOutputText`, `ResponseFunctionToolCall`,
`ResponseUsage`, `Response`, and the Open Responses specification's schemas (`ResponseResource`,
`Message`, `FunctionCall`, `ReasoningBody`, `Usage`; tests/fixtures/openresponses/). Every field
either requires is always present (the `Response` object: every field `ResponseResource` requires,
`presence_penalty` and `frequency_penalty` included, which openai-python does not declare);
optional ones only when the proxy has a value for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from proxy.core import jsonio
from proxy.core.usage import ESTIMATED_MARKER, cached_input

ItemStatus = Literal["in_progress", "completed", "incomplete"]
ResponseStatus = Literal["in_progress", "completed", "incomplete", "failed"]

# What a `Response` repeats of its request, each with the API's documented default for a request
# that leaves it out (a field sent as null counts as absent). Together with the fields computed in
# `echo_fields` (tools, text, reasoning) and the ones that say what the bridge did (`background`,
# `service_tier`), they are every field Open Responses' `ResponseResource` requires of a response
# (docs/responses.md, "The response object"). Mutable defaults are made anew per object.
ECHO_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "instructions": None,
        "previous_response_id": None,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "truncation": "disabled",
        "temperature": 1.0,
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "store": True,
        "safety_identifier": None,
        "prompt_cache_key": None,
        "user": None,
    }
)
# The request fields a `Response` repeats: those above, and the three `echo_fields` shapes.
ECHO_KEYS = (*ECHO_DEFAULTS, "metadata", "tools", "text", "reasoning")
# What the bridge did whatever the request asked: it answers in the request (no background mode)
# and has no service tiers.
BRIDGE_FACTS: Mapping[str, Any] = MappingProxyType({"background": False, "service_tier": "default"})
# The tool types a bridged upstream gets (as chat functions); hosted tools are left out of it
# (proxy.core.protocols.responses.tools), so a response does not list them among its tools.
BRIDGED_TOOL_TYPES = frozenset(("function", "namespace", "custom"))
# `ResponseError.code` is a closed set; any other code (a chat error's) becomes "server_error".
ERROR_CODES = frozenset(("server_error", "rate_limit_exceeded", "invalid_prompt"))

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class ResponseFrame:
    """What the caller knows of the response before the first event: its id, the model it names,
    when it was created (epoch seconds), whether the request asked for a reasoning summary, the
    request fields the response repeats (`ECHO_KEYS`; one left out gets its default) and the
    caller's wall clock, read for `completed_at` when the response completes (the core never reads
    the clock itself; None: `completed_at` stays null)."""

    id: str
    model: str
    created_at: float
    summary: bool = False
    echo: Mapping[str, Any] = field(default_factory=dict)
    clock: Clock | None = None

    @classmethod
    def for_request(
        cls,
        request: Mapping[str, Any],
        *,
        response_id: str,
        model: str,
        created_at: float,
        clock: Clock | None = None,
        can_store: bool = True,
    ) -> ResponseFrame:
        """The frame of a Responses request body: its echoed fields (`echo_fields`), and `summary`
        when it asked `reasoning.summary` (auto | concise | detailed). `can_store`: whether the
        response can be kept at all (False: the state store is off, and `store` says false)."""
        reasoning = request.get("reasoning")
        summary = reasoning.get("summary") if isinstance(reasoning, Mapping) else None
        echo = echo_fields(request)
        if not can_store:
            echo["store"] = False
        wants = isinstance(summary, str) and summary not in ("", "none")
        return cls(response_id, model, created_at, summary=wants, echo=MappingProxyType(echo), clock=clock)


def echo_fields(request: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a `Response` repeats of its request, as the response states them: the ones the
    request set (not null), `tools` as the model had them (function tools with their `description`,
    `parameters` and `strict`, null where not sent; hosted tools, left out of a bridged request, not
    listed), `text` with its `format` (default `text`), `reasoning` as `{effort, summary}`."""
    echo = {key: request[key] for key in ECHO_KEYS if request.get(key) is not None}
    tools = request.get("tools")
    if isinstance(tools, list):
        echo["tools"] = [
            _tool(tool)
            for tool in tools
            if isinstance(tool, Mapping) and tool.get("type") in BRIDGED_TOOL_TYPES
        ]
    text = request.get("text")
    if isinstance(text, Mapping):
        echo["text"] = {**text, "format": text.get("format") or {"type": "text"}}
    reasoning = request.get("reasoning")
    if isinstance(reasoning, Mapping):
        summary = reasoning.get("summary")
        echo["reasoning"] = {
            "effort": reasoning.get("effort"),
            "summary": reasoning.get("generate_summary") if summary is None else summary,
        }
    return echo


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    if tool.get("type") != "function":
        return dict(tool)  # (namespace and custom tools as declared)
    out = {"type": "function", "name": tool.get("name")}
    for key in ("description", "parameters", "strict"):
        out[key] = tool.get(key)
    return out


@dataclass(frozen=True, slots=True)
class ReasoningItemFacts:
    """What the sealing callback gets for one reasoning item as it is done; it returns the item's
    `encrypted_content`, or None for none.

    `details`: the raw `reasoning_details` entries that came while the item was open or its calls
    streamed, as sent. `call_ids`: the tool calls that directly followed it (its item is done with
    them), in order; `signatures`: their `extra_content` (Gemini's thought signatures) by call id.
    `status` is "incomplete" when the output was cut inside the reasoning (max tokens, filter)."""

    item_id: str
    response_id: str
    model: str
    text: str
    details: tuple[Any, ...] = ()
    call_ids: tuple[str, ...] = ()
    signatures: Mapping[str, Any] = field(default_factory=dict)
    status: ItemStatus = "completed"


Seal = Callable[[ReasoningItemFacts], str | None]
# Makes an id from its kind's prefix: "rs" (reasoning item), "msg", "fc" (function_call item),
# "call" (a call id the chat stream did not give).
IdFactory = Callable[[str], str]


def output_text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_text_part(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


def summary_text_part(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def reasoning_item(
    item_id: str,
    text: str | None,
    *,
    summary: bool,
    status: ItemStatus,
    encrypted_content: str | None = None,
) -> dict[str, Any]:
    """A reasoning item. Its text goes in one `summary_text` part (`summary`) or one
    `reasoning_text` content part; None (not begun) leaves both lists empty."""
    item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": []}
    if summary:
        if text is not None:
            item["summary"].append(summary_text_part(text))
    else:
        item["content"] = [] if text is None else [reasoning_text_part(text)]
    if encrypted_content is not None:
        item["encrypted_content"] = encrypted_content
    item["status"] = status
    return item


def message_item(item_id: str, text: str | None, *, status: ItemStatus) -> dict[str, Any]:
    """An assistant message with one `output_text` part (none while not begun)."""
    content = [] if text is None else [output_text_part(text)]
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def function_call_item(
    item_id: str,
    call_id: str,
    name: str,
    arguments: str,
    *,
    status: ItemStatus,
    namespace: str | None = None,
) -> dict[str, Any]:
    item = {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }
    if namespace is not None:
        item["namespace"] = namespace
    return item


def custom_tool_call_item(
    item_id: str, call_id: str, name: str, input_: str, namespace: str | None = None
) -> dict[str, Any]:
    """A freeform tool's call (`ResponseCustomToolCall` has no status)."""
    item = {"id": item_id, "type": "custom_tool_call", "call_id": call_id, "name": name, "input": input_}
    if namespace is not None:
        item["namespace"] = namespace
    return item


def count(container: Any, *keys: str) -> int:
    """The first of `keys` in `container` holding a count (an int, not a bool), else 0."""
    if isinstance(container, Mapping):
        for key in keys:
            value = container.get(key)
            if type(value) is int:
                return value
    return 0


def responses_usage(usage: Any) -> dict[str, Any] | None:
    """A chat `usage` object in the Responses shape (None when there is none).

    prompt_tokens → input_tokens; the upstream's cache hits in whichever shape it reports them
    (proxy.core.usage.cached_input: OpenAI's prompt_tokens_details.cached_tokens, DeepSeek's
    prompt_cache_hit_tokens, Kimi's top-level cached_tokens; 0 when it says nothing) →
    input_tokens_details.cached_tokens; completion_tokens →
    output_tokens; completion_tokens_details.reasoning_tokens → output_tokens_details.reasoning_tokens
    (with the proxy's `reasoning_tokens_estimated` marker when it estimated the count);
    total_tokens (or their sum). `cache_write_tokens`, which the type requires, is the provider's
    prompt_tokens_details.cache_write_tokens when it sends one, else 0."""
    if not isinstance(usage, Mapping):
        return None
    prompt_details = usage.get("prompt_tokens_details")
    input_tokens = count(usage, "prompt_tokens")
    output_tokens = count(usage, "completion_tokens")
    cached = cached_input(usage) or 0
    completion_details = usage.get("completion_tokens_details")
    reasoning_details: dict[str, Any] = {"reasoning_tokens": count(completion_details, "reasoning_tokens")}
    if isinstance(completion_details, Mapping) and completion_details.get(ESTIMATED_MARKER) is True:
        reasoning_details[ESTIMATED_MARKER] = True  # the proxy's estimate says so (proxy.core.usage)
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": cached,
            "cache_write_tokens": count(prompt_details, "cache_write_tokens"),
        },
        "output_tokens": output_tokens,
        "output_tokens_details": reasoning_details,
        "total_tokens": count(usage, "total_tokens") or input_tokens + output_tokens,
    }


def response_error(message: str, code: str) -> dict[str, Any]:
    return {"code": code if code in ERROR_CODES else "server_error", "message": message}


def response_object(
    frame: ResponseFrame,
    *,
    status: ResponseStatus,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    incomplete_reason: str | None = None,
) -> dict[str, Any]:
    """The `Response` object: the frame's id, model and times, the echoed request fields (their
    defaults where the request left them out), what the bridge did, and what the stream has
    produced so far. `completed_at` is the frame's clock when the status is completed, else null."""
    clock = frame.clock
    out: dict[str, Any] = {
        "id": frame.id,
        "object": "response",
        "created_at": int(frame.created_at),
        "completed_at": int(clock()) if clock is not None and status == "completed" else None,
        "model": frame.model,
        "status": status,
        "output": output,
        "error": error,
        "incomplete_details": None if incomplete_reason is None else {"reason": incomplete_reason},
        "usage": usage,
    }
    echo = frame.echo
    for key, default in ECHO_DEFAULTS.items():
        out[key] = echo.get(key, default)
    out["tools"] = echo.get("tools", [])
    out["text"] = echo.get("text", {"format": {"type": "text"}})
    out["reasoning"] = echo.get("reasoning")
    out["metadata"] = echo.get("metadata", {})
    out.update(BRIDGE_FACTS)
    return out


def custom_input(arguments: str) -> str:
    """A freeform tool's input from its chat call's arguments (`{"input": "…"}`, the one string
    argument the bridge declared); arguments that are not that object are the input as they came."""
    try:
        parsed = jsonio.loads(arguments.encode())
    except ValueError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get("input"), str):
        return str(parsed["input"])
    return arguments


def first_choice(choices: Any) -> Mapping[str, Any] | None:
    """The chunk's choice 0 (a response has one output)."""
    if isinstance(choices, list):
        for choice in choices:
            if isinstance(choice, Mapping) and choice.get("index", 0) == 0:
                return choice
    return None


def error_facts(error: Any) -> tuple[str, str]:
    """The message and code of an error chunk's `error`."""
    if isinstance(error, Mapping):
        message, code = error.get("message"), error.get("code")
        return (
            message if isinstance(message, str) else "upstream error",
            code if isinstance(code, str) else "",
        )
    return (error if isinstance(error, str) and error else "upstream error", "")


def frame(event: Mapping[str, Any]) -> bytes:
    """One event as SSE: `event: <type>`, `data: <json>`, a blank line."""
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + jsonio.dumps(event) + b"\n\n"


def frames(events: Iterable[Mapping[str, Any]]) -> bytes:
    return b"".join([frame(event) for event in events])


def message_frames(events: Iterable[Mapping[str, Any]]) -> bytes:
    """Events in the WebSocket mode's form (a socket turn's door output): each event's JSON, the
    very text of its SSE `data:` line, then a newline. The JSON holds no raw newline (orjson
    escapes them in strings), so the socket splits a write into its messages with one `split`."""
    return b"".join([jsonio.dumps(event) + b"\n" for event in events])
