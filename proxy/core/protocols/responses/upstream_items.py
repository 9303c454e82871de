"""A whole Responses API object read as chat's (issue 29): the items of an upstream's `Response`
(message parts, reasoning texts and their encrypted blobs, tool calls), its usage, its finish
reason and its error, and `completion_from_response`, the non-stream answer as a `chat.completion`.

Pure. proxy.core.protocols.responses.upstream_decode reads the streamed form with the same
helpers, so a stream and a whole answer say the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from proxy.core import jsonio
from proxy.core.errors import error_payload
from proxy.core.protocols.responses.output import count

ENCRYPTED_TYPE: Final = "reasoning.encrypted"
ENCRYPTED_FORMAT: Final = "openai-responses-v1"
ERROR_TYPE: Final = "upstream_error"
INCOMPLETE_FINISH: Final = {"max_output_tokens": "length", "content_filter": "content_filter"}
CALLS: Final = ("function_call", "custom_tool_call")
REASONING: Final = ("summary_text", "reasoning_text")
DELTA_FIELD: Final = {"output_text": "content", "refusal": "refusal"}
PART_KINDS: Final = frozenset((*DELTA_FIELD, *REASONING))  # the text parts of message and reasoning items


def completion_from_response(response: Mapping[str, Any]) -> dict[str, Any]:
    """A whole `Response` as a `chat.completion`; a failed one as an `{"error": …}` body (the
    caller chooses the status)."""
    error = response.get("error")
    if response.get("status") == "failed" or (isinstance(error, Mapping) and error):
        message, code = error_facts(error)
        return error_payload(message, ERROR_TYPE, code)
    texts: dict[str, list[str]] = {"output_text": [], "refusal": [], "reasoning": []}
    details: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for item in list_of(response.get("output")):
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind == "reasoning":
            texts["reasoning"] += reasoning_texts(item)
            detail = encrypted_detail(item, len(details))
            details += [] if detail is None else [detail]
        elif kind == "message":
            for part_kind, _, text in text_parts(item):
                texts.get(part_kind, []).append(text)
        elif kind in CALLS:
            arguments = str(item.get(call_field(item)) or "")
            if kind == "custom_tool_call":
                arguments = jsonio.dumps({"input": arguments}).decode()
            function = {"name": str(item.get("name") or ""), "arguments": arguments}
            calls.append({"id": call_id(item), "type": "function", "function": function})
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts["output_text"]) or None}
    extra = {
        "refusal": "".join(texts["refusal"]),
        "reasoning_content": "\n\n".join(texts["reasoning"]),
        "reasoning_details": details,
        "tool_calls": calls,
    }
    reply.update((key, value) for key, value in extra.items() if value)
    incomplete = response.get("status") == "incomplete"
    finish = finish_reason(response, incomplete=incomplete, called=bool(calls))
    out: dict[str, Any] = {
        "id": str(response.get("id") or ""),
        "object": "chat.completion",
        "created": seconds(response.get("created_at")),
        "model": str(response.get("model") or ""),
        "choices": [{"index": 0, "message": reply, "finish_reason": finish, "logprobs": None}],
    }
    usage = chat_usage(response.get("usage"))
    return out if usage is None else {**out, "usage": usage}


def list_of(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def seconds(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def escaped(text: str) -> str:
    """`text` as it is written inside a JSON string: escaping is per character, so the escaped
    pieces of a text add up to the escaped text."""
    return jsonio.dumps(text)[1:-1].decode()


def text_field(kind: str) -> str:
    """The field of a part's (or a done event's) whole text."""
    return kind if kind in ("refusal", "arguments", "input") else "text"


def call_field(item: Mapping[str, Any]) -> str:
    return "input" if item.get("type") == "custom_tool_call" else "arguments"


def call_id(item: Mapping[str, Any]) -> str:
    return str(item.get("call_id") or item.get("id") or "")


def text_parts(item: Mapping[str, Any]) -> list[tuple[str, int, str]]:
    """A message's or reasoning item's text parts: (part type, part index, text)."""
    out: list[tuple[str, int, str]] = []
    for field in ("summary", "content"):
        for number, part in enumerate(list_of(item.get(field))):
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind in PART_KINDS and isinstance(part.get(text_field(kind)), str):
                out.append((kind, number, part[text_field(kind)]))
    return out


def reasoning_texts(item: Mapping[str, Any]) -> list[str]:
    """A reasoning item's non-empty texts: its summary when it has one, else its raw text."""
    parts = [(kind, text) for kind, _, text in text_parts(item) if text]
    summary = [text for kind, text in parts if kind == "summary_text"]
    return summary or [text for kind, text in parts if kind == "reasoning_text"]


def encrypted_detail(item: Mapping[str, Any], index: int) -> dict[str, Any] | None:
    """The `reasoning_details` entry of a reasoning item with `encrypted_content` (else None)."""
    data = item.get("encrypted_content")
    if item.get("type") != "reasoning" or not isinstance(data, str) or not data:
        return None
    summary = [text for kind, _, text in text_parts(item) if kind == "summary_text"]
    detail = {"type": ENCRYPTED_TYPE, "id": str(item.get("id") or ""), "data": data}
    return {**detail, "format": ENCRYPTED_FORMAT, "index": index, "summary": summary}


def finish_reason(response: Mapping[str, Any], *, incomplete: bool, called: bool) -> str:
    details = response.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, Mapping) else None
    if incomplete or reason is not None:
        return INCOMPLETE_FINISH.get(reason, "length") if isinstance(reason, str) else "length"
    return "tool_calls" if called else "stop"


def chat_usage(usage: Any) -> dict[str, Any] | None:
    """A Responses `usage` in the chat shape (None when there is none)."""
    if not isinstance(usage, Mapping):
        return None
    prompt, completion = count(usage, "input_tokens"), count(usage, "output_tokens")
    cached = count(usage.get("input_tokens_details"), "cached_tokens")
    reasoning = count(usage.get("output_tokens_details"), "reasoning_tokens")
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": count(usage, "total_tokens") or prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def error_facts(error: Any) -> tuple[str, str]:
    """The message and code of a Responses error (`ResponseError`, or an `error` event)."""
    error = error if isinstance(error, Mapping) else {}
    message, code = error.get("message"), error.get("code")
    message = message if isinstance(message, str) and message else "The upstream response failed."
    return message, code if isinstance(code, str) and code else "upstream_failed"
