"""Shared test helpers (imported by tests; fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import jsonschema.exceptions
import orjson
import pytest

from proxy.core.config.providers import ProvidersTable, default_providers_path
from proxy.core.config.yamlfile import load_config
from proxy.core.controls import ReasoningField, TraceFormat, TraceMode
from proxy.core.events import AccessRecord, RequestObserver
from proxy.core.sessions.facts import RequestFacts
from proxy.core.stream.chunk_template import DoorPiece, KnownRun, learn
from proxy.core.stream.pipeline import StreamPipeline
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.trace import TraceBuilder
from proxy.core.usage import ReasoningTokens, TokenUsage
from proxy.server.serving import BackgroundServer, bind_loopback
from proxy.settings import Settings
from proxy.simulated import simulated_providers_text


def coroutines_running_in(server: BackgroundServer) -> list[str]:
    """The qualified names of the coroutines of every task on `server`'s event loop, now."""

    async def names() -> list[str]:
        return [getattr(task.get_coro(), "__qualname__", "") for task in asyncio.all_tasks()]

    loop = server.server.servers[0].get_loop()
    return asyncio.run_coroutine_threadsafe(names(), loop).result(10)


def make_settings(**overrides: Any) -> Settings:
    """Settings isolated from the machine's environment and .env file."""
    base: dict[str, Any] = {"upstream_base_url": "https://api.deepseek.com/v1", "trace": "off"}
    base.update(overrides)
    return Settings(_env_file=None, **base)  # type: ignore[call-arg]


class Recorder:
    """An httpx.MockTransport handler that records every request and answers with `respond`."""

    def __init__(self, respond: Callable[[httpx.Request], httpx.Response]) -> None:
        self.respond = respond
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return self.respond(request)


def bench_module(name: str) -> Any:
    """A module of bench/ (a tool, not a package) by its own name, as its siblings import each other."""
    import importlib

    bench = str(Path(__file__).resolve().parent.parent / "bench")
    sys.path.insert(0, bench)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(bench)


