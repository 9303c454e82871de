"""`thinkproxy demo`: the simulated upstream and the proxy on loopback, a short conversation
through them with the official openai client (plain httpx when it is not installed), one request
by each of the Responses and Messages doors (proxy.demo_doors), and a readable timeline of what
happened."""

from __future__ import annotations

import signal
import textwrap
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import httpx
import orjson

from proxy.core.stream.sse import SSEDecoder
from proxy.demo_doors import demo_messages, demo_responses
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from proxy.settings import Settings
from proxy.simulated import SIMULATED_ROUTES as SIMULATED_ROUTES
from proxy.simulated import simulated_table as simulated_table

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
            "required": ["city"],
        },
    },
}


class ChatClient(Protocol):
    name: str

    def stream(
        self, base_url: str, body: dict[str, Any], headers: dict[str, str]
    ) -> Iterator[dict[str, Any]]: ...


class OpenAIClient:
    """The official SDK; trace frames (event format) arrive as chunks with a `trace` extra field."""

    def __init__(self) -> None:
        import openai

        self.openai = openai
        self.name = f"openai {openai.__version__}"

    def stream(
        self, base_url: str, body: dict[str, Any], headers: dict[str, str]
    ) -> Iterator[dict[str, Any]]:
        client = self.openai.OpenAI(base_url=base_url, api_key="sk-demo", max_retries=0, timeout=30)
        with client.chat.completions.create(**body, stream=True, extra_headers=headers) as stream:
            for chunk in stream:
                yield chunk.model_dump(exclude_none=True)


class HttpxClient:
    name = f"httpx {httpx.__version__} (openai not installed)"

    def stream(
        self, base_url: str, body: dict[str, Any], headers: dict[str, str]
    ) -> Iterator[dict[str, Any]]:
        decoder = SSEDecoder()
        with httpx.stream(
            "POST",
            f"{base_url}/chat/completions",
            json={**body, "stream": True},
            headers={"authorization": "Bearer sk-demo", **headers},
            timeout=30,
        ) as r:
            r.raise_for_status()
            for piece in r.iter_bytes():
                for event in decoder.feed(piece):
                    if event.data and event.data != b"[DONE]":
                        yield orjson.loads(event.data)


def make_client() -> ChatClient:
    try:
        return OpenAIClient()
    except ImportError:
        return HttpxClient()


class Printer:
    def __init__(self, color: bool) -> None:
        self.color = color

    def _c(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def title(self, text: str) -> None:
        print()
        print(self._c("1", text))

    def line(self, label: str, text: str, code: str = "0") -> None:
        print(f"  {self._c('2', f'{label:>12}')}  {self._c(code, text)}")

    def trace(self, event: dict[str, Any]) -> None:
        t = event.get("t_ms", 0)
        detail = ""
        for key in ("input_summary", "output_summary", "duration_ms"):
            if key in event:
                detail = f"  [{key.split('_')[0]}: {event[key]}]"
        if event["type"] == "done":
            detail = f"  [finish: {event.get('finish_reason')}, first token after {event.get('ttft_ms')} ms]"
        print(
            f"  {self._c('36', f'{t:>8} ms')}  {self._c('36', event['type']):<30} "
            f"{event.get('message', '')}{detail}"
        )


class Turn:
    """What one streamed answer contained, collected from the chunks."""

    def __init__(self) -> None:
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                self.reasoning.append(delta["reasoning_content"])
            if delta.get("content"):
                self.content.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                slot = self.calls.setdefault(call.get("index", 0), {"id": "", "name": "", "arguments": ""})
                slot["id"] = call.get("id") or slot["id"]
                fn = call.get("function") or {}
                slot["name"] += fn.get("name") or ""
                slot["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]


def short(text: str, width: int = 88) -> str:
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" …") or "—"


def sent_upstream(mock_url: str, original: dict[str, Any]) -> str:
    """What the proxy changed in the body, as the simulated upstream received it."""
    received = httpx.get(f"{mock_url}/_mock/requests/last", timeout=5).json()["body"]
    changes = {
        k: v for k, v in received.items() if k != "messages" and original.get(k) != v and k != "stream"
    }
    injected = len(received.get("messages", [])) - len(original.get("messages", []))
    text = orjson.dumps(changes).decode() if changes else "(no thinking parameters)"
    if injected > 0:
        text += f" + {injected} system instruction injected (never shown to the client)"
    return text + replay_note(original.get("messages", []), received.get("messages", []))


def replay_note(sent: list[dict[str, Any]], received: list[dict[str, Any]]) -> str:
    """How the reasoning of earlier assistant turns was replayed to the provider."""
    for before in sent:
        if before.get("role") != "assistant" or not before.get("reasoning_content"):
            continue
        after = next((m for m in received if m.get("tool_calls") == before.get("tool_calls")), {})
        if str(after.get("content") or "").startswith("<think>"):
            return "; earlier reasoning replayed as inline <think> (the provider's replay rule)"
        if after.get("reasoning_content") or after.get("reasoning"):
            return "; earlier reasoning replayed in its field (the provider's replay rule)"
        return "; earlier reasoning stripped from the history (the provider's replay rule)"
    return ""


def run_turn(
    client: ChatClient, p: Printer, base: str, body: dict[str, Any], headers: dict[str, str], show_trace: bool
) -> Turn:
    turn = Turn()
    for chunk in client.stream(base, body, headers):
        trace = chunk.get("trace")
        if trace is not None:
            if show_trace:
                p.trace(trace)
            continue
        turn.add(chunk)
    return turn


def run_demo(color: bool = False, keep: bool = False, port: int = 0) -> int:
    """The scripted conversation, then exit 0; with `keep`, the proxy and its console stay up
    (on `port`, 0 = any free one) until interrupted."""
    p = Printer(color)
    client = make_client()
    with BackgroundServer(create_mock_app(MockOptions(pace_ms=2.0))) as mock:
        table = simulated_table(mock.port)
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            upstream_base_url=f"{mock.url}/deepseek/v1",
            # the demo switches between simulated providers with X-Upstream-Base-URL
            allowed_upstreams=[f"127.0.0.1:{mock.port}"],
            ui=True,
        )
        with BackgroundServer(create_app(settings, table=table), port=port) as proxy:
            base = f"{proxy.url}/v1"
            print(f"thinkproxy demo — simulated upstream {mock.url}, proxy {base}, client {client.name}")
            print(
                f"console: {proxy.url}/ui (live view of the requests below; playground at "
                f"{proxy.url}/ui#playground){'' if keep else ' — pass --keep to keep it open'}"
            )
            demo_levels(client, p, base, mock.url, proxy.url)
            demo_tools(client, p, mock.url, proxy.url)
            demo_prompted(client, p, mock.url, proxy.url)
            demo_responses(p, mock.url, proxy.url)
            demo_messages(p, mock.url, proxy.url)
            print()
            if keep:
                keep_serving(proxy.url, mock.url)
    print()
    print("Done. Run `thinkproxy explain --base-url URL --level deep` to see what any provider would get.")
    return 0


