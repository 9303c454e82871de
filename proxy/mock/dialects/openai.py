"""OpenAI's own wire shape (api.openai.com chat completions).

Function tools and reasoning on chat completions, from GPT-5.4 on: OpenAI's chat endpoint refuses
a request with a function tool unless `reasoning_effort` is `"none"` (the Responses API takes
both), and from GPT-5.6 on the model's default effort counts when none is sent, so only an explicit
`"none"` passes. The 400 as clients report it (the model id as sent, `code: null`):

    {"error": {"message": "Function tools with reasoning_effort are not supported for gpt-5.6-terra
    in /v1/chat/completions. To use function tools, use /v1/responses or set reasoning_effort to
    'none'.", "type": "invalid_request_error", "param": "reasoning_effort", "code": null}}

Sources: github.com/GEMISIS/leviath/issues/333 and github.com/itzcrazykns/vane/issues/1173 (the
whole body, gpt-5.6-terra and gpt-5.6-luna); the OpenAI community thread (gpt-5.6-sol; "blocking
developer functions on reasoning models started with gpt-5.4")
community.openai.com/t/gpt-5-6-chat-completion-reasoning-effort-bug-behavior-change/1386454;
github.com/BerriAI/litellm/pull/34569 and github.com/danny-avila/LibreChat/issues/14355 (gpt-5.6:
tools without `reasoning_effort` 400, only "none" passes); the same text for gpt-6-astra in
github.com/Wei-Shaw/sub2api/issues/6740. Earlier reports (March to June 2026) end the message with
"Please use /v1/responses instead." (gpt-5.4: github.com/pipecat-ai/pipecat/issues/4043; gpt-5.5:
github.com/charmbracelet/crush/issues/2913); the mock answers with the current text.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from proxy.mock.dialects.base import (
    JSON,
    Counts,
    Dialect,
    Rejection,
    ResponsesTraits,
    Turn,
    tool_call_items,
)
from proxy.mock.dialects.knobs import effort_depth
from proxy.mock.scenarios import Depth, Script

# From this (major, minor) on, chat refuses function tools with an effort other than "none"...
TOOLS_NEED_NO_EFFORT_FROM = (5, 4)
# ...and from this one on, a request without `reasoning_effort` gets the model's default effort.
DEFAULT_EFFORT_FROM = (5, 6)

_GPT_VERSION = re.compile(r"gpt-(\d+)(?:\.(\d+))?(?:-|$)")


def gpt_version(model: str) -> tuple[int, int] | None:
    """The (major, minor) of a `gpt-<major>[.<minor>][-suffix]` model id: `gpt-5.4-mini` -> (5, 4),
    `gpt-5` -> (5, 0), `gpt-5.10` -> (5, 10); None for other ids (`gpt-4o`, `o3`, `chatgpt-4o-latest`)."""
    match = _GPT_VERSION.match(model)
    if match is None:
        return None
    return int(match[1]), int(match[2] or 0)


def tools_refuse_effort(model: str, effort: object) -> bool:
    """Whether OpenAI's chat endpoint refuses function tools on `model` at this `reasoning_effort`
    (None = not sent): from GPT-5.4 any effort but "none", from GPT-5.6 also the unsent default."""
    version = gpt_version(model)
    if version is None or version < TOOLS_NEED_NO_EFFORT_FROM:
        return False
    if effort is None:
        return version >= DEFAULT_EFFORT_FROM
    return effort != "none"


def _has_function_tool(body: Mapping[str, Any]) -> bool:
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        isinstance(tool, dict) and tool.get("type") == "function" for tool in tools
    )


_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _alnum(length: int) -> str:
    """A random mixed-case alphanumeric id, as OpenAI's are."""
    number = uuid.uuid4().int << 64 | uuid.uuid4().int
    out = []
    for _ in range(length):
        number, digit = divmod(number, len(_ALNUM))
        out.append(_ALNUM[digit])
    return "".join(out)


