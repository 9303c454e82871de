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
What each item holds and looks like: proxy.core.protocols.responses.items.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.core import jsonio
from proxy.core.protocols.chat_events import Finish, ToolCallDelta, call_index
from proxy.core.protocols.door_stream import DoorEncoder, Event
from proxy.core.protocols.responses.item_frames import NUMBERED, NUMBERS, ItemFrames, numbers
from proxy.core.protocols.responses.items import StreamItem, is_custom, item_dict
from proxy.core.protocols.responses.output import (
    IdFactory,
    ItemStatus,
    ReasoningItemFacts,
    ResponseFrame,
    ResponseStatus,
    Seal,
    custom_input,
    first_choice,
    frame,
    frames,
    output_text_part,
    reasoning_text_part,
    response_error,
    response_object,
    responses_usage,
    summary_text_part,
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

# Finish reasons that end the output early, and the `incomplete_details.reason` they give.
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
# Finish reasons that say the upstream gave up (DeepSeek's, a generic one): a failed response.
FAILED_FINISHES = frozenset(("insufficient_system_resource", "error"))
NO_FINISH_MESSAGE = "the upstream stream ended without a finish reason"


class ResponsesEncoder(DoorEncoder):
    """The events of one response, from the internal event stream (`feed`, DoorEncoder's). `start()`
    gives the opening events (`feed`, `end` and `fail` give them first when not asked yet); after
    the terminal event every call returns no events."""

    def __init__(
        self,
        frame: ResponseFrame,
        *,
        seal: Seal,
        new_id: IdFactory,
        tool_names: Mapping[str, ToolName] | None = None,
        socket: bool = False,
    ) -> None:
        super().__init__()
        self._frame = frame
        # The WebSocket mode's form (output.message_frames) for the deltas written directly,
        # instead of SSE: each event's JSON and a newline.
        self._socket = socket
        # Chat function names that stand for a namespaced or a custom (freeform) Responses tool:
        # their calls go back as the client declared them (responses_tools.ToolName).
        self._tool_names = tool_names or {}
        self._sealer = seal
        self._new_id = new_id
        self._seq = 0
        self._items: list[StreamItem] = []  # announced items, in output order
        self._current: StreamItem | None = None  # the open reasoning or message item
        self._pending: StreamItem | None = None  # a reasoning item done when the call after it begins
        self._calls: dict[int, StreamItem] = {}  # the open tool calls, by chat index
        self._last_call: int | None = None
        # The bytes of a text delta frame of the item streaming (text_delta_frames) before its
        # number, between it and its text's JSON string's insides, and after them; and that item.
        self._form_item: StreamItem | None = None
        self._form: tuple[bytes, bytes, bytes] = (b"", b"", b"")
        # The frames that open and close a reasoning or message item, for the direct path.
        self._item_frames = ItemFrames(sse=not socket, summary=frame.summary)
        self.writes_finish = True

    def start(self) -> list[Event]:
        """`response.created` and `response.in_progress` (once), with the one `Response` object
        as it stands: nothing is output yet, and both say so."""
        out: list[Event] = []
        if not self._started:
            self._started = True
            opening = self.response()
            self._emit(out, "response.created", response=opening)
            self._emit(out, "response.in_progress", response=opening)
        return out

    def text_delta_frames(self, reasoning: bool, texts: list[str]) -> bytes | None:
        """Text deltas that continue the item streaming (most of a stream: a run's texts, or one
        chunk's), written directly: byte for byte `frames(feed([TextDelta([text])]))` (or
        ReasoningDelta; `message_frames` in the socket form) for each text in turn, without
        building the events. None: not that case (no such item streaming, or a text is empty),
        `feed` them instead (or `opening_frames`)."""
        item = self._current
        if item is None or not item.begun or self._finished or self._finish is not None or not all(texts):
            return None
        if item.kind != ("reasoning" if reasoning else "message"):
            return None
        head, middle, tail = self._form if self._form_item is item else self._delta_form(item)
        item.text += texts
        seq = self._seq
        count = len(texts)
        self._seq = seq + count
        if count == 1:  # (a paced stream's every delta)
            number = NUMBERS[seq] if seq < NUMBERED else b"%d" % seq
            return b"".join((head, number, middle, jsonio.dumps(texts[0])[1:-1], tail))
        # The run's frames joined from their parts, with no step per frame: the texts' JSON from
        # one orjson call, the numbers from a table.
        parts = [head, b"", middle, b"", tail] * count
        parts[1::5] = numbers(seq, count)
        parts[3::5] = jsonio.string_insides(texts)
        return b"".join(parts)

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
        text = "".join(item.text)
        return self._item_frames.closed(
            seq, reasoning, item.item_id, item.output_index, text, status, item.encrypted
        )

    def _delta_form(self, item: StreamItem) -> tuple[bytes, bytes, bytes]:
        """The parts of `item`'s text delta frames (ItemFrames.delta_form), kept while it streams."""
        form = self._item_frames.delta_form(item.kind == "reasoning", item.item_id, item.output_index)
        self._form_item, self._form = item, form
        return form

    def end(self) -> list[Event]:
        """The stream ended: the terminal event (failed when no finish reason came)."""
        if self._finished:
            return []
        out = self.start()
        finish = self._finish
        if finish is None or finish in FAILED_FINISHES:
            message = NO_FINISH_MESSAGE if finish is None else f"the upstream stopped: {finish}"
            return out + self._failed(message, "server_error")
        reason = INCOMPLETE_REASONS.get(finish)
        return out + self._terminal("completed" if reason is None else "incomplete", incomplete_reason=reason)

    def fail(self, message: str, code: str = "server_error") -> list[Event]:
        """The exchange broke: `response.failed` (`error.code` is `code` when `ResponseError`
        knows it, else "server_error")."""
        if self._finished:
            return []
        return self.start() + self._failed(message, code)

    def response(self, status: ResponseStatus = "in_progress") -> dict[str, Any]:
        """The `Response` object as the stream stands."""
        return response_object(self._frame, status=status, output=[self._item_dict(i) for i in self._items])

    # ----------------------------------------------------------------------------------------------
    # Deltas, the finish, errors (DoorEncoder.feed's hooks)
    # ----------------------------------------------------------------------------------------------
    def _details(self, details: list[Any]) -> None:
        current = self._current if self._current is not None else self._pending
        if current is not None and current.kind == "reasoning":
            current.details.extend(details)

    def _finished_by(self, finish: Finish, out: list[Event]) -> None:
        self._close(out, "incomplete" if finish.reason in INCOMPLETE_REASONS else "completed")

    def _error(self, message: str, code: str) -> list[Event]:
        return self._failed(message, code)

    def _open(self, kind: str, prefix: str, out: list[Event]) -> StreamItem:
        """The open item of `kind`, or a new one after whatever else was open is done."""
        current = self._current
        if current is not None and current.kind == kind:
            return current
        self._close(out, "completed")
        item = self._current = StreamItem(kind, self._new_id(prefix))
        self._announce(item, out)
        return item

    def _reasoning(self, text: str, out: list[Event]) -> None:
        item = self._open("reasoning", "rs", out)
        at = self._at(item)
        if self._frame.summary:
            if not item.begun:
                part = summary_text_part("")
                self._emit(out, "response.reasoning_summary_part.added", **at, summary_index=0, part=part)
            self._emit(out, "response.reasoning_summary_text.delta", **at, summary_index=0, delta=text)
        else:
            if not item.begun:
                part = reasoning_text_part("")
                self._emit(out, "response.content_part.added", **at, content_index=0, part=part)
            self._emit(out, "response.reasoning_text.delta", **at, content_index=0, delta=text)
        item.begun = True
        item.text.append(text)

    def _text(self, text: str, out: list[Event]) -> None:
        item = self._open("message", "msg", out)
        at = self._at(item)
        if not item.begun:
            item.begun = True
            self._emit(out, "response.content_part.added", **at, content_index=0, part=output_text_part(""))
        self._emit(out, "response.output_text.delta", **at, content_index=0, delta=text, logprobs=[])
        item.text.append(text)

    def _tool_call(self, fragment: ToolCallDelta, out: list[Event]) -> None:
        """One `tool_calls[i]` fragment. A call is announced once its name is known (arguments
        that came before follow at once); a fragment without an index continues the open call
        with its id, else starts a new call for a new id, else continues the last call."""
        current = self._current
        if current is not None and current.kind == "reasoning":
            self._end_reasoning_text(current, out)
            self._pending, self._current = current, None
        elif current is not None:
            self._close(out, "completed")
        index = fragment.chat_index
        if index is None:
            index = call_index(
                fragment.call_id, {i: c.call_id for i, c in self._calls.items()}, self._last_call
            )
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = StreamItem("function_call", self._new_id("fc"))
        self._last_call = index
        if fragment.call_id and not call.call_id:
            call.call_id = fragment.call_id
        if call.extra is None:
            call.extra = fragment.extra
        name, arguments = fragment.name, fragment.arguments
        if name and not call.name:
            call.name = name
        if arguments:
            call.text.append(arguments)
            if call.begun and not self._is_custom(call):
                self._emit(out, "response.function_call_arguments.delta", **self._at(call), delta=arguments)
        if not call.begun and call.name:
            self._begin_call(call, out)

    def _begin_call(self, call: StreamItem, out: list[Event]) -> None:
        if not call.call_id:
            call.call_id = self._new_id("call")
        call.begun = True
        pending, self._pending = self._pending, None
        if pending is not None:  # the reasoning before it is done first, bound to this call
            pending.status = "completed"
            self._seal_done(pending, [call], out)
        self._announce(call, out)
        if call.text and not self._is_custom(call):
            self._emit(
                out, "response.function_call_arguments.delta", **self._at(call), delta="".join(call.text)
            )

    # ----------------------------------------------------------------------------------------------
    # Items in and out
    # ----------------------------------------------------------------------------------------------
    def _announce(self, item: StreamItem, out: list[Event]) -> None:
        item.output_index = len(self._items)
        self._items.append(item)
        self._emit(
            out, "response.output_item.added", output_index=item.output_index, item=self._item_dict(item)
        )

    def _close(self, out: list[Event], status: ItemStatus) -> None:
        """Every open item done, with `status` (a pending reasoning item is done, "completed", as its
        first call begins)."""
        item, self._current = self._current, None
        if item is not None:
            item.status = status
            if item.kind == "reasoning":
                self._end_reasoning_text(item, out)
                self._seal_done(item, [], out)
            else:
                text, at = "".join(item.text), self._at(item)
                self._emit(out, "response.output_text.done", **at, content_index=0, text=text, logprobs=[])
                self._emit(
                    out, "response.content_part.done", **at, content_index=0, part=output_text_part(text)
                )
                self._done(item, out)
        calls = sorted(self._calls.values(), key=lambda c: (not c.begun, c.output_index))
        self._calls, self._last_call = {}, None
        for call in calls:
            if not call.begun:  # a call whose name never came is still a call the model made
                self._begin_call(call, out)
        for call in calls:
            call.status = status
            if self._is_custom(call):
                # A freeform tool's input is one JSON string argument: whole only at the end.
                text = custom_input("".join(call.text))
                self._emit(out, "response.custom_tool_call_input.delta", **self._at(call), delta=text)
                self._emit(out, "response.custom_tool_call_input.done", **self._at(call), input=text)
            else:
                arguments = "".join(call.text)
                self._emit(
                    out, "response.function_call_arguments.done", **self._at(call), arguments=arguments
                )
            self._done(call, out)

    def _end_reasoning_text(self, item: StreamItem, out: list[Event]) -> None:
        if not item.begun:
            return
        text, at = "".join(item.text), self._at(item)
        if self._frame.summary:
            self._emit(out, "response.reasoning_summary_text.done", **at, summary_index=0, text=text)
            part = summary_text_part(text)
            self._emit(out, "response.reasoning_summary_part.done", **at, summary_index=0, part=part)
        else:
            self._emit(out, "response.reasoning_text.done", **at, content_index=0, text=text)
            self._emit(
                out, "response.content_part.done", **at, content_index=0, part=reasoning_text_part(text)
            )

    def _seal_done(self, item: StreamItem, calls: list[StreamItem], out: list[Event]) -> None:
        self._seal(item, calls)
        self._done(item, out)

    def _seal(self, item: StreamItem, calls: list[StreamItem]) -> None:
        """The reasoning item's `encrypted_content`: its text and details sealed, with the calls it
        precedes."""
        facts = ReasoningItemFacts(
            item.item_id,
            self._frame.id,
            self._frame.model,
            "".join(item.text),
            details=tuple(item.details),
            call_ids=tuple(call.call_id for call in calls),
            signatures={call.call_id: call.extra for call in calls if call.extra is not None},
            status=item.status,
        )
        item.encrypted = self._sealer(facts)

    def _done(self, item: StreamItem, out: list[Event]) -> None:
        self._emit(
            out, "response.output_item.done", output_index=item.output_index, item=self._item_dict(item)
        )

    def _item_dict(self, item: StreamItem) -> dict[str, Any]:
        return item_dict(item, summary=self._frame.summary, tool_names=self._tool_names)

    def _is_custom(self, call: StreamItem) -> bool:
        return is_custom(call, self._tool_names)

    # ----------------------------------------------------------------------------------------------
    # Events
    # ----------------------------------------------------------------------------------------------
    def _at(self, item: StreamItem) -> dict[str, Any]:
        return {"item_id": item.item_id, "output_index": item.output_index}

    def _emit(self, out: list[Event], kind: str, **fields: Any) -> None:
        out.append({"type": kind, "sequence_number": self._seq, **fields})
        self._seq += 1

    def _failed(self, message: str, code: str) -> list[Event]:
        """`response.failed` at once: the open items are never done, and "incomplete"."""
        for item in (self._current, self._pending, *self._calls.values()):
            if item is not None:
                item.status = "incomplete"
        self._current = self._pending = None
        self._calls = {}  # (announced calls are in the output; the others never reached the client)
        return self._terminal("failed", error=response_error(message, code))

    def _terminal(
        self,
        status: ResponseStatus,
        *,
        error: dict[str, Any] | None = None,
        incomplete_reason: str | None = None,
    ) -> list[Event]:
        self._finished = True
        response = response_object(
            self._frame,
            status=status,
            output=[self._item_dict(item) for item in self._items],
            usage=responses_usage(self._usage),
            error=error,
            incomplete_reason=incomplete_reason,
        )
        out: list[Event] = []
        self._emit(out, f"response.{status}", response=response)
        return out
