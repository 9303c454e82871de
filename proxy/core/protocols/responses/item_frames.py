"""The frames of a reasoning or message item of a Responses stream written from their parts as
bytes (the encoder's direct path, proxy.core.protocols.responses.events): byte for byte what
`frame` (or `message_frames`, the socket's form) writes of the event dicts the encoder's general
path builds for them.

- The text deltas (most of a stream): the parts of an item's delta frame around its number and its
  text (`delta_form`), from which the encoder joins a run's frames, the numbers from a table.
- The opening and closing of an item, ~10 events a stream writes once each (so what they cost is
  per response, not per chunk): output_item.added, then content_part.added
  (reasoning_summary_part.added in the summary form), and at the item's end its text's done event,
  content_part.done (reasoning_summary_part.done), output_item.done. The closing three hold the
  item's whole text, serialized once here for all three (the general path serializes it with
  each event's dict, and builds the dicts, the item object and its parts first), and each group
  is one list of parts joined once (a concatenation copies all it holds, the text each time).
- The stream's opening pair, response.created and response.in_progress: both carry the one
  `Response` object, serialized once here for the two.

The key order is the dicts' (proxy.core.protocols.responses.output: reasoning_item, message_item,
the parts), which tests hold to the general path.

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from proxy.core import jsonio

__all__ = ["NUMBERED", "NUMBERS", "ItemFrames", "numbers"]

# The decimal bytes of the sequence numbers most responses stay under, made once per process: a
# run of text deltas is joined from its frames' parts, and formatting each frame's number would
# be half of what that costs (past the table, they are formatted).
NUMBERED: Final = 4096
NUMBERS: Final = tuple([b"%d" % number for number in range(NUMBERED)])

_EMPTY_PART: Final = {
    b"reasoning": b'{"type":"reasoning_text","text":""}',
    b"summary": b'{"type":"summary_text","text":""}',
    b"message": b'{"type":"output_text","text":"","annotations":[],"logprobs":[]}',
}


class ItemFrames:
    """The frames of one stream's items, in SSE (`sse`) or the socket's form, numbered from the
    sequence numbers they are given; `summary`: a reasoning item's text is a summary part."""

    __slots__ = ("_sse", "_summary")

    def __init__(self, *, sse: bool, summary: bool) -> None:
        self._sse = sse
        self._summary = summary

    def opening_frames(self, response_json: bytes) -> bytes:
        """response.created (0) and response.in_progress (1), both carrying the one `Response`
        object (the encoder's `start`), its JSON written once for the two."""
        end = b"}\n\n" if self._sse else b"}\n"
        return b"".join(
            (
                self._opening(b"response.created", 0),
                b',"response":',
                response_json,
                end,
                self._opening(b"response.in_progress", 1),
                b',"response":',
                response_json,
                end,
            )
        )

    def delta_form(self, reasoning: bool, item_id: str, output_index: int) -> tuple[bytes, bytes, bytes]:
        """The bytes of a text delta frame of an item before its number, between it and its text's
        JSON string's insides, and after them (the encoder joins a run's frames from them)."""
        if reasoning:
            summary = self._summary
            kind = b"response.reasoning_summary_text.delta" if summary else b"response.reasoning_text.delta"
            index = b',"summary_index":0,"delta":"' if summary else b',"content_index":0,"delta":"'
            tail = b'"}'
        else:
            kind, index, tail = (
                b"response.output_text.delta",
                b',"content_index":0,"delta":"',
                b'","logprobs":[]}',
            )
        sse = self._sse
        head = (b"event: " + kind + b"\ndata: " if sse else b"") + b'{"type":"' + kind
        head += b'","sequence_number":'
        middle = b',"item_id":"' + item_id.encode() + b'","output_index":' + b"%d" % output_index
        return (head, middle + index, tail + (b"\n\n" if sse else b"\n"))

    def opened(self, seq: int, reasoning: bool, item_id: str, output_index: int) -> bytes:
        """output_item.added (`seq`) of a new item, then the added event of its one part (`seq` + 1)."""
        id_json = jsonio.dumps(item_id)
        index = b"%d" % output_index
        if not reasoning:
            item = b',"type":"message","role":"assistant","status":"in_progress","content":[]}'
        elif self._summary:
            item = b',"type":"reasoning","summary":[],"status":"in_progress"}'
        else:
            item = b',"type":"reasoning","summary":[],"content":[],"status":"in_progress"}'
        if reasoning and self._summary:
            kind, slot = b"response.reasoning_summary_part.added", b',"summary_index":0,"part":'
            part = _EMPTY_PART[b"summary"]
        else:
            kind, slot = b"response.content_part.added", b',"content_index":0,"part":'
            part = _EMPTY_PART[b"reasoning" if reasoning else b"message"]
        end = b"\n\n" if self._sse else b"\n"
        return b"".join(
            (
                self._opening(b"response.output_item.added", seq),
                b',"output_index":',
                index,
                b',"item":{"id":',
                id_json,
                item,
                b"}",
                end,
                self._opening(kind, seq + 1),
                b',"item_id":',
                id_json,
                b',"output_index":',
                index,
                slot,
                part,
                b"}",
                end,
            )
        )

    def closed(
        self,
        seq: int,
        reasoning: bool,
        item_id: str,
        output_index: int,
        text: str,
        status: str,
        encrypted: str | None,
    ) -> bytes:
        """The item's text done (`seq`), its part done (`seq` + 1), the item done (`seq` + 2) with
        `status` (and a reasoning item's `encrypted` content, when it has one). Written as one
        list of parts joined once: the text's JSON is in all three, and ~700 bytes copied by each
        concatenation that carries it (the part, then the event, then its frame) added up."""
        id_json = jsonio.dumps(item_id)
        text_json = jsonio.dumps(text)
        at = b',"item_id":' + id_json + b',"output_index":' + b"%d" % output_index
        status_json = b'"' + status.encode() + b'"'
        if not reasoning:
            text_kind, part_kind = b"response.output_text.done", b"response.content_part.done"
            slot, text_end = b',"content_index":0', b',"logprobs":[]}'
            part_head, part_end = b'{"type":"output_text","text":', b',"annotations":[],"logprobs":[]}'
            item_head = b',"type":"message","role":"assistant","status":' + status_json + b',"content":['
            item_end = b"]}"
        else:
            if self._summary:
                text_kind, part_kind = (
                    b"response.reasoning_summary_text.done",
                    b"response.reasoning_summary_part.done",
                )
                slot, part_head = b',"summary_index":0', b'{"type":"summary_text","text":'
                item_head = b',"type":"reasoning","summary":['
            else:
                text_kind, part_kind = b"response.reasoning_text.done", b"response.content_part.done"
                slot, part_head = b',"content_index":0', b'{"type":"reasoning_text","text":'
                item_head = b',"type":"reasoning","summary":[],"content":['
            text_end = part_end = b"}"
            sealed = b"" if encrypted is None else b',"encrypted_content":' + jsonio.dumps(encrypted)
            item_end = b"]" + sealed + b',"status":' + status_json + b"}"
        done = b"response.output_item.done"
        sse = self._sse
        end = b"\n\n" if sse else b"\n"
        return b"".join(
            (
                self._opening(text_kind, seq),
                at,
                slot,
                b',"text":',
                text_json,
                text_end,
                end,
                self._opening(part_kind, seq + 1),
                at,
                slot,
                b',"part":',
                part_head,
                text_json,
                part_end,
                b"}",
                end,
                self._opening(done, seq + 2),
                b',"output_index":' + b"%d" % output_index + b',"item":{"id":',
                id_json,
                item_head,
                part_head,
                text_json,
                part_end,
                item_end,
                b"}",
                end,
            )
        )

    def _opening(self, kind: bytes, seq: int) -> bytes:
        """A frame's start up to its event's sequence number, included: the SSE event line and the
        data line's opening, or the socket form's JSON opening."""
        number = NUMBERS[seq] if seq < NUMBERED else b"%d" % seq
        if self._sse:
            return b"".join((b"event: ", kind, b'\ndata: {"type":"', kind, b'","sequence_number":', number))
        return b"".join((b'{"type":"', kind, b'","sequence_number":', number))


def numbers(start: int, count: int) -> Sequence[bytes]:
    """The decimal bytes of the `count` sequence numbers from `start`."""
    end = start + count
    if end <= NUMBERED:
        return NUMBERS[start:end]
    return [b"%d" % number for number in range(start, end)]