class OpenAI(Dialect):
    """OpenAI: no reasoning text at all, only `usage.completion_tokens_details.reasoning_tokens`;
    `usage: null` on every chunk when include_usage is on; an `obfuscation` pad on stream chunks.
    Its native Responses API (`proxy.mock.responses.routes`) seals reasoning and checks it comes back."""

    name = "openai"
    default_model = "gpt-5.1"
    models = ("gpt-5.1", "gpt-5", "o4-mini", "gpt-4.1-mini")
    owned_by = "system"
    # (and its WebSocket mode: https://developers.openai.com/api/docs/guides/websocket-mode)
    responses_api = ResponsesTraits(sealed=True, obfuscation=True, websocket=True)
    sample_400 = (
        "Unsupported value: 'minimal' is not supported with the 'gpt-5.1' model. "
        "Supported values are: 'none', 'low', 'medium', and 'high'."
    )

    @staticmethod
    def _efforts(model: str) -> tuple[str, ...]:
        """Accepted `reasoning_effort` values per model family; () = not a reasoning model."""
        if model.startswith("gpt-5.1"):
            return ("none", "low", "medium", "high")
        if model.startswith("gpt-5."):
            return ("none", "minimal", "low", "medium", "high", "xhigh")
        if model.startswith("gpt-5"):
            return ("minimal", "low", "medium", "high")
        if model.startswith(("o1", "o3", "o4")):
            return ("low", "medium", "high")
        return ()

    def sample_rejection(self) -> Rejection:
        return Rejection(
            400, self.error_body(self.sample_400, param="reasoning.effort", code="unsupported_value")
        )

    def depth(self, body: Mapping[str, Any]) -> Depth:
        if not self._efforts(str(body.get("model", self.default_model))):
            return Depth.NONE
        return effort_depth(body.get("reasoning_effort")) or Depth.STANDARD

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        return (
            self._effort_rejection(body, param="reasoning_effort")
            or self._max_tokens_rejection(body)
            or self._tools_effort_rejection(body)
        )

    def _max_tokens_rejection(self, body: Mapping[str, Any]) -> Rejection | None:
        if not (self._efforts(str(body.get("model", self.default_model))) and "max_tokens" in body):
            return None
        message = (
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead."
        )
        return Rejection(400, self.error_body(message, param="max_tokens", code="unsupported_parameter"))

    def _tools_effort_rejection(self, body: Mapping[str, Any]) -> Rejection | None:
        """Chat only (the Responses API takes tools with any effort); see the module docstring."""
        model = str(body.get("model", self.default_model))
        if not (_has_function_tool(body) and tools_refuse_effort(model, body.get("reasoning_effort"))):
            return None
        message = (
            f"Function tools with reasoning_effort are not supported for {model} in "
            "/v1/chat/completions. To use function tools, use /v1/responses or set "
            "reasoning_effort to 'none'."
        )
        return Rejection(400, self.error_body(message, param="reasoning_effort"))

    def check_responses(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        # The same effort rules (the Responses API names the parameter `reasoning.effort`); the
        # tools rule is chat's own.
        return self._effort_rejection(body, param="reasoning.effort")

    def _effort_rejection(self, body: Mapping[str, Any], *, param: str) -> Rejection | None:
        """The effort the model does not take: any effort on a non-reasoning model, or a value
        outside the model family's list."""
        model = str(body.get("model", self.default_model))
        accepted = self._efforts(model)
        effort = body.get("reasoning_effort")
        if effort is not None and not accepted:
            message = f"Unsupported parameter: '{param}' is not supported with this model."
            return Rejection(400, self.error_body(message, param=param, code="unsupported_parameter"))
        if effort is not None and effort not in accepted:
            listed = ", ".join(f"'{v}'" for v in accepted[:-1]) + f", and '{accepted[-1]}'"
            message = (
                f"Unsupported value: '{effort}' is not supported with the '{model}' model. "
                f"Supported values are: {listed}."
            )
            return Rejection(400, self.error_body(message, param=param, code="unsupported_value"))
        return None

    def new_id(self, created: int) -> str:
        return "chatcmpl-" + _alnum(29)

    def server_fields(self, turn: Turn) -> JSON:
        fingerprint = None if self._efforts(turn.model) else "fp_f33640a400"
        return {"service_tier": "default", "system_fingerprint": fingerprint}

    def envelope(self, turn: Turn, choices: list[JSON], usage: JSON | None = None) -> JSON:
        chunk = super().envelope(turn, choices, usage)
        if turn.include_usage:
            chunk["usage"] = usage  # null on every chunk but the usage one
        options = turn.body.get("stream_options")
        if not (isinstance(options, dict) and options.get("include_obfuscation") is False):
            # OpenAI pads chunks so that their length does not reveal the token; clients ignore it.
            chunk["obfuscation"] = "0123456789abcdef"[: 1 + len(orjson.dumps(choices)) % 16]
        return chunk

    def role_delta(self, turn: Turn) -> JSON:
        return {"role": "assistant", "content": "", "refusal": None}

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> None:
        return None  # reasoning stays hidden; only its token count is reported

    def usage(self, counts: Counts) -> JSON:
        return {
            **super().usage(counts),
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": counts.reasoning,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def message(self, script: Script, turn: Turn) -> JSON:
        message: JSON = {
            "role": "assistant",
            "content": script.content or None,
            "refusal": None,
            "annotations": [],
        }
        if script.tool_calls:
            message["tool_calls"] = tool_call_items(script.tool_calls)
        return message
