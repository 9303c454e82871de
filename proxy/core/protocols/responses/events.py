"""The Responses front door's encoder: the internal event stream (the typed events read from the
pipeline's chat chunks, proxy.core.protocols.chat_events) as the event stream a Responses client
reads (issue 28, item 3).

Pure and incremental. `ResponsesEncoder` takes the events, `feed(events)` as they come (`Done`, or
`end()`: the stream ended), or `fail(message)` (the exchange broke); each call returns the events
it produced, as dicts shaped like the openai-python types
(`openai.types.responses.ResponseStreamEvent`), numbered by `sequence_number` from 0. `frame` /
`frames` write them as SSE (`event: <type>` + `data: <json>`); there is no `[DONE]`.

One response's stream:

    response.created, response.in_progress
    per output item, in output order:
      reasoning  output_item.added; with text, either (the request asked `reasoning.summary`)
                 reasoning_summary_part.added, reasoning_summary_text.delta…,
                 reasoning_summary_text.done, reasoning_summary_part.done, or content_part.added
                 (reasoning_text), reasoning_text.delta…, reasoning_text.done, content_part.done;
                 then output_item.done with `encrypted_content` from the caller's `seal`, before
                 the next item's output_item.added
      message    output_item.added, content_part.added (output_text), output_text.delta…,
                 output_text.done, content_part.done, output_item.done
      calls      per chat tool call (by index): output_item.added (function_call; call_id = the
                 chat id), function_call_arguments.delta…; the calls in a row are done together,
                 in order, when other output begins or the finish reason comes:
                 function_call_arguments.done, output_item.done
    response.completed | response.incomplete (finish `length` → max_output_tokens;
    `content_filter`) | response.failed (a failure, an error chunk, an end without a finish reason)

An item is done when other output begins or the finish reason arrives, as OpenAI streams: each
reasoning or message item is done before the next item is added. Only tool calls in a row stay open
together (a chat upstream interleaves their arguments by index) and are done together. A reasoning
item followed directly by tool calls has its text done when the first call's fragment comes, and
its `output_item.done` just before that call is announced (its name known), so the sealed blob
names the call it precedes — the one call known then — and holds that call's `extra_content`
(Gemini's thought signature, which Gemini puts on the first of parallel calls). `reasoning_details`
that come after that are not carried (the item is done). `output_item.done` events always come in
output order. On a failure no open item is done (a half-received tool call must never look
complete): `response.failed` comes at once, its output holding them as "incomplete". Not carried:
`refusal` deltas, choices other than the first, output after the finish reason. The non-stream
form is built by the same encoder (responses_stream.response_from_completion), so both agree.
What each item holds and looks like: proxy.core.protocols.responses.items. The events built as
dicts (items opened, their deltas, each done, the terminal event): `ResponseItemEvents`
(proxy.core.protocols.responses.item_events), which `ResponsesEncoder` extends with the direct
path (text deltas, an item's opening, the finish written as bytes).
"""

from __future__ import annotations

from collections.abc import Mapping

from proxy.core import jsonio
from proxy.core.protocols.chat_events import Finish
from proxy.core.protocols.responses.item_events import INCOMPLETE_REASONS, ResponseItemEvents
from proxy.core.protocols.responses.item_frames import NUMBERED, NUMBERS, ItemFrames, numbers
from proxy.core.protocols.responses.items import StreamItem
from proxy.core.protocols.responses.output import (
    IdFactory,
    ItemStatus,
    ReasoningItemFacts,
    ResponseFrame,
    Seal,
    first_choice,
    frame,
    frames,
)
from proxy.core.protocols.responses.tools import ToolName

__all__ = [
    "IdFactory",
    "ReasoningItemFacts",
    "ResponseFrame",
    "ResponsesEncoder",
    "Seal",
    "first_choice",
    "frame",
    "frames",
]


