"""DeepSeek's wire shape (api.deepseek.com)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from proxy.mock.dialects.base import JSON, Counts, Rejection, Turn, tool_call_items
from proxy.mock.dialects.knobs import effort_depth, missing_replay, thinking_type
from proxy.mock.dialects.shapes import PairedReasoning
from proxy.mock.scenarios import Depth, Script


class DeepSeek(PairedReasoning):
    """api.deepseek.com: `reasoning_content` next to `content: null`, a system_fingerprint, cache usage."""

    name = "deepseek"
    # What GET /models lists since V4.1-Flash (2026-09-10): api-docs.deepseek.com/quick_start/pricing
    # names `deepseek-flash` and `deepseek-v4-pro`; `deepseek-v4-flash` is still accepted as an alias.
    default_model = "deepseek-flash"
    models = ("deepseek-flash", "deepseek-v4-pro")
    caches_prompts = True  # context caching, on for every request (api-docs.deepseek.com/guides/kv_cache)
    # Retired on 2026-07-24 15:59 UTC (api-docs.deepseek.com/updates/#date-2026-04-24): a request
    # naming one is refused with 400 like any unknown model (github.com/duanyytop/agents-radar/pull/2311),
    # the message listing the supported names (github.com/kolega-ai/kolega-code/pull/695).
    retired = ("deepseek-chat", "deepseek-reasoner")
    retired_message = "The supported API model names are {supported}, but you passed {model}."
    owned_by = "deepseek"
    fingerprint = "fp_ffc7281d48_prod0820_fp8_kvcache"
    replay_message = "The reasoning_content in the thinking mode must be passed back to the API."
    sample_400 = replay_message
    error_code = "invalid_request_error"

    def depth(self, body: Mapping[str, Any]) -> Depth:
        if thinking_type(body) == "disabled":
            return Depth.NONE
        effort = effort_depth(body.get("reasoning_effort"))
        return Depth.DEEP if effort is Depth.DEEP else Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        model = body.get("model")
        if isinstance(model, str) and model.lower() in self.retired:
            message = self.retired_message.format(supported=", ".join(self.models), model=model)
            return Rejection(400, self.error_body(message))
        # Measured on the live API: only tool-call turns after the last user message must carry
        # reasoning_content ("" accepted); earlier rounds are ignored.
        if depth is not Depth.NONE and missing_replay(body, current_round_only=True) is not None:
            return Rejection(400, self.error_body(self.replay_message))
        return None

    def unknown_route(self, method: str, path: str) -> Rejection:
        """DeepSeek's 404 for a path it does not serve (its API has no /v1/responses), as clients
        report it: github.com/carlrobertoh/ProxyAI/issues/827, github.com/Vali-98/ChatterUI/issues/437."""
        event_id = f"30-inst-128-{uuid.uuid4().int % 10**14:014d}-{uuid.uuid4().hex[:8]}"
        body = {"event_id": event_id, "error_msg": "Not Found. Please check the configuration."}
        return Rejection(404, orjson.dumps(body))

    def new_id(self, created: int) -> str:
        return str(uuid.uuid4())

    def server_fields(self, turn: Turn) -> JSON:
        return {"system_fingerprint": self.fingerprint}

    def role_delta(self, turn: Turn) -> JSON:
        if turn.thinking:
            return {"role": "assistant", "content": None, "reasoning_content": ""}
        return {"role": "assistant", "content": ""}

    def usage(self, counts: Counts) -> JSON:
        return {
            **super().usage(counts),
            "prompt_tokens_details": {"cached_tokens": counts.cached},
            "completion_tokens_details": {"reasoning_tokens": counts.reasoning},
            "prompt_cache_hit_tokens": counts.cached,
            "prompt_cache_miss_tokens": counts.prompt - counts.cached,
        }

    def message(self, script: Script, turn: Turn) -> JSON:
        message: JSON = {"role": "assistant", "content": script.content}
        if turn.thinking:
            message["reasoning_content"] = script.reasoning
        if script.tool_calls:
            message["tool_calls"] = tool_call_items(script.tool_calls)
        return message
