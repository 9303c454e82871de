"""The stream pipeline's output as a front door takes it (StreamPipeline.begin_runs / feed_runs).

A door that translates the chat chunks (proxy.core.plan.chat.FrontDoor.feed_pieces) gets the same
bytes a chat client gets, with what it would otherwise read a second time apart: each run of
chunks of more of the same as a KnownRun with its texts, and each event decoded here (a chunk as
parsed, a trace comment's line, [DONE]) as a KnownEvent with its values. The per-read loop that
finds the runs stays in the pipeline (its hot path, `_feed_by_runs` and `_process`); these are the
steps of that hand-over the chat path never runs: they read and write the pipeline's own state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.core.stream.chunk_template import DoorPiece, KnownEvent, KnownRun

if TYPE_CHECKING:
    from proxy.core.stream.pipeline import StreamPipeline


def begin_runs(
    pipeline: StreamPipeline, request_body: dict[str, Any] | None, now_ms: float
) -> list[DoorPiece]:
    """`begin` for a front door (as `feed_runs`): the trace's comments as KnownEvents."""
    if pipeline._trace is None:
        return []
    known: list[bytes | KnownEvent] = []
    out: list[bytes] = []
    trace_frames(pipeline, pipeline._trace.begin(request_body, now_ms), out, known)
    pieces: list[DoorPiece] = [*known]
    rest = b"".join(out)  # (the event format's frames, held until a chunk names the stream)
    if rest:
        pieces.append(rest)
    return pieces


def decode_for_door(
    pipeline: StreamPipeline, data: bytes, now_ms: float, out: list[bytes], runs: list[DoorPiece]
) -> None:
    """`_decode` for a front door (feed_runs): the bytes it writes go to `out`, the values a door
    would decode again (KnownEvent) to `runs` after them, and the last chunk when it is of the
    template as a run of one (`last_as_run`)."""
    known: list[bytes | KnownEvent] = []
    tail = pipeline._decode(data, now_ms, known)
    if tail:
        known.append(tail)
    last = known[-1] if known else b""
    if isinstance(last, bytes):
        run = last_as_run(pipeline, last)
    else:
        run = last_as_run(pipeline, last.data) if last.chunk is not None else None
    if run is not None:
        if isinstance(last, bytes) and len(last) > len(run.data):
            known[-1] = last[: len(last) - len(run.data)]
        else:
            known.pop()
    for part in known:
        if isinstance(part, bytes):
            out.append(part)
            continue
        if out:
            runs.append(b"".join(out))
            out.clear()
        runs.append(part)
    if run is not None:
        if out:
            runs.append(b"".join(out))
            out.clear()
        runs.append(run)


def last_as_run(pipeline: StreamPipeline, written: bytes) -> KnownRun | None:
    """The last event of what a decoded event wrote, as a run of one, when it is a chunk of
    the pipeline's template with its text: typically the chunk that has just taught the
    template (after any trace comment it caused), the first of the run that follows. A front
    door then takes its text instead of decoding it again (feed_runs). Only of choice 0: the
    doors read no other choice, so they decode such chunks as any."""
    template = pipeline._template
    if (
        not written
        or template is None
        or template.event_prefix is None
        or template.index != 0
        or pipeline._done_sent
    ):
        return None
    cut = written.rfind(b"\n\n", 0, len(written) - 2)
    last = written[cut + 2 :] if cut >= 0 else written
    text = template.text_of_event(last)
    if not text:
        return None
    return KnownRun(last, template.event_prefix, template.event_suffix, [text], template)


def trace_frames(
    pipeline: StreamPipeline,
    events: list[dict[str, Any]],
    out: list[bytes],
    known: list[bytes | KnownEvent] | None,
) -> None:
    """Trace events' frames into `out`; with `known` (a front door's), comment lines go there as
    KnownEvents after the bytes before them."""
    frames = pipeline._frames
    lines = frames.comment_lines(events) if known is not None and events else None
    if known is None or lines is None:
        out.append(frames.frames(events))
        return
    for line in lines:
        hand(out, known, KnownEvent(line + b"\n\n", None, [line]))


def hand(out: list[bytes], known: list[bytes | KnownEvent], event: KnownEvent) -> None:
    """`event` into a front door's `known`, after the bytes written before it (`out`, emptied)."""
    written = b"".join(out)
    if written:
        known.append(written)
    out.clear()
    known.append(event)
