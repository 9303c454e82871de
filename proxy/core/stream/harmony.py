"""gpt-oss harmony text in `content`: the analysis channel into reasoning, commentary calls into
tool calls, only the final channel left as content.

Pure and incremental, like `reasoning` (whose extractor it wraps). gpt-oss writes its answer in
OpenAI's harmony format (https://github.com/openai/harmony/blob/main/docs/format.md, also
https://cookbook.openai.com/articles/openai-harmony): messages `<|start|>{header}<|message|>{body}`
ended by `<|end|>`, or by the stop tokens `<|return|>` (answer done) and `<|call|>` (a tool call).
The header names the channel after `<|channel|>` — `analysis` (the chain of thought), `commentary`
(function calls, or a preamble meant for the user) or `final` (the answer) — and a call's recipient
as `to=functions.NAME`, in the role or the channel part, optionally followed by `<|constrain|>json`.
The model's output starts after the prompt's `<|start|>assistant`, so it opens with `<|channel|>`.
A server that parses harmony (vLLM, Ollama, llama.cpp's default) turns this into reasoning,
content and tool_calls itself; some set-ups pass the text on raw in `content` (llama.cpp with
`--reasoning-format none` or `--skip-chat-parsing`, some Ollama and LM Studio templates), split
anywhere across chunks. llama.cpp's own parser (common/chat.cpp, common_chat_parse_gpt_oss) is
the reference for what counts as what; as there, a bare text after a message's end is content.

For models matching `HARMONY_MODELS` (any upstream), `ReasoningOptions.harmony` is set by the plan,
and each choice's content is read as harmony before the reasoning extractor sees the chunk:
- analysis text (and anything not meant for the user: other channels, built-in tool calls such as
  `to=browser.search`) → the reasoning field, where the extractor puts inline-tag reasoning;
- final text and commentary preambles → content; markers and headers never reach either;
- a `to=functions.NAME` message → a chat `tool_calls` delta (its id minted from the response id,
  choice and call number, so the same answer gets the same ids, streamed or not; the arguments are
  the message body, streamed as they come), and a choice that made one finishes with
  `finish_reason: tool_calls` instead of `stop`. Turning them into real tool calls, rather than
  dropping them, is what the upstream's own parser would have done; it also puts them in front of
  the trace, the replay capture and the review gate, which see only structured tool calls.
Tool calls the upstream already sent as `tool_calls` are kept; minted ones take the next indexes.
A text without harmony markers passes as it came (a server that parsed harmony leaves none).
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from typing import Any

from proxy.core.stream import reasoning
from proxy.core.stream.reasoning import (
    ChunkOutcome,
    ReasoningOptions,
    ReasoningSink,
    StreamReasoningExtractor,
    TextRule,
)

# The gpt-oss family, whatever the upstream or the name's prefix (openai/gpt-oss-20b, gpt-oss:20b,
# gpt-oss-120b-mxfp4.gguf): the model decides the format, not the provider entry.
HARMONY_MODELS = "*gpt-oss*"
_HARMONY_MODELS = re.compile(fnmatch.translate(HARMONY_MODELS), re.IGNORECASE | re.DOTALL)

MARKERS = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>")
_PATTERN = re.compile("|".join(map(re.escape, MARKERS)))
_LONGEST = max(map(len, MARKERS))
# Every proper prefix of a marker: what a chunk may end with while the marker is still unfinished.
_PREFIXES = frozenset(m[:i] for m in MARKERS for i in range(1, len(m)))
_ENDS = frozenset({"<|end|>", "<|return|>", "<|call|>"})
_RECIPIENT = re.compile(r"to=([^\s<]+)")
# A header is a few words; text this long before `<|message|>` is not one (a literal `<|start|>`
# in an answer): it is released as text rather than held to the end of the stream.
HEADER_LIMIT = 256

# Where body text goes. BETWEEN: after a message's end, where whitespace is the format's (dropped)
# and any other text is content (llama.cpp's parser hands the final answer on so, header removed).
REASONING, CONTENT, ARGUMENTS, BETWEEN = 0, 1, 2, 3


def speaks_harmony(model: str | None) -> bool:
    """Whether `model` is of the gpt-oss family (HARMONY_MODELS)."""
    return model is not None and _HARMONY_MODELS.match(model) is not None


def call_id(seed: str, choice: int, number: int) -> str:
    """The id of a tool call minted from harmony text: the same for the same answer (`seed` is the
    response id), unique across the answers of a conversation as their ids are."""
    digest = hashlib.sha256(f"{seed}\x00{choice}\x00{number}".encode()).hexdigest()
    return "call_" + digest[:24]


class _Out:
    """What a piece of one choice's content turned out to be."""

    __slots__ = ("calls", "content", "reasoning")

    def __init__(self) -> None:
        self.reasoning: list[str] = []
        self.content: list[str] = []
        self.calls: list[dict[str, Any]] = []  # tool_calls delta items, in order

    def arguments(self, index: int, text: str) -> None:
        calls = self.calls
        if calls and calls[-1]["index"] == index:
            function = calls[-1]["function"]
            function["arguments"] += text
        else:
            calls.append({"index": index, "function": {"arguments": text}})

    def empty(self) -> bool:
        return not (self.reasoning or self.content or self.calls)


