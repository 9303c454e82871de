"""`auto`: the thinking level chosen per user turn by the policy file's `auto` rules.

Pure. A rule is `{when: {...}, level: ...}`; the first rule whose every condition holds chooses
(a rule without `when` always holds: the fallback). The conditions read only what stays the same
through a tool loop, so every request of one user turn gets the same level: the upstream's prompt
cache keeps its prefix, and the replay rules see one level per turn.

- `last_user_chars: {over: N, under: M}`: the length of the last *user* message's text (a tool
  result is not a user message: a Messages `tool_result` block, a Responses
  `function_call_output`, a chat `tool` message);
- `contains: [regex, …]`: any of them found in that text (case-insensitive; compiled once when
  the file loads; searched in its first SCAN_CHARS characters). The length alone does not bound a
  backtracking pattern's time, so the shapes that can take exponential time are refused when the
  file loads (proxy.core.policy.pattern_cost);
- `tools: true|false`: the request offers the model tools;
- `model: glob`: the model (its level suffix taken off);
- `door: chat|responses|messages` (or a list of them);
- `client: glob`: the client's kind (`client_kind`: `claude-code`, `codex`, else its
  User-Agent's first product name in lower case, `openai`, `anthropic`, `curl`…).

BUILT_IN is what applies when the file has none (docs/policy.md says why each rule is there).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.core.controls import Level
from proxy.core.policy.pattern_cost import risk

__all__ = [
    "BUILT_IN",
    "DOORS",
    "MAX_PATTERNS",
    "MAX_PATTERN_CHARS",
    "MAX_RULES",
    "SCAN_CHARS",
    "AutoRule",
    "Features",
    "choose",
    "client_kind",
    "features_of",
    "last_user_text",
]

DOORS: Final = ("chat", "responses", "messages")
SCAN_CHARS: Final = 8_192  # of the last user message, what `contains` searches
MAX_RULES: Final = 64
MAX_PATTERNS: Final = 32  # per rule
MAX_PATTERN_CHARS: Final = 256


@dataclass(frozen=True, slots=True)
class Features:
    """What the rules read of a request: all constant within one user turn's tool loop."""

    last_user: str = ""
    tools: bool = False
    model: str = ""
    door: str = "chat"
    client: str = ""


@dataclass(frozen=True, slots=True)
class AutoRule:
    """One rule, its patterns compiled. `text`: how it is named in the trace, the console and
    `X-Thinking-Level-Rule` (`auto[1]: last_user_chars over 2000 -> deep`)."""

    level: Level
    over: int | None = None
    under: int | None = None
    contains: tuple[re.Pattern[str], ...] = ()
    tools: bool | None = None
    model: str | None = None
    doors: tuple[str, ...] = ()
    client: str | None = None
    text: str = ""

    def holds(self, f: Features) -> bool:
        chars = len(f.last_user)
        if self.over is not None and chars <= self.over:
            return False
        if self.under is not None and chars >= self.under:
            return False
        if self.tools is not None and f.tools is not self.tools:
            return False
        if self.model is not None and not fnmatch.fnmatchcase(f.model, self.model):
            return False
        if self.doors and f.door not in self.doors:
            return False
        if self.client is not None and not fnmatch.fnmatchcase(f.client, self.client):
            return False
        if self.contains:
            head = f.last_user[:SCAN_CHARS]
            return any(pattern.search(head) for pattern in self.contains)
        return True


def make_rule(index: int, level: Level, when: Mapping[str, Any] | None) -> AutoRule:
    """Rule number `index` (1-based) from its validated `when` (proxy.core.config.policy_file);
    a pattern that does not compile, or that could backtrack without bound
    (proxy.core.policy.pattern_cost), is a ValueError naming it."""
    when = when or {}
    chars = when.get("last_user_chars") or {}
    patterns: list[re.Pattern[str]] = []
    for text in when.get("contains") or ():
        try:
            patterns.append(re.compile(text, re.IGNORECASE))
        except re.error as exc:
            raise ValueError(f"{text!r} is not a regular expression ({exc})") from None
        why = risk(text)
        if why is not None:
            raise ValueError(f"{text!r} could take unbounded time on a message: {why}")
    doors = when.get("door")
    door_list = (doors,) if isinstance(doors, str) else tuple(doors or ())
    rule = AutoRule(
        level,
        over=chars.get("over"),
        under=chars.get("under"),
        contains=tuple(patterns),
        tools=when.get("tools"),
        model=when.get("model"),
        doors=door_list,
        client=when.get("client"),
    )
    return _named(index, rule, when)


