"""Chat completions spoken to an upstream over its Responses API (issue 29): the internal chat
request → a `POST /v1/responses` body, for the requests OpenAI refuses on chat completions.

OpenAI's GPT-5.4 and later refuse function tools with a `reasoning_effort` other than `none` on
`/v1/chat/completions` ("use /v1/responses"). Silently dropping the effort is the downgrade this
proxy refuses, so for entries that say so (providers.yaml `chat_tools_with_reasoning: responses`)
such a request goes to the upstream's Responses API instead, and its answer is decoded back into
chat chunks (proxy.core.protocols.responses.upstream_decode) before the response pipeline.

Pure. `responses_request(chat, effort=…)` maps:

- leading `system` / `developer` messages → `instructions`; later ones → `developer` input messages;
- `user` messages → input messages (text parts → `input_text`, `image_url` → `input_image`);
- `assistant` messages → their encrypted reasoning (`reasoning_details` entries of type
  `reasoning.encrypted`, format `openai-responses-v1`: what the decoder put there, kept by the
  client or restored by the replay store) as `reasoning` items first, then the text as an assistant
  message, then each tool call as a `function_call` item;
- `tool` messages → `function_call_output` items;
- `tools` (functions) → Responses function tools; `tool_choice`, `parallel_tool_calls`;
  `response_format` → `text.format`; `max_completion_tokens` / `max_tokens` → `max_output_tokens`;
  `temperature`, `top_p`, `user`, `stream` kept;
- always `store: false` with `include: ["reasoning.encrypted_content"]` (no state at OpenAI: the
  reasoning travels with the conversation) and `reasoning: {effort, summary: "auto"}` (the summary
  is what a chat client sees as `reasoning_content`).

Every other field is dropped and listed (`dropped`), for a trace note.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from proxy.core import jsonio
from proxy.core.errors import BadRequest, quoted
from proxy.core.protocols.responses.upstream_decode import ResponsesDecoder
from proxy.core.protocols.responses.upstream_items import (
    ENCRYPTED_FORMAT,
    ENCRYPTED_TYPE,
    completion_from_response,
)
from proxy.core.stream.chunk_template import KnownRun

__all__ = [
    "ResponsesAnswer",
    "UpstreamResponsesRequest",
    "over_responses_note",
    "responses_request",
    "wants_usage",
]

_KEPT: Final = ("model", "temperature", "top_p", "user", "parallel_tool_calls", "stream", "metadata")
_HANDLED: Final = frozenset(
    {
        *_KEPT,
        "messages",
        "tools",
        "tool_choice",
        "response_format",
        "max_tokens",
        "max_completion_tokens",
        "reasoning_effort",
        "stream_options",
        "store",
    }
)


@dataclass(frozen=True, slots=True)
class UpstreamResponsesRequest:
    body: dict[str, Any]
    dropped: tuple[str, ...]  # chat fields with no Responses equivalent, not sent


def responses_request(chat: Mapping[str, Any], *, effort: str) -> UpstreamResponsesRequest:
    """The Responses body for a chat request (already checked as a chat body)."""
    messages = chat.get("messages")
    if not isinstance(messages, list):
        raise BadRequest("messages must be a list.", param="messages")
    body: dict[str, Any] = {k: chat[k] for k in _KEPT if chat.get(k) is not None}
    instructions, items = _input(messages)
    if instructions:
        body["instructions"] = instructions
    body["input"] = items
    tools = [
        _tool(t) for t in chat.get("tools") or () if isinstance(t, Mapping) and t.get("type") == "function"
    ]
    if tools:
        body["tools"] = tools
        if chat.get("tool_choice") is not None:
            body["tool_choice"] = _tool_choice(chat["tool_choice"])
    text_format = _text_format(chat.get("response_format"))
    if text_format is not None:
        body["text"] = {"format": text_format}
    limit = chat.get("max_completion_tokens", chat.get("max_tokens"))
    if limit is not None:
        body["max_output_tokens"] = limit
    body["store"] = False
    body["include"] = ["reasoning.encrypted_content"]
    body["reasoning"] = {"effort": effort, "summary": "auto"}
    dropped = tuple(k for k, v in chat.items() if k not in _HANDLED and v is not None)
    return UpstreamResponsesRequest(body, dropped)


def _input(messages: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    instructions: list[str] = []
    items: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise BadRequest(f"messages[{i}] must be an object.", param=f"messages[{i}]")
        role = message.get("role")
        if role in ("system", "developer"):
            text = _text(message.get("content"))
            if not items:
                instructions.append(text)  # (leading ones: the model's instructions)
            else:
                items.append({"role": "developer", "content": text})
        elif role == "user":
            items.append({"role": "user", "content": _user_content(message.get("content"), i)})
        elif role == "assistant":
            items.extend(_assistant(message))
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": str(message.get("tool_call_id") or ""),
                    "output": _text(message.get("content")),
                }
            )
        else:
            raise BadRequest(
                f"messages[{i}] has role {quoted(role)}, which the Responses API has no place for.",
                param=f"messages[{i}].role",
            )
    return "\n\n".join(t for t in instructions if t), items


def _assistant(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for detail in message.get("reasoning_details") or ():
        if (
            isinstance(detail, Mapping)
            and detail.get("type") == ENCRYPTED_TYPE
            and detail.get("format", ENCRYPTED_FORMAT) == ENCRYPTED_FORMAT
            and isinstance(detail.get("data"), str)
        ):
            item: dict[str, Any] = {
                "type": "reasoning",
                "summary": [
                    {"type": "summary_text", "text": s}
                    for s in detail.get("summary") or ()
                    if isinstance(s, str)
                ],
                "encrypted_content": detail["data"],
            }
            if isinstance(detail.get("id"), str):
                item["id"] = detail["id"]
            out.append(item)
    text = _text(message.get("content"))
    if text:
        out.append({"role": "assistant", "content": text})
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            continue
        out.append(
            {
                "type": "function_call",
                "call_id": str(call.get("id") or ""),
                "name": str(function.get("name") or ""),
                "arguments": str(function.get("arguments") or ""),
            }
        )
    return out


def _text(content: Any) -> str:
    """A message's text: a string, or its text parts joined (other parts have no place here)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text") or "") for p in content if isinstance(p, Mapping) and p.get("type") == "text"
        )
    return ""