class HarmonyParser:
    """One choice's content as harmony, across chunks. `feed` then `finish` write into an `_Out`."""

    __slots__ = ("base", "call", "choice", "header", "held", "kind", "made", "seed")

    def __init__(self, seed: str, choice: int) -> None:
        self.seed = seed
        self.choice = choice
        self.held = ""  # a possible marker start at the end of the text so far
        self.header: list[str] | None = None  # the header's parts while inside one
        self.kind = CONTENT  # where body text goes; text outside any message is content
        self.call = -1  # the index of the tool call whose arguments are streaming
        self.made = 0  # tool calls minted so far
        self.base = 0  # the first index free of the upstream's own tool calls

    @property
    def quiet(self) -> bool:
        """A text without `<` passes unchanged, and a finish needs nothing."""
        return self.kind == CONTENT and self.header is None and not self.held and not self.made

    def feed(self, text: str, out: _Out) -> None:
        if not text:
            return
        if not self.held and "<" not in text:
            self._text(text, out)
            return
        s = self.held + text
        self.held = ""
        pos = 0
        for match in _PATTERN.finditer(s):
            if match.start() > pos:
                self._text(s[pos : match.start()], out)
            self._marker(match.group(), out)
            pos = match.end()
        end = len(s)
        lt = s.rfind("<", max(pos, end - _LONGEST + 1))
        if lt >= 0 and s[lt:] in _PREFIXES:
            self.held = s[lt:]
            end = lt
        if end > pos:
            self._text(s[pos:end], out)

    def finish(self, out: _Out) -> None:
        """The choice ended: held text is literal text; an unfinished header is dropped (it names a
        channel, it says nothing); an open call ends."""
        held, self.held = self.held, ""
        if held:
            self._text(held, out)
        self.header = None
        self.kind = CONTENT
        self.call = -1

    def upstream_calls(self, items: Any) -> None:
        """The upstream's own tool_calls fragments: minted calls take indexes after theirs."""
        if type(items) is not list:
            return
        for item in items:
            index = item.get("index") if type(item) is dict else None
            if type(index) is int and index >= self.base:
                self.base = index + 1

    def _text(self, text: str, out: _Out) -> None:
        header = self.header
        if header is not None:
            header.append(text)
            if sum(map(len, header)) > HEADER_LIMIT:
                self.header = None
                self.kind = CONTENT
                self._text("".join(p for p in header if p not in MARKERS), out)
        elif self.kind == CONTENT:
            out.content.append(text)
        elif self.kind == REASONING:
            out.reasoning.append(text)
        elif self.kind == ARGUMENTS:
            out.arguments(self.call, text)
        else:
            text = text.lstrip()
            if text:
                self.kind = CONTENT
                out.content.append(text)

    def _marker(self, marker: str, out: _Out) -> None:
        header = self.header
        if marker == "<|message|>":
            if header is not None:
                self.header = None
                self._begin("".join(header), out)
        elif marker in ("<|channel|>", "<|constrain|>"):
            if header is not None:
                header.append(marker)
            elif marker == "<|channel|>":  # a message without `<|start|>`: the output's first
                self._end()
                self.header = [marker]
        elif marker == "<|start|>":
            self._end()
            self.header = []
        else:  # an end
            self.header = None
            self._end()

    def _end(self) -> None:
        self.kind = BETWEEN
        self.call = -1

    def _begin(self, header: str, out: _Out) -> None:
        """A message body starts: where its text goes, by the header."""
        role, _, rest = header.partition("<|channel|>")
        channel_part = rest.partition("<|constrain|>")[0]
        words = channel_part.split()
        channel = words[0] if words else ""
        found = _RECIPIENT.search(role) or _RECIPIENT.search(channel_part)
        recipient = found.group(1) if found is not None else None
        role_words = role.split()
        if role_words and role_words[0] != "assistant" and not role_words[0].startswith("to="):
            self.kind = REASONING  # (a tool's or another role's message: not the model's answer)
        elif recipient is not None and recipient.startswith("functions.") and len(recipient) > 10:
            self.kind = ARGUMENTS
            self.call = index = self.base + self.made
            self.made += 1
            out.calls.append(
                {
                    "index": index,
                    "id": call_id(self.seed, self.choice, self.made - 1),
                    "type": "function",
                    "function": {"name": recipient[10:], "arguments": ""},
                }
            )
        elif recipient is None and channel in ("final", "commentary"):
            self.kind = CONTENT
        else:
            self.kind = REASONING


