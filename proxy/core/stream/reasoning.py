"""Reasoning extraction: every upstream form of reasoning into one field, tags out of content.

Pure and incremental. `StreamReasoningExtractor` takes the parsed `chat.completion.chunk` dicts of one
streamed response in order and normalizes each in place; `normalize_message` / `normalize_completion` do
the same for a non-streamed answer. For the same answer both give the same reasoning and content text.

Reasoning is read from (per choice): `reasoning_content`, `reasoning`, `reasoning_details[]` text and
summary items (one of them, in that order of precedence: OpenRouter sends the same text in `reasoning`
and `reasoning_details`), Mistral `thinking` content parts, and inline tags in content (`<think>…</think>`
and the like, split however the text is split: proxy.core.stream.reasoning_tags; gpt-oss harmony
channels: proxy.core.stream.harmony).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.core.controls import ReasoningField
from proxy.core.stream.reasoning_tags import TextSplitter, tag_set

ReasoningSink = Callable[[int, str], None]
_TEXT_DETAIL_KEYS = {"reasoning.text": "text", "reasoning.summary": "summary"}
_PLAIN_FIELDS = ("reasoning_content", "reasoning")


@dataclass(frozen=True, slots=True)
class ReasoningOptions:
    """How to read and write reasoning for one response.

    `tags`: inline tag names to extract from content (`("think",)` → `<think>`/`</think>`).
    `implicit_open`: the chat template opens the tag itself, so content starts inside reasoning
    until the first closing tag (tags default to `("think",)` when none are given). It does not
    apply to a choice whose upstream already sent reasoning in a field before any content: that
    server has split reasoning off itself. `output_field`: where reasoning goes. `hide`: reasoning
    text is removed from what the client gets (replay-only data such as signatures stays).
    `harmony`: content is gpt-oss harmony text, read first by proxy.core.stream.harmony.
    """

    tags: tuple[str, ...] = ()
    implicit_open: bool = False
    output_field: ReasoningField = ReasoningField.REASONING_CONTENT
    hide: bool = False
    harmony: bool = False


@dataclass(frozen=True, slots=True)
class ChunkOutcome:
    """What `process_chunk` did and saw.

    `changed` False means the chunk dict is untouched (forward the original bytes). `reasoning`:
    the chunk carried reasoning text (also when hidden). `content`: it carried answer text after
    extraction.
    """

    changed: bool
    reasoning: bool
    content: bool


# The outcomes of an untouched chunk, shared: the per-chunk fast path allocates nothing.
_UNCHANGED = {(r, c): ChunkOutcome(False, r, c) for r in (False, True) for c in (False, True)}


@dataclass(frozen=True, slots=True)
class TextRule:
    """See StreamReasoningExtractor.text_rule."""

    unless_lt: bool  # a text with `<` in it needs the full path
    tell: Callable[[str], None] | None


class _Writer:
    """Writes reasoning text into a delta or message according to the options."""

    __slots__ = ("hide", "others", "targets")

    def __init__(self, options: ReasoningOptions) -> None:
        self.hide = options.hide
        field = options.output_field
        if field is ReasoningField.BOTH:
            self.targets: tuple[str, ...] = _PLAIN_FIELDS
        else:
            self.targets = (field.value,)
        self.others = tuple(f for f in _PLAIN_FIELDS if f not in self.targets)

    def write(self, obj: dict[str, Any], text: str) -> bool:
        """Put `text` (this part's whole reasoning) in place; True if `obj` changed."""
        changed = False
        if self.hide:
            for key in _PLAIN_FIELDS:
                if obj.get(key):
                    del obj[key]
                    changed = True
            details = obj.get("reasoning_details")
            if type(details) is list:
                kept = _hide_details(details)
                if kept is not None:
                    changed = True
                    if kept:
                        obj["reasoning_details"] = kept
                    else:
                        del obj["reasoning_details"]
            return changed
        if not text:
            return False
        for key in self.targets:
            if obj.get(key) != text:
                obj[key] = text
                changed = True
        for key in self.others:
            # `null` stays; any other value is a second place (or, as "", shadows the real field).
            if obj.get(key) is not None:
                del obj[key]
                changed = True
        return changed


def _hide_details(details: list[Any]) -> list[Any] | None:
    """`details` without reasoning text, or None if it had none.

    Text and summary items go; an item that also carries a signature stays without its text
    (the signature is what a replay needs); encrypted and unknown items stay as they are.
    """
    kept: list[Any] = []
    removed = False
    for item in details:
        if type(item) is dict and type(item.get("type")) is str and item["type"] in _TEXT_DETAIL_KEYS:
            key = _TEXT_DETAIL_KEYS[item["type"]]
            if key in item:
                removed = True
                if item.get("signature"):
                    kept.append({k: v for k, v in item.items() if k != key})
                continue
        kept.append(item)
    return kept if removed else None


def _field_reasoning(obj: dict[str, Any]) -> str:
    """Reasoning text carried in fields, counted once: reasoning_content > reasoning > details."""
    text = obj.get("reasoning_content")
    if text and type(text) is str:
        return text
    text = obj.get("reasoning")
    if text and type(text) is str:
        return text
    details = obj.get("reasoning_details")
    if not details or type(details) is not list:
        return ""
    parts: list[str] = []
    for item in details:
        if type(item) is dict:
            kind = item.get("type")
            key = _TEXT_DETAIL_KEYS.get(kind) if type(kind) is str else None
            if key is not None:
                value = item.get(key)
                if value and type(value) is str:
                    parts.append(value)
    return "".join(parts)


def _content_parts(parts: list[Any]) -> tuple[str, str]:
    """(thinking, text) of a Mistral content array.

    Any other part with a `text` string counts as text; parts without one carry nothing a
    string content can hold, and the normalized content is a string.
    """
    thinking: list[str] = []
    text: list[str] = []
    for part in parts:
        if type(part) is str:
            text.append(part)
        elif type(part) is dict:
            if part.get("type") == "thinking":
                inner = part.get("thinking")
                if type(inner) is str:
                    thinking.append(inner)
                elif type(inner) is list:
                    for sub in inner:
                        if type(sub) is dict and type(sub.get("text")) is str:
                            thinking.append(sub["text"])
            elif type(part.get("text")) is str:
                text.append(part["text"])
    return "".join(thinking), "".join(text)


def _normalize(
    obj: dict[str, Any], splitter: TextSplitter, writer: _Writer, implicit_open: bool, finishing: bool
) -> tuple[bool, str, bool]:
    """Normalize one delta or message in place → (changed, its reasoning text, carried content)."""
    reasoning = _field_reasoning(obj)
    if reasoning and implicit_open and splitter.fresh:
        # The server already split reasoning off: its content is the answer.
        splitter.inside = False

    content = obj.get("content")
    new_content: str | None = None
    if type(content) is str:
        tag_reasoning, answer = splitter.feed(content)
        reasoning += tag_reasoning
        if answer != content:
            new_content = answer
    elif type(content) is list:
        thinking, text = _content_parts(content)
        tag_reasoning, new_content = splitter.feed(text)
        reasoning += thinking + tag_reasoning
    if finishing and splitter.held:
        tail_reasoning, tail_answer = splitter.flush()
        reasoning += tail_reasoning
        if tail_answer:
            if new_content is None:
                new_content = content if type(content) is str else ""
            new_content += tail_answer

    changed = False
    if new_content is not None:
        obj["content"] = new_content
        changed = True
    final_content = new_content if new_content is not None else content
    if writer.write(obj, reasoning):
        changed = True
    return changed, reasoning, bool(final_content) and type(final_content) is str


class StreamReasoningExtractor:
    """Normalizes the chunks of one streamed chat completion, in order, in place.

    Contract per chunk: reasoning text ends up only in the configured field(s) (removed entirely
    when hiding); `reasoning_details` stays as sent (minus text items when hiding); content never
    carries a tag; every other field is kept as sent; no chunk is dropped (a chunk whose content
    was only a held-back partial tag keeps `content: ""`). A choice's held-back text is released
    in the chunk that carries its finish_reason, or by `flush()` if the stream ends without one.
    A chunk with nothing to do costs a few dict lookups and is reported `changed=False`.
    """

    __slots__ = (
        "_fast_path",
        "_implicit",
        "_in_place",
        "_last",
        "_quiet",
        "_sink",
        "_splitters",
        "_tags",
        "_writer",
    )

    def __init__(
        self, options: ReasoningOptions, sink: ReasoningSink | None = None, *, fast_path: bool = True
    ) -> None:
        names = options.tags or (("think",) if options.implicit_open else ())
        self._tags = tag_set(names) if names else None
        self._implicit = options.implicit_open
        self._writer = _Writer(options)
        # The one output field and the other plain one, when reasoning can stay where it came.
        self._in_place: tuple[str, str] | None = None
        if not options.hide and options.output_field is not ReasoningField.BOTH:
            field = options.output_field.value
            self._in_place = (field, "reasoning" if field == "reasoning_content" else "reasoning_content")
        self._splitters: dict[Any, TextSplitter] = {}
        # True while no choice is inside reasoning or holding text back: the fast path is exact.
        # `fast_path=False` only for the tests: the full path is the reference the fast one must match.
        self._fast_path = fast_path
        self._quiet = fast_path and not options.implicit_open
        self._last: dict[str, Any] | None = None
        # Told each choice's reasoning text as normalized (even when hidden): the replay capture.
        self._sink = sink

    def process_chunk(self, chunk: dict[str, Any]) -> ChunkOutcome:
        if "id" in chunk:
            self._last = chunk
        choices = chunk.get("choices")
        if not choices or type(choices) is not list:
            return _UNCHANGED[False, False]
        if self._quiet:
            outcome = self._fast(choices)
            if outcome is not None:
                if outcome.reasoning and self._sink is not None:
                    self._sink_in_place(choices)
                return outcome
        changed = has_reasoning = has_content = False
        for choice in choices:
            if type(choice) is not dict:
                continue
            delta = choice.get("delta")
            finishing = choice.get("finish_reason") is not None
            splitter = self._splitter(_choice_index(choice))
            if type(delta) is not dict:
                if not (finishing and splitter.held):
                    continue
                delta = choice["delta"] = {}
                changed = True
            c, r, a = _normalize(delta, splitter, self._writer, self._implicit, finishing)
            changed |= c
            if r:
                has_reasoning = True
                if self._sink is not None:
                    self._sink(_choice_index(choice), r)
            has_content |= a
        self._quiet = self._fast_path and not any(s.inside or s.held for s in self._splitters.values())
        return ChunkOutcome(changed, has_reasoning, has_content)

    def flush(self) -> list[dict[str, Any]]:
        choices: list[dict[str, Any]] = []
        # By index, not by when each choice was first seen: the fast path meets a choice later
        # than the full path when its first deltas need nothing, and the end must not differ.
        for index, splitter in sorted(self._splitters.items()):
            if not splitter.held:
                continue
            reasoning, answer = splitter.flush()
            if reasoning and self._sink is not None:
                self._sink(index, reasoning)
            delta: dict[str, Any] = {"content": answer} if answer else {}
            self._writer.write(delta, reasoning)
            if delta:
                choices.append({"index": index, "delta": delta, "finish_reason": None})
        if not choices:
            return []
        last = self._last or {}
        chunk: dict[str, Any] = {
            key: last[key] for key in ("id", "object", "created", "model") if key in last
        }
        chunk.setdefault("object", "chat.completion.chunk")
        chunk["choices"] = choices
        return [chunk]

    def _fast(self, choices: list[Any]) -> ChunkOutcome | None:
        """The outcome of a chunk that needs nothing done, or None if it needs the full path."""
        has_content = has_reasoning = False
        scan_tags = self._tags is not None
        for choice in choices:
            if type(choice) is not dict:
                continue
            delta = choice.get("delta")
            if not delta or type(delta) is not dict:
                continue
            if self._implicit and _choice_index(choice) not in self._splitters:
                return None
            if delta.get("reasoning_details"):
                return None
            if delta.get("reasoning_content") or delta.get("reasoning"):
                # Already alone in the one field it goes to (DeepSeek-style chunks): nothing to move.
                if self._in_place is None:
                    return None
                field, other = self._in_place
                text = delta.get(field)
                if not text or type(text) is not str or delta.get(other) is not None:
                    return None
                has_reasoning = True
            content = delta.get("content")
            if content is None:
                continue
            if type(content) is not str or (scan_tags and "<" in content):
                return None
            has_content = has_content or bool(content)
        return _UNCHANGED[has_reasoning, has_content]

    def text_rule(self, field: str, index: int, last: dict[str, Any] | None = None) -> TextRule | None:
        """For chunks of one choice (`index`) whose delta sets only `field` to a non-empty string
        (no other text field, no reasoning_details), recognized without being parsed
        (proxy.core.stream.chunk_template): None when they need `process_chunk`; else whether such a chunk
        still needs it when its text contains `<` (a possible tag), and what to tell of its text
        (the sink, for reasoning left where it was) — what `_fast` decides for that shape.
        Valid until the next `process_chunk` or `flush`, the only calls that change the state
        it depends on. A rule given (not None) stands for the chunks it covers: `last` (their id,
        object, created and model, when they have an id) is remembered as `process_chunk` would."""
        if not self._quiet or (self._implicit and index not in self._splitters):
            return None
        if field != "content" and (self._in_place is None or self._in_place[0] != field):
            return None
        if last is not None:
            self._last = last
        if field == "content":
            return TextRule(self._tags is not None, None)
        sink = self._sink
        return TextRule(False, None if sink is None else functools.partial(sink, index))

    def _sink_in_place(self, choices: list[Any]) -> None:
        """Tell the sink the reasoning the fast path left where it was (one field per delta)."""
        assert self._sink is not None and self._in_place is not None
        field = self._in_place[0]
        for choice in choices:
            delta = choice.get("delta") if type(choice) is dict else None
            if type(delta) is dict:
                text = delta.get(field)
                if text and type(text) is str:
                    self._sink(_choice_index(choice), text)

    def _splitter(self, index: Any) -> TextSplitter:
        splitter = self._splitters.get(index)
        if splitter is None:
            splitter = self._splitters[index] = TextSplitter(self._tags, self._implicit)
        return splitter


def _choice_index(choice: dict[str, Any]) -> int:
    """A choice's index as a dict key; a malformed one counts as the first choice."""
    index = choice.get("index", 0)
    return index if type(index) is int else 0


def normalize_message(message: dict[str, Any], options: ReasoningOptions) -> bool:
    """Normalize a non-streamed `choices[].message` in place; True if it changed.

    Same rules as the stream: the reasoning and content it leaves are those the streamed deltas
    of the same answer concatenate to.
    """
    names = options.tags or (("think",) if options.implicit_open else ())
    splitter = TextSplitter(tag_set(names) if names else None, options.implicit_open)
    changed, _, _ = _normalize(message, splitter, _Writer(options), options.implicit_open, finishing=True)
    return changed


def normalize_completion(body: dict[str, Any], options: ReasoningOptions) -> bool:
    """Normalize every `choices[].message` of a `chat.completion` body in place."""
    changed = False
    choices = body.get("choices")
    if type(choices) is not list:
        return False
    for choice in choices:
        if type(choice) is dict and type(choice.get("message")) is dict:
            changed |= normalize_message(choice["message"], options)
    return changed
