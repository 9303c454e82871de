"""A fake OpenAI-compatible upstream built to never be the bottleneck of a benchmark.

Raw asyncio (uvloop when available) HTTP/1.1 server with every response precomputed as bytes:
no framework, no JSON work per request. Keep-alive; Content-Length for JSON, chunked transfer
for streams (one HTTP chunk per SSE event, like real providers).

`POST .../chat/completions` serves one scenario, chosen by the request header
`X-Bench-Scenario` (the proxy forwards headers it does not own), else by a path prefix
(`/paced/v1/chat/completions`), else `json`:

  json   a chat.completion with reasoning_content, Content-Length
  burst  200 DeepSeek-style chunks (role, reasoning_content deltas, content deltas, finish with
         usage) then `data: [DONE]`, all written at once
  paced  the same 200 events, one every 5 ms (~1 s per response)
  ttft   the first event at once, the other 199 after a 10 ms gap (idle time-to-first-token)
  slow   the same 200 events, one every --slow-interval-ms (memory test: long-lived streams)

Every response id names its scenario (`chatcmpl-bench-<scenario>-…`) so a runner can check
that the scenario it asked for is the one it got. `GET /__stats` returns counters (requests,
SSE events written) that the runner uses to count chunks relayed.

Run: python bench/fake_upstream.py --port 9000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from collections.abc import Callable
from typing import cast

CREATED = 1735689600
MODEL = "deepseek-v4-pro"
FINGERPRINT = "fp_7e0991cad4_prod0820_fp8_kvcache"
EVENTS_PER_STREAM = 200
SCENARIOS = ("json", "burst", "paced", "ttft", "slow")

REASONING_TEXT = (
    "Okay, the user wants to know why the sky is blue. Let me recall the physics: sunlight is a mix "
    "of wavelengths, and when it enters the atmosphere it scatters off nitrogen and oxygen molecules. "
    "Rayleigh scattering goes as the inverse fourth power of the wavelength, so blue light scatters "
    "far more than red. But violet is even shorter, so why not a violet sky? Partly the solar spectrum "
    "has less violet, partly some is absorbed high up, and our eyes are less sensitive to violet. "
    "I should also mention sunsets, where the long path through air removes the blue and leaves red "
    "and orange. Keep it short and clear, with one concrete number for the scattering ratio. "
)
ANSWER_TEXT = (
    "The sky looks blue because of **Rayleigh scattering**. Sunlight contains every visible colour, "
    "and as it passes through the atmosphere the short blue wavelengths are scattered by air "
    "molecules much more strongly than the long red ones — about 5.5 times more for blue (450 nm) "
    "than for red (700 nm). That scattered blue light reaches your eyes from every direction of the "
    "sky. Violet scatters even more, but the Sun emits less of it and our eyes are less sensitive "
    "to it. At sunset the light crosses much more air, so most of the blue is scattered away and "
    "the remaining light looks red and orange."
)
USAGE = {
    "prompt_tokens": 18,
    "completion_tokens": 198,
    "total_tokens": 216,
    "prompt_tokens_details": {"cached_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 120},
    "prompt_cache_hit_tokens": 0,
    "prompt_cache_miss_tokens": 18,
}


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _pieces(text: str, count: int) -> list[str]:
    """Split text into `count` token-like pieces (word boundaries, as a tokenizer roughly would)."""
    words = text.split(" ")
    size = len(words) / count
    return [
        " ".join(words[round(i * size) : round((i + 1) * size)]) + ("" if i == count - 1 else " ")
        for i in range(count)
    ]


def sse_events(scenario: str) -> list[bytes]:
    """The 200 SSE events of one stream (without `[DONE]`), DeepSeek-style."""
    cid = f"chatcmpl-bench-{scenario}-8f3a2c1d9e7b4a60"

    def chunk(delta: dict[str, object], finish: str | None = None, usage: object = None) -> bytes:
        obj: dict[str, object] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": MODEL,
            "system_fingerprint": FINGERPRINT,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if usage is not None:
            obj["usage"] = usage
        return b"data: " + _dumps(obj) + b"\n\n"

    n_reasoning = 120
    n_content = EVENTS_PER_STREAM - 2 - n_reasoning
    # The first event carries the first token of reasoning, so an idle TTFT probe times a token
    # through every front door (the Responses door writes nothing for a role-only chunk).
    first, *rest = _pieces(REASONING_TEXT, n_reasoning + 1)
    events = [chunk({"role": "assistant", "content": None, "reasoning_content": first})]
    events += [chunk({"content": None, "reasoning_content": p}) for p in rest]
    events += [chunk({"content": p, "reasoning_content": None}) for p in _pieces(ANSWER_TEXT, n_content)]
    events.append(chunk({"content": "", "reasoning_content": None}, "stop", USAGE))
    assert len(events) == EVENTS_PER_STREAM
    return events


def responses_events() -> list[bytes]:
    """A Responses API stream of the same answer (for chat over the Responses API, issue 29): the
    reasoning as 120 summary deltas, the answer as 78 text deltas, OpenAI's event framing, with
    the `obfuscation` pad OpenAI puts on delta events by default (1-16 characters)."""
    rid, rs, msg = "resp_bench_8f3a2c1d9e7b4a60", "rs_bench_1", "msg_bench_1"
    seq = iter(range(10_000))

    def event(kind: str, **fields: object) -> bytes:
        data = _dumps({"type": kind, "sequence_number": next(seq), **fields})
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"

    def response(status: str, output: list[object], usage: object = None) -> dict[str, object]:
        return {"id": rid, "object": "response", "created_at": CREATED, "model": "gpt-5.4", "status": status,
                "output": output, "usage": usage, "error": None, "incomplete_details": None,
                "tools": [], "tool_choice": "auto", "parallel_tool_calls": True}  # fmt: skip

    summary = {"type": "summary_text", "text": REASONING_TEXT}
    blob = "gAAAAB" + "x" * 600
    reasoning = {"id": rs, "type": "reasoning", "summary": [summary], "encrypted_content": blob}
    text = {"type": "output_text", "text": ANSWER_TEXT, "annotations": [], "logprobs": []}
    message = {"id": msg, "type": "message", "role": "assistant", "status": "completed", "content": [text]}
    at_rs, at_msg = {"item_id": rs, "output_index": 0}, {"item_id": msg, "output_index": 1}
    out = [
        event("response.created", response=response("in_progress", [])),
        event("response.in_progress", response=response("in_progress", [])),
        event("response.output_item.added", output_index=0, item={**reasoning, "summary": []}),
        event(
            "response.reasoning_summary_part.added", **at_rs, summary_index=0, part={**summary, "text": ""}
        ),
    ]
    out += [
        event("response.reasoning_summary_text.delta", **at_rs, summary_index=0, delta=p, obfuscation=_pad(p))
        for p in _pieces(REASONING_TEXT, 120)
    ]
    out += [
        event("response.reasoning_summary_text.done", **at_rs, summary_index=0, text=REASONING_TEXT),
        event("response.output_item.done", output_index=0, item=reasoning),
        event("response.output_item.added", output_index=1, item={**message, "content": []}),
        event("response.content_part.added", **at_msg, content_index=0, part={**text, "text": ""}),
    ]
    out += [
        event(
            "response.output_text.delta", **at_msg, content_index=0, delta=p, logprobs=[], obfuscation=_pad(p)
        )
        for p in _pieces(ANSWER_TEXT, 78)
    ]
    usage = {
        "input_tokens": USAGE["prompt_tokens"],
        "output_tokens": USAGE["completion_tokens"],
        "total_tokens": USAGE["total_tokens"],
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 300},
    }
    out += [
        event("response.output_text.done", **at_msg, content_index=0, text=ANSWER_TEXT, logprobs=[]),
        event("response.output_item.done", output_index=1, item=message),
        event("response.completed", response=response("completed", [reasoning, message], usage)),
    ]
    return out  # fmt: skip


def _pad(piece: str) -> str:
    """OpenAI's pad evens out the delta events' sizes: shorter after longer text."""
    return "Xq7Zp2Lm9Vb4Nc1K"[: 1 + (16 - len(piece)) % 16]


def json_body() -> bytes:
    return _dumps(
        {
            "id": "chatcmpl-bench-json-8f3a2c1d9e7b4a60",
            "object": "chat.completion",
            "created": CREATED,
            "model": MODEL,
            "system_fingerprint": FINGERPRINT,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": ANSWER_TEXT,
                        "reasoning_content": REASONING_TEXT,
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": USAGE,
        }
    )


def _http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _head(status: str, content_type: str, scenario: str, extra: str) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{extra}"
        f"X-Bench-Served: {scenario}\r\nConnection: keep-alive\r\n\r\n"
    ).encode()


class Precomputed:
    """Every byte the server can send, built once at start-up."""

    def __init__(self) -> None:
        body = json_body()
        self.json = _head("200 OK", "application/json", "json", f"Content-Length: {len(body)}\r\n") + body
        self.stream_head = {
            s: _head("200 OK", "text/event-stream; charset=utf-8", s, "Transfer-Encoding: chunked\r\n")
            for s in SCENARIOS
            if s != "json"
        }
        self.events = {s: [_http_chunk(e) for e in sse_events(s)] for s in self.stream_head}
        self.tail = _http_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self.burst = self.stream_head["burst"] + b"".join(self.events["burst"]) + self.tail
        responses = b"".join(_http_chunk(e) for e in responses_events()) + b"0\r\n\r\n"
        self.responses_burst = self.stream_head["burst"] + responses
        self.not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


def _header(head: bytes, name: bytes) -> bytes | None:
    """Value of header `name` in a lower-cased request head (request line included), or None."""
    at = head.find(b"\r\n" + name + b":")
    if at < 0:
        return None
    start = at + len(name) + 3
    stop = head.find(b"\r\n", start)
    return head[start : stop if stop >= 0 else None].strip()


class Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.events = 0
        self.by_scenario: dict[str, int] = dict.fromkeys(SCENARIOS, 0)

    def response(self) -> bytes:
        body = _dumps({"requests": self.requests, "events": self.events, "by_scenario": self.by_scenario})
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            len(body),
            body,
        )


class UpstreamProtocol(asyncio.Protocol):
    """One client connection: parse requests (pipelining-safe), answer from precomputed bytes."""

    def __init__(self, pre: Precomputed, stats: Stats, intervals: dict[str, float]) -> None:
        self.pre, self.stats, self.intervals = pre, stats, intervals
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a timed stream is in progress; later requests wait in buf
        self.timer: asyncio.TimerHandle | None = None
        self.close_after = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the asyncio.Transport API without subclassing it
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._serve_buffered()

    def _serve_buffered(self) -> None:
        while not self.busy and self.transport is not None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).lower()
            length = int(_header(head, b"content-length") or 0)
            if len(self.buf) < end + 4 + length:
                return
            del self.buf[: end + 4 + length]
            self.close_after = b"\r\nconnection: close" in head
            self._respond(head)
            if self.close_after and not self.busy and self.transport is not None:
                self.transport.close()

    def _respond(self, head: bytes) -> None:
        assert self.transport is not None
        line = head[: head.find(b"\r\n")]
        if line.startswith(b"get /__stats"):
            self.transport.write(self.stats.response())
            return
        if line.startswith(b"post ") and b"/responses" in line:  # the Responses API: always a burst
            self.stats.requests += 1
            self.transport.write(self.pre.responses_burst)
            return
        if not line.startswith(b"post ") or b"/chat/completions" not in line:
            self.transport.write(self.pre.not_found)
            return
        named = _header(head, b"x-bench-scenario")
        if named is not None:
            scenario = named.decode()
        else:
            path = line.split(b" ")[1]
            first = path.split(b"/")[1].decode() if path.count(b"/") > 1 else ""
            scenario = first if first in SCENARIOS else "json"
        if scenario not in SCENARIOS:
            self.transport.write(self.pre.not_found)
            return
        self.stats.requests += 1
        self.stats.by_scenario[scenario] += 1
        if scenario == "json":
            self.transport.write(self.pre.json)
        elif scenario == "burst":
            self.transport.write(self.pre.burst)
            self.stats.events += EVENTS_PER_STREAM
        else:
            self._start_timed(scenario)

    def _start_timed(self, scenario: str) -> None:
        assert self.transport is not None
        events = self.pre.events[scenario]
        self.transport.write(self.pre.stream_head[scenario] + events[0])
        self.stats.events += 1
        self.busy = True
        if scenario == "ttft":
            self.timer = asyncio.get_running_loop().call_later(0.010, self._ttft_rest, events)
        else:
            self._schedule(events, 1, self.intervals[scenario])

    def _schedule(self, events: list[bytes], index: int, interval: float) -> None:
        self.timer = asyncio.get_running_loop().call_later(interval, self._tick, events, index, interval)

    def _tick(self, events: list[bytes], index: int, interval: float) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(events[index])
        self.stats.events += 1
        if index + 1 < len(events):
            self._schedule(events, index + 1, interval)
        else:
            self._finish()

    def _ttft_rest(self, events: list[bytes]) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(b"".join(events[1:]))
        self.stats.events += len(events) - 1
        self._finish()

    def _finish(self) -> None:
        assert self.transport is not None
        self.transport.write(self.pre.tail)
        self.busy = False
        self.timer = None
        if self.close_after:
            self.transport.close()
            return
        self._serve_buffered()


async def serve(
    host: str, port: int, slow_interval: float, ready: Callable[[int], None] | None = None
) -> None:
    pre, stats = Precomputed(), Stats()
    intervals = {"paced": 0.005, "slow": slow_interval}
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: UpstreamProtocol(pre, stats, intervals), host, port, backlog=4096, reuse_address=True
    )
    bound = server.sockets[0].getsockname()[1]
    if ready is not None:
        ready(bound)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--slow-interval-ms", type=float, default=150.0)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(
        serve(
            args.host,
            args.port,
            args.slow_interval_ms / 1000,
            lambda p: print(f"fake upstream listening on http://{args.host}:{p}", flush=True),
        )
    )


if __name__ == "__main__":
    main()