def _write(obj: dict[str, Any], out: _Out, content: Any, *, message: bool) -> bool:
    """Put one piece's outcome into a delta or message in place; True if it changed."""
    changed = False
    text = "".join(out.content)
    if out.calls:
        existing = obj.get("tool_calls")
        calls = [_whole(c) for c in out.calls] if message else out.calls
        obj["tool_calls"] = (existing if type(existing) is list else []) + calls
        changed = True
    if message and not text and obj.get("tool_calls"):
        if content is not None:
            obj["content"] = None  # (a message that only calls has no content, as the APIs send it)
            changed = True
    elif (content is None or type(content) is str) and text != (content or ""):
        obj["content"] = text
        changed = True
    if out.reasoning:
        # Into the field the extractor reads first, after what the upstream sent there itself.
        key = "reasoning_content"
        if not _nonempty(obj, key) and _nonempty(obj, "reasoning"):
            key = "reasoning"
        before = obj.get(key)
        obj[key] = (before if type(before) is str else "") + "".join(out.reasoning)
        changed = True
    return changed


def _nonempty(obj: dict[str, Any], key: str) -> bool:
    value = obj.get(key)
    return type(value) is str and value != ""


def _whole(call: dict[str, Any]) -> dict[str, Any]:
    """A delta's tool call item as a message's (no index)."""
    return {k: v for k, v in call.items() if k != "index"}