def _named(index: int, rule: AutoRule, when: Mapping[str, Any]) -> AutoRule:
    parts: list[str] = []
    if rule.over is not None:
        parts.append(f"last_user_chars over {rule.over}")
    if rule.under is not None:
        parts.append(f"last_user_chars under {rule.under}")
    if rule.contains:
        parts.append("contains " + "|".join(str(p) for p in when.get("contains") or ()))
    if rule.tools is not None:
        parts.append(f"tools {str(rule.tools).lower()}")
    if rule.model is not None:
        parts.append(f"model {rule.model}")
    if rule.doors:
        parts.append("door " + ",".join(rule.doors))
    if rule.client is not None:
        parts.append(f"client {rule.client}")
    condition = ", ".join(parts) or "otherwise"
    return AutoRule(
        rule.level,
        rule.over,
        rule.under,
        rule.contains,
        rule.tools,
        rule.model,
        rule.doors,
        rule.client,
        text=f"auto[{index}]: {condition} -> {rule.level.value}",
    )


# The rules when the policy file has none (or there is no policy file). Why each: docs/policy.md,
# "auto".
_DEEP_WORDS = (
    r"\b(debug|prove|proof|derive|refactor|architect\w*|design|optimi[sz]e|root cause|trade-?offs?"
    r"|step by step|think (hard|carefully|deeply)|ultrathink)\b"
)
BUILT_IN: Final[tuple[AutoRule, ...]] = (
    make_rule(1, Level.DEEP, {"contains": [_DEEP_WORDS]}),
    make_rule(2, Level.DEEP, {"last_user_chars": {"over": 2000}}),
    make_rule(3, Level.OFF, {"last_user_chars": {"under": 160}, "tools": False}),
    make_rule(4, Level.STANDARD, None),
)


def choose(rules: Sequence[AutoRule], features: Features) -> tuple[Level, str]:
    """The level the first rule that holds names, and that rule's text; standard when none holds
    (a file whose rules all have conditions)."""
    for rule in rules:
        if rule.holds(features):
            return rule.level, rule.text
    return Level.STANDARD, "auto: no rule held -> standard"


# -- what a request offers the rules, per door ---------------------------------------------------


def features_of(shape: str, door: str, body: Mapping[str, Any], model: str, client: str) -> Features:
    """The rules' view of a request `body` in the protocol `shape` (chat, responses, messages: a
    bridged door's body is already chat) that came through `door`."""
    tools = body.get("tools")
    has_tools = isinstance(tools, list) and bool(tools)
    return Features(last_user_text(shape, body), has_tools, model, door, client)


def last_user_text(shape: str, body: Mapping[str, Any]) -> str:
    """The text of the last message the user wrote (not a tool's result), in the body's shape."""
    door = shape
    if door == "responses":
        items = body.get("input")
        if isinstance(items, str):
            return items
        return _last_text(items, _responses_user)
    messages = body.get("messages")
    return _last_text(messages, _messages_user if door == "messages" else _chat_user)


def _last_text(items: Any, read: Any) -> str:
    if not isinstance(items, list):
        return ""
    for item in reversed(items):
        if isinstance(item, Mapping):
            text = read(item)
            if text is not None:
                return str(text)
    return ""


def _chat_user(message: Mapping[str, Any]) -> str | None:
    if message.get("role") != "user":
        return None
    return _texts(message.get("content"), ("text", "input_text"))


def _responses_user(item: Mapping[str, Any]) -> str | None:
    if item.get("role") != "user" or item.get("type", "message") != "message":
        return None
    return _texts(item.get("content"), ("input_text", "text"))


def _messages_user(message: Mapping[str, Any]) -> str | None:
    """A Messages `user` message, unless all it carries is tool results (Claude Code's tool loop
    sends each result as a user message: it is not the user speaking)."""
    if message.get("role") != "user":
        return None
    content = message.get("content")
    if isinstance(content, list):
        kinds = {block.get("type") for block in content if isinstance(block, Mapping)}
        if kinds and kinds <= {"tool_result"}:
            return None
    return _texts(content, ("text",))


def _texts(content: Any, kinds: Iterable[str]) -> str | None:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    wanted = frozenset(kinds)
    parts = [
        str(part.get("text") or "")
        for part in content
        if isinstance(part, Mapping) and part.get("type") in wanted
    ]
    return "\n".join(parts)


def client_kind(headers: Iterable[tuple[str, str]]) -> str:
    """The client's kind, from what it sends: `claude-code` (its session header or User-Agent),
    `codex` (its `originator` or User-Agent), else the User-Agent's first product name in lower
    case (`openai`, `anthropic`, `agents`, `ai`, `curl`…); empty when none."""
    agent = ""
    originator = ""
    for name, value in headers:
        low = name.lower()
        if low == "x-claude-code-session-id":
            return "claude-code"
        if low == "user-agent":
            agent = value
        elif low == "originator":
            originator = value
    if originator.startswith("codex") or agent.startswith("codex"):
        return "codex"
    if agent.startswith("claude-cli/"):
        return "claude-code"
    product = agent.split("/", 1)[0].split(" ", 1)[0].strip().lower()
    return product