def _user_content(content: Any, i: int) -> str | list[dict[str, Any]]:
    if not isinstance(content, list):
        return _text(content)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            parts.append({"type": "input_text", "text": str(part.get("text") or "")})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            entry: dict[str, Any] = {"type": "input_image", "image_url": url, "detail": "auto"}
            if isinstance(image, Mapping) and image.get("detail") in ("low", "high", "auto"):
                entry["detail"] = image["detail"]
            parts.append(entry)
        else:
            raise BadRequest(
                f"messages[{i}].content[{j}] has type {quoted(kind)}, which is not carried to the "
                "Responses API.",
                param=f"messages[{i}].content[{j}].type",
            )
    return parts


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    function = tool.get("function")
    function = function if isinstance(function, Mapping) else {}
    out: dict[str, Any] = {"type": "function", "name": function.get("name")}
    for key in ("description", "parameters"):
        if function.get(key) is not None:
            out[key] = function[key]
    # A tool without `strict` is non-strict on chat completions but strict on the Responses API
    # (its schema tightened, optional fields made required): say what the client meant.
    out["strict"] = function.get("strict") is True
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        return {"type": "function", "name": name}
    if isinstance(choice, Mapping) and choice.get("type") == "allowed_tools":
        # chat: {"type": "allowed_tools", "allowed_tools": {"mode", "tools": [chat tools]}}
        allowed = choice.get("allowed_tools")
        allowed = allowed if isinstance(allowed, Mapping) else {}
        tools = [_tool(t) for t in allowed.get("tools") or () if isinstance(t, Mapping)]
        return {
            "type": "allowed_tools",
            "mode": allowed.get("mode", "auto"),
            "tools": [{"type": "function", "name": t["name"]} for t in tools],
        }
    return choice


def _text_format(response_format: Any) -> dict[str, Any] | None:
    if not isinstance(response_format, Mapping):
        return None
    kind = response_format.get("type")
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        spec = spec if isinstance(spec, Mapping) else {}
        out: dict[str, Any] = {"type": "json_schema", "name": spec.get("name"), "schema": spec.get("schema")}
        for key in ("description", "strict"):
            if spec.get(key) is not None:
                out[key] = spec[key]
        return out
    return None


def wants_usage(chat: Mapping[str, Any]) -> bool:
    """Whether the chat client asked for the usage chunk (`stream_options.include_usage`)."""
    options = chat.get("stream_options")
    return isinstance(options, Mapping) and options.get("include_usage") is True


def over_responses_note(dropped: tuple[str, ...], rule: str | None = None) -> tuple[str, str]:
    """The trace note that says the request went over the Responses API (English, Chinese), and
    why: the entry's `chat_tools_with_reasoning` (the default reason) or `reasoning_visible`."""
    if rule == "reasoning_visible":
        en = "Sent over the upstream's Responses API: its chat completions does not return the reasoning"
        zh = "经上游 Responses API 发送：其聊天接口不返回推理内容"
    else:
        en = (
            "Sent over the upstream's Responses API: its chat completions refuses function tools with a level"
        )
        zh = "经上游 Responses API 发送：其聊天接口不支持工具与推理级别同时使用"
    if dropped:
        en += f" (not carried: {', '.join(dropped)})"
        zh += f"（未转发：{', '.join(dropped)}）"
    return en, zh


class ResponsesAnswer:
    """The upstream's Responses answer as the internal chat exchange (a plan_chat.UpstreamDecoder):
    streamed events through proxy.core.protocols.responses.upstream_decode.ResponsesDecoder, a whole
    `Response` through completion_from_response."""

    def __init__(self, *, include_usage: bool) -> None:
        self._decoder = ResponsesDecoder(include_usage=include_usage)

    def feed(self, data: bytes) -> bytes:
        return self._decoder.feed(data)

    def feed_pieces(self, data: bytes) -> list[bytes | KnownRun]:
        return self._decoder.feed_pieces(data)

    def close(self) -> bytes:
        return self._decoder.close()

    def completion(self, body: bytes) -> bytes:
        try:
            parsed = jsonio.loads(body)
        except ValueError:
            return body  # (not JSON: the pipeline reports an unreadable answer, as for chat)
        if not isinstance(parsed, Mapping):
            return body
        return jsonio.dumps(completion_from_response(parsed))
