"""The simulated upstream's native Responses API: `POST [/{dialect}]/v1/responses`.

Served for the dialects whose provider has one (`Dialect.responses_api`: openai, openrouter, vllm,
ollama); the others answer the path as they answer any unknown one (`Dialect.unknown_route`). The
app module does the I/O (reading, logging, the fault plan, sending); this module decides the
answer and keeps the little state the API has: the responses and items stored (`store`, on by
default) for `previous_response_id` and id lookups, and which reasoning preceded each tool call
the mock issued, so that a stateless client's replay can be checked (`responses_replay`).

The content is the chat side's: the request is mapped onto a chat body (`responses_input`) that
`scenarios.answer` scripts and the dialect's own knobs read, `reasoning.effort` included
(`none` thinks not at all). Its shape is `responses_output`'s. Request errors follow OpenAI's
wording (sources in `responses_input` and `responses_replay`), written in the dialect's error
shape; an unknown `previous_response_id` is 400 `Previous response with id 'resp_…' not found.`
(param `previous_response_id`, code `previous_response_not_found`;
github.com/maximhq/bifrost/issues/2441, github.com/router-for-me/CLIProxyAPI/issues/2954).

Faults (`X-Mock-Fault`) apply as on chat: the app serves the status faults; here a stream gets the
stream faults (disconnect, stall, invalid-json, huge-line: a delta whose data line is
X-Mock-Huge-Bytes long, pacing) and a JSON answer the body faults.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.mock import faults
from proxy.mock.dialects import Dialect, ResponsesTraits, count_tokens
from proxy.mock.faults import Fault, Plan, Step
from proxy.mock.responses.inputs import (
    Problem,
    chat_body,
    custom_tool_names,
    includes,
    input_items,
    summary,
    validate,
)
from proxy.mock.responses.output import Head, Shape, events, frame, output_items, response_object
from proxy.mock.responses.replay import Origin, replay_problem, resolve_references
from proxy.mock.responses.seal import Ids, call_id
from proxy.mock.scenarios import JSON, Depth, Script, answer, cut

STORED_RESPONSES = 256
REMEMBERED_ITEMS = 4096
HUGE_MARKER = "\x00huge\x00"  # never produced by a scenario; replaced by the padding


@dataclass(frozen=True)
class Reply:
    """What the app sends: a whole body, or steps (a stream, or a body with faults)."""

    status: int
    media_type: str = "application/json"
    body: bytes = b""
    steps: Iterable[Step] | None = None
    streaming: bool = False


class Bounded(OrderedDict[str, Any]):
    """A dict that forgets its oldest entries past `limit`: the mock's memory stays small."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: str, value: Any) -> None:
        self[key] = value
        while len(self) > self.limit:
            self.popitem(last=False)


class ResponsesApi:
    """The endpoint and its memory (one per mock app)."""

    def __init__(self) -> None:
        self.conversations = Bounded(STORED_RESPONSES)  # response id -> its items, input and output
        self.items = Bounded(REMEMBERED_ITEMS)  # item id -> item (stored responses only)
        self.origins = Bounded(REMEMBERED_ITEMS)  # call id and item id -> Origin (every answer)

    # `responses_replay.Memory`
    def item(self, item_id: str) -> JSON | None:
        found = self.items.get(item_id)
        return dict(found) if found is not None else None

    def origin(self, key: str) -> Origin | None:
        found = self.origins.get(key)
        return found if isinstance(found, Origin) else None

    def reply(self, dialect: Dialect, traits: ResponsesTraits, body: Any, plan: Plan) -> Reply:
        """The answer to one request whose route and faults the app has dealt with."""
        made = self.make(dialect, traits, body, plan)
        if isinstance(made, Reply):
            return made
        numbered, final = made
        if body.get("stream") is True:
            return _stream(numbered, plan)
        return _complete(final, plan)

    def make(
        self,
        dialect: Dialect,
        traits: ResponsesTraits,
        body: Any,
        plan: Plan,
        local: Bounded | None = None,
        *,
        generate: bool = True,
    ) -> tuple[list[JSON], JSON] | Reply:
        """One response: its stream's events (numbered) and the finished Response, or the error
        Reply it is refused with. `local`: a WebSocket's own responses (proxy.mock.responses.socket),
        which `previous_response_id` reads first and which keeps every response made on it, `store`
        true or false; `generate` false: the response is made with no output (a warm-up)."""
        checked = self._checked(dialect, traits, body, local)
        if isinstance(checked, Reply):
            return checked
        chat, depth, conversation = checked
        script, incomplete = cut(_with_call_ids(answer(chat, depth)), body.get("max_output_tokens"))
        created = int(time.time())
        ids = Ids(created)
        head = Head(ids.new("resp"), created, body["model"], body, thinking=depth is not Depth.NONE)
        shape = _shape(body, traits, plan)
        if generate:
            output = output_items(script, ids, shape, incomplete=incomplete)
            counts = count_tokens(chat, script)
        else:
            output, incomplete, counts = [], False, None
        status = "incomplete" if incomplete else "completed"
        final = response_object(head, output, status=status, counts=counts)
        self._remember(final, conversation, store=body.get("store") is not False, local=local)
        return events(head, final, shape), final

    def _checked(
        self, dialect: Dialect, traits: ResponsesTraits, body: Any, local: Bounded | None = None
    ) -> tuple[JSON, Depth, list[JSON]] | Reply:
        """Everything the request is refused for, in OpenAI's order (the body, the items sent
        back, then the model's knobs); else its chat body, the thinking depth and the whole
        conversation (what `previous_response_id` continues, then the request's items)."""
        problem = (
            Problem(400, "Failed to parse the request body as JSON.") if body is None else validate(body)
        )
        if problem is not None:
            return _error(dialect, problem)
        store = body.get("store") is not False
        items = self._conversation(body, store, local)
        if isinstance(items, Problem):
            return _error(dialect, items)
        prior, sent = items
        problem = replay_problem(sent, self, store=store, sealed=traits.sealed)
        if problem is not None:
            return _error(dialect, problem)
        chat = chat_body(body, [*prior, *sent])
        depth = dialect.depth(chat)
        rejection = dialect.check_responses(chat, depth)
        if rejection is not None:
            return Reply(rejection.status, rejection.media_type, rejection.body)
        return chat, depth, [*prior, *sent]

    def _conversation(
        self, body: Mapping[str, Any], store: bool, local: Bounded | None = None
    ) -> tuple[list[JSON], list[JSON]] | Problem:
        """The stored items `previous_response_id` continues (a WebSocket's own first: `local`),
        and the request's own items with references resolved."""
        prior: list[JSON] = []
        previous = body.get("previous_response_id")
        if previous is not None:
            held = local.get(previous) if local is not None else None
            if held is None and previous not in self.conversations:
                message = f"Previous response with id '{previous}' not found."
                return Problem(400, message, "previous_response_id", "previous_response_not_found")
            prior = list(held if held is not None else self.conversations[previous])
        sent = resolve_references(input_items(body), self, store)
        return sent if isinstance(sent, Problem) else (prior, sent)

    def _remember(
        self, final: JSON, conversation: Sequence[JSON], *, store: bool, local: Bounded | None = None
    ) -> None:
        """Which reasoning came before each tool call (always: it is what OpenAI's ids carry), the
        conversation on the WebSocket it was made on (`local`, whatever `store`), and with `store`
        on the response and its items."""
        reasoning_id: str | None = None
        for item in final["output"]:
            if item["type"] == "reasoning":
                reasoning_id = item["id"]
            elif item["type"] in ("function_call", "custom_tool_call"):
                self.origins.remember(item["id"], Origin(reasoning_id))
                self.origins.remember(item["call_id"], Origin(reasoning_id))
        if local is not None:
            local.remember(final["id"], [*conversation, *final["output"]])
        if not store:
            return
        self.conversations.remember(final["id"], [*conversation, *final["output"]])
        for item in final["output"]:
            self.items.remember(item["id"], item)


