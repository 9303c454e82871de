"""Display titles for tools, from a file an operator writes (`THINKPROXY_TOOL_TITLES_FILE`).

YAML or JSON, one entry per tool name:

    kb_search:
      zh: 调用知识库
      en: Searching the knowledge base

Trace events of a titled tool carry a `title` (in the trace's language) and the console shows it
instead of the bare name. A title given in one language only is used for both.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from proxy.core.config.yamlfile import decode_config, load_config
from proxy.core.errors import ConfigError

ToolTitles = Mapping[str, Mapping[str, str]]

MAX_TITLE_CHARS = 120
NO_TITLES: ToolTitles = MappingProxyType({})


def load_tool_titles(path: Path | None) -> ToolTitles:
    """The map in `path` ({name: {"en": …, "zh": …}}, both languages filled in); empty for None."""
    if path is None:
        return NO_TITLES
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the tool titles file: {exc.strerror or exc}") from None
    data = load_config(decode_config(raw, str(path)), str(path), "YAML or JSON")  # JSON is YAML too
    return parse_tool_titles(data, str(path))


def parse_tool_titles(data: object, source: str = "tool titles") -> ToolTitles:
    if data is None:
        return NO_TITLES
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must be a mapping of tool name to {{zh: …, en: …}}")
    titles: dict[str, Mapping[str, str]] = {}
    for name, entry in data.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{source}: tool names must be non-empty text (got {name!r})")
        if isinstance(entry, str):
            entry = {"en": entry}
        if not isinstance(entry, dict):
            raise ConfigError(f"{source}: entry {name!r} must be a mapping with zh and/or en")
        unknown = set(entry) - {"zh", "en"}
        if unknown:
            raise ConfigError(
                f"{source}: entry {name!r} has unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                "use zh and en"
            )
        en, zh = entry.get("en"), entry.get("zh")
        for lang, value in (("en", en), ("zh", zh)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"{source}: entry {name!r}: {lang} must be non-empty text")
            if isinstance(value, str) and len(value) > MAX_TITLE_CHARS:
                raise ConfigError(
                    f"{source}: entry {name!r}: {lang} is longer than {MAX_TITLE_CHARS} characters"
                )
        given = [v.strip() for v in (en, zh) if isinstance(v, str)]
        if not given:
            raise ConfigError(f"{source}: entry {name!r} needs zh and/or en")
        english = en.strip() if isinstance(en, str) else given[0]
        chinese = zh.strip() if isinstance(zh, str) else given[0]
        titles[name] = MappingProxyType({"en": english, "zh": chinese})
    return MappingProxyType(titles)
