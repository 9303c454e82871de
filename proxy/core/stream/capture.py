"""What one response leaves for the replay store: per choice, the reasoning as normalized, the
content as the client got it, the tool-call ids, and — exactly as the provider sent them —
`reasoning_details` and each tool call's `extra_content` (Gemini's thought signatures).

Pure. A `TurnCollector` exists only when the replay store is on; the stream pipeline hands it
what it already has in hand (the parsed chunk before and after normalization, the reasoning text
the extractor found), so capture adds no parsing and no I/O per chunk. The store write happens
once, at the end of the response (proxy.server.replay_service).

Streamed `reasoning_details` arrive in pieces: items with the same `index` are merged the way a
non-streamed answer carries them (text and summary concatenated, every other key as last sent),
items without an index are kept as they came.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

_CONCATENATED = ("text", "summary")


class CapturedTurn:
    """One choice's turn while its response is collected. (A plain class with its containers built
    in `__init__`: one is made for every collected response, and a dataclass's default factories
    cost several calls each.)"""

    __slots__ = ("calls", "content", "content_seen", "detail_slots", "details", "extra", "index", "reasoning")

    def __init__(self, index: int) -> None:
        self.index = index
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.content_seen = False
        self.calls: dict[int, str] = {}  # tool-call position → id
        self.extra: dict[int, Any] = {}  # tool-call position → extra_content
        self.details: list[Any] = []
        self.detail_slots: dict[int, dict[str, Any]] = {}

    @property
    def first_call_id(self) -> str | None:
        calls = self.calls
        if not calls:
            return None
        return calls[0] if 0 in calls else calls[min(calls)]

    @property
    def signatures(self) -> dict[str, Any]:
        if not self.extra:
            return {}
        return {self.calls[i]: extra for i, extra in self.extra.items() if i in self.calls}

    def finished(self) -> Turn:
        """The turn as the store keeps it (asked at the end of every collected response; a plain
        answer has neither calls nor extra_content, so neither property is asked for it)."""
        reasoning = self.reasoning
        return _new_turn(
            (
                self.first_call_id if self.calls else None,
                "".join(reasoning) if reasoning else None,
                "".join(self.content) if self.content_seen else None,
                self.details or None,
                self.signatures if self.extra else {},
            )
        )


class TurnCollector:
    """Collects the turns of one response (stream or not). See the module docstring.

    Per streamed chunk the pipeline calls `chunk` once, after normalization (and `raw_details`
    before it only when reasoning is hidden from the client, since hiding takes the text out of
    `reasoning_details`); the extractor calls `reasoning` with the text it found. Those two run for
    every chunk of a tool loop's stream, so they are kept to a few dict lookups and one append for
    the common chunk (one choice, the same as the chunk before, carrying text); anything else —
    tool calls, details, another choice — takes the general path. What is kept is what the store
    needs (text pieces, tool-call ids and extra_content, merged details), never a chunk.
    """

    __slots__ = ("_last", "_last_index", "_turns", "raw_details_first")

    def __init__(self, *, raw_details_first: bool = False) -> None:
        self._turns: dict[int, CapturedTurn] = {}
        # The turn the previous chunk went to, and its index object: a chunk whose index is that
        # very object (small ints are shared) goes straight to it. A stand-in until the first one.
        self._last = _NO_TURN
        self._last_index: object = _NO_TURN
        # True: details are read by `raw_details` before normalization, not by `chunk` after it.
        self.raw_details_first = raw_details_first

    def _turn(self, index: Any) -> CapturedTurn:
        key = index if type(index) is int else 0
        turn = self._turns.get(key)
        if turn is None:
            turn = self._turns[key] = CapturedTurn(key)
        self._last, self._last_index = turn, key
        return turn

    # -- stream ---------------------------------------------------------------------------------
    def chunk(self, chunk: dict[str, Any]) -> None:
        """A chunk after normalization: content as the client gets it, tool calls, details."""
        choices = chunk.get("choices")
        if type(choices) is not list:
            return
        for choice in choices:
            if type(choice) is not dict:
                continue
            delta = choice.get("delta")
            if type(delta) is not dict:
                continue
            content = delta.get("content")
            if content is None:
                # A reasoning-only chunk (most of a thinking model's stream) ends here.
                calls = delta.get("tool_calls")
                details = None if self.raw_details_first else delta.get("reasoning_details")
                if not calls and not details:
                    continue
                index = choice.get("index", 0)
                self._more(self._last if index is self._last_index else self._turn(index), calls, details)
                continue
            index = choice.get("index", 0)
            turn = self._last if index is self._last_index else self._turn(index)
            if type(content) is str:
                turn.content_seen = True
                if content:
                    turn.content.append(content)
            calls = delta.get("tool_calls")
            details = None if self.raw_details_first else delta.get("reasoning_details")
            if calls or details:
                self._more(turn, calls, details)

    def _more(self, turn: CapturedTurn, calls: Any, details: Any) -> None:
        """The rarer parts of a delta: tool calls and reasoning_details."""
        if calls and type(calls) is list:
            for position, call in enumerate(calls):
                if type(call) is dict:
                    _add_call(turn, call, call.get("index", position))
        if details and type(details) is list:
            for item in details:
                _add_detail(turn, item)

    def raw_details(self, chunk: dict[str, Any]) -> None:
        """A chunk before normalization: its `reasoning_details` exactly as sent (hide mode)."""
        choices = chunk.get("choices")
        if type(choices) is not list:
            return
        for choice in choices:
            delta = choice.get("delta") if type(choice) is dict else None
            details = delta.get("reasoning_details") if type(delta) is dict else None
            if details and type(details) is list:
                turn = self._turn(choice.get("index", 0))
                for item in details:
                    _add_detail(turn, item)

    def content(self, index: int, text: str) -> None:
        """What `chunk` keeps of a chunk whose delta carries only `text` as content (the stream
        pipeline recognized it without parsing it: proxy.core.stream.chunk_template)."""
        turn = self._last if index is self._last_index else self._turn(index)
        turn.content_seen = True
        if text:
            turn.content.append(text)

    def reasoning(self, index: int, text: str) -> None:
        """Reasoning text of one choice as the extractor normalized it (also when hidden)."""
        if text:
            (self._last if index is self._last_index else self._turn(index)).reasoning.append(text)

    # -- non-stream -----------------------------------------------------------------------------
    def message(self, index: Any, message: dict[str, Any]) -> None:
        """A normalized `choices[].message` (reasoning still visible, details as sent)."""
        turn = self._turn(index)
        for key in ("reasoning_content", "reasoning"):
            text = message.get(key)
            if type(text) is str and text:
                turn.reasoning.append(text)
                break
        content = message.get("content")
        if type(content) is str:
            turn.content_seen = True
            turn.content.append(content)
        calls = message.get("tool_calls")
        if type(calls) is list:
            for position, call in enumerate(calls):
                if type(call) is dict:
                    _add_call(turn, call, position)
        details = message.get("reasoning_details")
        if type(details) is list:
            turn.details.extend(details)

    # -- result ---------------------------------------------------------------------------------
    def reasoning_texts(self) -> list[str]:
        """Every reasoning text collected so far, all choices (the token estimate reads them)."""
        return [text for turn in self._turns.values() for text in turn.reasoning]

    def first_call_ids(self) -> list[str]:
        """Each turn's first tool-call id so far: what `turns()` would key them by, without
        joining any text (asked while the response is still under way)."""
        return [cid for t in self._turns.values() if (cid := t.first_call_id) is not None]

    def completion(self, completion: dict[str, Any]) -> None:
        """Every choice's message of a whole non-stream answer."""
        choices = completion.get("choices")
        if type(choices) is not list:
            return
        for choice in choices:
            if type(choice) is dict and type(choice.get("message")) is dict:
                self.message(choice.get("index", 0), choice["message"])

    def turns(self) -> list[Turn]:
        return [turn.finished() for turn in self._turns.values()]


