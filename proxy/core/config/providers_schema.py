"""providers.yaml's schema: what an operator may write in it, validated by pydantic (unknown keys
rejected everywhere).

Pure. proxy.core.config.providers loads the file, validates it against `ProvidersFile` and compiles
each `EntrySpec` (with its `ModelOverrideSpec`s) into the `Dialect`s a request is rewritten with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proxy.core.config.front_door_rules import BRIDGE, MESSAGES_BRIDGE, MessagesRule, ResponsesRule
from proxy.core.controls import Level
from proxy.core.replay.policy import ReplayPolicy

# --------------------------------------------------------------------------------------------------
# Schema (pydantic, unknown keys rejected everywhere)
# --------------------------------------------------------------------------------------------------

_TAG = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]*$")
_DOTTED = re.compile(r"^[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*$")
ENTRY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # it travels in the X-Thinking-Provider header
_URL = re.compile(r"^https?://\S+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReasoningFormat(_Strict):
    """Where an upstream puts reasoning besides the reasoning_content / reasoning fields.

    `tags` are inline tag names (`think` means `<think>…</think>` in content); `implicit_open` means the
    chat template opens the first tag itself, so the output may start inside it and only close it;
    `implicit_open_when` says the same only of requests whose body holds each of its dotted paths
    with that value (a template that prefills the opening marker only in thinking mode: MiniMax
    M3's `chat_template_kwargs.thinking_mode: enabled`). `always`: the model always reasons, so an
    answer with text and no reasoning at all means the reasoning went into the text (Kimi K3):
    it is counted (a trace warning and a metric), never guessed apart.
    """

    tags: tuple[str, ...] = ()
    implicit_open: bool = False
    implicit_open_when: dict[str, str | bool | int] = Field(default_factory=dict)
    always: bool = False

    @field_validator("implicit_open_when")
    @classmethod
    def _check_when(cls, when: dict[str, str | bool | int]) -> dict[str, str | bool | int]:
        _check_paths(tuple(when))
        return when

    def opens_implicitly(self, body: Mapping[str, Any] | None) -> bool:
        """Whether an answer to `body` (the request as sent upstream) may start inside a tag."""
        if self.implicit_open:
            return True
        if not self.implicit_open_when or body is None:
            return False
        return all(_at_path(body, path) == value for path, value in self.implicit_open_when.items())

    @field_validator("tags")
    @classmethod
    def _check_tags(cls, tags: tuple[str, ...]) -> tuple[str, ...]:
        for tag in tags:
            if not _TAG.match(tag):
                raise ValueError(f"{tag!r} is not a tag name (write think, not <think>)")
        return tags


class LevelRule(_Strict):
    """How one level is applied: `params` deep-merged into the body, or `prompt`, the name of an
    instruction injected as a system message. Exactly one of the two; `params: {}` sends nothing."""

    params: dict[str, Any] | None = None
    prompt: str | None = None

    @model_validator(mode="after")
    def _exactly_one_method(self) -> LevelRule:
        if self.params is not None and self.prompt is not None:
            raise ValueError("a level gives either params or prompt, not both")
        if self.params is None and self.prompt is None:
            raise ValueError("a level needs params (use {} to send nothing) or prompt")
        return self


_LEVEL_NAMES = {level.value for level in Level}


def _check_not_applicable(reasons: dict[str, str] | None, levels: _Levels | None) -> None:
    """A level named under `not_applicable` has a reason and no rule."""
    for name, reason in (reasons or {}).items():
        if name not in _LEVEL_NAMES:
            raise ValueError(f"not_applicable: unknown level {name!r} (levels are off, standard, deep)")
        if not reason.strip():
            raise ValueError(f"not_applicable.{name}: give the reason (it is shown to the client)")
        if not reason.isascii() or not reason.isprintable():
            raise ValueError(f"not_applicable.{name}: one line of ASCII text (it travels in a header)")
        if levels is not None and getattr(levels, name) is not None:
            raise ValueError(f"level {name!r} has a rule and is also not_applicable: keep one")


class _Levels(_Strict):
    off: LevelRule | None = None
    standard: LevelRule | None = None
    deep: LevelRule | None = None

    def as_mapping(self) -> Mapping[Level, LevelRule]:
        rules = {Level.OFF: self.off, Level.STANDARD: self.standard, Level.DEEP: self.deep}
        return MappingProxyType({level: rule for level, rule in rules.items() if rule is not None})


def reasons_mapping(reasons: dict[str, str] | None) -> Mapping[Level, str]:
    """`not_applicable` as {Level: reason}."""
    return MappingProxyType({Level(name): reason.strip() for name, reason in (reasons or {}).items()})


def _at_path(body: Mapping[str, Any], path: str) -> Any:
    node: Any = body
    for key in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _check_paths(paths: tuple[str, ...]) -> tuple[str, ...]:
    for path in paths:
        if not _DOTTED.match(path):
            raise ValueError(f"{path!r} is not a dotted path such as chat_template_kwargs.enable_thinking")
    return paths


class ModelOverrideSpec(_Strict):
    match: tuple[str, ...] = Field(min_length=1)
    levels: _Levels | None = None
    # Levels the model cannot take, with the reason the client is told (X-Thinking-Level-Reason).
    not_applicable: dict[str, str] | None = None
    conflicts: tuple[str, ...] | None = None
    reasoning: ReasoningFormat | None = None
    replay: ReplayPolicy | None = None
    responses: ResponsesRule | None = None
    messages: MessagesRule | None = None
    chat_tools_with_reasoning: Literal["responses", "chat"] | None = None
    reasoning_visible: Literal["responses", "chat"] | None = None

    @field_validator("match")
    @classmethod
    def _check_globs(cls, globs: tuple[str, ...]) -> tuple[str, ...]:
        for glob in globs:
            if not glob.strip():
                raise ValueError("empty model glob")
        return globs

    @field_validator("conflicts")
    @classmethod
    def _check_conflicts(cls, paths: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if paths is None else _check_paths(paths)

    @model_validator(mode="after")
    def _check_reasons(self) -> ModelOverrideSpec:
        _check_not_applicable(self.not_applicable, self.levels)
        return self


class EntrySpec(_Strict):
    docs: str
    # The day `docs` was last re-read against this entry (or the page's own date when older). The
    # shipped table carries one on every entry; an operator's own file may leave it out.
    verified: date | None = None
    match: tuple[str, ...] = Field(min_length=1)
    levels: _Levels
    not_applicable: dict[str, str] | None = None  # (see ModelOverrideSpec)
    conflicts: tuple[str, ...]
    reasoning: ReasoningFormat
    replay: ReplayPolicy
    responses: ResponsesRule = BRIDGE
    messages: MessagesRule = MESSAGES_BRIDGE
    # A chat request with function tools and a level: over the upstream's Responses API, when its
    # chat completions refuses that combination (OpenAI GPT-5.4+); `chat` forwards it as it is.
    chat_tools_with_reasoning: Literal["responses", "chat"] = "chat"
    # Every chat request with a level other than off over the Responses API, so that chat clients
    # see the reasoning summaries the upstream's chat completions never returns (OpenAI).
    reasoning_visible: Literal["responses", "chat"] = "chat"
    # The source that says this upstream serves the Responses API's WebSocket mode (`GET` its
    # `/responses` upgraded, `response.create` messages): a Responses WebSocket's native turns are
    # then relayed over one upstream socket instead of a POST each (docs/responses.md). The host's
    # capability, so an entry key (a model override's `responses` rule still decides native).
    responses_websocket: str | None = None
    models: tuple[ModelOverrideSpec, ...] = ()

    @field_validator("docs")
    @classmethod
    def _check_docs(cls, docs: str) -> str:
        if not _URL.match(docs):
            raise ValueError(f"{docs!r} is not an http(s) URL")
        return docs

    @field_validator("responses_websocket")
    @classmethod
    def _check_websocket_source(cls, docs: str | None) -> str | None:
        if docs is not None and not _URL.match(docs):
            raise ValueError(
                f"{docs!r} is not an http(s) URL (responses_websocket names the page that says the "
                "upstream serves the Responses WebSocket mode)"
            )
        return docs

    @field_validator("verified", mode="before")
    @classmethod
    def _check_verified(cls, value: object) -> object:
        if value is not None and not isinstance(value, (date, str)):  # a number would read as a timestamp
            raise ValueError(f"{value!r} is not a date (write YYYY-MM-DD)")
        return value

    @field_validator("conflicts")
    @classmethod
    def _check_conflicts(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        return _check_paths(paths)

    @model_validator(mode="after")
    def _check_reasons(self) -> EntrySpec:
        _check_not_applicable(self.not_applicable, self.levels)
        return self


class _Instruction(_Strict):
    en: str = Field(min_length=1)
    zh: str = Field(min_length=1)


class ProvidersFile(_Strict):
    instructions: dict[str, _Instruction] = Field(default_factory=dict)
    providers: dict[str, EntrySpec] = Field(min_length=1)
