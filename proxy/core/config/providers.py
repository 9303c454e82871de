"""providers.yaml: loading, and the lookup of a provider's thinking dialect by URL and model (the
file's schema: proxy.core.config.providers_schema).

Pure apart from reading the providers file in `ProvidersTable.load`. Everything a request needs is
compiled at load time (patterns, model globs, one `Dialect` per entry and per model override), so
`ProvidersTable.match` only compares strings and returns a prebuilt object.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import ValidationError

from proxy.core.config.front_door_rules import BRIDGE as BRIDGE  # re-exported: part of an entry
from proxy.core.config.front_door_rules import MESSAGES_BRIDGE as MESSAGES_BRIDGE
from proxy.core.config.front_door_rules import MessagesRule as MessagesRule
from proxy.core.config.front_door_rules import ResponsesRule as ResponsesRule
from proxy.core.config.providers_schema import (
    ENTRY_NAME,
    EntrySpec,
    LevelRule,
    ModelOverrideSpec,
    ProvidersFile,
    ReasoningFormat,
    reasons_mapping,
)
from proxy.core.config.url_patterns import UrlPattern, UrlTarget
from proxy.core.config.yamlfile import decode_config, load_config
from proxy.core.controls import Level
from proxy.core.errors import ConfigError
from proxy.core.replay.policy import ReplayPolicy as ReplayPolicy  # re-exported: part of an entry

_NO_REASONS: Mapping[Level, str] = MappingProxyType({})

# --------------------------------------------------------------------------------------------------
# The resolved dialect a request is rewritten with
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    """One providers.yaml entry with the matching model override already merged in.

    `levels` holds only the levels this provider supports; `conflicts` are dotted paths removed from
    the client's body before the level's params are merged; `instructions` are all the table's named
    instructions ({name: {"en": …, "zh": …}}) that prompt rules refer to, and `instruction_texts` the
    set of their texts (stripped), used to recognise an earlier copy in a conversation's history.
    """

    name: str
    docs: str
    levels: Mapping[Level, LevelRule]
    conflicts: tuple[str, ...]
    reasoning: ReasoningFormat
    replay: ReplayPolicy
    instructions: Mapping[str, Mapping[str, str]]
    instruction_texts: frozenset[str] = frozenset()
    model_override: tuple[str, ...] | None = None  # the globs of the override that applied, if any
    responses: ResponsesRule = BRIDGE  # how POST /v1/responses reaches this upstream
    messages: MessagesRule = MESSAGES_BRIDGE  # how POST /v1/messages reaches this upstream
    chat_tools_with_reasoning: Literal["responses", "chat"] = "chat"  # (see EntrySpec)
    reasoning_visible: Literal["responses", "chat"] = "chat"  # (see EntrySpec)
    # Levels this model cannot take, with the reason the client is told (none for the others).
    not_applicable: Mapping[Level, str] = field(default_factory=lambda: _NO_REASONS)
    # The source that says the upstream serves the Responses WebSocket mode (None: it does not).
    responses_websocket: str | None = None

    @property
    def relays_responses_socket(self) -> bool:
        """A Responses WebSocket's turn to this upstream goes over an upstream WebSocket: its
        Responses door is native and the upstream serves the WebSocket mode."""
        return self.responses.mode == "native" and self.responses_websocket is not None


@dataclass(frozen=True)
class EntrySummary:
    """A read-only view of one entry, for documentation and explanations."""

    name: str
    docs: str
    patterns: tuple[str, ...]
    dialect: Dialect
    overrides: tuple[Dialect, ...]
    verified: date | None = None  # when `docs` was last re-read against the entry


# --------------------------------------------------------------------------------------------------
# URL patterns
# --------------------------------------------------------------------------------------------------

# The syntax and both ways of matching live in proxy.core.config.url_patterns (shared with the allow-list).


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------

_CACHE_LIMIT = 4096  # (base_url, model) pairs; the model string is client-chosen, so the cache is bounded


@dataclass(frozen=True)
class _CompiledEntry:
    name: str
    docs: str
    patterns: tuple[UrlPattern, ...]
    dialect: Dialect
    overrides: tuple[tuple[tuple[re.Pattern[str], ...], Dialect], ...]
    verified: date | None = None

    def dialect_for(self, model: str | None) -> Dialect:
        if model is not None:
            for globs, dialect in self.overrides:
                if any(glob.match(model) for glob in globs):
                    return dialect
        return self.dialect


class ProvidersTable:
    """The validated providers file: base URL (+ model) -> `Dialect`.

    Build it with `load` (a file, by default the shipped one) or `from_text`; both raise
    `ConfigError` naming the entry and the field at fault. `match` is meant to run on every request:
    it returns prebuilt dialects and caches by (base_url, model).
    """

    def __init__(self, entries: tuple[_CompiledEntry, ...], source: str) -> None:
        self._entries = entries
        self._source = source
        self._cache: dict[tuple[str, str | None], Dialect] = {}

    # ---- construction -----------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path | None = None) -> ProvidersTable:
        path = default_providers_path() if path is None else Path(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the providers file: {exc.strerror or exc}") from None
        return cls.from_text(decode_config(data, str(path)), source=path.name)

    @classmethod
    def from_text(cls, text: str, source: str = "providers.yaml") -> ProvidersTable:
        data = load_config(text, source)
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: the file must be a mapping with 'providers' (and 'instructions')")
        try:
            parsed = ProvidersFile.model_validate(data)
        except ValidationError as exc:
            raise ConfigError("\n".join(_describe(source, err) for err in exc.errors())) from None
        return cls(_compile(parsed, source), source)

    def with_extra_patterns(self, entry: str, patterns: list[str]) -> ProvidersTable:
        """A copy in which `entry` also matches `patterns` (e.g. a simulated upstream's path prefix)."""
        names = [e.name for e in self._entries]
        if entry not in names:
            raise ConfigError(f"{self._source}: no entry {entry!r} (entries: {', '.join(names)})")
        extra = []
        for i, text in enumerate(patterns):
            try:
                extra.append(UrlPattern.parse(text))
            except ValueError as exc:
                raise ConfigError(f"{self._source}: entry {entry!r}, extra pattern [{i}]: {exc}") from None
        entries = tuple(
            _CompiledEntry(e.name, e.docs, e.patterns + tuple(extra), e.dialect, e.overrides, e.verified)
            if e.name == entry
            else e
            for e in self._entries
        )
        return ProvidersTable(entries, self._source)

    def with_messages_bridged(self, entry: str) -> ProvidersTable:
        """A copy in which `entry`'s Messages door bridges (for a simulated upstream serving chat only)."""
        entries = tuple(
            _CompiledEntry(
                e.name,
                e.docs,
                e.patterns,
                replace(e.dialect, messages=MESSAGES_BRIDGE),
                tuple((globs, replace(d, messages=MESSAGES_BRIDGE)) for globs, d in e.overrides),
                e.verified,
            )
            if e.name == entry
            else e
            for e in self._entries
        )
        return ProvidersTable(entries, self._source)

    # ---- lookup -----------------------------------------------------------------------------------

    @property
    def entry_names(self) -> list[str]:
        return [e.name for e in self._entries]

    def match(self, base_url: str, model: str | None = None) -> Dialect:
        """The dialect for an upstream base URL and model: the most specific pattern's entry, then
        the first model override whose glob matches (case-insensitive)."""
        key = (base_url, model)
        cache = self._cache
        found = cache.get(key)
        if found is not None:
            return found
        entry, _ = self._best(base_url)
        found = entry.dialect_for(model)
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = found
        return found

    def matched_pattern(self, base_url: str) -> str:
        """The pattern text that made `match` pick its entry for this base URL."""
        return self._best(base_url)[1].text

    def summaries(self) -> list[EntrySummary]:
        return [
            EntrySummary(
                e.name,
                e.docs,
                tuple(p.text for p in e.patterns),
                e.dialect,
                tuple(d for _, d in e.overrides),
                e.verified,
            )
            for e in self._entries
        ]

    def _best(self, base_url: str) -> tuple[_CompiledEntry, UrlPattern]:
        target = UrlTarget.lenient(base_url)
        best: tuple[_CompiledEntry, UrlPattern] | None = None
        for entry in self._entries:
            for pattern in entry.patterns:
                if pattern.matches(target) and (best is None or pattern.specificity > best[1].specificity):
                    best = (entry, pattern)
        assert best is not None, "validation guarantees a catch-all entry"
        return best


def default_providers_path() -> Path:
    """The packaged copy (wheel installs carry proxy/providers.yaml) or, in a checkout, the repo root's."""
    package = Path(__file__).resolve().parents[2]  # proxy/, where the wheel puts its copy
    packaged = package / "providers.yaml"
    return packaged if packaged.is_file() else package.parent / "providers.yaml"


# --------------------------------------------------------------------------------------------------
# Loading helpers
# --------------------------------------------------------------------------------------------------


def _field_path(parts: Iterable[int | str]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _describe(source: str, err: Mapping[str, Any]) -> str:
    loc = tuple(err["loc"])
    message = str(err["msg"]).removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]
    if err["type"] == "extra_forbidden" and len(loc) >= 2 and loc[-2] == "levels":
        message = f"unknown level {loc[-1]!r} (levels are off, standard, deep)"
    if len(loc) >= 2 and loc[0] == "providers":
        where = f"entry {loc[1]!r}"
        rest = loc[2:]
    elif len(loc) >= 2 and loc[0] == "instructions":
        where = f"instruction {loc[1]!r}"
        rest = loc[2:]
    else:
        return f"{source}: field {_field_path(loc)!r}: {message}"
    return (
        f"{source}: {where}, field {_field_path(rest)!r}: {message}"
        if rest
        else f"{source}: {where}: {message}"
    )


def _compile(parsed: ProvidersFile, source: str) -> tuple[_CompiledEntry, ...]:
    instructions: Mapping[str, Mapping[str, str]] = MappingProxyType(
        {name: MappingProxyType({"en": ins.en, "zh": ins.zh}) for name, ins in parsed.instructions.items()}
    )
    texts = frozenset(text.strip() for ins in instructions.values() for text in ins.values())

    def fail(entry: str, where: str, message: str) -> ConfigError:
        return ConfigError(f"{source}: entry {entry!r}, field {where!r}: {message}")

    def replay_of(
        name: str, entry: EntrySpec, override: ModelOverrideSpec | None, where: str
    ) -> ReplayPolicy:
        """The entry's replay policy with the keys an override writes put over it (an override on
        a model family keeps the field its entry's server reads: vLLM's and SGLang's differ)."""
        if override is None or override.replay is None:
            return entry.replay
        written = override.replay.model_dump(include=override.replay.model_fields_set)
        inherited = entry.replay.model_dump()
        if written.get("mode") == "strip":
            inherited.pop("params")  # nothing is replayed: nothing to ask the upstream to keep
        try:
            return ReplayPolicy.model_validate({**inherited, **written})
        except ValidationError as exc:
            message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise fail(name, f"{where}replay", message) from None

    def build(name: str, entry: EntrySpec, override: ModelOverrideSpec | None, where: str) -> Dialect:
        levels = (override.levels if override and override.levels is not None else entry.levels).as_mapping()
        reasoning = override.reasoning if override and override.reasoning is not None else entry.reasoning
        for level, rule in levels.items():
            if rule.prompt is None:
                continue
            field_name = f"{where}levels.{level.value}.prompt"
            if rule.prompt not in instructions:
                known = ", ".join(sorted(instructions)) or "none defined"
                raise fail(name, field_name, f"unknown instruction {rule.prompt!r} (known: {known})")
            if not any(
                f"<{tag}>" in text for tag in reasoning.tags for text in instructions[rule.prompt].values()
            ):
                raise fail(
                    name,
                    field_name,
                    f"instruction {rule.prompt!r} asks for none of this entry's reasoning.tags "
                    f"{list(reasoning.tags)}: the tag parser could not split its reasoning from the answer",
                )
        if override is not None and override.not_applicable is not None:
            reasons = override.not_applicable
        elif override is not None and override.levels is not None:
            reasons = None  # the override's own levels replace the entry's, and with them its reasons
        else:
            reasons = entry.not_applicable
        for level_name in reasons or {}:
            if Level(level_name) in levels:
                raise fail(
                    name,
                    f"{where}not_applicable.{level_name}",
                    "the level has a rule here: keep one of the two",
                )
        return Dialect(
            name=name,
            docs=entry.docs,
            levels=levels,
            not_applicable=reasons_mapping(reasons),
            conflicts=override.conflicts if override and override.conflicts is not None else entry.conflicts,
            reasoning=reasoning,
            replay=replay_of(name, entry, override, where),
            instructions=instructions,
            instruction_texts=texts,
            model_override=override.match if override else None,
            responses=override.responses if override and override.responses is not None else entry.responses,
            messages=override.messages if override and override.messages is not None else entry.messages,
            chat_tools_with_reasoning=(
                override.chat_tools_with_reasoning
                if override and override.chat_tools_with_reasoning is not None
                else entry.chat_tools_with_reasoning
            ),
            reasoning_visible=(
                override.reasoning_visible
                if override and override.reasoning_visible is not None
                else entry.reasoning_visible
            ),
            responses_websocket=entry.responses_websocket,
        )

    compiled: list[_CompiledEntry] = []
    catch_alls: list[str] = []
    for name, entry in parsed.providers.items():
        if not ENTRY_NAME.match(name):
            raise ConfigError(f"{source}: entry {name!r}: names use letters, digits, '_', '.', '-' only")
        patterns = []
        for i, text in enumerate(entry.match):
            try:
                patterns.append(UrlPattern.parse(text))
            except ValueError as exc:
                raise fail(name, f"match[{i}]", str(exc)) from None
        if any(p.catch_all for p in patterns):
            if len(patterns) > 1:
                raise fail(name, "match", "the catch-all '*' stands alone in its entry")
            catch_alls.append(name)
        overrides = tuple(
            (
                tuple(re.compile(fnmatch.translate(glob.strip()), re.IGNORECASE) for glob in override.match),
                build(name, entry, override, f"models[{i}]."),
            )
            for i, override in enumerate(entry.models)
        )
        compiled.append(
            _CompiledEntry(
                name, entry.docs, tuple(patterns), build(name, entry, None, ""), overrides, entry.verified
            )
        )
    if len(catch_alls) != 1:
        found = f"found {len(catch_alls)}: {', '.join(catch_alls)}" if catch_alls else "found none"
        raise ConfigError(
            f"{source}: exactly one entry must be the catch-all (match: ['*']) "
            f"for unrecognized upstreams; {found}"
        )
    return tuple(compiled)
