"""Streamed tool calls as the trace follows them: which call each fragment belongs to, when a
call's arguments are complete, and what is kept of them for the call's summary.

Separate from the trace builder (proxy.core.stream.trace) because it is the part that reads the
upstream's tool-call fragments, in whatever form they come (with or without `index` or `id`, the
name in pieces, megabytes of arguments), and is tested on its own at every split of the text. It
makes no events: the builder asks it which call a fragment belongs to and whether that call's
arguments have closed, and makes the events itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from proxy.core.stream.summaries import summarize_arguments

# Bound on a tool name copied into an event (client- or model-controlled text).
MAX_NAME_CHARS = 128
# Argument text a detailed trace keeps per tool call for its summary; beyond it the summary is
# made from the head (a file-writing call may send megabytes, one fragment at a time).
MAX_KEPT_ARGUMENT_CHARS = 256 * 1024

# The characters that matter to the argument scanner, outside and inside a JSON string.
_STRUCTURE = re.compile(r'[{}\[\]"]')
_IN_STRING = re.compile(r'["\\]')
_JSON_WHITESPACE = " \t\n\r"


class ArgumentScanner:
    """Tells, fragment by fragment, when streamed arguments have closed their top-level object.

    Linear in the text fed and constant in memory: it tracks only the bracket depth and whether it
    is inside a string (and after a backslash), never re-reads earlier fragments. Arguments that
    are not an object or array (a bare string or number) never close here: they end with the call.
    """

    __slots__ = ("closed", "depth", "escaped", "in_string", "scalar", "started")

    def __init__(self) -> None:
        self.depth = 0
        self.started = False
        self.scalar = False
        self.in_string = False
        self.escaped = False
        self.closed = False

    def feed(self, text: str) -> bool:
        """True once the arguments fed so far form a closed object or array."""
        if self.closed or self.scalar:
            return self.closed
        pos, n = 0, len(text)
        if not self.started:
            pos = n - len(text.lstrip(_JSON_WHITESPACE))
            if pos == n:
                return False
            if text[pos] not in "{[":
                self.scalar = True
                return False
            self.started = True
        if self.escaped:  # the previous fragment ended with a backslash: this character is escaped
            self.escaped = False
            pos += 1
        depth, in_string = self.depth, self.in_string
        while pos < n:
            if in_string:
                match = _IN_STRING.search(text, pos)
                if match is None:
                    break
                pos = match.end()
                if match.group() == '"':
                    in_string = False
                elif pos == n:
                    self.escaped = True
                else:
                    pos += 1
            else:
                match = _STRUCTURE.search(text, pos)
                if match is None:
                    break
                pos = match.end()
                char = match.group()
                if char == '"':
                    in_string = True
                elif char in "{[":
                    depth += 1
                else:
                    depth -= 1
                    if depth <= 0:
                        self.closed = True
                        break
        self.depth, self.in_string = depth, in_string
        return self.closed


@dataclass(slots=True)
class ToolCall:
    index: int
    id: str = ""
    name: str = ""
    started: bool = False
    ended: bool = False
    scanner: ArgumentScanner = field(default_factory=ArgumentScanner)
    # The head of the argument text (detailed traces only), and the length of the whole.
    kept: list[str] = field(default_factory=list)
    kept_chars: int = 0
    total_chars: int = 0

    @property
    def shown_name(self) -> str:
        return self.name[:MAX_NAME_CHARS] or "unknown"

    def add_arguments(self, text: str, keep: bool) -> None:
        self.total_chars += len(text)
        if keep and self.kept_chars < MAX_KEPT_ARGUMENT_CHARS:
            piece = text[: MAX_KEPT_ARGUMENT_CHARS - self.kept_chars]
            self.kept.append(piece)
            self.kept_chars += len(piece)

    def summary(self) -> str:
        head = "".join(self.kept)
        return summarize_arguments(head, total_chars=self.total_chars)


class ToolCalls:
    """The tool calls of one response in order of appearance, and how later fragments find theirs:
    by the upstream's `index`, else by `id`, else by position in the previous tool_calls delta."""

    __slots__ = ("by_id", "by_index", "calls", "open", "positions")

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.by_index: dict[int, ToolCall] = {}
        self.by_id: dict[str, ToolCall] = {}
        # The calls of the last tool_calls delta, by position (the caller sets it after each delta).
        self.positions: list[ToolCall] = []
        self.open = 0  # calls not yet ended

    def take(self, fragment: dict[str, Any], position: int, keep: bool) -> tuple[ToolCall, bool]:
        """The call a fragment belongs to (created if it starts one), with the fragment's name and
        argument text added (`keep`: kept for the summary too); and whether it carried argument text."""
        call = self._call_for(fragment, position)
        function = fragment.get("function")
        has_arguments = False
        if isinstance(function, dict):
            name = function.get("name")
            if isinstance(name, str) and name and name != call.name:
                # Pieces are appended; an upstream that repeats the name (whole or growing) is not.
                call.name = name if name.startswith(call.name) else call.name + name
            arguments = function.get("arguments")
            if isinstance(arguments, str) and arguments:
                call.add_arguments(arguments, keep=keep)
                call.scanner.feed(arguments)
                has_arguments = True
        return call, has_arguments

    def end(self, call: ToolCall) -> None:
        call.ended = True
        self.open -= 1

    def _call_for(self, fragment: dict[str, Any], position: int) -> ToolCall:
        index = fragment.get("index")
        if type(index) is not int or index < 0:
            index = None
        call_id = fragment.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = None
        call: ToolCall | None = None
        if index is not None:
            call = self.by_index.get(index)
            if call is not None and call_id is not None and call.id and call.id != call_id:
                call = None  # an upstream that numbers every call 0: a new id is a new call
        if call is None and call_id is not None:
            call = self.by_id.get(call_id)
        if call is None and index is None and call_id is None and position < len(self.positions):
            # Neither index nor id (some upstreams): the call at the same place in the last delta,
            # unless that one is finished and this fragment names a new one.
            call = self.positions[position]
            function = fragment.get("function")
            if call.scanner.closed and isinstance(function, dict) and function.get("name"):
                call = None
        if call is None:
            call = ToolCall(index if index is not None else len(self.calls))
            self.calls.append(call)
            self.open += 1
        if index is not None:
            self.by_index[index] = call
        if call_id is not None and not call.id:
            call.id = call_id
            self.by_id[call_id] = call
        return call
