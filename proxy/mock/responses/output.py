"""What the simulated Responses API sends: output items, the `Response` object, and its events.

Pure: a `Script` (what the model says) and the request in, JSON-ready dicts and SSE frames out,
shaped like openai-python's `openai.types.responses` (the tests validate every event and object
against them). One stream, in order:

    response.created, response.in_progress (the response so far: `in_progress`, no output)
    reasoning  output_item.added; with `reasoning.summary` asked, per summary part:
               reasoning_summary_part.added, reasoning_summary_text.delta…,
               reasoning_summary_text.done, reasoning_summary_part.done; on a provider that shows
               raw reasoning: content_part.added (reasoning_text), reasoning_text.delta…,
               reasoning_text.done, content_part.done; then output_item.done (with
               `encrypted_content` when `include` asks for it)
    message    output_item.added, content_part.added (output_text), output_text.delta…,
               output_text.done, content_part.done, output_item.done
    calls      output_item.added, function_call_arguments.delta… and .done (a custom tool:
               custom_tool_call_input.delta… and .done), output_item.done
    response.completed, or response.incomplete when `max_output_tokens` cut the answer

Each event is an `event: <type>` line and a `data: <json>` line; `sequence_number` counts from 0;
there is no `[DONE]`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.mock.dialects import Counts, split_arguments, split_text
from proxy.mock.responses.inputs import custom_input, effort, summary
from proxy.mock.responses.seal import Ids, seal
from proxy.mock.scenarios import JSON, Script, ToolCall

SENTENCES_PER_SUMMARY_PART = 3
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Shape:
    """What the request asked of the output, and the provider's habits (`ResponsesTraits`)."""

    summary: bool  # `reasoning.summary` asked: summary parts on the reasoning item
    encrypted: bool  # `include` has `reasoning.encrypted_content`, on a provider that seals
    reasoning_text: bool  # the provider shows raw reasoning as `reasoning_text` content
    obfuscation: bool  # the provider pads delta events
    chunk_chars: int
    custom_tools: frozenset[str]  # tool names that are `custom` tools (free-text input)


# --- output items --------------------------------------------------------------------------------


def output_items(script: Script, ids: Ids, shape: Shape, *, incomplete: bool) -> list[JSON]:
    """The output items as they end: reasoning, then the message, then the tool calls."""
    items: list[JSON] = []
    if script.reasoning:
        items.append(reasoning_item(ids, script.reasoning, shape))
    if script.content:
        items.append(
            message_item(ids.new("msg"), script.content, "incomplete" if incomplete else "completed")
        )
    items += [call_item(ids, call, shape) for call in script.tool_calls]
    return items


def reasoning_item(ids: Ids, text: str, shape: Shape) -> JSON:
    item_id = ids.new("rs")
    item: JSON = {"id": item_id, "type": "reasoning"}
    if shape.encrypted:
        item["encrypted_content"] = seal(item_id, text, ids.created)
    parts = summary_parts(text) if shape.summary else []
    item["summary"] = [{"type": "summary_text", "text": p} for p in parts]
    if shape.reasoning_text:
        item["content"] = [{"type": "reasoning_text", "text": text}]
    return item


def summary_parts(text: str) -> list[str]:
    """The reasoning as summary parts of a few sentences each (deep thinking gives several)."""
    sentences = _SENTENCE_END.split(text.strip())
    step = SENTENCES_PER_SUMMARY_PART
    return [" ".join(sentences[i : i + step]) for i in range(0, len(sentences), step)]


def message_item(item_id: str, text: str, status: str) -> JSON:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "content": [_output_text(text)],
        "role": "assistant",
    }


def _output_text(text: str) -> JSON:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def call_item(ids: Ids, call: ToolCall, shape: Shape) -> JSON:
    if call.name in shape.custom_tools:
        return {
            "id": ids.new("ctc"),
            "type": "custom_tool_call",
            "call_id": call.id,
            "input": custom_input(call.arguments),
            "name": call.name,
        }
    return {
        "id": ids.new("fc"),
        "type": "function_call",
        "status": "completed",
        "arguments": call.arguments,
        "call_id": call.id,
        "name": call.name,
    }


# --- the Response object -------------------------------------------------------------------------


@dataclass(frozen=True)
class Head:
    """The response's identity and what it echoes of the request."""

    id: str
    created: int
    model: str
    body: Mapping[str, Any]
    thinking: bool  # the model reasons (the echoed effort is null otherwise)


def response_object(head: Head, output: Sequence[JSON], *, status: str, counts: Counts | None) -> JSON:
    """The `Response`: in progress (no output, no usage), completed or incomplete."""
    body = head.body
    asked = effort(body)
    return {
        "id": head.id,
        "object": "response",
        "created_at": head.created,
        "status": status,
        "background": False,
        "completed_at": head.created if status == "completed" else None,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": head.model,
        "output": list(output),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": {
            "effort": (asked or "medium") if head.thinking or asked == "none" else None,
            "summary": summary(body),
        },
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [_echo_tool(t) for t in body.get("tools") or ()],
        "top_logprobs": 0,
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage(counts) if counts is not None else None,
        "user": None,
        "metadata": body.get("metadata") or {},
    }


