"""The thinking level written on the model name: `deepseek-v4-pro(deep)`, `gpt-5(high)`, `kimi-k3(auto)`.

Pure. Many agent tools let their user set only a base URL and a model name; the level rides on the
name, and the proxy takes it off before anything else reads the model (routing, providers.yaml's
model overrides, the upstream, metrics labels).

A suffix is the text between the name's last `(` and a `)` that ends it, and only when that text
is a level word (case-insensitive, spaces around it ignored):

- the proxy's levels: `off`, `standard`, `deep`, and `auto` (the policy file's auto rules choose);
- the effort words clients know, read as the Responses door reads `reasoning.effort`
  (proxy.core.protocols.responses.request.EFFORT_LEVELS): `none` is off; `minimal`, `low`,
  `medium` are standard; `high`, `xhigh`, `max` are deep.

Anything else is left alone: a name that merely contains or ends in parentheses (`my-model(v2)`,
`llama(8b)`), an empty `()`, a budget number, or a name that is all suffix (`(deep)`). Ollama's
`name:tag` is never touched (`qwen3:8b(deep)` is `qwen3:8b` at deep).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from proxy.core.controls import Level
from proxy.core.protocols.responses.request import EFFORT_LEVELS

__all__ = [
    "AUTO",
    "LEVEL_WORDS",
    "LISTED_WORDS",
    "ModelSuffix",
    "level_word",
    "split_model",
    "with_level_forms",
]

AUTO: Final = "auto"

# Every word a suffix may carry, and the level it names (None: auto).
LEVEL_WORDS: Final[Mapping[str, Level | None]] = MappingProxyType(
    {
        **{level.value: level for level in Level},
        AUTO: None,
        **EFFORT_LEVELS,
    }
)


@dataclass(frozen=True, slots=True)
class ModelSuffix:
    """A model name with its level suffix taken off: `model` is what the proxy routes and sends,
    `word` the suffix as the client wrote it, `level` what it names (None: auto)."""

    model: str
    word: str
    level: Level | None

    @property
    def auto(self) -> bool:
        return self.level is None


def level_word(word: str) -> tuple[bool, Level | None]:
    """Whether `word` is a level word, and the level it names (None: auto)."""
    key = word.strip(" \t").lower()
    if key not in LEVEL_WORDS:
        return False, None
    return True, LEVEL_WORDS[key]


def split_model(model: object) -> ModelSuffix | None:
    """The name without its level suffix, or None when it carries none (see the module's text)."""
    if not isinstance(model, str) or not model.endswith(")"):
        return None
    opening = model.rfind("(")
    if opening < 0:
        return None
    word = model[opening + 1 : -1]
    known, level = level_word(word)
    base = model[:opening].rstrip(" \t")
    if not known or not base:
        return None
    return ModelSuffix(base, word, level)


# The suffixed forms `GET /v1/models` lists after each model with THINKPROXY_MODELS_WITH_LEVELS
# (some clients offer only listed models): the proxy's own words, not every effort word.
LISTED_WORDS: Final = (Level.OFF.value, Level.STANDARD.value, Level.DEEP.value, AUTO)


def with_level_forms(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A model list's items, each followed by its suffixed forms (`id(off)`, `id(standard)`,
    `id(deep)`, `id(auto)`), the rest of the item as it came; an id already suffixed gets none."""
    out: list[dict[str, Any]] = []
    for item in items:
        out.append(item)
        model = item.get("id")
        if isinstance(model, str) and split_model(model) is None:
            out.extend({**item, "id": f"{model}({word})"} for word in LISTED_WORDS)
    return out