_NO_TURN = CapturedTurn(-1)  # TurnCollector's stand-in before its first turn (never in _turns)


class Turn(NamedTuple):
    """One finished assistant turn, as the store keeps it. (A NamedTuple: built at the end of
    every collected response, so it must be cheap.)"""

    first_call_id: str | None
    reasoning: str | None
    content: str | None
    details: list[Any] | None
    signatures: dict[str, Any]


# Builds a Turn from a tuple in C, without the generated __new__'s Python frame.
_new_turn: Callable[[tuple[str | None, str | None, str | None, list[Any] | None, dict[str, Any]]], Turn] = (
    partial(tuple.__new__, Turn)
)


def _add_call(turn: CapturedTurn, call: dict[str, Any], position: Any) -> None:
    slot = position if type(position) is int else len(turn.calls)
    call_id = call.get("id")
    if type(call_id) is str and call_id and slot not in turn.calls:
        turn.calls[slot] = call_id
    extra = call.get("extra_content")
    if extra is not None and slot not in turn.extra:
        turn.extra[slot] = extra


def _add_detail(turn: CapturedTurn, item: Any) -> None:
    if type(item) is not dict or type(item.get("index")) is not int:
        turn.details.append(item)
        return
    slot = turn.detail_slots.get(item["index"])
    if slot is None or slot.get("type") != item.get("type"):
        slot = dict(item)
        turn.detail_slots[item["index"]] = slot
        turn.details.append(slot)
        return
    for key, value in item.items():
        current = slot.get(key)
        if key in _CONCATENATED and type(value) is str and type(current) is str:
            slot[key] = current + value
        else:
            slot[key] = value
