"""The Anthropic Messages front door: `POST /v1/messages` and `POST /v1/messages/count_tokens` onto
the same core as chat completions (docs/messages.md).

Per providers.yaml entry (`messages: native | bridge`). Native (Anthropic, DeepSeek's
`/anthropic`): forwarded to the upstream's own Messages API (proxy.server.doors.messages_native).
Bridged: the request is mapped to the internal chat request
(proxy.core.protocols.messages.request), reasoning put back from the thinking blocks' sealed
signatures (proxy.core.protocols.messages.state); then the chat path runs as for any chat request
(proxy.server.handlers.Proxy.run_chat: replay store, level rewrite, normalization, trace, review
gate, relay), and its output is translated last (`MessagesOutput`, a FrontDoor). Upstream errors
come back with their status and body unchanged; the proxy's own errors in Anthropic's shape.

The I/O lives here: the state store (reasoning too large to seal inline), the clock, ids.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Send

from proxy.core import jsonio
from proxy.core.errors import FailedAnswer, ProxyError
from proxy.core.events import AccessRecord
from proxy.core.protocols.expansion import Expansion
from proxy.core.protocols.messages.events import error_body, failed_answer_status
from proxy.core.protocols.messages.request import (
    BridgedMessages,
    bridge_messages,
    chat_headers,
    estimate_tokens,
    redacts_thinking,
)
from proxy.core.protocols.messages.state import RestoreReport, restore_thinking, spilled_keys, thinking_sealer
from proxy.core.protocols.messages.stream import PING, MessagesTranscoder
from proxy.server.asgi import BodyProducer, RelayResponse, body_piece
from proxy.server.doors.common import (
    BridgedOutput,
    Door,
    Note,
    NoteWords,
    bridge_notes,
    chat_request,
    new_id,
    restore_history,
)
from proxy.server.doors.messages_native import NATIVE
from proxy.server.doors.native import forward_native

logger = logging.getLogger("thinkproxy.messages")

ROUTE = "messages"


def anthropic_error(exc: ProxyError) -> bytes:
    return error_body(exc.status, exc.message)


def _json(body: bytes) -> Any:
    try:
        return jsonio.loads(body)
    except ValueError:
        return None


# Ids in Anthropic's style (`msg_…`, `toolu_…`): 24 random hex digits.
anthropic_id = partial(new_id, digits=24)


@dataclass(slots=True)
class MessagesOutput(BridgedOutput):
    """The bridged answer in the Messages protocol (a proxy.core.plan.chat.FrontDoor): the translation
    is pure (MessagesTranscoder); writing large reasoning to the state store is this edge's I/O
    (door_common.BridgedOutput). A failed answer is said by its status."""

    def completion(self, body: bytes) -> bytes:
        out = self.transcoder.completion(body)
        if self.transcoder.final is None:
            # The answer failed (an error body, no choice): said by its status, not a 200 with an
            # error body; the relay answers it like any error of the proxy's, in Anthropic's shape.
            error = jsonio.loads(out).get("error") or {}
            raise FailedAnswer(
                str(error.get("message") or "upstream error"), failed_answer_status(_json(body))
            )
        return out


class MessagesDoor(Door):
    """The handlers of `/v1/messages*`, bound to one app's proxy."""

    # -- POST /v1/messages ----------------------------------------------------------------------
    async def create(self, request: Request) -> Response:
        async def run(record: AccessRecord, started: float) -> Response:
            return await self._create(request, record, started)

        return await self.proxy.guarded(request, ROUTE, run, anthropic_error)

    # -- POST /v1/messages/count_tokens ----------------------------------------------------------
    async def count_tokens(self, request: Request) -> Response:
        async def run(record: AccessRecord, started: float) -> Response:
            _, _, tgt = await self.proxy.arrive(request, record, parse=True)
            assert tgt.parsed is not None
            record.model = tgt.model
            bridged = bridge_messages(tgt.parsed)
            out = jsonio.dumps({"input_tokens": estimate_tokens(bridged.body)})
            record.status, record.bytes_out = 200, len(out)
            self.proxy.finish(record, started)
            return Response(out, media_type="application/json", headers=dict(record.response_headers))

        return await self.proxy.guarded(request, ROUTE, run, anthropic_error)

    async def _create(self, request: Request, record: AccessRecord, started: float) -> Response:
        proxy = self.proxy
        s = proxy.s
        arrival, intent, tgt, parsed, dialect = await self.arrive(request, record)
        if dialect.messages.mode == "native":
            return await forward_native(
                proxy, NATIVE, request, arrival, intent, tgt, dialect, record, started
            )
        bridged = bridge_messages(parsed)
        chat = bridged.body
        tenants, ctx, expansion = self.sealing(request, tgt, dialect, str(chat.get("model") or ""))
        tenant = tenants.current  # (what this request writes is kept under the current hash)
        report = await self._restore(chat["messages"], bridged, expansion)
        if bridged.level is not None:  # (sent with the client's own level, if that is what applies)
            intent = replace(intent, budget_tokens=bridged.budget_tokens)
        spill: list[tuple[str, bytes]] = []
        transcoder = MessagesTranscoder(
            anthropic_id("msg"),
            str(chat.get("model") or ""),
            seal=thinking_sealer(ctx, spill if self.store is not None else None),
            new_id=anthropic_id,
            # (`display: omitted`, or Claude Code's redact-thinking beta: signed blocks, no text)
            show_thinking=bridged.show_thinking and not redacts_thinking(tgt.headers),
            stop_sequences=tuple(chat.get("stop") or ()),
        )
        door = MessagesOutput(
            transcoder, notes=_notes(bridged, report), spill=spill, spill_store=self.store, tenant=tenant
        )
        # (the query is Anthropic's, `?beta=true` from Claude Code and the SDKs' beta calls: not sent on)
        chat_arrival, chat_tgt = chat_request(
            arrival, tgt, chat, record, bridged.omitted_tools, query=b"", headers=chat_headers(tgt.headers)
        )
        response = await proxy.run_chat(
            request,
            chat_arrival,
            intent,
            chat_tgt,
            chat,
            record,
            started,
            dialect=dialect,
            door=door,
            client_level=bridged.level,
        )
        if record.stream and isinstance(response, RelayResponse):
            response.produce = with_pings(response.produce, s.settings.review_keepalive, record)
        return response

    async def _restore(
        self, messages: list[dict[str, Any]], bridged: BridgedMessages, expansion: Expansion
    ) -> RestoreReport:
        """The history's thinking put back from its signatures (each distinct one opened once): in
        a worker thread past OFFLOAD_BLOBS signatures, so that opening many never holds the loop."""
        turns, ctx = bridged.thinking, expansion.ctx
        return await restore_history(
            sum(1 for turn in turns for block in turn.blocks if block.signature),
            lambda: spilled_keys(turns, ctx, expansion),
            lambda spilled: restore_thinking(messages, turns, ctx, spilled, expansion),
            self.store,
        )


