"""One response's processing: SSE decoding → reasoning extraction → trace → encoding.

Pure and incremental: `feed(bytes, now_ms) -> bytes` per upstream read, so everything one read
produced goes to the client in one write. Events that need no change are forwarded as the
upstream's original bytes; only changed chunks are re-serialized. What it hands a front door
instead of bytes alone: proxy.core.stream.pipeline_door; how it ends a stream (the closing events,
a failure, an event withheld): proxy.core.stream.pipeline_end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from proxy.core import jsonio
from proxy.core.controls import TraceFormat
from proxy.core.stream import chunk_template, harmony, pipeline_door, pipeline_end
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.chunk_template import ChunkTemplate, DoorPiece, KnownEvent, KnownRun
from proxy.core.stream.pipeline_door import decode_for_door, hand, trace_frames
from proxy.core.stream.pipeline_end import DONE, StreamFailure
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.sse import EventTooLarge, SSEDecoder, SSEEvent, encode_event
from proxy.core.stream.template_rule import FULL_PATH, TemplateRule, tell_joined, template_rule
from proxy.core.stream.trace import TraceBuilder
from proxy.core.stream.trace_format import TraceFrames
from proxy.core.usage import ReasoningTally, fill_final_usage

# Chunks a stream may (re)learn its template from without a single match before it stops trying.
MAX_TEMPLATE_MISSES = 8
# Events of one read decoded one at a time, in a row, without a run of template chunks starting
# after one of them: beyond this the rest of the read is decoded at once (see _feed_by_runs).
MAX_STEPS = 8


class StreamPipeline:
    """Turns one upstream SSE body into the client's SSE body, incrementally.

    Contract: call `feed` for every upstream read, then exactly one of `finish` (upstream ended)
    or `fail` (the exchange broke). The output always ends with `data: [DONE]`, once.
    """

    def __init__(
        self,
        *,
        reasoning: ReasoningOptions,
        trace: TraceBuilder | None,
        trace_format: TraceFormat,
        max_event_bytes: int,
        capture: TurnCollector | None = None,
        templates: bool = True,
        tally: ReasoningTally | None = None,
    ) -> None:
        self._decoder = SSEDecoder(max_event_bytes)
        self._max_event_bytes = max_event_bytes
        # The replay capture, when the store is on: it sees each chunk already parsed, nothing more.
        self._capture = capture
        if capture is not None and reasoning.hide:
            capture.raw_details_first = True  # hiding takes the text out of reasoning_details
        # The reasoning text's tally for the token estimate (proxy.core.usage): told each text, or
        # reading the capture's when it collects them anyway (then nothing more per chunk).
        self._tally = tally
        if tally is not None and capture is not None:
            tally.follow(capture.reasoning_texts)
        self._extractor = harmony.extractor(reasoning, capture.reasoning if capture is not None else tally)
        self._hide = reasoning.hide
        self._trace = trace
        self._frames = TraceFrames(trace_format is TraceFormat.EVENT)
        self._done_sent = False
        # The shape of the last chunk of more-of-the-same, and how many chunks it was (re)learned
        # from without one match since (proxy.core.stream.chunk_template).
        self._template: ChunkTemplate | None = None
        # `templates=False` (the tests' reference: every event decoded) starts as a stream that
        # stopped trying: no template is ever learned, so nothing resets the count.
        self._template_misses = 0 if templates else MAX_TEMPLATE_MISSES
        # What the consumers (extractor, trace, capture) decided of the template's chunks: asked
        # once, valid until a chunk takes the ordinary path (only that changes their state).
        self._rule: TemplateRule | None = None
        # True once the client's stream is complete (ended or failed): stop reading upstream.
        self.closed = False
        # Why the stream ended with an error event, if it did.
        self.failure: StreamFailure | None = None

    def begin(self, request_body: dict[str, Any] | None, now_ms: float) -> bytes:
        if self._trace is None:
            return b""
        return self._frames.frames(self._trace.begin(request_body, now_ms))

    def begin_runs(self, request_body: dict[str, Any] | None, now_ms: float) -> list[DoorPiece]:
        """`begin` for a front door (as `feed_runs`): the trace's comments as KnownEvents."""
        return pipeline_door.begin_runs(self, request_body, now_ms)

    # -- stream -------------------------------------------------------------------------
    def feed(self, data: bytes, now_ms: float) -> bytes:
        return self._feed(data, now_ms, None)

    def feed_known(self, run: KnownRun, now_ms: float) -> bytes:
        """A run of chunks another decoder wrote and read (chunk_template.KnownRun): when it is of
        this pipeline's template, its texts are taken as they are, without a second scan of its
        bytes; else (another shape, a text the consumers must see parsed) it is fed as any read."""
        return self._feed_known(run, now_ms, None)

    def feed_pieces(self, pieces: Sequence[bytes | KnownRun], now_ms: float) -> bytes:
        """What another decoder made of one read (proxy.core.plan.chat.UpstreamDecoder.feed_pieces)."""
        out = [
            self._feed_known(p, now_ms, None) if isinstance(p, KnownRun) else self._feed(p, now_ms, None)
            for p in pieces
        ]
        return out[0] if len(out) == 1 else b"".join(out)

    def feed_runs(self, piece: bytes | Sequence[bytes | KnownRun], now_ms: float) -> list[DoorPiece]:
        """`feed` (bytes) or `feed_pieces` (a decoder's pieces), for a front door that translates the
        output (proxy.core.plan.chat.FrontDoor.feed_pieces): the same bytes, with each run of chunks of
        more of the same that went out as it came apart as a KnownRun with its texts, so that the
        door takes the texts instead of scanning the bytes a second time, and the events decoded
        here apart as KnownEvents with their values (each chunk as parsed, each trace comment's
        line, [DONE]), so that the door does not decode them again."""
        runs: list[DoorPiece] = []
        for p in (piece,) if isinstance(piece, bytes) else piece:
            rest = (
                self._feed_known(p, now_ms, runs) if isinstance(p, KnownRun) else self._feed(p, now_ms, runs)
            )
            if rest:
                runs.append(rest)
        return runs

    def _feed(self, data: bytes, now_ms: float, runs: list[DoorPiece] | None) -> bytes:
        """The output for `data`; with `runs`, what precedes the output's last run goes there
        (bytes, and the runs apart), and the rest is returned."""
        if self.closed:
            return b""
        template = self._template
        if template is not None and not self._done_sent and self._decoder.idle:
            # A read of exactly one chunk of more of the same (a paced stream): no decoding either.
            text = template.text_of_event(data)
            if text is not None and len(data) <= self._max_event_bytes and self._take_text(template, text):
                if runs is None or template.event_prefix is None:
                    return data
                runs.append(KnownRun(data, template.event_prefix, template.event_suffix, [text], template))
                return b""
        if self._done_sent or (template is None and self._template_misses >= MAX_TEMPLATE_MISSES):
            return self._decode(data, now_ms)  # (nothing more of the same to expect)
        return self._feed_by_runs(data, now_ms, runs)

    def _feed_known(self, run: KnownRun, now_ms: float, runs: list[DoorPiece] | None) -> bytes:
        template = self._template
        if (
            template is not None
            and not self.closed
            and run.prefix == template.event_prefix
            and run.suffix == template.event_suffix
            and not self._done_sent
            and self._decoder.idle
            and len(run.data) <= self._max_event_bytes  # (so is each of its events)
            and self._take_texts(template, run.texts)
        ):
            if runs is None:
                return run.data
            runs.append(run if run.template is template else run._replace(template=template))
            return b""
        return self._feed(run.data, now_ms, runs)

    def _feed_by_runs(self, data: bytes, now_ms: float, runs: list[DoorPiece] | None) -> bytes:
        """A read of several events: each run of chunks of more of the same (a fast upstream's
        read holds hundreds) is taken without decoding and goes out as one slice of the read
        (with `runs`: a KnownRun there, after the bytes before it); the events between runs are
        decoded one at a time, so that a template learned from one of them serves the rest of the
        same read. When runs are not to be had (the consumers need every chunk parsed, or
        MAX_STEPS events in a row started none), the rest of the read is decoded at once, as
        without runs."""
        out: list[bytes] = []
        pos, size = 0, len(data)
        find = data.find
        steps = 0
        while pos < size:
            template = self._template
            if (
                template is not None
                and template.event_prefix is not None
                and self._decoder.idle
                and data.startswith(template.event_prefix, pos)
            ):
                taken, texts = self._take_run(template, data, pos)
                if taken > 0:
                    if runs is not None:
                        if out:
                            runs.append(b"".join(out))
                            out = []
                        taken_bytes = data[pos : pos + taken]
                        prefix, suffix = template.event_prefix, template.event_suffix
                        run = KnownRun(taken_bytes, prefix, suffix, texts, template)
                        runs.append(run)
                    elif taken == size:
                        return data
                    else:
                        out.append(data[pos : pos + taken])
                    pos += taken
                    steps = 0
                    continue
                if taken < 0:
                    steps = MAX_STEPS
            # The next event the ordinary way: up to the end of its blank line, or all that is
            # left (the decoder gives the same events however its input is cut).
            end = find(b"\n\n", pos) if steps < MAX_STEPS else -1
            end = size if end < 0 else end + 2
            steps += 1
            if runs is None:
                out.append(self._decode(data[pos:end], now_ms))
            else:
                decode_for_door(self, data[pos:end], now_ms, out, runs)
            pos = end
            if self.closed:
                break  # (an event over the size limit ended the stream: the rest is not relayed)
            if self._done_sent and pos < size:
                out.append(self._decode(data[pos:], now_ms))  # (events after [DONE] are dropped)
                break
        return b"".join(out)

    def _take_run(self, template: ChunkTemplate, data: bytes, start: int) -> tuple[int, list[str]]:
        """How many bytes from `start` are whole events of `template` handled from their text
        alone (ChunkTemplate.take_texts), as _take_text would handle each, and their texts; -1
        when the consumers need this template's chunks parsed (none can be)."""
        rule = self._rule
        if rule is None:
            rule = self._rule = self._text_rule(template)
        if rule is FULL_PATH:
            return -1, []
        end, texts = template.take_texts(data, start, self._max_event_bytes, rule.unless_lt)
        if end > start:
            self._template_misses = 0
            tell_joined(rule.tell, texts)
        return end - start, texts

    def _decode(self, data: bytes, now_ms: float, known: list[bytes | KnownEvent] | None = None) -> bytes:
        """The bytes `data` completes; with `known` (a front door's), they go there instead, with
        the values a door would decode again apart (see `_process`), and the bytes return empty
        (the end of an oversized event's stream excepted)."""
        try:
            events = self._decoder.feed(data)
        except EventTooLarge as exc:
            return self._process(exc.events, now_ms, known) + pipeline_end.too_large(self, exc, now_ms)
        return self._process(events, now_ms, known)

    def _process(
        self, events: list[SSEEvent], now_ms: float, known: list[bytes | KnownEvent] | None = None
    ) -> bytes:
        """The bytes `events` write. With `known` (a front door reads them: feed_runs), what a door
        would decode again goes there as values after the bytes before it, each parsed chunk that
        reading its bytes gives exactly (orjson's strict reading, no integer it would round), each
        trace comment and [DONE] (KnownEvent); the rest as bytes; and the bytes return empty."""
        # The per-event hot path: kept flat (no per-event helper calls) on purpose.
        out: list[bytes] = []
        append = out.append
        extract = self._extractor.process_chunk
        trace = self._trace
        capture = self._capture
        template = self._template
        tally = self._tally
        frames = self._frames
        for event in events:
            data = event.data
            if self._done_sent:
                continue  # the stream ends with its one [DONE]; nothing may follow it
            if data is None:
                append(event.raw)
                continue
            if template is not None:
                text = template.text_of(data)
                if text is not None and self._take_text(template, text):
                    append(event.raw)
                    continue
            self._rule = None  # whatever happens next may change what the consumers decide
            if data == DONE:
                if known is None:
                    append(pipeline_end.closing_bytes(self, now_ms))
                    append(event.raw)
                else:
                    pipeline_end.closing_bytes(self, now_ms, out, known)
                    hand(out, known, KnownEvent(event.raw))
                self._done_sent = True
                continue
            exact = True  # (orjson's strict reading)
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                # Not ours to understand: forwarded unchanged, unless reasoning must be hidden.
                chunk = jsonio.loads_lenient(data) if self._hide else None
                exact = False
                if chunk is None:
                    append(pipeline_end.withheld(self, now_ms) if self._hide else event.raw)
                    continue
            if type(chunk) is not dict or "error" in chunk:
                append(self._hidden_odd(event, chunk, now_ms) if self._hide else event.raw)
                continue
            if capture is not None:
                if capture.raw_details_first:
                    capture.raw_details(chunk)
                outcome = extract(chunk)
                capture.chunk(chunk)
            else:
                outcome = extract(chunk)
            # The answer's last usage gets the reasoning estimate before anyone reads it.
            filled = tally is not None and chunk.get("usage") is not None and fill_final_usage(chunk, tally)
            if trace is not None:
                if frames.meta is None:
                    append(frames.start(chunk))  # (event frames held for the stream's identity)
                # A trace event describes the chunk that caused it; it precedes it in the same write.
                caused = trace.on_chunk(chunk, outcome.reasoning, now_ms)
                if caused:
                    if known is None:
                        append(frames.frames(caused))
                    else:
                        trace_frames(self, caused, out, known)
            # A front door's list, when it takes this chunk as parsed (see the docstring).
            door = known if exact and known is not None and not jsonio.may_hold_big_integer(data) else None
            if outcome.changed or filled:
                encoded = self._encoded(event, chunk)
                if encoded is None:
                    append(self._unencodable(event, now_ms))
                elif door is not None:
                    hand(out, door, KnownEvent(encoded, chunk))
                else:
                    append(encoded)
            else:
                if door is not None:
                    hand(out, door, KnownEvent(event.raw, chunk))
                else:
                    append(event.raw)
                if self._template_misses < MAX_TEMPLATE_MISSES:
                    # Learn (again) from a chunk that went out as it came. A stream whose every
                    # chunk differs elsewhere too (a random field per chunk) stops trying.
                    self._template_misses += 1
                    template = self._template = chunk_template.learn(data, chunk) or template
        if known is not None:
            rest = b"".join(out)
            if rest:
                known.append(rest)
            return b""
        return out[0] if len(out) == 1 else b"".join(out)

    def _take_text(self, template: ChunkTemplate, text: str) -> bool:
        """Handles a chunk of `template` with `text` in place from its text alone, when no consumer
        needs more (proxy.core.stream.chunk_template); True: done, the chunk goes out as it came,
        unparsed. (_take_texts for one text, without a list: this runs for every paced chunk.)"""
        rule = self._rule
        if rule is None:
            rule = self._rule = self._text_rule(template)
        if rule is FULL_PATH or (rule.unless_lt and "<" in text):
            return False
        for tell in rule.tell:
            tell(text)
        self._template_misses = 0
        return True

    def _take_texts(self, template: ChunkTemplate, texts: Sequence[str]) -> bool:
        """_take_text for the chunks of a run whose texts another decoder read (feed_known)."""
        rule = self._rule
        if rule is None:
            rule = self._rule = self._text_rule(template)
        if rule is FULL_PATH or (rule.unless_lt and any("<" in text for text in texts)):
            return False
        tell_joined(rule.tell, texts)
        self._template_misses = 0
        return True

    def _text_rule(self, template: ChunkTemplate) -> TemplateRule:
        """What every consumer says of the template's chunks (see `_rule`)."""
        return template_rule(template, self._trace, self._extractor, self._capture)

    def _reencoded(self, event: SSEEvent, chunk: dict[str, Any], now_ms: float) -> bytes:
        encoded = self._encoded(event, chunk)
        return self._unencodable(event, now_ms) if encoded is None else encoded

    def _encoded(self, event: SSEEvent, chunk: dict[str, Any]) -> bytes | None:
        """The event again with `chunk` as its data; None when it is nested deeper than anything
        writes (`_unencodable`)."""
        try:
            return encode_event(event, jsonio.dumps(chunk))
        except ValueError:
            return None

    def _unencodable(self, event: SSEEvent, now_ms: float) -> bytes:
        """A changed chunk that cannot be written: only the original bytes remain (hiding: withheld)."""
        return pipeline_end.withheld(self, now_ms) if self._hide else event.raw

    def _hidden_odd(self, event: SSEEvent, chunk: Any, now_ms: float) -> bytes:
        """A hiding stream's error-keyed chunk (passed on, minus reasoning) or non-object data."""
        if type(chunk) is not dict:
            return pipeline_end.withheld(self, now_ms)
        return (
            self._reencoded(event, chunk, now_ms)
            if self._extractor.process_chunk(chunk).changed
            else event.raw
        )

    def finish(self, now_ms: float) -> bytes:
        """The upstream body ended without a transport error.

        Ending inside an event (no blank line after it) is a truncation: the SSE spec discards
        such a tail, so it is not forwarded, and the stream ends with an `upstream_truncated`
        error event, then [DONE]. Ending at an event boundary without [DONE] is the upstream's own
        end of stream (several OpenAI-compatible servers end so): the client gets its [DONE]."""
        return pipeline_end.finish(self, now_ms)

    def fail(self, failure: StreamFailure, now_ms: float) -> bytes:
        """The exchange broke after the stream started: an error event, then [DONE]."""
        return pipeline_end.fail(self, failure, now_ms)