def keep_serving(proxy_url: str, mock_url: str) -> None:
    print(f"The proxy and its console stay up: open {proxy_url}/ui (Ctrl-C to stop).")
    print(
        f"  playground: any API key works (the simulated upstream ignores it); other simulated "
        f"providers: Upstream = {mock_url}/<qwen|kimi|minimax|ollama|openrouter|mistral|prompted>/v1"
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):  # a clean stop on either, servers closed
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()


def demo_levels(client: ChatClient, p: Printer, base: str, mock_url: str, proxy_url: str) -> None:
    p.title("1. One header, three levels — simulated DeepSeek (entry 'deepseek')")
    body = {
        "model": "deepseek-v4-pro",
        "messages": [{"role": "user", "content": "Is 1,000,003 a prime number?"}],
    }
    for level in ("off", "standard", "deep"):
        turn = run_turn(client, p, base, body, {"X-Thinking-Level": level, "X-Trace": "off"}, False)
        print()
        p.line("level", level, "1")
        p.line("sent", sent_upstream(mock_url, body), "33")
        p.line(
            "reasoning", f"{len(''.join(turn.reasoning))} chars: {short(''.join(turn.reasoning), 70)}", "35"
        )
        p.line("answer", short("".join(turn.content)), "32")


def demo_tools(client: ChatClient, p: Printer, mock_url: str, proxy_url: str) -> None:
    p.title("2. A tool-using conversation — simulated MiniMax (inline <think> tags split across chunks)")
    base = f"{proxy_url}/v1"
    headers = {
        "X-Thinking-Level": "standard",
        "X-Trace": "detailed",
        "X-Trace-Format": "event",
        "X-Upstream-Base-URL": f"{mock_url}/minimax/v1",
    }
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What's the weather in Paris right now?"}]
    body = {"model": "MiniMax-M2", "messages": messages, "tools": [WEATHER_TOOL]}
    print("  turn 1: the model decides to call a tool")
    turn = run_turn(client, p, base, body, headers, True)
    p.line("reasoning", short("".join(turn.reasoning)), "35")
    call = turn.calls.get(0)
    if call is None:
        p.line("answer", short("".join(turn.content)), "32")
        return
    p.line("tool call", f"{call['name']}({call['arguments']})", "33")
    result = {"city": "Paris", "temperature_c": 17, "conditions": "light rain", "humidity": 0.82}
    p.line("tool runs", f"locally in the demo → {orjson.dumps(result).decode()}")
    messages.append(
        {
            "role": "assistant",
            "content": "".join(turn.content) or None,
            "reasoning_content": "".join(turn.reasoning),
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": orjson.dumps(result).decode()})
    print("  turn 2: the tool result goes back; the model answers")
    turn = run_turn(client, p, base, body, headers, True)
    p.line("sent", sent_upstream(mock_url, body), "33")
    p.line("answer", short("".join(turn.content)), "32")


def demo_prompted(client: ChatClient, p: Printer, mock_url: str, proxy_url: str) -> None:
    p.title("3. A model with no thinking knob — gpt-4o-mini, level applied by prompt")
    base = f"{proxy_url}/v1"
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Plan a 3-day trip to Kyoto."}]}
    headers = {
        "X-Thinking-Level": "standard",
        "X-Upstream-Base-URL": f"{mock_url}/prompted/v1",
        "X-Trace": "off",
    }
    turn = run_turn(client, p, base, body, headers, False)
    p.line("sent", sent_upstream(mock_url, body), "33")
    p.line("reasoning", short("".join(turn.reasoning)), "35")
    p.line("answer", short("".join(turn.content)), "32")
