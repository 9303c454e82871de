"""Realistic streams and the small helpers the trace tests share (tests/core/stream/test_trace.py,
test_tool_args.py): chunks as an upstream sends them, a builder, and what it made of them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import orjson

from proxy.core.controls import TraceMode
from proxy.core.stream.trace import TraceBuilder

SCHEMA = orjson.loads((Path(__file__).parents[3] / "docs" / "trace-event.schema.json").read_bytes())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

REASONING_SENTINEL = "REASONING-SENTINEL-4b1d"
SYSTEM_SENTINEL = "SYSTEM-PROMPT-SENTINEL-88c2"
SECRET = "sk-SECRET-SENTINEL-0e9f"
TOOL_OUTPUT_SENTINEL = "TOOL-OUTPUT-TAIL-SENTINEL"

ALL_TYPES = {
    "status",
    "reasoning.start",
    "reasoning.end",
    "tool_call.start",
    "tool_call.end",
    "tool_result",
    "error",
    "done",
}

Chunk = dict[str, Any]
Step = tuple[Chunk, bool]  # a chunk and whether it carried reasoning


# -- realistic streams -----------------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> Chunk:
    return {
        "id": "chatcmpl-7a1",
        "object": "chat.completion.chunk",
        "created": 1761725211,
        "model": "deepseek-flash",
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}],
    }


def usage_chunk(completion_tokens: int = 120) -> Chunk:
    body = chunk()
    body["choices"] = []
    body["usage"] = {"prompt_tokens": 310, "completion_tokens": completion_tokens, "total_tokens": 310 + 120}
    return body


def reasoning_steps(n: int) -> list[Step]:
    return [
        (chunk({"content": None, "reasoning_content": f"{REASONING_SENTINEL} {i}"}), True) for i in range(n)
    ]


def content_steps(text: str, pieces: int) -> list[Step]:
    size = max(1, len(text) // pieces)
    return [(chunk({"content": text[i : i + size]}), False) for i in range(0, len(text), size)]


def split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def tool_steps(index: int, call_id: str, name: str, arguments: str, pieces: int) -> list[Step]:
    """OpenAI's shape: id + name + empty arguments first, then argument fragments."""
    first = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    steps: list[Step] = [(chunk({"tool_calls": [first]}), False)]
    for piece in split(arguments, pieces):
        steps.append((chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), False))
    return steps


KB_ARGS = orjson.dumps({"query": "refund policy for EU orders", "top_k": 5, "api_key": SECRET}).decode()
WEATHER_ARGS = orjson.dumps({"city": "Paris", "days": 3}).decode()


def tool_turn() -> list[Step]:
    """Think, then call kb_search and get_weather (arguments in many fragments), then usage."""
    return [
        (chunk({"role": "assistant", "content": ""}), False),
        *reasoning_steps(30),
        *tool_steps(0, "call_kb", "kb_search", KB_ARGS, 12),
        *tool_steps(1, "call_wx", "get_weather", WEATHER_ARGS, 6),
        (chunk(finish="tool_calls"), False),
        (usage_chunk(), False),
    ]


def answer_turn() -> list[Step]:
    """Think, then answer in many content chunks, then usage."""
    return [
        (chunk({"role": "assistant", "content": ""}), False),
        *reasoning_steps(20),
        *content_steps("EU orders can be refunded within 30 days; Paris will be sunny. " * 3, 40),
        (chunk(finish="stop"), False),
        (usage_chunk(), False),
    ]


def builder(mode: TraceMode = TraceMode.DETAILED, zh: bool = False) -> TraceBuilder:
    return TraceBuilder(mode=mode, zh=zh, level="deep", provider="deepseek", method="params")


def run(
    steps: Iterable[Step],
    *,
    mode: TraceMode = TraceMode.DETAILED,
    zh: bool = False,
    request: dict[str, Any] | None = None,
    step_ms: float = 12.5,
) -> list[dict[str, Any]]:
    b = builder(mode, zh)
    events = b.begin(request, 2.0)
    now = 40.0
    for c, reasoning in steps:
        events += b.on_chunk(c, reasoning, now)
        now += step_ms
    events += b.finish(now)
    return events


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def stages(events: list[dict[str, Any]]) -> list[str]:
    return [e["stage"] for e in events if e["type"] == "status"]


def of_type(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_]


def assert_valid(events: list[dict[str, Any]]) -> None:
    for event in events:
        errors = [e.message for e in VALIDATOR.iter_errors(event)]
        assert not errors, (event, errors)
