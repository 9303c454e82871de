"""`thinkproxy demo`'s front doors: one OpenAI Responses request and one Anthropic Messages request
through the proxy, bridged onto the simulated DeepSeek's chat completions, each shown as a new user
would want to see it: what reached the upstream (its path and the thinking parameters the level
put there), the level applied, the door's own events and the trace riding along as SSE comments
(`: trace {…}`, which every Responses and Anthropic SDK skips). Raw HTTP, so that nothing of the
stream is hidden; proxy.demo prints the rest of the timeline.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import orjson

# What a chat body carries besides the thinking parameters (not shown as "what the level sent").
CHAT_FIELDS = frozenset(
    (
        "model",
        "messages",
        "tools",
        "stream",
        "stream_options",
        "tool_choice",
        "parallel_tool_calls",
        "max_tokens",
    )
)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


class Lines(Protocol):
    """How the demo prints (proxy.demo.Printer)."""

    def title(self, text: str) -> None: ...

    def line(self, label: str, text: str, code: str = "0") -> None: ...

    def trace(self, event: dict[str, Any]) -> None: ...


@dataclass
class DoorTurn:
    """What one streamed answer of a front door held: its headers, its events' names in order,
    the trace events from its comment lines, and the text, reasoning and tool calls it said."""

    headers: dict[str, str] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    trace: list[dict[str, Any]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def read(self, block: str) -> None:
        """One SSE block: an `event:` name and its data, or a trace comment."""
        data: dict[str, Any] | None = None
        for line in block.splitlines():
            if line.startswith(": trace "):
                self.trace.append(orjson.loads(line[len(": trace ") :]))
            elif line.startswith("event: "):
                self.events.append(line[len("event: ") :])
            elif line.startswith("data: "):
                data = orjson.loads(line[len("data: ") :])
        if data is not None:
            self.said(data)

    def said(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "response.output_text.delta":
            self.text.append(event["delta"])
        elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            self.reasoning.append(event["delta"])
        elif kind == "response.output_item.done" and event["item"].get("type") == "function_call":
            self.calls.append(f"{event['item']['name']}({event['item']['arguments']})")
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                self.text.append(delta["text"])
            elif delta.get("type") == "thinking_delta":
                self.reasoning.append(delta["thinking"])


def door_turn(url: str, body: dict[str, Any], headers: dict[str, str]) -> DoorTurn:
    """One streamed request to a front door, read whole."""
    turn = DoorTurn()
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as r:
        r.raise_for_status()
        turn.headers = {k.lower(): v for k, v in r.headers.items()}
        text = r.read().decode()
    for block in text.replace("\r\n", "\n").split("\n\n"):
        if block.strip():
            turn.read(block)
    return turn


def runs(names: list[str]) -> str:
    """Event names in order, a run of the same one said once with its count (`…delta ×12`)."""
    out: list[str] = []
    for index, name in enumerate(names):
        if index and names[index - 1] == name:
            continue
        count = 1
        while index + count < len(names) and names[index + count] == name:
            count += 1
        out.append(f"{name} ×{count}" if count > 1 else name)
    return ", ".join(out)


def upstream_line(mock_url: str, door_path: str) -> str:
    """`POST <door> → POST <upstream path>` and the thinking parameters the upstream got."""
    received = httpx.get(f"{mock_url}/_mock/requests/last", timeout=5).json()
    body = received.get("body") if isinstance(received.get("body"), dict) else {}
    params = {k: v for k, v in body.items() if k not in CHAT_FIELDS}
    tools = [t.get("function", {}).get("name") for t in body.get("tools") or ()]
    count = len(body.get("messages") or ())
    shape = f"{count} chat message{'' if count == 1 else 's'}" + (f", tools {tools}" if tools else "")
    return f"POST {door_path} → POST {received['path']} {orjson.dumps(params).decode()} ({shape})"


def show(p: Lines, turn: DoorTurn, sent: str) -> None:
    p.line("sent", sent, "33")
    p.line("level applied", turn.headers.get("x-thinking-level-applied", "none"), "1")
    for number, chunk in enumerate(textwrap.wrap(runs(turn.events), 92)):
        p.line("events" if number == 0 else "", chunk)
    for event in turn.trace:
        p.trace(event)
    if turn.reasoning:
        p.line("reasoning", _short("".join(turn.reasoning)), "35")
    for call in turn.calls:
        p.line("tool call", _short(call), "33")
    if turn.text:
        p.line("answer", _short("".join(turn.text)), "32")


def demo_responses(p: Lines, mock_url: str, proxy_url: str) -> None:
    p.title(
        "4. The Responses door — POST /v1/responses (Codex, the Agents SDK), bridged onto DeepSeek's chat"
    )
    body = {
        "model": "deepseek-v4-pro",
        "input": "What's the weather in Paris?",
        "tools": [WEATHER],
        "reasoning": {"effort": "high"},  # (the level from the body: high is deep)
        "stream": True,
    }
    headers = {"authorization": "Bearer sk-demo", "X-Trace": "detailed"}
    turn = door_turn(f"{proxy_url}/v1/responses", body, headers)
    show(p, turn, upstream_line(mock_url, "/v1/responses"))


def demo_messages(p: Lines, mock_url: str, proxy_url: str) -> None:
    p.title(
        "5. The Messages door — POST /v1/messages (Claude Code, the Anthropic SDKs), bridged the same way"
    )
    body = {
        "model": "deepseek-v4-pro",
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": "Is 1,000,003 a prime number?"}],
        "stream": True,
    }
    headers = {
        "x-api-key": "sk-demo",
        "anthropic-version": "2023-06-01",
        "X-Thinking-Level": "standard",
        "X-Trace": "detailed",
    }
    turn = door_turn(f"{proxy_url}/v1/messages", body, headers)
    show(p, turn, upstream_line(mock_url, "/v1/messages"))


def _short(text: str, width: int = 88) -> str:
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" …") or "—"
