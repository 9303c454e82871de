"""Tool calls and their results: one rule for every bridged front door. Pure.

A chat upstream reads the calls in a conversation only as chat has them: an assistant message's
`tool_calls`, each answered by one `tool` message before the conversation goes on. Some upstreams
refuse anything else in their own words, others read it wrong in silence. So both bridged doors —
the Responses door (input items, proxy.core.protocols.responses.inputs) and the Messages door
(content blocks, proxy.core.protocols.messages.inputs) — hold their client to the same rule before
anything is sent, and refuse (400, naming the item) what breaks it:

- each call has its own id;
- a result answers a call made before it and not answered yet;
- every call is answered before the conversation goes on, and by its end. Where it goes on is the
  door's own: on the Responses door at the next message item that is not the assistant's, on the
  Messages door after the user message right after the call (as Anthropic has it).

Each door words the errors in its own protocol's terms (`Words`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.core.errors import BadRequest, quoted


@dataclass(frozen=True, slots=True)
class Words:
    """How a door's protocol names the pieces of the rule, for its error messages."""

    call_id: str  # the field holding a call's id: `call_id`, `id`
    result_id: str  # the field of a result naming its call: `call_id`, `tool_use_id`
    result: str  # what answers a call: `function_call_output …`, `tool_result block`
    answer: str  # a call's answer, in one word: `output`, `result`
    place: str  # where the answer goes: `right after the call`
    order: str  # the rule, one sentence: what a result must follow


RESPONSES = Words(
    call_id="call_id",
    result_id="call_id",
    result="function_call_output (or custom_tool_call_output) item",
    answer="output",
    place="right after the call",
    order="Each output must follow the function_call or custom_tool_call with its call_id, with only calls "
    "and outputs between.",
)
MESSAGES = Words(
    call_id="id",
    result_id="tool_use_id",
    result="tool_result block",
    answer="result",
    place="in the user message right after the call",
    order="Each tool_result block answers a tool_use block of the assistant message right before its "
    "message.",
)


@dataclass(slots=True)
class ToolPairing:
    """The calls of one conversation, walked in order: `call` each call, `answer` each result,
    `settle` where the conversation goes on (and at its end). Each refuses with a BadRequest."""

    words: Words
    unanswered: dict[str, str] = field(default_factory=dict)  # call id → where the call is
    seen: set[str] = field(default_factory=set)

    def call(self, call_id: str, where: str) -> None:
        w = self.words
        if call_id in self.seen:
            raise BadRequest(
                f"{where} repeats {w.call_id} {quoted(call_id)}: each call needs its own {w.call_id}.",
                param=f"{where}.{w.call_id}",
            )
        self.seen.add(call_id)
        self.unanswered[call_id] = where

    def answer(self, call_id: str, where: str) -> None:
        w = self.words
        if call_id not in self.unanswered:
            said = "was already answered" if call_id in self.seen else "was never made"
            raise BadRequest(
                f"{where} answers {w.result_id} {quoted(call_id)}, which {said} before it. {w.order}",
                param=f"{where}.{w.result_id}",
            )
        del self.unanswered[call_id]

    def settle(self, at: str = "") -> None:
        """The conversation goes on (`at`: ` before input[3]`, ` in messages[2]`; empty at its
        end): every call made so far must have been answered."""
        if not self.unanswered:
            return
        call_id, where = next(iter(self.unanswered.items()))
        w = self.words
        raise BadRequest(
            f"{where} calls {quoted(call_id)}, which has no {w.answer}{at}: add a {w.result} with "
            f"{w.result_id} {quoted(call_id)} {w.place}.",
            param=where,
        )
