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
- `thinking: {type: enabled}` needs `budget_tokens` of at least 1024 and below `max_tokens`;
- per model and provider (proxy.mock.messages_rules): Fable 5.1's and Opus 5.5's thinking blocks
  bound to their prefix (their signatures then carry a second, bound part), their always-on
  thinking and refusal of forced tool use, DeepSeek's refusal of an effort beside disabled thinking.

The raw body of each request is kept too (`GET /_mock/messages/raw`: the last one, as it came), for
tests that compare bytes.

The answer: a thinking block when `thinking` is enabled or adaptive, or the model always thinks,
or `between_tools` after a tool result (its text names the question; signed), then a `tool_use`
of the first tool when tools are offered and the last turn is not a tool result, else a text
block; streamed as Anthropic's events, or one `Message`. The app module logs each request
(headers with keys shortened), as on every route.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.mock import messages_rules as rules

Recorder = Callable[[Request, bytes, str | None], Any]


def messages_routes(record: Recorder) -> list[Route]:
    """The routes, each request logged by `record` (which returns its parsed JSON body)."""
    api = MessagesApi()

    async def endpoint(request: Request) -> Response:
        raw = await request.body()
        api.last_raw = raw
        status, body, media_type = api.reply(request.headers, record(request, raw, None))
        return Response(body, status, media_type=media_type)

    async def last_raw(request: Request) -> Response:
        return Response(api.last_raw, 200, media_type="application/json")

    return [
        Route("/v1/messages", endpoint, methods=["POST"]),
        Route("/{prefix}/v1/messages", endpoint, methods=["POST"]),
        Route("/_mock/messages/raw", last_raw, methods=["GET"]),
    ]


def error(status: int, kind: str, message: str) -> tuple[int, bytes, str]:
    payload = {"type": "error", "error": {"type": kind, "message": message}}
    return status, orjson.dumps(payload), "application/json"


class MessagesApi:
    """One app's Messages API: the key its signatures are minted with."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self.last_raw = b""  # the last request's body, as it came

    def sign(self, thinking: str, digest: bytes | None = None) -> str:
        """A block's signature; on a model that binds blocks to their prefix (`digest`: what it is
        bound to) a second part binds it."""
        own = base64.b64encode(hmac.digest(self._key, thinking.encode(), hashlib.sha256)).decode()
        return own if digest is None else f"{own}.{rules.bound_signature(self._key, thinking, digest)}"

    def reply(self, headers: Mapping[str, str], body: Any) -> tuple[int, bytes, str]:
        if not headers.get("x-api-key"):
            return error(401, "authentication_error", "x-api-key header is required")
        if not headers.get("anthropic-version"):
            return error(400, "invalid_request_error", "anthropic-version: header is required")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return error(400, "invalid_request_error", "messages: Field required")
        refused = rules.deepseek_problem(body)
        if refused is not None:
            return refused
        behavior, problem = rules.binding_behavior(body, headers.get("anthropic-beta", ""))
        problem = problem or rules.model_problem(body) or self._problem(body)
        if problem is not None:
            return error(400, "invalid_request_error", problem)
        dropped, problem = self._binding(body, behavior == "drop_block")
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
        if rules.bound(body):
            message["input_transformations"] = dropped
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
                        and hmac.compare_digest(signature.split(".")[0], self.sign(text))
                    ):
                        return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
        return None

    def _binding(self, body: dict[str, Any], drop: bool) -> tuple[list[dict[str, Any]], str | None]:
        """On a model that binds thinking blocks to their prefix: the blocks whose prefix changed
        (and every thinking block after the first of them) — a 400, or with `drop` left out of the
        request and listed as `input_transformations`."""
        dropped: list[dict[str, Any]] = []
        if not rules.bound(body):
            return dropped, None
        for i, message in enumerate(body["messages"]):
            content = message.get("content") if isinstance(message, dict) else None
            for j, block in enumerate(content if isinstance(content, list) else []):
                if not (isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking")):
                    continue
                path = f"messages.{i}.content.{j}"
                if not dropped:
                    _, _, binding = str(block.get("signature", "")).partition(".")
                    text = str(block.get("thinking", ""))
                    expected = rules.bound_signature(self._key, text, rules.prefix_digest(body, i, j))
                    if not binding or hmac.compare_digest(binding, expected):
                        continue
                    if not drop:
                        return [], rules.BOUND_TO_ANOTHER.format(path=path)
                dropped.append({"type": "thinking_dropped", "path": path, "reason": "prefix_mismatch"})
        return dropped, None

    def _answer(self, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        last = body["messages"][-1] if body["messages"] else {}
        content = last.get("content") if isinstance(last, dict) else None
        blocks: list[dict[str, Any]] = []
        thinking = body.get("thinking")
        kind = thinking.get("type") if isinstance(thinking, dict) else None
        answered = isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        )
        always = any(fnmatchcase(str(body.get("model")).lower(), p) for p in rules.ALWAYS_THINKING_MODELS)
        if kind in ("enabled", "adaptive") or always or (kind == "between_tools" and answered):
            text = f"The user wrote {len(orjson.dumps(content))} bytes; answer briefly."
            digest = rules.prefix_digest(body, len(body["messages"]), 0, []) if rules.bound(body) else None
            blocks.append({"type": "thinking", "thinking": text, "signature": self.sign(text, digest)})
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