def _echo_tool(tool: Mapping[str, Any]) -> JSON:
    """Function tools come back with their defaults filled in (`strict` is on unless turned off)."""
    if tool.get("type") != "function":
        return dict(tool)
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict", True),
    }


def usage(counts: Counts) -> JSON:
    return {
        "input_tokens": counts.prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": counts.completion,
        "output_tokens_details": {"reasoning_tokens": counts.reasoning},
        "total_tokens": counts.total,
    }


# --- the stream ---------------------------------------------------------------------------------


def events(head: Head, final: JSON, shape: Shape) -> list[JSON]:
    """Every event of the stream (see the module doc), numbered; `final` is the finished Response."""
    shell = response_object(head, [], status="in_progress", counts=None)
    raw: list[tuple[str, JSON]] = [("response.created", {"response": shell})]
    raw.append(("response.in_progress", {"response": shell}))
    for index, item in enumerate(final["output"]):
        raw += _item_events(index, item, shape)
    raw.append((f"response.{final['status']}", {"response": final}))
    return [{"type": kind, "sequence_number": n, **fields} for n, (kind, fields) in enumerate(raw)]


def frame(event: Mapping[str, Any]) -> bytes:
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _item_events(index: int, item: JSON, shape: Shape) -> list[tuple[str, JSON]]:
    kind = item["type"]
    if kind == "reasoning":
        started: JSON = {"id": item["id"], "type": "reasoning", "summary": []}
        body = _reasoning_events(index, item, shape)
    elif kind == "message":
        started = {**item, "status": "in_progress", "content": []}
        body = _text_part_events(index, item["id"], 0, item["content"][0], "output_text", shape)
    elif kind == "function_call":
        started = {**item, "status": "in_progress", "arguments": ""}
        body = _argument_events(index, item, "function_call_arguments", item["arguments"], shape)
    else:
        started = {**item, "input": ""}
        body = _argument_events(index, item, "custom_tool_call_input", item["input"], shape)
    where = {"output_index": index}
    return [
        ("response.output_item.added", {**where, "item": started}),
        *body,
        ("response.output_item.done", {**where, "item": item}),
    ]


def _reasoning_events(index: int, item: JSON, shape: Shape) -> list[tuple[str, JSON]]:
    where = {"item_id": item["id"], "output_index": index}
    out: list[tuple[str, JSON]] = []
    for number, part in enumerate(item["summary"]):
        at = {**where, "summary_index": number}
        out.append(("response.reasoning_summary_part.added", {**at, "part": {**part, "text": ""}}))
        for piece in split_text(part["text"], shape.chunk_chars):
            out.append(("response.reasoning_summary_text.delta", _delta(at, piece, shape)))
        out.append(("response.reasoning_summary_text.done", {**at, "text": part["text"]}))
        out.append(("response.reasoning_summary_part.done", {**at, "part": part}))
    for number, part in enumerate(item.get("content") or ()):
        out += _text_part_events(index, item["id"], number, part, "reasoning_text", shape)
    return out


def _text_part_events(
    index: int, item_id: str, number: int, part: JSON, kind: str, shape: Shape
) -> list[tuple[str, JSON]]:
    """content_part.added, the text's deltas and done, content_part.done (an answer's output_text
    parts carry `logprobs`, empty)."""
    at = {"item_id": item_id, "output_index": index, "content_index": number}
    extra: JSON = {"logprobs": []} if kind == "output_text" else {}
    out: list[tuple[str, JSON]] = [("response.content_part.added", {**at, "part": {**part, "text": ""}})]
    for piece in split_text(part["text"], shape.chunk_chars):
        out.append((f"response.{kind}.delta", {**_delta(at, piece, shape), **extra}))
    out.append((f"response.{kind}.done", {**at, "text": part["text"], **extra}))
    out.append(("response.content_part.done", {**at, "part": part}))
    return out


def _argument_events(index: int, item: JSON, kind: str, text: str, shape: Shape) -> list[tuple[str, JSON]]:
    at = {"item_id": item["id"], "output_index": index}
    done_field = "arguments" if kind == "function_call_arguments" else "input"
    out = [(f"response.{kind}.delta", _delta(at, p, shape)) for p in split_arguments(text, shape.chunk_chars)]
    out.append((f"response.{kind}.done", {**at, done_field: text}))
    return out


def _delta(at: JSON, piece: str, shape: Shape) -> JSON:
    delta: JSON = {**at, "delta": piece}
    if shape.obfuscation:
        # OpenAI pads deltas so that their length does not reveal the token; clients ignore it.
        delta["obfuscation"] = "0123456789abcdef"[: 1 + len(piece.encode()) % 16]
    return delta
