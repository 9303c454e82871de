"""An upstream's Responses API answer as the chat completion a chat client reads (issue 29).

OpenAI's reasoning models refuse function tools with a reasoning level on /v1/chat/completions, so
such requests go to its Responses API (responses_upstream), and the answer comes back here as the
internal event stream, chat-completion chunks, before the pipeline (responses_events the other way).
Pure. `ResponsesDecoder.feed(bytes)` takes the SSE body in any split, `close()` ends it; each event
gives its chunks at once, so the output is the same however the input is cut. One choice, index 0;
id, created and model are `response.created`'s.

    reasoning_summary_text.delta, reasoning_text.delta → delta.reasoning_content (a blank line
        between two parts; an item's reasoning in one form only, the first to come: a model that
        sent a summary and its raw text would otherwise say it twice)
    output_item.done (reasoning with encrypted_content) → delta.reasoning_details: one
        `reasoning.encrypted` entry (OpenRouter's shape) with the item's summary texts beside the
        blob, so that the next turn sends the item back whole (responses_upstream reads it)
    output_text.delta → delta.content; refusal.delta → delta.refusal
    output_item.added (function_call | custom_tool_call) → a tool call (id = call_id, index = the
        calls' order); function_call_arguments.delta → its arguments. A custom (freeform) tool's
        input is streamed as the arguments `{"input":"…"}`: chat has no freeform tools.
    response.completed → finish_reason tool_calls | stop; response.incomplete → content_filter, else
        length (the answer was cut); a usage chunk when asked (`include_usage`); [DONE]
    response.failed, error → an error chunk, then [DONE]

Text is never dropped: what the deltas did not deliver of a `*.done` event's or a done item's whole
text is sent then, and the final Response's output catches up items never streamed. A stream that
ends without a terminal event, or with an event that is not JSON, ends with an error chunk: it must
never look complete. The non-stream form, from the same helpers, is
proxy.core.protocols.responses.upstream_items.completion_from_response.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from proxy.core import jsonio
from proxy.core.errors import error_payload
from proxy.core.protocols.event_template import Run, learn
from proxy.core.protocols.responses.upstream_items import (
    CALLS,
    DELTA_FIELD,
    ERROR_TYPE,
    REASONING,
    call_field,
    call_id,
    chat_usage,
    encrypted_detail,
    error_facts,
    escaped,
    finish_reason,
    list_of,
    seconds,
    text_field,
    text_parts,
)
from proxy.core.stream.chunk_template import KnownRun, joined, pieces_of, value_span
from proxy.core.stream.sse import DEFAULT_MAX_EVENT_BYTES, EventTooLarge, SSEDecoder, SSEEvent, data_frame

__all__ = ["ResponsesDecoder"]

DONE: Final = b"data: [DONE]\n\n"
# Templates learned per stream at most: a slot whose events never match their template (some
# field varies that event_template does not know) is then just decoded, without a learning cost.
MAX_LEARNS: Final = 16

# A text slot: (kind, output index, part index). Kinds are the part types (output_text, refusal,
# summary_text, reasoning_text), and a call's `arguments` or a custom call's `input`.
Slot = tuple[str, int, int]
# The events of one text, `<base>.delta` and `<base>.done`: the slot kind, the field numbering the
# part. (A done event's whole text is in the field named like the kind, else in `text`.)
_TEXT_EVENTS: Final = {
    "response.output_text": ("output_text", "content_index"),
    "response.refusal": ("refusal", "content_index"),
    "response.reasoning_summary_text": ("summary_text", "summary_index"),
    "response.reasoning_text": ("reasoning_text", "content_index"),
    "response.function_call_arguments": ("arguments", ""),
    "response.custom_tool_call_input": ("input", ""),
}


class ResponsesDecoder:
    """One upstream Responses stream as chat SSE. After the end ([DONE] written) every call
    returns nothing; `finished` tells."""

    def __init__(
        self, *, include_usage: bool = False, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    ) -> None:
        self._sse = SSEDecoder(max_event_bytes)
        self._include_usage = include_usage
        self._head: dict[str, Any] = {"id": "", "object": "chat.completion.chunk", "created": 0, "model": ""}
        self._out: list[bytes | KnownRun] = []
        self._frame = b""  # the last chunk written by _chunk
        self._finished = False
        self._role_sent = False
        self._item_ids: dict[str, int] = {}  # item id → output index
        self._texts: dict[Slot, list[str]] = {}  # what each slot has received
        self._forms: dict[int, str] = {}  # a reasoning item's form (the first of REASONING to come)
        self._last_reasoning: Slot | None = None
        self._calls: dict[int, int] = {}  # output index → chat tool call index
        self._open_custom: set[int] = set()  # custom calls whose `{"input":"` is not closed yet
        self._done: set[int] = set()  # output indexes of the items done
        self._details = 0
        self._max_event_bytes = max_event_bytes
        # Runs of more of the same (the bulk of a stream): the template of the last delta event
        # decoded, and what that event's chunk was, to be learned after it (_text sets it).
        self._run: Run[Slot] | None = None
        self._learn: tuple[Slot, str, bytes] | None = None
        self._learns = 0
        self._held = bytearray()  # the start of an event not whole yet (_feed_by_runs)

    @property
    def finished(self) -> bool:
        return self._finished

    def feed(self, data: bytes) -> bytes:
        """The chat frames of the events `data` completes."""
        if self._finished:
            return b""
        self._feed_by_runs(data)
        return self._take()

    def feed_pieces(self, data: bytes) -> list[bytes | KnownRun]:
        """As `feed`, each run of chunks of more of the same apart with its texts (KnownRun), for
        a pipeline that then need not read them from the bytes again."""
        if self._finished:
            return []
        self._feed_by_runs(data)
        pieces = pieces_of(self._out)
        self._out.clear()  # (in place: a run writes to this list)
        return pieces

    def _decode(self, data: bytes) -> None:
        try:
            self._events(self._sse.feed(data))
        except EventTooLarge as exc:
            self._events(exc.events)
            self._fail(str(exc), "upstream_event_too_large")

    def _feed_by_runs(self, data: bytes) -> None:
        """Runs of the learned template's events are taken from their bytes (a fast upstream's
        read holds hundreds); each event between runs is decoded alone, so that a template
        learned from it serves the rest of the read. The part of an event at the end of a read
        is held here until the read that completes it (with an idle SSE decoder, the decoder would
        only hold it too): the whole event can then be taken as part of a run."""
        held = self._held
        if held:
            whole = data.find(b"\n\n") >= 0 or (held.endswith(b"\n") and data.startswith(b"\n"))
            if not whole and data.find(b"\r") < 0 and len(held) + len(data) <= self._max_event_bytes:
                held += data  # (still not whole: kept without copying what came before)
                return
            data = bytes(held) + data
            held.clear()
        pos, size = 0, len(data)
        while pos < size and not self._finished:
            run = self._run
            if (
                run is not None
                and self._sse.idle
                and data.startswith(run.template.parts[0], pos)
                and self._run_holds(run.key)
            ):
                taken = run.take(data, pos, self._max_event_bytes, self._out)
                if taken > pos:
                    pos = taken
                    continue
            end = data.find(b"\n\n", pos)
            if end < 0 and self._sse.idle and size - pos <= self._max_event_bytes:
                held += memoryview(data)[pos:]
                return
            end = size if end < 0 else end + 2
            self._decode(data[pos:end])
            pos = end

    def _run_holds(self, slot: Slot) -> bool:
        """Whether a delta of `slot` would now be sent as the run's chunk: nothing of another slot
        came between (a reasoning part's separator, a call not announced yet)."""
        kind, index, _ = slot
        if kind in REASONING:
            return self._last_reasoning == slot and self._forms.get(index) == kind
        return kind in DELTA_FIELD or index in self._calls

    def close(self) -> bytes:
        """The upstream body ended: the rest, and an error chunk when no terminal event came."""
        cut = False
        if self._held and not self._finished:
            self._decode(bytes(self._held))
        self._held.clear()
        for event in [] if self._finished else self._sse.flush():  # (at most one, unterminated)
            if event.raw.endswith((b"\n\n", b"\r\r", b"\n\r", b"\r\r\n", b"\n\r\n")):
                self._events([event])  # (complete after all: its last line end was a held CR)
            elif event.raw.strip(b"\r\n"):
                cut = True
        if not self._finished:
            where = "in the middle of an event" if cut else "before the response was completed"
            self._fail(f"The upstream Responses stream ended {where}.", "upstream_truncated")
        return self._take()

    def _take(self) -> bytes:
        out = joined(self._out)
        self._out.clear()  # (in place: a run writes to this list)
        return out

    def _events(self, events: list[SSEEvent]) -> None:
        for event in events:
            if self._finished:
                return
            if event.data is None or event.data == b"[DONE]":
                continue
            try:
                parsed = jsonio.loads(event.data)
            except ValueError:
                parsed = jsonio.loads_lenient(event.data)  # (lone surrogates), None when not JSON
            if not isinstance(parsed, dict):
                self._fail("The upstream sent an event that is not a JSON object.", "upstream_bad_response")
                return
            self._event(parsed)
            if self._learn is not None:
                self._learn_run(event.raw, parsed, *self._learn)
                self._learn = None

    def _event(self, event: dict[str, Any]) -> None:
        kind = str(event.get("type"))
        base, _, end = kind.rpartition(".")
        if base in _TEXT_EVENTS and end in ("delta", "done"):
            slot_kind, index_field = _TEXT_EVENTS[base]
            part = event.get(index_field) if index_field else 0
            index = self._index(event.get("output_index"), event.get("item_id"))
            slot = (slot_kind, index, part if type(part) is int else 0)
            text = event.get("delta" if end == "delta" else text_field(slot_kind))
            if isinstance(text, str):
                (self._text if end == "delta" else self._catch_up)(slot, text)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = event.get("item")
            if isinstance(item, Mapping):
                index = self._index(event.get("output_index"), item.get("id"))
                if end == "done":
                    self._item_done(index, item)
                elif item.get("type") in CALLS and index not in self._calls:
                    self._start_call(index, item)
        elif kind in ("response.created", "response.in_progress"):
            self._take_head(event.get("response"))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self._terminal(kind, event.get("response"))
        elif kind == "error":
            nested = event.get("error")
            self._fail(*error_facts(nested if isinstance(nested, Mapping) else event))

    def _index(self, output_index: Any, item_id: Any) -> int:
        """An item's output index: the event's, else the one its id came with (-1: unknown)."""
        if type(output_index) is int:
            if isinstance(item_id, str):
                self._item_ids.setdefault(item_id, output_index)
            return output_index
        return self._item_ids.get(item_id, -1) if isinstance(item_id, str) else -1

    def _take_head(self, response: Any) -> None:
        """The chunks' id, created and model: the first Response object's that has them."""
        if isinstance(response, Mapping):
            head = self._head
            head["id"] = head["id"] or str(response.get("id") or "")
            head["created"] = head["created"] or seconds(response.get("created_at"))
            head["model"] = head["model"] or str(response.get("model") or "")

    def _text(self, slot: Slot, text: str) -> None:
        """A piece of one slot's text, recorded and sent as its delta."""
        kind, index, _ = slot
        if not text or (kind in REASONING and self._forms.setdefault(index, kind) != kind):
            return  # (nothing, or the item's reasoning in its other form)
        self._texts.setdefault(slot, []).append(text)
        plain = self._role_sent  # (the first chunk carries the role: not more of the same)
        if kind in REASONING:
            separate = self._last_reasoning not in (None, slot)
            self._last_reasoning = slot
            self._chunk({"reasoning_content": "\n\n" + text if separate else text})
            plain = plain and not separate
            key = "reasoning_content"
        elif kind in DELTA_FIELD:
            key = DELTA_FIELD[kind]
            self._chunk({key: text})
        elif index in self._calls:  # (arguments before their call was announced come with it)
            self._arguments(index, escaped(text) if kind == "input" else text)
            plain, key = plain and kind == "arguments", "arguments"
        else:
            return
        run = self._run
        if plain and (run is None or run.key != slot or not run.hits) and self._learns < MAX_LEARNS:
            self._learn = (slot, key, self._frame)

    def _learn_run(self, raw: bytes, event: dict[str, Any], slot: Slot, key: str, frame: bytes) -> None:
        """The run of `slot` from its delta event just decoded, when both the event and the chunk
        it gave are templates (else the last run stays)."""
        template = learn(raw, event) if str(event.get("type")).endswith(".delta") else None
        span = value_span(frame, key) if template is not None else None
        self._learns += 1
        if template is not None and span is not None:
            halves = (frame[: span[0]], frame[span[1] :])
            self._run = Run(template, slot, halves, self._texts[slot])

    def _catch_up(self, slot: Slot, whole: str) -> None:
        """What of a slot's whole text its deltas did not deliver (none when they differ)."""
        have = "".join(self._texts.get(slot, ()))
        if len(whole) > len(have) and whole.startswith(have):
            self._text(slot, whole[len(have) :])

    def _start_call(self, index: int, item: Mapping[str, Any]) -> None:
        k = self._calls[index] = len(self._calls)
        arguments = "".join(self._texts.get((call_field(item), index, 0), ()))
        if item.get("type") == "custom_tool_call":
            self._open_custom.add(index)
            arguments = '{"input":"' + escaped(arguments)
        function = {"name": str(item.get("name") or ""), "arguments": arguments}
        call = {"index": k, "id": call_id(item), "type": "function", "function": function}
        self._chunk({"tool_calls": [call]})

    def _arguments(self, index: int, text: str) -> None:
        self._chunk({"tool_calls": [{"index": self._calls[index], "function": {"arguments": text}}]})

    def _item_done(self, index: int, item: Mapping[str, Any]) -> None:
        """An item is whole: the text its deltas missed, then a reasoning item's encrypted detail or
        a custom call's closing quote. Once per item (the terminal Response repeats them)."""
        if index in self._done:
            return
        self._done.add(index)
        if item.get("type") in CALLS:
            if index not in self._calls:
                self._start_call(index, item)
            field = call_field(item)
            self._catch_up((field, index, 0), str(item.get(field) or ""))
            if index in self._open_custom:
                self._open_custom.discard(index)
                self._arguments(index, '"}')
            return
        for kind, number, text in text_parts(item):
            self._catch_up((kind, index, number), text)
        detail = encrypted_detail(item, self._details)
        if detail is not None:
            self._details += 1
            self._chunk({"reasoning_details": [detail]})

    def _terminal(self, kind: str, response: Any) -> None:
        response = response if isinstance(response, Mapping) else {}
        self._take_head(response)
        if kind == "response.failed" or response.get("status") == "failed":
            self._fail(*error_facts(response.get("error")))
            return
        for index, item in enumerate(list_of(response.get("output"))):
            if isinstance(item, Mapping):
                self._item_done(index, item)
        for index in sorted(self._open_custom):  # (a custom call never done)
            self._arguments(index, '"}')
        incomplete = kind == "response.incomplete" or response.get("status") == "incomplete"
        self._chunk({}, finish_reason(response, incomplete=incomplete, called=bool(self._calls)))
        usage = chat_usage(response.get("usage"))
        if self._include_usage and usage is not None:
            self._out.append(data_frame(jsonio.dumps({**self._head, "choices": [], "usage": usage})))
        self._out.append(DONE)
        self._finished = True

    def _fail(self, message: str, code: str) -> None:
        self._out += (data_frame(jsonio.dumps(error_payload(message, ERROR_TYPE, code))), DONE)
        self._finished = True

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> None:
        if not self._role_sent:
            self._role_sent = True
            delta = {"role": "assistant", **delta}
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        self._frame = data_frame(jsonio.dumps({**self._head, "choices": [choice]}))
        self._out.append(self._frame)