class HarmonyExtractor:
    """`StreamReasoningExtractor` for a harmony model: each choice's content is read as harmony
    first (`HarmonyParser`), then the chunk is normalized as usual. Same contract and calls; a
    chunk with no `<` in its content, of a choice outside any harmony message, needs nothing more
    (the chunk-template fast path stays open for it)."""

    __slots__ = ("_inner", "_last", "_parsers", "_seed")

    def __init__(
        self, options: ReasoningOptions, sink: ReasoningSink | None = None, *, fast_path: bool = True
    ) -> None:
        self._inner = StreamReasoningExtractor(options, sink, fast_path=fast_path)
        self._parsers: dict[int, HarmonyParser] = {}
        self._seed: str | None = None
        self._last: dict[str, Any] | None = None

    def process_chunk(self, chunk: dict[str, Any]) -> ChunkOutcome:
        if "id" in chunk:
            self._seen(chunk)
        choices = chunk.get("choices")
        changed = False
        if choices and type(choices) is list:
            for choice in choices:
                if type(choice) is dict:
                    changed |= self._choice(choice)
        outcome = self._inner.process_chunk(chunk)
        if changed and not outcome.changed:
            return ChunkOutcome(True, outcome.reasoning, outcome.content)
        return outcome

    def flush(self) -> list[dict[str, Any]]:
        choices: list[dict[str, Any]] = []
        for index, parser in sorted(self._parsers.items()):
            out = _Out()
            parser.finish(out)
            if not out.empty():
                delta: dict[str, Any] = {}
                _write(delta, out, None, message=False)
                choices.append({"index": index, "delta": delta, "finish_reason": None})
        chunks: list[dict[str, Any]] = []
        if choices:
            last = self._last or {}
            chunk: dict[str, Any] = {k: last[k] for k in ("id", "object", "created", "model") if k in last}
            chunk.setdefault("object", "chat.completion.chunk")
            chunk["choices"] = choices
            self._inner.process_chunk(chunk)
            chunks.append(chunk)
        return chunks + self._inner.flush()

    def text_rule(self, field: str, index: int, last: dict[str, Any] | None = None) -> TextRule | None:
        """As `StreamReasoningExtractor.text_rule`, and never while the choice is inside a harmony
        message; a content text with `<` in it always takes the full path."""
        parser = self._parsers.get(index)
        if parser is not None and not parser.quiet:
            return None
        rule = self._inner.text_rule(field, index, last)
        if last is not None:
            self._seen(last)
        if rule is None or field != "content" or rule.unless_lt:
            return rule
        return TextRule(True, rule.tell)

    def _seen(self, chunk: dict[str, Any]) -> None:
        self._last = chunk
        if self._seed is None:
            seed = chunk.get("id")
            self._seed = seed if type(seed) is str else ""

    def _choice(self, choice: dict[str, Any]) -> bool:
        index = choice.get("index", 0)
        index = index if type(index) is int else 0
        delta = choice.get("delta")
        parser = self._parsers.get(index)
        finishing = choice.get("finish_reason") is not None
        if type(delta) is not dict:
            if not (finishing and parser is not None and not parser.quiet):
                return False
            delta = choice["delta"] = {}
        content = delta.get("content")
        calls = delta.get("tool_calls")
        if parser is None or parser.quiet:
            if not calls and (type(content) is not str or "<" not in content):
                return False  # (the fast path: nothing harmony about it)
            if parser is None:
                parser = self._parsers[index] = HarmonyParser(self._seed or "", index)
        if calls:
            parser.upstream_calls(calls)
        out = _Out()
        if type(content) is str:
            parser.feed(content, out)
        if finishing:
            parser.finish(out)
        changed = _write(delta, out, content, message=False)
        if finishing and parser.made and choice.get("finish_reason") == "stop":
            choice["finish_reason"] = "tool_calls"
            changed = True
        return changed


def extractor(
    options: ReasoningOptions, sink: ReasoningSink | None = None, *, fast_path: bool = True
) -> StreamReasoningExtractor | HarmonyExtractor:
    """The stream's reasoning extractor: harmony-aware only when the options say the model speaks it."""
    if options.harmony:
        return HarmonyExtractor(options, sink, fast_path=fast_path)
    return StreamReasoningExtractor(options, sink, fast_path=fast_path)


def split_message(message: dict[str, Any], seed: str, choice: int) -> bool:
    """A non-streamed message's harmony content in place (what the stream's deltas add up to)."""
    content = message.get("content")
    if type(content) is not str or "<" not in content:
        return False
    parser = HarmonyParser(seed, choice)
    parser.upstream_calls(message.get("tool_calls"))
    out = _Out()
    parser.feed(content, out)
    parser.finish(out)
    return _write(message, out, content, message=True)


def normalize_completion(body: dict[str, Any], options: ReasoningOptions) -> bool:
    """`reasoning.normalize_completion`, with each message's harmony read first when the options
    say so; a choice that called a function through harmony finishes with `tool_calls`."""
    changed = False
    choices = body.get("choices")
    if options.harmony and type(choices) is list:
        seed = body.get("id")
        for position, choice in enumerate(choices):
            if type(choice) is not dict or type(choice.get("message")) is not dict:
                continue
            index = choice.get("index", position)
            index = index if type(index) is int else 0
            message = choice["message"]
            before = len(message.get("tool_calls") or ())
            if split_message(message, seed if type(seed) is str else "", index):
                changed = True
                if len(message.get("tool_calls") or ()) > before and choice.get("finish_reason") == "stop":
                    choice["finish_reason"] = "tool_calls"
    return reasoning.normalize_completion(body, options) or changed
