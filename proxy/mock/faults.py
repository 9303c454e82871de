"""Faults the simulated upstream injects on request, chosen per request by `X-Mock-Fault`.

Pure: request headers in, a `Plan` out; a list of SSE frames (or a JSON body) plus a plan in, a
sequence of `Step`s out (bytes to send, a pause, or an abort). The app module turns steps into
ASGI messages, so every fault is testable here without a socket.

`X-Mock-Fault` takes one value or a comma-separated list; the status faults (400, 429, 500) and
`non-sse` replace the answer, the others combine (e.g. `gzip,slow-first,stall`).
`reasoning-in-content` is a model's fault rather than the wire's: the chain of thought written into
the answer's text with no reasoning field at all (Kimi K3 at times, MoonshotAI/Kimi-K3#45), in
whatever shape the dialect gives a plain answer.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import orjson

FAULT_HEADER = "x-mock-fault"
PACE_HEADER = "x-mock-pace-ms"
STALL_HEADER = "x-mock-stall-s"
HUGE_HEADER = "x-mock-huge-bytes"
DELAY_HEADER = "x-mock-delay-ms"
CHUNK_HEADER = "x-mock-chunk-chars"

DEFAULT_STALL_S = 30.0
DEFAULT_HUGE_BYTES = 16 * 1024 * 1024
DEFAULT_DELAY_MS = 2000.0
FEW_FRAMES = 3  # "a few chunks" before a disconnect or a stall
PIECE_BYTES = 64 * 1024  # how the huge line is cut, and the most bytes coalesced into one send
RETRY_AFTER_S = 7

_PAD = b"x" * PIECE_BYTES


class Fault(StrEnum):
    BAD_REQUEST = "400"
    RATE_LIMITED = "429"
    SERVER_ERROR = "500"
    DISCONNECT = "disconnect"
    STALL = "stall"
    INVALID_JSON = "invalid-json"
    NON_SSE = "non-sse"
    GZIP = "gzip"
    HUGE_LINE = "huge-line"
    SLOW_FIRST = "slow-first"
    REASONING_IN_CONTENT = "reasoning-in-content"


class BadMockHeader(ValueError):
    """An `X-Mock-*` header the mock cannot read; answered 400 naming the header."""

    def __init__(self, header: str, message: str) -> None:
        super().__init__(message)
        self.header = header


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Abort:
    """Cut the connection here: no more bytes, no end of body."""


Step = bytes | Sleep | Abort


@dataclass(frozen=True)
class Plan:
    """How one request is answered, beyond its content: faults, pacing, chunk size."""

    faults: frozenset[Fault] = frozenset()
    pace_s: float = 0.0
    chunk_chars: int = 4
    stall_s: float = DEFAULT_STALL_S
    huge_bytes: int = DEFAULT_HUGE_BYTES
    delay_s: float = DEFAULT_DELAY_MS / 1000

    def has(self, fault: Fault) -> bool:
        return fault in self.faults


def parse_plan(headers: Mapping[str, str], *, pace_ms: float, chunk_chars: int) -> Plan:
    """Read the `X-Mock-*` headers (names lower-case); options give the defaults for pace and chunk size."""
    faults = set()
    for raw in (headers.get(FAULT_HEADER) or "").split(","):
        value = raw.strip().lower()
        if not value:
            continue
        try:
            faults.add(Fault(value))
        except ValueError:
            accepted = ", ".join(f.value for f in Fault)
            raise BadMockHeader(
                FAULT_HEADER, f"Unknown X-Mock-Fault {raw.strip()!r}; accepted: {accepted}."
            ) from None
    return Plan(
        faults=frozenset(faults),
        pace_s=_number(headers, PACE_HEADER, pace_ms, 0, 60_000) / 1000,
        chunk_chars=int(_number(headers, CHUNK_HEADER, chunk_chars, 1, 1_000_000)),
        stall_s=_number(headers, STALL_HEADER, DEFAULT_STALL_S, 0, 3600),
        huge_bytes=int(_number(headers, HUGE_HEADER, DEFAULT_HUGE_BYTES, 1, 1 << 30)),
        delay_s=_number(headers, DELAY_HEADER, DEFAULT_DELAY_MS, 0, 3_600_000) / 1000,
    )


def _number(headers: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    raw = headers.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:  # also rejects NaN
        raise BadMockHeader(name, f"Invalid {name} {raw!r}: expected a number from {low:g} to {high:g}.")
    return value


# --- replacing the answer -----------------------------------------------------------------------


@dataclass(frozen=True)
class Canned:
    """A whole response that replaces the answer."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    media_type: str = "application/json"


