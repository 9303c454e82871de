"""The Responses front door's events as dicts (the encoder's model, proxy.core.protocols.responses.events):
one response's items opened, their deltas, each done, and the terminal event, built from the
internal event stream (DoorEncoder.feed's hooks) as the openai-python types shape them
(`openai.types.responses.ResponseStreamEvent`), numbered by `sequence_number`. What the stream
looks like, item by item, and when each item is done: the events module's docstring.
`ResponsesEncoder` (events) adds the direct path: the frames most of a stream is made of, written
as bytes without building these events, byte for byte what they would frame to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.core.protocols.chat_events import Finish, ToolCallDelta, call_index
from proxy.core.protocols.door_stream import DoorEncoder, Event
from proxy.core.protocols.responses.items import StreamItem, is_custom, item_dict
from proxy.core.protocols.responses.output import (
    IdFactory,
    ItemStatus,
    ReasoningItemFacts,
    ResponseFrame,
    ResponseStatus,
    Seal,
    custom_input,
    output_text_part,
    reasoning_text_part,
    response_error,
    response_object,
    responses_usage,
    summary_text_part,
)
from proxy.core.protocols.responses.tools import ToolName

# Finish reasons that end the output early, and the `incomplete_details.reason` they give.
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
# Finish reasons that say the upstream gave up (DeepSeek's, a generic one): a failed response.
FAILED_FINISHES = frozenset(("insufficient_system_resource", "error"))
NO_FINISH_MESSAGE = "the upstream stream ended without a finish reason"


class ResponseItemEvents(DoorEncoder):
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
    ) -> None:
        super().__init__()
        self._frame = frame
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
        # The opening `Response` object (`start`): the terminal one is it with what the stream
        # produced, built from it rather than from the frame a second time.
        self._opening: dict[str, Any] | None = None

    def start(self) -> list[Event]:
        """`response.created` and `response.in_progress` (once), with the one `Response` object
        as it stands: nothing is output yet, and both say so."""
        out: list[Event] = []
        if not self._started:
            self._started = True
            opening = self._opening = self.response()
            self._emit(out, "response.created", response=opening)
            self._emit(out, "response.in_progress", response=opening)
        return out

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
            self._emit(out, "response.function_call_arguments.delta", **self._at(call), delta=call.joined())

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
                text, at = item.joined(), self._at(item)
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
                text = custom_input(call.joined())
                self._emit(out, "response.custom_tool_call_input.delta", **self._at(call), delta=text)
                self._emit(out, "response.custom_tool_call_input.done", **self._at(call), input=text)
            else:
                arguments = call.joined()
                self._emit(
                    out, "response.function_call_arguments.done", **self._at(call), arguments=arguments
                )
            self._done(call, out)

    def _end_reasoning_text(self, item: StreamItem, out: list[Event]) -> None:
        if not item.begun:
            return
        text, at = item.joined(), self._at(item)
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
        frame = self._frame
        facts = ReasoningItemFacts(
            item.item_id,
            frame.id,
            frame.model,
            item.joined(),
            tuple(item.details),
            # (no calls, as a reasoning item before the answer has: no generator or comprehension run)
            tuple([call.call_id for call in calls]) if calls else (),
            {call.call_id: call.extra for call in calls if call.extra is not None} if calls else {},
            item.status,
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
        output = [self._item_dict(item) for item in self._items]
        usage = responses_usage(self._usage)
        # `response_object`'s fields that differ from the opening's, set in place (its key order).
        response = dict(self._opening or self.response())
        clock = self._frame.clock
        response["completed_at"] = int(clock()) if clock is not None and status == "completed" else None
        response["status"] = status
        response["output"] = output
        response["error"] = error
        response["incomplete_details"] = None if incomplete_reason is None else {"reason": incomplete_reason}
        response["usage"] = usage
        out: list[Event] = []
        self._emit(out, f"response.{status}", response=response)
        return out