def free_port() -> int:
    sock = bind_loopback()
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def start_serve(
    mock: BackgroundServer, *args: str, ready_path: str = "/healthz", **env: str
) -> tuple[subprocess.Popen[bytes], str]:
    """`thinkproxy serve` as a real process in front of the simulated DeepSeek; returns once it
    answers `ready_path` with 200, and fails the test (with the server's output) if it never does."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "serve", *args],
        env={
            **os.environ,
            "THINKPROXY_UPSTREAM_BASE_URL": f"{mock.url}/deepseek/v1",
            "THINKPROXY_PORT": str(port),
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30.0
    while server.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}{ready_path}", timeout=2).status_code == 200:
                return server, base
        except httpx.TransportError:
            threading.Event().wait(0.05)
    if server.poll() is None:
        server.kill()
    output = server.communicate(timeout=20)[0].decode(errors="replace")
    pytest.fail(f"thinkproxy serve never answered {ready_path} with 200:\n{output}")


def worker_pids(parent: int, count: int) -> list[int]:
    """The pids of `thinkproxy serve`'s worker processes (its children running uvicorn workers)."""
    deadline = time.monotonic() + 30.0
    while True:
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                cmdline = (stat.parent / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == parent and b"spawn_main" in cmdline:
                found.append(int(stat.parent.name))
        if len(found) >= count or time.monotonic() > deadline:
            return sorted(found)
        threading.Event().wait(0.05)


def simulated_providers_file(directory: Path, mock_port: int) -> Path:
    """A providers.yaml for a `serve` process: the shipped one, with the simulated upstream's path
    prefixes added to the entries they imitate (what proxy.simulated.simulated_table does
    in-process, and `serve --mock` writes for its workers)."""
    path = directory / "providers.yaml"
    path.write_text(simulated_providers_text(mock_port), encoding="utf-8")
    return path


def chat_scope(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """An ASGI scope of `POST /v1/chat/completions`, for calling the app directly (to see each
    message it sends)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }


def passes_straight_through(middleware: Callable[[Any], Any], scope: dict[str, Any]) -> bool:
    """Whether the ASGI middleware `middleware(app)` hands `scope` to `app` as `app`'s own coroutine:
    no frame of its own left in the request's await chain (each time a request's task suspends and
    resumes, every frame of that chain is passed through)."""
    made: list[Any] = []

    async def nothing() -> None:
        return None

    def app(scope: dict[str, Any], receive: Any, send: Any) -> Any:
        made.append(nothing())
        return made[-1]

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    returned = middleware(app)(scope, receive, send)
    try:
        return bool(made) and returned is made[0]
    finally:
        for coroutine in {id(c): c for c in [*made, returned]}.values():
            coroutine.close()


def assert_run_tells_its_texts(run: KnownRun) -> None:
    """A KnownRun is what it says: whole events, each its prefix + one JSON string + its suffix,
    those strings' texts in order."""
    events = [e + b"\n\n" for e in run.data.split(b"\n\n") if e]
    assert len(events) == len(run.texts)
    for event, text in zip(events, run.texts, strict=True):
        assert event.startswith(run.prefix) and event.endswith(run.suffix)
        assert orjson.loads(event[len(run.prefix) : -len(run.suffix)]) == text


def known_pieces(read: bytes) -> list[bytes | KnownRun]:
    """`read` as a decoder of another protocol hands it over (proxy.core.protocols.responses.upstream_decode):
    each run of whole events that share the bytes around one text field is a KnownRun with its
    texts, the rest is bytes. (Only LF-ended events are grouped, as the decoder writes them.)"""
    if b"\r" in read:
        return [read]
    pieces: list[bytes | KnownRun] = []
    rest = read
    while rest:
        end = rest.find(b"\n\n")
        if end < 0:
            pieces.append(rest)
            break
        event, rest = rest[: end + 2], rest[end + 2 :]
        frame = None
        if event.startswith(b"data: ") and event.count(b"\n") == 2:
            try:
                parsed = orjson.loads(event[6:-2])
            except orjson.JSONDecodeError:
                parsed = None
            template = learn(event[6:-2], parsed) if isinstance(parsed, dict) else None
            if template is not None and template.event_prefix is not None:
                text = parsed["choices"][0]["delta"][template.field]  # type: ignore[index]
                frame = (template.event_prefix, template.event_suffix, text)
        last = pieces[-1] if pieces else None
        if frame is None:
            pieces.append(event)
        elif isinstance(last, KnownRun) and (last.prefix, last.suffix) == frame[:2]:
            pieces[-1] = KnownRun(last.data + event, last.prefix, last.suffix, [*last.texts, frame[2]])
        else:
            pieces.append(KnownRun(event, frame[0], frame[1], [frame[2]]))
    return pieces


def split_points(stream: bytes, every: int) -> list[int]:
    """Where a split test cuts a long `stream` in two when cutting at every byte costs too much: at
    each line end (so at each event boundary, LF or CRLF), the two bytes before it and the one
    after it, at both ends, and every `every`th byte between. A stream's hard cases are at its
    boundaries (an event, a line, a `\r\n` or `\n\n` cut in half); inside an event, the cuts of
    a run of same-shaped events fall at offsets that move along the run as the events' lengths
    vary, so a shape is cut at many of its offsets. The decoders' own tests, and the streams built
    for the hard cases inside an event (escapes, holes), keep every byte."""
    ends = [i + 1 for i, byte in enumerate(stream) if byte in b"\r\n"]
    near = {end + d for end in ends for d in (-2, -1, 0, 1)}
    cuts = {*range(0, len(stream) + 1, every), len(stream), *near}
    return sorted(cut for cut in cuts if 0 <= cut <= len(stream))


def sse_frames(raw: bytes) -> list[bytes]:
    """The SSE frames of a stream's bytes (CRLF read as LF), without their blank lines."""
    return [f for f in raw.replace(b"\r\n", b"\n").split(b"\n\n") if f]


def pipeline_pieces(raw: bytes, cuts: list[int]) -> list[list[DoorPiece]]:
    """What the response pipeline hands a front door (`piped`'s pipeline, without keep-alives)
    for an upstream stream read in pieces cut at `cuts`."""
    options = ReasoningOptions(tags=("think",), output_field=ReasoningField.REASONING_CONTENT)
    trace = TraceBuilder(mode=TraceMode.BRIEF, zh=False, level="deep", provider="p", method="params")
    pipeline = StreamPipeline(
        reasoning=options, trace=trace, trace_format=TraceFormat.COMMENT, max_event_bytes=1 << 20
    )
    out: list[list[DoorPiece]] = [pipeline.begin_runs({"messages": []}, 0.0)]
    bounds = [0, *cuts, len(raw)]
    out += [pipeline.feed_runs(raw[a:b], 1.0) for a, b in pairwise(bounds)]
    return [*out, [pipeline.finish(2.0)]]


def routed_table(
    mock_port: int, chat: dict[str, str], messages: dict[str, str] | None = None
) -> ProvidersTable:
    """The shipped table on the simulated upstream: each of `chat` ({path prefix: entry}) maps
    `127.0.0.1:PORT/<prefix>` onto that entry (its Messages door bridged, as in
    proxy.demo.simulated_table), but each entry of `messages` ({entry: path prefix}) whose Messages
    door is native there, pointed at the simulated Messages API under `/<prefix>`. The prefix ""
    maps the simulated upstream's own `/v1` (its default dialect) onto its entry."""
    data = load_config(default_providers_path().read_text(), "providers.yaml")
    native = messages or {}
    for prefix, entry in chat.items():
        rules = data["providers"][entry]
        rules["match"].append(f"127.0.0.1:{mock_port}/{prefix}".rstrip("/"))
        for holder in (rules, *rules.get("models", ())):
            if "messages" not in holder:
                continue
            if entry in native:
                holder["messages"]["base_url"] = f"http://127.0.0.1:{mock_port}/{native[entry]}"
                holder["messages"]["mode"] = "native"
            else:
                holder.pop("messages")
    return ProvidersTable.from_text(json.dumps(data, default=str))


def route_handler(app: Any, path: str, method: str) -> object:
    """The object whose bound method serves `method path` in a proxy app (a front door, such as
    proxy.server.doors.responses.ResponsesDoor: its state store and keys, for tests that seed them)."""
    for route in app.routes:
        if getattr(route, "path", None) == path and method in (getattr(route, "methods", None) or ()):
            owner: object = route.endpoint.__self__
            return owner
    raise LookupError(f"no route {method} {path}")


def laughs(levels: int) -> str:
    """A YAML "billion laughs" (top-level keys a0…): each anchor a list of ten aliases of the one
    before, so `levels` lines expand to about 10**levels nodes; the largest alias is on the
    last line."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


class OpenResponsesSchema:
    """The Open Responses specification (tests/fixtures/openresponses/: its released openapi.json
    with the later upstream versions of the component schemas in components/ put in place of the
    released ones; sources and license in its README) as a validator, the way its compliance suite
    validates: a response object against `ResponseResource`, a streamed event against the member
    of the `text/event-stream` union its `type` names. Each check returns the errors, as readable
    strings (an empty list: it conforms)."""

    FOLDER = Path(__file__).parent / "fixtures" / "openresponses"

    def __init__(self) -> None:
        self.document: dict[str, Any] = json.loads((self.FOLDER / "openapi.json").read_text(encoding="utf-8"))
        schemas = self.document["components"]["schemas"]
        for later in sorted((self.FOLDER / "components").glob("*.json")):
            assert later.stem in schemas, f"{later.name} replaces no schema of the release"
            schemas[later.stem] = json.loads(later.read_text(encoding="utf-8"))
        stream = self.document["paths"]["/responses"]["post"]["responses"]["200"]["content"]
        self.events: dict[str, str] = {}  # event type -> its schema's name
        for member in stream["text/event-stream"]["schema"]["oneOf"]:
            name = member["$ref"].rsplit("/", 1)[1]
            (kind,) = self.document["components"]["schemas"][name]["properties"]["type"]["enum"]
            self.events[kind] = name
        self._validators: dict[str, jsonschema.Draft202012Validator] = {}

    def errors(self, value: Any, schema: str) -> list[str]:
        """Where `value` breaks the component schema `schema` (e.g. "ResponseResource")."""
        validator = self._validators.get(schema)
        if validator is None:
            root = {**self.document, "$ref": f"#/components/schemas/{schema}"}
            validator = jsonschema.Draft202012Validator(root)
            self._validators[schema] = validator
        found = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {_leaf(e).message}" for e in found]

    def event_errors(self, event: Any) -> list[str]:
        """Where a streamed event breaks its event schema (an unknown `type` is an error too)."""
        kind = event.get("type") if isinstance(event, dict) else None
        name = self.events.get(kind) if isinstance(kind, str) else None
        if name is None:
            return [f"no event schema has type {kind!r}"]
        return [f"{kind}: {error}" for error in self.errors(event, name)]


def _leaf(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """The innermost cause of a jsonschema error (a oneOf/anyOf failure: its best match)."""
    best = jsonschema.exceptions.best_match(error.context) if error.context else None
    return error if best is None else _leaf(best)


class Ended:
    """A listener that keeps every request's final record (proxy.core.events)."""

    def __init__(self) -> None:
        self.records: list[AccessRecord] = []
        self.turn_ended = threading.Event()

    def start(self, record: AccessRecord, headers: Iterable[tuple[str, str]]) -> RequestObserver:
        ended = self

        class Observer(RequestObserver):
            def on_end(self, record: AccessRecord, duration_ms: float) -> None:
                ended.records.append(record)
                ended.turn_ended.set()

        return Observer()


def session_facts(at: int, **over: Any) -> RequestFacts:
    """A finished request's facts as the sessions keep them (proxy.core.sessions.facts), with
    `over` replacing fields: 100 input tokens (80 cached), 20 output (10 reasoning), $0.001."""
    usage = TokenUsage(input=100, output=20, cached_input=80, reasoning=ReasoningTokens(10, "reported"))
    base: dict[str, Any] = {
        "id": f"r{at}", "at": at, "door": "chat", "client": "curl", "key": None, "provider": "deepseek",
        "model": "deepseek-v4-pro", "model_suffix": None, "level_requested": None, "level": "deep",
        "level_source": None, "level_rule": None, "stream": False, "status": 200, "error": None,
        "usage": usage, "cost_usd": 0.001, "ttft_ms": None, "thinking_ms": None, "total_ms": 5.0,
        "finish_reason": "tool_calls", "tools": ("shell",), "reasoning_starved": False, "changes": None,
    }  # fmt: skip
    base.update(over)
    return RequestFacts(**base)


# The recorded provider streams (tests/fixtures/streams), and the reasoning options most stream
# tests read them with.
STREAM_FIXTURES = Path(__file__).parent / "fixtures" / "streams"
THINK = ReasoningOptions(tags=("think",))


def stream_pipeline(
    mode: TraceMode | None = TraceMode.BRIEF,
    fmt: TraceFormat = TraceFormat.COMMENT,
    options: ReasoningOptions = THINK,
    max_event_bytes: int = 1 << 20,
) -> StreamPipeline:
    """A stream pipeline as the tests build it: a trace of `mode` (None: none) in `fmt`."""
    trace = None if mode is None else TraceBuilder(mode=mode, zh=False, level="standard", provider="p")
    return StreamPipeline(reasoning=options, trace=trace, trace_format=fmt, max_event_bytes=max_event_bytes)