def with_pings(produce: BodyProducer, interval: float, record: AccessRecord) -> BodyProducer:
    """A Messages stream that sends a `ping` event whenever nothing was written for `interval`
    seconds (the keep-alive interval, THINKPROXY_REVIEW_KEEPALIVE), as Anthropic does while the model
    is quiet. Pings start after the first write (message_start) and go between whole writes (the
    door writes whole events); the upstream's read timeout still counts its silence.

    One timer per stream, armed at the first write and moved on when it finds the stream was not
    quiet: most streams end before it is due, so they pay for one timer, not for a task and a lock
    per write. A ping is its own task (the timer cannot await); a write waits for one in flight."""

    async def produce_with_pings(send: Send) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        writing = False
        timer: asyncio.TimerHandle | None = None
        pinging: asyncio.Task[None] | None = None

        def arm(delay: float) -> None:
            nonlocal timer
            timer = loop.call_later(delay, due)

        def due() -> None:
            nonlocal pinging
            quiet = loop.time() - last
            if writing or quiet < interval:
                arm(interval if writing else interval - quiet)
            else:
                pinging = loop.create_task(ping())

        async def ping() -> None:
            nonlocal last, pinging
            try:
                await send(body_piece(PING))
            except Exception:  # (the client is gone: the next write meets the same end)
                pinging = None
                return
            pinging = None
            record.bytes_out += len(PING)
            last = loop.time()
            arm(interval)

        async def sent(message: Message) -> None:
            nonlocal last, writing
            if pinging is not None:
                await asyncio.shield(pinging)  # (a ping is being written: the next write follows it)
            writing = True
            await send(message)
            writing = False
            last = loop.time()
            if timer is None and message.get("body"):
                arm(interval)

        try:
            await produce(sent)
        finally:
            if timer is not None:
                timer.cancel()
            if pinging is not None:
                pinging.cancel()
                await asyncio.gather(pinging, return_exceptions=True)

    return produce_with_pings


# How the Messages door names what its bridge notes speak of (door_common.bridge_notes).
WORDS = NoteWords("Server tools", "服务端工具", "Thinking", "思考块", "signature", "签名")


def _notes(bridged: BridgedMessages, report: RestoreReport) -> list[Note]:
    """What the trace says about the bridge: tools left out, fields dropped, signatures not used."""
    return bridge_notes(bridged.omitted_tools, bridged.dropped, report.unverified + report.foreign, WORDS)
