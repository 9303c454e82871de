"""Which thinking level a request asks, and where it came from (docs/policy.md, "Levels").

Pure. Sources, first that names one wins:

1. `header`: `X-Thinking-Level` (`off`, `standard`, `deep`, `auto`);
2. `suffix`: the model's `(level)` suffix (proxy.core.plan.model_suffix);
3. `client`: the body's own field (chat's `reasoning_effort` and the entry's other knobs, the
   Responses API's `reasoning.effort`, the Messages API's `thinking` / `output_config.effort`);
4. `default`: the key's `default_level` in the policy file (`default` or its own), else
   THINKPROXY_DEFAULT_THINKING_LEVEL;
5. none: the upstream's own default (nothing is sent).

`auto` from any source is resolved by the auto rules (proxy.core.policy.auto_rules) on what stays
the same within a user turn; the policy's ceiling and budget then judge the level like any other.
The header and the suffix override the client's field (a header or a suffix is someone choosing
on purpose); a default only applies to a request that names no level at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from proxy.core.controls import Level
from proxy.core.plan.model_suffix import ModelSuffix
from proxy.core.policy.auto_rules import BUILT_IN, AutoRule, Features, choose

__all__ = ["SOURCE_HEADER", "Asked", "LevelAsk", "LevelChoice", "Source", "decide"]

# Says which source the level came from (its values: Source).
SOURCE_HEADER: Final = "x-thinking-level-source"
# When `auto` chose: the rule that did.
RULE_HEADER: Final = "x-thinking-level-rule"


class Source(StrEnum):
    HEADER = "header"
    SUFFIX = "suffix"
    CLIENT = "client"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class Asked:
    """A level as a source names it: `level`, or `auto` (level None)."""

    level: Level | None
    auto: bool = False


@dataclass(frozen=True, slots=True)
class LevelAsk:
    """What the request's headers, model name and key say about its level, before the body's own
    field is read (that is door-specific: `decide`)."""

    header: Asked | None = None
    suffix: ModelSuffix | None = None
    default: Asked | None = None
    rules: Sequence[AutoRule] = BUILT_IN


@dataclass(frozen=True, slots=True)
class LevelChoice:
    """The level to apply (None: none named, or the client's own field goes as it came), which
    source named it (None: none did) and, for `auto`, the rule that chose."""

    level: Level | None
    source: Source | None
    rule: str | None = None

    @property
    def forced(self) -> bool:
        """The level overrides the client's own field (it came from the header or the suffix)."""
        return self.source is Source.HEADER or self.source is Source.SUFFIX

    def headers(self) -> list[tuple[str, str]]:
        """X-Thinking-Level-Source (and X-Thinking-Level-Rule when auto chose)."""
        out = [(SOURCE_HEADER, self.source.value if self.source is not None else "none")]
        if self.rule is not None:
            out.append((RULE_HEADER, header_text(self.rule)))
        return out


RULE_HEADER_CHARS: Final = 200


def header_text(text: str) -> str:
    """`text` as a header value: printable ASCII kept, anything else (a pattern's Chinese words, a
    control character) written `\\uXXXX`, cut to RULE_HEADER_CHARS (the record and the trace keep
    it whole)."""
    out = "".join(c if " " <= c <= "~" else f"\\u{ord(c):04x}" for c in text)
    return out if len(out) <= RULE_HEADER_CHARS else out[: RULE_HEADER_CHARS - 3] + "..."


NO_ASK: Final = LevelAsk()


def decide(ask: LevelAsk, client: Level | None, features: Callable[[], Features]) -> LevelChoice:
    """The level by the sources in order; `client`: the level the body's own field asks (None: it
    names none); `features`: the request as the auto rules read it (read only for `auto`)."""
    named: Asked | None = None
    source: Source | None = None
    if ask.header is not None:
        named, source = ask.header, Source.HEADER
    elif ask.suffix is not None:
        named, source = Asked(ask.suffix.level, ask.suffix.auto), Source.SUFFIX
    elif client is not None:
        return LevelChoice(client, Source.CLIENT)
    elif ask.default is not None:
        named, source = ask.default, Source.DEFAULT
    if named is None:
        return LevelChoice(None, None)
    if named.auto:
        level, rule = choose(ask.rules, features())
        return LevelChoice(level, source, rule)
    return LevelChoice(named.level, source)