class ResponsesEncoder(ResponseItemEvents):
    """The events of one response (ResponseItemEvents), and the direct path the door's transcoder
    takes for most of a stream (DoorEncoder's `text_delta_frames`, `opening_frames`,
    `finish_frames`): text deltas, the opening of a reasoning or message item and the finish written
    as bytes, without building the events they stand for."""

    def __init__(
        self,
        frame: ResponseFrame,
        *,
        seal: Seal,
        new_id: IdFactory,
        tool_names: Mapping[str, ToolName] | None = None,
        socket: bool = False,
    ) -> None:
        super().__init__(frame, seal=seal, new_id=new_id, tool_names=tool_names)
        # The WebSocket mode's form (output.message_frames) for the deltas written directly,
        # instead of SSE: each event's JSON and a newline.
        self._socket = socket
        # The bytes of a text delta frame of the item streaming (text_delta_frames) before its
        # number, between it and its text's JSON string's insides, and after them, and the tail
        # and the head as one (between two frames of a run); and that item.
        self._form_item: StreamItem | None = None
        self._form: tuple[bytes, bytes, bytes, bytes] = (b"", b"", b"", b"")
        # The frames that open and close a reasoning or message item, for the direct path.
        self._item_frames = ItemFrames(sse=not socket, summary=frame.summary)
        self.writes_finish = True

    def start_frames(self) -> bytes:
        """`start()` written directly: byte for byte its two events' frames, the `Response` both
        carry serialized once (b"" once started)."""
        events = self.start()
        if not events:
            return b""
        return self._item_frames.opening_frames(jsonio.dumps(events[0]["response"]))

    def text_delta_frames(self, reasoning: bool, texts: list[str]) -> bytes | None:
        """Text deltas that continue the item streaming (most of a stream: a run's texts, or one
        chunk's), written directly: byte for byte `frames(feed([TextDelta([text])]))` (or
        ReasoningDelta; `message_frames` in the socket form) for each text in turn, without
        building the events. None: not that case (no such item streaming, or a text is empty),
        `feed` them instead (or `opening_frames`)."""
        if len(texts) == 1:  # (a paced stream's every delta: its five parts joined, no call between)
            item = self._current
            text = texts[0]
            if item is None or not item.begun or self._finished or self._finish is not None or not text:
                return None
            if item.kind != ("reasoning" if reasoning else "message"):
                return None
            item.text.append(text)
            head, middle, tail, _ = self._form if self._form_item is item else self._delta_form(item)
            seq = self._seq
            self._seq = seq + 1
            number = NUMBERS[seq] if seq < NUMBERED else b"%d" % seq
            return b"".join((head, number, middle, jsonio.dumps(text)[1:-1], tail))
        out: list[bytes] = []
        if not self.text_delta_parts(reasoning, texts, out):
            return None
        return b"".join(out)

    def text_delta_parts(self, reasoning: bool, texts: list[str], out: list[bytes]) -> bool:
        """`text_delta_frames` as parts added to `out` (the transcoder joins a read's parts once):
        the run's frames with no step per frame, the texts' JSON from one orjson call and the
        numbers from a table; one frame's tail and the next one's head are one part."""
        form = self._continued(reasoning, texts)
        if form is None:
            return False
        head, middle, tail, joint = form
        seq = self._seq
        count = len(texts)
        if not count:
            return True  # (no text: nothing to write, as `feed` writes nothing)
        self._seq = seq + count
        start = len(out)
        out += [joint, b"", middle, b""] * count
        out[start] = head
        out[start + 1 :: 4] = numbers(seq, count)
        out[start + 3 :: 4] = jsonio.string_insides(texts)
        out.append(tail)
        return True

    def _continued(self, reasoning: bool, texts: list[str]) -> tuple[bytes, bytes, bytes, bytes] | None:
        """The parts of the streaming item's delta frames (`ItemFrames.delta_form`) when `texts`
        continue it (its texts then kept); None when they do not, or a text is empty."""
        item = self._current
        if item is None or not item.begun or self._finished or self._finish is not None or not all(texts):
            return None
        if item.kind != ("reasoning" if reasoning else "message"):
            return None
        item.text += texts
        return self._form if self._form_item is item else self._delta_form(item)

    def opening_frames(self, reasoning: bool, texts: list[str]) -> bytes | None:
        """Texts that open a new reasoning or message item (none of that kind streaming), written
        directly: what `_open` and `_reasoning` / `_text` write for the first (the item before done,
        "completed"; the new one announced with its part), then the deltas. None when a tool call
        is open or waits, or a text is empty (the general path's)."""
        before = self._current
        kind = "reasoning" if reasoning else "message"
        if (
            not self._started
            or self._finished
            or self._finish is not None
            or not texts
            or not all(texts)
            or (before is not None and (before.kind == kind or not before.begun))
            or self._calls
            or self._pending is not None
        ):
            return None
        out: list[bytes] = []
        if before is not None:
            self._current = None
            out.append(self._closing_frames(before, "completed"))
        self._last_call = None
        item = self._current = StreamItem(kind, self._new_id("rs" if reasoning else "msg"))
        item.output_index = len(self._items)
        self._items.append(item)
        out.append(self._item_frames.opened(self._seq, reasoning, item.item_id, item.output_index))
        self._seq += 2
        item.begun = True
        deltas = self.text_delta_frames(reasoning, texts)
        if deltas is None:  # (cannot be: the item is open, of this kind, and begun)
            raise AssertionError("an item opened for its deltas takes them")
        out.append(deltas)
        return b"".join(out)

    def finish_frames(self, finish: Finish) -> bytes | None:
        """`feed([finish])` written directly when only a reasoning or message item (or nothing)
        is open: the finish reason recorded, the item done with its frames (`_closing_frames`).
        None otherwise (a tool call open or waiting: the general path's)."""
        if not self._started or self._finished:
            return None
        if self._finish is not None:
            return b""  # (a second finish reason: nothing, as `feed` gives)
        current = self._current
        if self._calls or self._pending is not None or (current is not None and not current.begun):
            return None
        self._finish = finish.reason
        self._current, self._last_call = None, None
        if current is None:
            return b""
        return self._closing_frames(
            current, "incomplete" if finish.reason in INCOMPLETE_REASONS else "completed"
        )

    def _closing_frames(self, item: StreamItem, status: ItemStatus) -> bytes:
        """A begun reasoning or message item done with `status` (no call open): the frames `_close`
        writes for it (a reasoning item sealed as `_seal_done` seals it)."""
        item.status = status
        reasoning = item.kind == "reasoning"
        if reasoning:
            self._seal(item, [])
        seq, self._seq = self._seq, self._seq + 3
        text = item.joined()
        return self._item_frames.closed(
            seq, reasoning, item.item_id, item.output_index, text, status, item.encrypted
        )

    def _delta_form(self, item: StreamItem) -> tuple[bytes, bytes, bytes, bytes]:
        """The parts of `item`'s text delta frames (ItemFrames.delta_form, and its tail and head
        joined), kept while it streams."""
        head, middle, tail = self._item_frames.delta_form(
            item.kind == "reasoning", item.item_id, item.output_index
        )
        form = self._form = (head, middle, tail, tail + head)
        self._form_item = item
        return form
