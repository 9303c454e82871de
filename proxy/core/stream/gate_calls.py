"""Which tool calls a chat stream carries, for the stream gate (proxy.core.stream.gate). Pure.

`CallTracker` follows choice 0's `tool_calls` fragments as they come (each call's id, name and
arguments, by index) and removes, in place, every call it cannot attribute to one call: calls of
other choices, the legacy `function_call`, fragments of another shape, a call renamed after its
name was complete (proxy.core.stream.gate_rules has the shared rules). It says when the stream
must be held (`holding`: a new call whose name is not known yet) and held to the end (`covered`:
a call the policy covers, or one removed), and names what it removed as the client knows the
tool (`removed_calls`). `rewrite_calls` is what the decisions make of a held chunk's calls.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from proxy.core.review.rules import ClientNames, Decision, HeldCall, ReviewPolicy, shown_name
from proxy.core.stream.gate_rules import carried_name, choices0, index_of, is_zero, refusal, texts


@dataclass(slots=True)
class TrackedCall:
    index: int
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    name_complete: bool = False
    covered: bool = False


class CallTracker:
    """The calls of one stream (see the module docstring)."""

    def __init__(self, policy: ReviewPolicy, names: ClientNames) -> None:
        self.policy = policy
        self.names = names  # the tools the client knows by other names (review_rules.ClientTool)
        self.calls: dict[int, TrackedCall] = {}
        # Calls removed without a review, by where they came from: (name pieces, why).
        self.removed: dict[str, tuple[list[str], str]] = {}
        self.holding = False  # a call's name is not known yet: hold what comes
        self.covered = False  # a covered call was seen (or one was removed): hold to the end

    def track_calls(self, chunk: dict[str, Any]) -> bool:
        """Follows choice 0's calls and removes, in place, every call it cannot attribute; True
        when something was removed."""
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return False
        changed = False
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            zero = is_zero(choice)
            where: tuple[Any, ...] = (choice.get("index"),) if not zero else (0,)
            for key in ("delta", "message"):
                delta = choice.get(key)
                if not isinstance(delta, dict):
                    continue
                if delta.get("function_call") is not None:
                    shape = "function_call" if zero else "choice"
                    self._remove((*where, "fc"), delta.pop("function_call"), shape)
                    changed = True
                fragments = delta.get("tool_calls")
                if fragments is None:
                    continue
                if not zero or key == "message" or not isinstance(fragments, list):
                    for fragment in fragments if isinstance(fragments, list) else [fragments]:
                        self._remove((*where, index_of(fragment)), fragment, "shape" if zero else "choice")
                    del delta["tool_calls"]
                    changed = True
                    continue
                kept: list[Any] = []
                for fragment in fragments:
                    why = self._unattributable(fragment)
                    if why is None:
                        self._track(fragment)
                        kept.append(fragment)
                    else:
                        self._remove((*where, index_of(fragment)), fragment, why)
                if len(kept) != len(fragments):
                    changed = True
                    if kept:
                        delta["tool_calls"] = kept
                    else:
                        del delta["tool_calls"]
            finish = choice.get("finish_reason")
            if isinstance(finish, str):
                if zero:
                    for call in self.calls.values():
                        call.name_complete = True
                if finish == "function_call" or (not zero and finish == "tool_calls"):
                    choice["finish_reason"] = "stop"  # no call is left where this one pointed
                    changed = True
        return changed

    def names_settled(self) -> bool:
        return all(call.name_complete for call in self.calls.values())

    def removed_calls(self, zh: bool) -> list[tuple[HeldCall, Decision]]:
        """The calls removed without a review, each named as the client knows the tool, with the
        reason the client is told."""
        return [
            refusal(shown_name("".join(names), self.names), why, zh) for names, why in self.removed.values()
        ]

    def _unattributable(self, fragment: Any) -> str | None:
        """Why a `tool_calls` fragment of choice 0 cannot be attributed to one call, or None."""
        if not isinstance(fragment, dict):
            return "shape"
        index = fragment.get("index")
        if type(index) is not int or index < 0:
            return "shape"
        if fragment.get("type") not in (None, "function") or fragment.get("custom") is not None:
            return "shape"
        function = fragment.get("function")
        if function is None:
            function = {}
        elif not isinstance(function, dict):
            return "shape"
        name = function.get("name")
        if not texts(fragment.get("id"), name, function.get("arguments")):
            return "shape"
        call = self.calls.get(index)
        if call is not None and call.name_complete and isinstance(name, str) and name and name != call.name:
            return "renamed"
        return None

    def _track(self, fragment: dict[str, Any]) -> None:
        index: int = fragment["index"]
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = TrackedCall(index)
            self.holding = True  # nothing of a new call goes out before its name is known
        if isinstance(fragment.get("id"), str) and fragment["id"]:
            call.id = fragment["id"]
        function = fragment.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        if isinstance(name, str) and name and name != call.name:
            call.name = name if name.startswith(call.name) else call.name + name
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            call.arguments.append(arguments)
            call.name_complete = True
        if call.name and self.policy.covers(call.name, self.names) and not call.covered:
            call.covered = self.covered = True

    def _remove(self, where: tuple[Any, ...], carrier: Any, why: str) -> None:
        """A call removed before it reached the client: remembered (its name, as its pieces
        come), so the client is told; from here on the stream is held to the end."""
        names, _ = self.removed.setdefault(repr(where), ([], why))
        name = carried_name(carrier, legacy=where[-1:] == ("fc",))
        if name:
            joined = "".join(names)
            if name != joined:
                names[:] = [name] if name.startswith(joined) else [*names, name]
        self.covered = self.holding = True


def rewrite_calls(
    chunk: dict[str, Any], renumber: dict[int, int], modified: dict[int, str | None], wrote_args: set[int]
) -> dict[str, Any] | None:
    """The chunk with refused calls removed, kept ones renumbered, modified arguments put in;
    None when nothing of it is left to send."""
    chunk = copy.deepcopy(chunk)  # a private copy: the held original stays as it came
    left = False
    for choice in choices0(chunk):
        delta = choice.get("delta")
        fragments = delta.get("tool_calls") if isinstance(delta, dict) else None
        if not isinstance(fragments, list) or not isinstance(delta, dict):
            left = True
            continue
        kept_fragments = []
        for fragment in fragments:
            index = fragment["index"]  # (the gate removed every fragment without an integer index)
            if index not in renumber:
                continue  # a refused call: nothing of it reaches the client
            fragment = {**fragment, "index": renumber[index]}
            if index in modified:
                function = fragment.get("function")
                function = dict(function) if isinstance(function, dict) else {}
                if index in wrote_args:
                    function.pop("arguments", None)
                    if not function.get("name") and not fragment.get("id"):
                        continue  # a fragment that only carried the replaced arguments
                else:
                    function["arguments"] = modified[index] or "{}"
                    wrote_args.add(index)
                fragment["function"] = function
            kept_fragments.append(fragment)
        if kept_fragments:
            delta["tool_calls"] = kept_fragments
        else:
            del delta["tool_calls"]
        if delta or choice.get("finish_reason") is not None:
            left = True
    if not left and chunk.get("usage") is None:
        return None
    return chunk