def rate_limited(request_id: str) -> Canned:
    """OpenAI's 429: its body and the headers clients use to back off."""
    body = {
        "error": {
            "message": (
                "Rate limit reached for requests per min (RPM): Limit 500, Used 500, Requested 1. "
                f"Please try again in {RETRY_AFTER_S}s."
            ),
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    headers = {
        "retry-after": str(RETRY_AFTER_S),
        "x-request-id": request_id,
        "x-ratelimit-limit-requests": "500",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": f"{RETRY_AFTER_S}s",
    }
    return Canned(429, headers, orjson.dumps(body))


def server_error(request_id: str) -> Canned:
    body = {
        "error": {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
    return Canned(500, {"x-request-id": request_id}, orjson.dumps(body))


NON_SSE_BODY = (
    b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head>\n"
    b"<body><h1>Network login required</h1><p>Please sign in to continue.</p></body></html>\n"
)


def non_sse(request_id: str) -> Canned:
    """What a captive portal or a misrouted gateway answers: 200, but an HTML page."""
    return Canned(200, {"x-request-id": request_id}, NON_SSE_BODY, media_type="text/html")


# --- shaping a stream --------------------------------------------------------------------------


def broken_line(frame: bytes) -> bytes:
    """The same data line cut in the middle of its JSON (an `event:` line before it is kept)."""
    head, _, payload = frame.partition(b"data: ")
    payload = payload.rstrip(b"\n")
    return head + b"data: " + payload[: max(1, len(payload) // 2)] + b"\n\n"


def padded(template: bytes, marker: bytes, size: int) -> Iterator[bytes]:
    """`template` with `marker` replaced by padding so the whole is `size` bytes long (or the
    template's own length if larger), in pieces of at most PIECE_BYTES: nothing large is built."""
    head, _, tail = template.partition(marker)
    remaining = max(0, size - len(head) - len(tail))
    yield head
    while remaining > 0:
        piece = min(remaining, PIECE_BYTES)
        yield _PAD if piece == PIECE_BYTES else _PAD[:piece]
        remaining -= piece
    yield tail


def stream_steps(
    frames: Sequence[bytes], plan: Plan, *, huge_at: int, huge: Iterable[bytes] = ()
) -> Iterator[Step]:
    """The frames with the plan's stream faults and pacing applied.

    `huge_at` is the frame index the huge line goes before (the app passes the finish chunk's),
    `huge` its pieces. The broken line is a truncated copy of the middle frame, inserted before it.
    """
    units: list[Iterable[bytes]] = [(f,) for f in frames]
    if plan.has(Fault.HUGE_LINE):
        units.insert(huge_at, huge)
    if plan.has(Fault.INVALID_JSON):
        middle = len(frames) // 2
        units.insert(middle, (broken_line(frames[middle]),))
    cut = min(FEW_FRAMES, len(units) - 1)
    for index, unit in enumerate(units):
        if index == 0 and plan.has(Fault.SLOW_FIRST):
            yield Sleep(plan.delay_s)
        elif index > 0 and plan.pace_s > 0:
            yield Sleep(plan.pace_s)
        if index == cut:
            if plan.has(Fault.DISCONNECT):
                yield Abort()
                return
            if plan.has(Fault.STALL):
                yield Sleep(plan.stall_s)
        yield from unit


def body_steps(body: bytes, plan: Plan) -> Iterator[Step]:
    """A non-stream body with the plan's faults applied: a cut or a stall half-way through it."""
    half = len(body) // 2
    if plan.has(Fault.DISCONNECT):
        yield body[:half]
        yield Abort()
        return
    if plan.has(Fault.STALL):
        yield body[:half]
        yield Sleep(plan.stall_s)
        yield body[half:]
        return
    yield body


def coalesce(steps: Iterable[Step], limit: int = PIECE_BYTES) -> Iterator[Step]:
    """Join runs of bytes into one send each (up to `limit`): unpaced streams then cost a few
    sends instead of one per chunk; pauses and aborts keep their place."""
    buffer: list[bytes] = []
    size = 0
    for step in steps:
        if isinstance(step, bytes):
            if buffer and size + len(step) > limit:
                yield b"".join(buffer)
                buffer, size = [], 0
            buffer.append(step)
            size += len(step)
            continue
        if buffer:
            yield b"".join(buffer)
            buffer, size = [], 0
        yield step
    if buffer:
        yield b"".join(buffer)


def gzip_steps(steps: Iterable[Step]) -> Iterator[Step]:
    """Gzip the bytes as one member, flushing after each send so a stream still arrives incrementally."""
    compressor = zlib.compressobj(wbits=31)
    for step in steps:
        if isinstance(step, bytes):
            yield compressor.compress(step) + compressor.flush(zlib.Z_SYNC_FLUSH)
        else:
            yield step
    yield compressor.flush()


def new_request_id() -> str:
    return "req_" + uuid.uuid4().hex
