"""Request rewrite: a client body, a thinking level and a dialect in; the body to send upstream out.

Pure. The caller's dict is never mutated: every changed level of nesting is a fresh copy, and nothing
from the providers table is shared with the result (params are copied), so later stages may mutate
the returned body freely.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from proxy.core.config.providers import Dialect
from proxy.core.controls import Level
from proxy.core.replay.signatures import with_skipped_signatures

# Fields in which reasoning travels on assistant messages, across dialects.
_REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_details")
# Content parts that carry reasoning rather than answer (Mistral's `thinking` chunks and the like).
_REASONING_PART_TYPES = frozenset({"thinking", "reasoning"})
# Inline blocks stripped from history: the entry's tags, and always <think>, the common one.
_ALWAYS_STRIPPED_TAGS = ("think",)
_INSTRUCTION_ROLES = frozenset({"system", "developer"})


@dataclass(frozen=True)
class RewriteResult:
    """The body to send upstream, the level actually applied (None -> report `none`) and how."""

    body: dict[str, Any]
    level_applied: Level | None
    method: Literal["params", "prompt"] | None


def rewrite_body(
    body: dict[str, Any], level: Level | None, dialect: Dialect, *, zh: bool = False
) -> RewriteResult:
    """Apply `level` to `body` in `dialect`.

    - level None: the body is returned as is (same object), so the caller can forward the original
      bytes — unless an assistant message carries reasoning in a field the upstream does not read
      (`fit_history`): the entry's `replay.field` is a fact about the upstream, whatever the level.
    - a level this provider has no rule for: no knob is removed or sent (level applied None); the
      history is still put in the form the provider wants (replay policy).
    - a params rule: the entry's conflicting knobs are removed, the params deep-merged, then the replay
      policy applied to assistant messages.
    - a prompt rule: conflicting knobs removed, the history cleaned (earlier copies of the proxy's
      instructions dropped, reasoning stripped from assistant messages), then the instruction (zh or
      en) inserted as a new system message at position 0.
    """
    if level is None:
        return RewriteResult(_signatures_fitted(fit_history(body, dialect), dialect), None, None)
    rule = dialect.levels.get(level)
    messages = body.get("messages")
    history: list[Any] | None = messages if isinstance(messages, list) else None
    if rule is None or (rule.prompt is not None and history is None):
        out = dict(body)
        if history is not None:
            out["messages"] = _clean_history(history, dialect, prompted=False)
        return RewriteResult(_signatures_fitted(out, dialect), None, None)

    out = body
    for keys in conflict_paths(dialect.conflicts):
        if keys[0] in out:  # (most bodies send none of the entry's knobs: no call for those)
            out = without_path(out, keys)
    out = dict(out) if out is body else out

    if rule.prompt is not None:
        instruction = dialect.instructions[rule.prompt]["zh" if zh else "en"]
        cleaned = _clean_history(history or [], dialect, prompted=True)
        out["messages"] = [{"role": "system", "content": instruction}, *cleaned]
        return RewriteResult(out, level, "prompt")

    out = _merged(out, rule.params or {})
    if history is not None:
        out["messages"] = _clean_history(history, dialect, prompted=False)
        if dialect.replay.params and level is not Level.OFF and _has_assistant_turn(history):
            out = _merged(out, dialect.replay.params)  # keep the reasoning replayed below
    return RewriteResult(_signatures_fitted(out, dialect), level, "params")


def _has_assistant_turn(messages: list[Any]) -> bool:
    return any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages)


def _signatures_fitted(body: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    """`body` with Gemini's placeholder signature where its validator wants one and none came
    (replay `missing_signature: skip_validator`); the same object when nothing changed."""
    if dialect.replay.missing_signature != "skip_validator":
        return body
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    fitted = with_skipped_signatures(messages)
    return body if fitted is messages else {**body, "messages": fitted}


# --------------------------------------------------------------------------------------------------
# Knobs: removal of dotted paths and deep merge, copy-on-write
# --------------------------------------------------------------------------------------------------


@lru_cache(maxsize=256)  # (keyed by the providers table's entries' paths, never a request's)
def conflict_paths(conflicts: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """An entry's dotted `conflicts` paths as their keys, split once per table: every chat request
    reads them (the rewrite, the thinking policy's reading of the body's knobs)."""
    return tuple(tuple(path.split(".")) for path in conflicts)


def without_path(data: dict[str, Any], path: Sequence[str]) -> dict[str, Any]:
    """`data` without the dotted `path` (a copy if anything was removed; a parent left empty by the
    removal is removed too, so `chat_template_kwargs: {}` is not sent)."""
    key = path[0]
    if key not in data:
        return data
    if len(path) == 1:
        out = dict(data)
        del out[key]
        return out
    child = data[key]
    if not isinstance(child, dict):
        return data
    new_child = without_path(child, path[1:])
    if new_child is child:
        return data
    out = dict(data)
    if new_child:
        out[key] = new_child
    else:
        del out[key]
    return out


def _merged(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        current = out.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):  # (mostly absent: no ABC check)
            out[key] = _merged(current, value)
        else:
            out[key] = _fresh(value)
    return out


def _fresh(value: Any) -> Any:
    """A copy of a JSON-like value from the providers table, so the body never aliases table data."""
    if type(value) in _LEAVES:
        return value  # (the common case, before the ABC check)
    if isinstance(value, Mapping):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_fresh(v) for v in value]
    return value


_LEAVES = frozenset({str, int, float, bool, type(None)})


# --------------------------------------------------------------------------------------------------
# History: the proxy's own instructions and reasoning replay
# --------------------------------------------------------------------------------------------------


def _clean_history(messages: list[Any], dialect: Dialect, *, prompted: bool) -> list[Any]:
    texts = dialect.instruction_texts
    cleaned: list[Any] = []
    for message in messages:
        if not isinstance(message, dict):
            cleaned.append(message)
            continue
        role = message.get("role")
        if (
            isinstance(role, str)
            and role in _INSTRUCTION_ROLES
            and texts
            and _is_instruction(message.get("content"), texts)
        ):
            continue  # an earlier copy of the proxy's own instruction: never two of them
        if role == "assistant":
            message = _replay(message, dialect, prompted=prompted)
        cleaned.append(message)
    return cleaned


def _is_instruction(content: Any, texts: frozenset[str]) -> bool:
    if isinstance(content, str):
        return content.strip() in texts
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
        text = content[0].get("text")
        return isinstance(text, str) and text.strip() in texts
    return False


def _replay(message: dict[str, Any], dialect: Dialect, *, prompted: bool) -> dict[str, Any]:
    # A prompted model never gets old reasoning back, whatever the entry's policy.
    mode = "strip" if prompted else dialect.replay.mode
    if mode == "tool_calls":
        mode = "every_turn" if message.get("tool_calls") else "strip"
    if mode == "every_turn":
        return _keep(message, dialect.replay.field)
    return _strip(message, _inline_patterns(dialect.reasoning.tags, dialect.reasoning.implicit_open))


# Where a level's params carry a numeric thinking budget (providers.yaml): DashScope's and
# SiliconFlow's `thinking_budget`, Anthropic's `thinking.budget_tokens`, OpenRouter's
# `reasoning.max_tokens`. A client's own budget (the Messages API's `budget_tokens`) replaces it.
BUDGET_PATHS: tuple[tuple[str, ...], ...] = (
    ("thinking_budget",),
    ("thinking", "budget_tokens"),
    ("reasoning", "max_tokens"),
)


def with_budget(body: dict[str, Any], budget: int) -> tuple[dict[str, Any], str | None]:
    """`body` (a rewritten request) with `budget` in the numeric budget its level's params set, and
    that param's dotted name; the same body and None when they set none: a dialect whose knob is
    only a switch or an effort has no number to take, and none is invented."""
    for path in BUDGET_PATHS:
        node: Any = body
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and type(node.get(path[-1])) is int:
            out = dict(body)
            parent = out
            for key in path[:-1]:
                parent[key] = dict(parent[key])
                parent = parent[key]
            parent[path[-1]] = budget
            return out, ".".join(path)
    return body, None


def fit_history(body: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    """`body` with the reasoning of its assistant messages in the field the upstream reads, when no
    level is applied (the same object when nothing needed it, so the original bytes can go).

    Only what the upstream would refuse or silently lose is touched: under `field: none` (Groq
    answers 400 "property 'reasoning_content' is unsupported") the reasoning fields are removed;
    under a policy that replays, reasoning a client sent in another text field is moved into
    `field` (recent vLLM reads `reasoning` and ignores `reasoning_content`). A strip policy with a
    field the upstream reads leaves the body alone, as it always did without a level."""
    policy = dialect.replay
    if policy.field != "none" and not policy.wants_reasoning:
        return body
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    out: list[Any] | None = None
    for position, message in enumerate(messages):
        if type(message) is not dict or message.get("role") != "assistant":
            continue
        fitted = _fit(message, policy.field)
        if fitted is not message:
            if out is None:
                out = list(messages)
            out[position] = fitted
    return body if out is None else {**body, "messages": out}


def _fit(message: dict[str, Any], field: str) -> dict[str, Any]:
    if field == "none":
        if any(key in message for key in _REASONING_FIELDS):
            return {k: v for k, v in message.items() if k not in _REASONING_FIELDS}
        return message
    if field == "reasoning_details" or field in message:
        return message  # signed details travel as they are; a message already in the field is right
    if "reasoning_content" not in message and "reasoning" not in message:
        return message
    return _keep(message, field)


def _keep(message: dict[str, Any], field: str) -> dict[str, Any]:
    """Reasoning the client sent back (reasoning_content, else reasoning) moved into the provider's
    field. Nothing is invented: a message without reasoning gets none."""
    text = _reasoning_text(message)
    if field in ("reasoning_content", "reasoning"):
        out: dict[str, Any] = {}
        for key, value in message.items():
            if key not in _REASONING_FIELDS:
                out[key] = value
            elif key != "reasoning_details" and text is not None and field not in out:
                out[field] = text  # where the client had it, so the message reads the same
        return out
    out = {k: v for k, v in message.items() if k not in ("reasoning_content", "reasoning")}
    if field == "inline_think" and "reasoning_details" not in message and text:
        out["content"] = with_think_block(message.get("content"), text)
    # reasoning_details (and inline_think with details present): the details travel unchanged.
    return out


def _reasoning_text(message: dict[str, Any]) -> str | None:
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str):
            return value
    return None


def with_think_block(content: Any, text: str) -> Any:
    """`content` with `<think>text</think>` in front (as MiniMax wants its reasoning back)."""
    block = f"<think>{text}</think>"
    if isinstance(content, str):
        if "<think>" in content:
            return content  # the client replayed the raw content: already in the provider's form
        separator = "" if not content or content[:1].isspace() else "\n\n"
        return block + separator + content
    if isinstance(content, list):
        if any(isinstance(p, dict) and "<think>" in str(p.get("text", "")) for p in content):
            return content
        return [{"type": "text", "text": block}, *content]
    return block


def _strip(message: dict[str, Any], patterns: _InlinePatterns) -> dict[str, Any]:
    out = {k: v for k, v in message.items() if k not in _REASONING_FIELDS}
    content = message.get("content")
    if isinstance(content, str):
        out["content"] = patterns.strip(content)
    elif isinstance(content, list):
        parts: list[Any] = []
        for part in content:
            if isinstance(part, dict):
                kind = part.get("type")
                if isinstance(kind, str) and kind in _REASONING_PART_TYPES:
                    continue
                text = part.get("text")
                if part.get("type") == "text" and isinstance(text, str):
                    stripped = patterns.strip(text)
                    if stripped != text:
                        part = {**part, "text": stripped}
            parts.append(part)
        out["content"] = parts
    return out


@dataclass(frozen=True)
class _InlinePatterns:
    block: re.Pattern[str]  # <tag>…</tag> and the whitespace after it
    unterminated: re.Pattern[str]  # <tag>… to the end (a reply cut off while thinking)
    leading_close: re.Pattern[str] | None  # …</tag> with no opener before it (implicit open)

    def strip(self, text: str) -> str:
        if "<" not in text:
            return text
        if self.leading_close is not None:
            text = self.leading_close.sub("", text, count=1)
        return self.unterminated.sub("", self.block.sub("", text))


@lru_cache(maxsize=64)
def _inline_patterns(tags: tuple[str, ...], implicit_open: bool) -> _InlinePatterns:
    names = "|".join(re.escape(t) for t in dict.fromkeys((*tags, *_ALWAYS_STRIPPED_TAGS)))
    leading = (
        re.compile(rf"\A(?:(?!<(?:{names})>).)*?</(?:{names})>\s*", re.DOTALL) if implicit_open else None
    )
    return _InlinePatterns(
        block=re.compile(rf"<({names})>.*?</\1>\s*", re.DOTALL),
        unterminated=re.compile(rf"<(?:{names})>.*\Z", re.DOTALL),
        leading_close=leading,
    )
