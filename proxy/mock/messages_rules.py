"""The rules the simulated Messages API (proxy.mock.messages) enforces per model and provider, with
the providers' own error wording, so that a test of the Messages door fails when the door breaks one.

- **Preserved thinking** (platform.claude.com/docs/build-with-claude/preserved-thinking; Bedrock's
  page of the same name): on Claude Fable 5.1 and Opus 5.5 (`BOUND_MODELS`) a thinking block is
  bound to its prefix — the top-level `system`, `tools` and everything before the block in
  `messages`. A block whose prefix changed is invalid, and so is every thinking block after it:
  400 ``messages.{i}.content.{j}: Invalid `signature` in `thinking` block. The block is bound to a
  different conversation. …`` by default, or, with `thinking.block_binding.prefix_mismatch_behavior:
  drop_block` (beta `thinking-binding-controls-2026-08-01`), the invalid blocks dropped and listed
  in the answer's `input_transformations` (`{type: thinking_dropped, path, reason}`). The
  simulation compares the prefix as values (its canonical JSON); whether the proxy kept its bytes
  is what the door's tests compare themselves, from the raw bodies this mock keeps.
- **Always-on thinking** (platform.claude.com/docs/en/models/opus-5-5/whats-new-opus-5-5; the same
  on Fable 5.1): `thinking: {type: disabled}` or `{type: enabled, budget_tokens}` is a 400, and so
  is forced tool use (`tool_choice` `any` or a named tool).
- **DeepSeek's Anthropic endpoint** (models `deepseek-*`): `thinking: {type: disabled}` with an
  effort set (`output_config.effort`, or `reasoning_effort`) is a 400 with DeepSeek's own
  (OpenAI-shaped) body, "thinking options type cannot be disabled when reasoning_effort is set"
  (deepseek-ai/DeepSeek-V3#1397, the body as quoted in ding113/claude-code-hub#1257).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Any

import orjson

BOUND_MODELS = ("claude-fable-5-1*", "claude-opus-5-5*")
ALWAYS_THINKING_MODELS = BOUND_MODELS
BINDING_BETA = "thinking-binding-controls-2026-08-01"
BOUND_TO_ANOTHER = (
    "{path}: Invalid `signature` in `thinking` block. The block is bound to a different conversation. "
    'Remove the block, or set `thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
)
NOT_SUPPORTED = (
    '"thinking.type.{kind}" is not supported for this model. Use "thinking.type.adaptive" and '
    '"output_config.effort" to control thinking behavior.'
)
FORCED_TOOL_USE = "Thinking may not be enabled when tool_choice forces tool use."
DEEPSEEK_DISABLED_WITH_EFFORT = "thinking options type cannot be disabled when reasoning_effort is set"


def _model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    return model.lower() if isinstance(model, str) else ""


def bound(body: Mapping[str, Any]) -> bool:
    """Whether the request's model binds thinking blocks to their prefix."""
    return any(fnmatchcase(_model(body), pattern) for pattern in BOUND_MODELS)


def prefix_digest(
    body: Mapping[str, Any], message: int, block: int, answer: list[Any] | None = None
) -> bytes:
    """What a thinking block at `messages[message].content[block]` is bound to: `system`, `tools`,
    the messages before it and the blocks before it in its own message (`answer`: the blocks of an
    answer not sent back yet, whose message is the next one)."""
    messages = body.get("messages")
    messages = messages if isinstance(messages, list) else []
    if answer is not None:
        before = answer[:block]
    else:
        content = messages[message].get("content") if isinstance(messages[message], dict) else None
        before = content[:block] if isinstance(content, list) else []
    prefix = [body.get("system"), body.get("tools"), messages[:message], before]
    return hashlib.sha256(orjson.dumps(prefix, option=orjson.OPT_SORT_KEYS)).digest()


def bound_signature(key: bytes, text: str, digest: bytes) -> str:
    return hmac.digest(key, text.encode() + b"\0" + digest, hashlib.sha256).hex()


def binding_behavior(body: Mapping[str, Any], beta: str) -> tuple[str | None, str | None]:
    """`thinking.block_binding.prefix_mismatch_behavior` (`error` when not sent), or the problem
    with it: the beta it needs, a value it does not take."""
    thinking = body.get("thinking")
    binding = thinking.get("block_binding") if isinstance(thinking, dict) else None
    if binding is None:
        return "error", None
    if BINDING_BETA not in [part.strip() for part in beta.split(",")]:
        return None, f"thinking.block_binding: requires the anthropic-beta header {BINDING_BETA}"
    behavior = binding.get("prefix_mismatch_behavior", "error") if isinstance(binding, dict) else None
    if behavior not in ("error", "drop_block"):
        return (
            None,
            "thinking.block_binding.prefix_mismatch_behavior: Input should be 'error' or 'drop_block'",
        )
    return str(behavior), None


def model_problem(body: Mapping[str, Any]) -> str | None:
    """Opus 5.5's and Fable 5.1's refusals: thinking off or with a budget, forced tool use."""
    if not any(fnmatchcase(_model(body), pattern) for pattern in ALWAYS_THINKING_MODELS):
        return None
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind in ("disabled", "enabled"):
        return NOT_SUPPORTED.format(kind=kind)
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        return FORCED_TOOL_USE
    return None


def deepseek_problem(body: Mapping[str, Any]) -> tuple[int, bytes, str] | None:
    """DeepSeek's 400 for thinking disabled beside an effort, in its own body."""
    if not _model(body).startswith("deepseek-"):
        return None
    thinking = body.get("thinking")
    config = body.get("output_config")
    effort = (isinstance(config, dict) and config.get("effort") is not None) or "reasoning_effort" in body
    if not (isinstance(thinking, dict) and thinking.get("type") == "disabled" and effort):
        return None
    error = {
        "message": DEEPSEEK_DISABLED_WITH_EFFORT,
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }
    return 400, orjson.dumps({"error": error}), "application/json"
