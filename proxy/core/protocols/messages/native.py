"""The Messages front door to an upstream that serves the Anthropic Messages API itself
(providers.yaml `messages: {mode: native}`, proxy.core.config.front_door_rules.MessagesRule), as values:
the body and headers that go upstream. The edge is proxy.server.doors.messages_native.

- **The level**, as Anthropic's own fields: `X-Thinking-Level` decides when sent: the client's
  `thinking` and `output_config.effort` are removed and the entry's fields for that level merged
  in (a level the entry gives none for is applied as none); the client's own `budget_tokens`
  replaces the level's number where the level carries one, as on the bridge. Without the header
  the client's own `thinking` stands and names the level applied; a client that sent none gets
  the default level.
- **Thinking blocks the proxy signed** (a `tp1.` sealed blob as `signature`, from a bridged
  answer: proxy.core.protocols.messages.state) are removed from the history before the hop: the
  upstream did not make them and refuses them ("Invalid `signature` in `thinking` block"). A
  genuine upstream signature passes untouched, as does every other block.
- **The model's own rules** (providers.yaml `messages:`, proxy.core.config.front_door_rules.
  MessagesRule): where the upstream refuses an effort beside disabled thinking (DeepSeek,
  `effort_needs_thinking`), a request whose thinking is off goes without its effort; where the
  model always thinks (Claude Opus 5.5, Fable 5.1, `always_thinks`), a `thinking` that turns it
  off or sets a budget goes as `{type: adaptive}` (its other fields kept) and an off asked is
  not applied, said in `X-Thinking-Level-Reason` (`model_rules`), and forced tool use is refused
  before the upstream with Anthropic's error shape.
- **The key**: sent as `x-api-key` (the client's, BYOK; in gateway mode the upstream key the
  gateway put in `Authorization`), never as `Authorization`. `anthropic-version` and
  `anthropic-beta` pass as they came.

Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.core import seal
from proxy.core.config.front_door_rules import MessagesRule
from proxy.core.controls import LEVEL_REASON_HEADER, Level
from proxy.core.errors import BadRequest
from proxy.core.protocols.messages.request import thinking_level

__all__ = ["LEVEL_REASON_HEADER", "model_rules", "native_body", "native_headers", "strip_proxy_thinking"]

# tool_choice types that force a tool call (Anthropic refuses them while thinking is on).
_FORCING = ("any", "tool")


def native_body(
    body: Mapping[str, Any], level: Level | None, rule: MessagesRule, *, header: bool
) -> tuple[dict[str, Any] | None, Level | None]:
    """The body with the level applied (None: unchanged) and the level that applies."""
    if not header and body.get("thinking") is not None:
        out, applied = dict(body), thinking_level(body)  # the client's own thinking stands
    elif level is None:
        out, applied = dict(body), None
    else:
        out, applied = _with_level(body, level, rule)
    if _kind(out.get("thinking")) == "disabled" and rule.effort_needs_thinking:
        _drop_effort(out)
    if rule.always_thinks and _kind(out.get("thinking")) in ("disabled", "enabled"):
        kept = {k: v for k, v in out["thinking"].items() if k not in ("type", "budget_tokens")}
        out["thinking"] = {"type": "adaptive", **kept}
        applied = thinking_level(out)  # (what goes: adaptive, at the effort the client sent)
    changed = out != body
    return (out if changed else None), applied


def _kind(thinking: Any) -> Any:
    return thinking.get("type") if isinstance(thinking, Mapping) else None


def _drop_effort(out: dict[str, Any]) -> None:
    """`output_config.effort` (and a top-level `reasoning_effort`) left out; the rest of
    `output_config` stays."""
    out.pop("reasoning_effort", None)
    config = out.get("output_config")
    if isinstance(config, Mapping) and "effort" in config:
        rest = {k: v for k, v in config.items() if k != "effort"}
        if rest:
            out["output_config"] = rest
        else:
            del out["output_config"]


def _with_level(
    body: Mapping[str, Any], level: Level, rule: MessagesRule
) -> tuple[dict[str, Any], Level | None]:
    """The body with the entry's fields for `level` in place of the client's thinking knobs."""
    fields = rule.fields_for(level)
    out = {k: v for k, v in body.items() if k != "thinking"}
    config = body.get("output_config")
    if isinstance(config, Mapping) and "effort" in config:
        rest = {k: v for k, v in config.items() if k != "effort"}
        if rest:
            out["output_config"] = rest
        else:
            del out["output_config"]
    for name, value in (fields or {}).items():
        current = out.get(name)
        out[name] = (
            {**current, **value} if isinstance(current, Mapping) and isinstance(value, Mapping) else value
        )
    budget = _budget(body.get("thinking"))
    thinking = out.get("thinking")
    if budget is not None and isinstance(thinking, dict) and "budget_tokens" in thinking:
        out["thinking"] = {**thinking, "budget_tokens": budget}  # (the client's number, as on the bridge)
    return out, (level if fields is not None else None)


def model_rules(
    body: Mapping[str, Any], level: Level | None, rule: MessagesRule, *, header: bool
) -> list[tuple[str, str]]:
    """What the model's own rules refuse before the upstream (BadRequest, Anthropic's shape at the
    door) and the response headers that say what was asked and not applied."""
    if not rule.always_thinks:
        return []
    model = body.get("model")
    name = model if isinstance(model, str) else "this model"
    choice = body.get("tool_choice")
    forcing = choice.get("type") if isinstance(choice, Mapping) else None
    if forcing in _FORCING:
        raise BadRequest(
            f"tool_choice {{type: {forcing}}} forces tool use, which {name} refuses: its thinking is "
            "always on, and thinking may not be enabled when tool_choice forces tool use. Send "
            "tool_choice auto (or none) and name the tool in the prompt.",
            param="tool_choice",
        )
    thinking = _kind(body.get("thinking"))
    asked_off = (not header and thinking == "disabled") or (
        level is Level.OFF and (header or thinking is None)
    )
    if asked_off:
        reason = f"off not applied: {name} always thinks (adaptive); lower output_config.effort instead"
        return [(LEVEL_REASON_HEADER, reason)]
    if not header and thinking == "enabled":
        reason = (
            f"budget_tokens not applied: {name} takes no thinking budget; output_config.effort sets the depth"
        )
        return [(LEVEL_REASON_HEADER, reason)]
    return []


def _budget(thinking: Any) -> int | None:
    budget = thinking.get("budget_tokens") if isinstance(thinking, Mapping) else None
    return budget if type(budget) is int and budget > 0 else None


def strip_proxy_thinking(body: Mapping[str, Any]) -> tuple[dict[str, Any] | None, int]:
    """The body without the thinking blocks the proxy signed (None: none found), and how many."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None, 0
    removed = 0
    out: list[Any] = []
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list) and any(_proxy_signed(block) for block in content):
            kept = [block for block in content if not _proxy_signed(block)]
            removed += len(content) - len(kept)
            message = {**message, "content": kept}
        out.append(message)
    if not removed:
        return None, 0
    return {**body, "messages": out}, removed


def _proxy_signed(block: Any) -> bool:
    return (
        isinstance(block, Mapping)
        and block.get("type") == "thinking"
        and seal.is_ours(block.get("signature"))
    )


def native_headers(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The request headers for a Messages upstream: a key in `Authorization` (a Bearer token, as
    Claude Code's ANTHROPIC_AUTH_TOKEN or a gateway's upstream key) sent as `x-api-key` instead,
    unless the client sent one."""
    has_key = any(name.lower() == "x-api-key" for name, _ in headers)
    out: list[tuple[str, str]] = []
    for name, value in headers:
        if name.lower() == "authorization":
            scheme, _, token = value.partition(" ")
            if not has_key:
                out.append(("x-api-key", token.strip() if scheme.lower() == "bearer" else value.strip()))
                has_key = True
            continue
        out.append((name, value))
    return out
