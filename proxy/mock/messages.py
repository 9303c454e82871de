"""The simulated upstream's native Anthropic Messages API: `POST [/{prefix}]/v1/messages`, for the
Messages door's native mode (providers.yaml `messages: {mode: native}`).

It enforces the rules of Anthropic's API that the door must respect (wording from the API's
error bodies, `{"type": "error", "error": {"type", "message"}}`):

- `x-api-key` is required (401 authentication_error `x-api-key header is required`), and so is
  `anthropic-version` (400 `anthropic-version: header is required`);
- a `thinking` block in the history must carry a signature this server minted for its text (an
  HMAC under the app's own random key), else 400 `messages.{i}.content.{j}: Invalid
  \\`signature\\` in \\`thinking\\` block` (what Anthropic answers for another provider's or a
  proxy's signature);
- `thinking: {type: enabled}` needs `budget_tokens` of at least 1024 and below `max_tokens`.

The answer: a thinking block when `thinking` is enabled or adaptive (its text names the question;
signed), then a `tool_use` of the first tool when tools are offered and the last turn is not a
tool result, else a text block; streamed as Anthropic's events, or one `Message`. The app module
logs each request (headers with keys shortened), as on every route.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

Recorder = Callable[[Request, bytes, str | None], Any]


def messages_routes(record: Recorder) -> list[Route]:
    """The routes, each request logged by `record` (which returns its parsed JSON body)."""
    api = MessagesApi()

    async def endpoint(request: Request) -> Response:
        status, body, media_type = api.reply(request.headers, record(request, await request.body(), None))
        return Response(body, status, media_type=media_type)

    return [
        Route("/v1/messages", endpoint, methods=["POST"]),
        Route("/{prefix}/v1/messages", endpoint, methods=["POST"]),
    ]


def error(status: int, kind: str, message: str) -> tuple[int, bytes, str]:
    payload = {"type": "error", "error": {"type": kind, "message": message}}
    return status, orjson.dumps(payload), "application/json"


class MessagesApi:
    """One app's Messages API: the key its signatures are minted with."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def sign(self, thinking: str) -> str:
        return base64.b64encode(hmac.digest(self._key, thinking.encode(), hashlib.sha256)).decode()

    def reply(self, headers: Mapping[str, str], body: Any) -> tuple[int, bytes, str]:
        if not headers.get("x-api-key"):
            return error(401, "authentication_error", "x-api-key header is required")
        if not headers.get("anthropic-version"):
            return error(400, "invalid_request_error", "anthropic-version: header is required")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return error(400, "invalid_request_error", "messages: Field required")
        problem = self._problem(body)
        if problem is not None:
            return error(400, "invalid_request_error", problem)
        blocks, stop = self._answer(body)
        message = {
            "id": "msg_mock_" + secrets.token_hex(8),
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": len(orjson.dumps(body["messages"])) // 4, "output_tokens": 12},
        }
        if body.get("stream") is True:
            return 200, _stream(message), "text/event-stream"
        return 200, orjson.dumps(message), "application/json"

    def _problem(self, body: dict[str, Any]) -> str | None:
        thinking = body.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") == "enabled":
            budget = thinking.get("budget_tokens")
            if not isinstance(budget, int) or budget < 1024:
                return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
            if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] <= budget:
                return "`max_tokens` must be greater than `thinking.budget_tokens`."
        for i, message in enumerate(body["messages"]):
            content = message.get("content") if isinstance(message, dict) else None
            for j, block in enumerate(content if isinstance(content, list) else []):
                if isinstance(block, dict) and block.get("type") == "thinking":
                    signature, text = block.get("signature"), block.get("thinking")
                    if not (
                        isinstance(text, str)
                        and isinstance(signature, str)
                        and hmac.compare_digest(signature, self.sign(text))
                    ):
                        return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
        return None

    def _answer(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        last = body["messages"][-1] if body["messages"] else {}
        content = last.get("content") if isinstance(last, dict) else None
        blocks: list[dict[str, Any]] = []
        thinking = body.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
            text = f"The user wrote {len(orjson.dumps(content))} bytes; answer briefly."
            blocks.append({"type": "thinking", "thinking": text, "signature": self.sign(text)})
        answered = isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        )
        tools = body.get("tools")
        if isinstance(tools, list) and tools and isinstance(tools[0], dict) and not answered:
            call = {"type": "tool_use", "id": "toolu_mock_1", "name": tools[0].get("name"), "input": {"q": 1}}
            return [*blocks, call], "tool_use"
        return [*blocks, {"type": "text", "text": "Done." if answered else "Hello."}], "end_turn"


def _stream(message: dict[str, Any]) -> bytes:
    """The message as Anthropic streams it."""
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
        {"type": "ping"},
    ]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        empty = (
            {"thinking": "", "signature": ""}
            if kind == "thinking"
            else {"text": ""}
            if kind == "text"
            else {}
        )
        start = {**block, **empty, **({"input": {}} if kind == "tool_use" else {})}
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        if kind == "thinking":
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]}]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            deltas = [{"type": "text_delta", "text": block["text"]}]
        else:
            deltas = [{"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}]
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events.append({"type": "message_delta", "delta": delta, "usage": {"output_tokens": 12}})
    events.append({"type": "message_stop"})
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events)
