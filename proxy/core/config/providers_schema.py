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
    chat template opens the first tag itself, so the output may start inside it and only close it.
    """

    tags: tuple[str, ...] = ()
    implicit_open: bool = False

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


class _Levels(_Strict):
    off: LevelRule | None = None
    standard: LevelRule | None = None
    deep: LevelRule | None = None

    def as_mapping(self) -> Mapping[Level, LevelRule]:
        rules = {Level.OFF: self.off, Level.STANDARD: self.standard, Level.DEEP: self.deep}
        return MappingProxyType({level: rule for level, rule in rules.items() if rule is not None})


def _check_paths(paths: tuple[str, ...]) -> tuple[str, ...]:
    for path in paths:
        if not _DOTTED.match(path):
            raise ValueError(f"{path!r} is not a dotted path such as chat_template_kwargs.enable_thinking")
    return paths


class ModelOverrideSpec(_Strict):
    match: tuple[str, ...] = Field(min_length=1)
    levels: _Levels | None = None
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


class EntrySpec(_Strict):
    docs: str
    # The day `docs` was last re-read against this entry (or the page's own date when older). The
    # shipped table carries one on every entry; an operator's own file may leave it out.
    verified: date | None = None
    match: tuple[str, ...] = Field(min_length=1)
    levels: _Levels
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


class _Instruction(_Strict):
    en: str = Field(min_length=1)
    zh: str = Field(min_length=1)


class ProvidersFile(_Strict):
    instructions: dict[str, _Instruction] = Field(default_factory=dict)
    providers: dict[str, EntrySpec] = Field(min_length=1)