def _shape(body: Mapping[str, Any], traits: ResponsesTraits, plan: Plan) -> Shape:
    return Shape(
        summary=summary(body) is not None,
        encrypted=traits.sealed and includes(body, "reasoning.encrypted_content"),
        reasoning_text=traits.reasoning_text,
        obfuscation=traits.obfuscation,
        chunk_chars=plan.chunk_chars,
        custom_tools=custom_tool_names(body),
    )


def _with_call_ids(script: Script) -> Script:
    """The scenario's calls with OpenAI-style call ids."""
    calls = tuple(dataclasses.replace(c, id=call_id()) for c in script.tool_calls)
    return dataclasses.replace(script, tool_calls=calls)


def _error(dialect: Dialect, problem: Problem) -> Reply:
    return Reply(
        problem.status, body=dialect.error_body(problem.message, param=problem.param, code=problem.code)
    )


# --- sending ------------------------------------------------------------------------------------


def _stream(numbered: list[JSON], plan: Plan) -> Reply:
    frames = [frame(e) for e in numbered]
    huge_at, huge = _huge_delta(numbered, plan) if plan.has(Fault.HUGE_LINE) else (0, iter(()))
    steps = faults.stream_steps(frames, plan, huge_at=huge_at, huge=huge)
    return Reply(200, "text/event-stream", steps=steps, streaming=True)


def _huge_delta(numbered: Sequence[JSON], plan: Plan) -> tuple[int, Iterator[bytes]]:
    """Where the huge line goes and its pieces: a copy of the last delta event, right after it,
    whose data line is X-Mock-Huge-Bytes long (none when the answer streams no delta)."""
    deltas = [i for i, e in enumerate(numbered) if str(e["type"]).endswith(".delta")]
    if not deltas:
        return 0, iter(())
    template = frame({**numbered[deltas[-1]], "delta": HUGE_MARKER})
    event_line = template.index(b"\n") + 1
    return deltas[-1] + 1, faults.padded(template, _marker_bytes(), event_line + plan.huge_bytes + 2)


def _marker_bytes() -> bytes:
    return orjson.dumps(HUGE_MARKER)[1:-1]  # as it appears inside a JSON string


def _complete(final: JSON, plan: Plan) -> Reply:
    if plan.has(Fault.HUGE_LINE):
        template = orjson.dumps(_with_huge_text(final))
        pieces = faults.padded(template, _marker_bytes(), plan.huge_bytes)
        return Reply(200, steps=pieces)
    payload = orjson.dumps(final)
    if plan.has(Fault.INVALID_JSON):
        payload = payload[: len(payload) // 2]
    if plan.has(Fault.DISCONNECT) or plan.has(Fault.STALL):
        return Reply(200, steps=faults.body_steps(payload, plan))
    return Reply(200, body=payload)


def _with_huge_text(final: JSON) -> JSON:
    """The response with its answer's text replaced by the marker the padding goes in (a message
    is added when the answer has none)."""
    output = [item for item in final["output"] if item["type"] != "message"]
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": HUGE_MARKER}
    message = {
        "id": "msg_huge",
        "type": "message",
        "status": "completed",
        "content": [part],
        "role": "assistant",
    }
    return {**final, "output": [*output, message]}
