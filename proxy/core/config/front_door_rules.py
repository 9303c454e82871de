"""providers.yaml: how the front doors other than chat completions reach an entry's upstream.

`responses:` (`POST /v1/responses`, docs/responses.md) and `messages:` (`POST /v1/messages`,
docs/messages.md), per entry and per model override. Each is `bridge` (the default: the request
is translated to chat completions and the chat path runs) or `native` (forwarded to the upstream's
own API of that protocol, the level written in that protocol's own fields), with `docs`: the
source that says the upstream serves it.

Pure: the schema (pydantic, unknown keys rejected) and the small lookups the doors need.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proxy.core.controls import Level

_URL = re.compile(r"^https?://\S+$")
LevelName = Literal["off", "standard", "deep"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_source(mode: str, docs: str | None) -> None:
    if mode == "native" and (docs is None or not _URL.match(docs)):
        raise ValueError("mode native needs docs: the http(s) URL that says the upstream serves it")


class ResponsesRule(_Strict):
    """How `POST /v1/responses` reaches this upstream (docs/responses.md). `bridge` (the default):
    translated to chat completions. `native`: forwarded to the upstream's own `/responses`, the
    level sent as `reasoning.effort` (`effort`: the value per level; a level left out sends
    nothing); `docs` is the source that says the upstream serves the Responses API."""

    mode: Literal["native", "bridge"] = "bridge"
    docs: str | None = None
    effort: dict[LevelName, str] = Field(default_factory=dict)

    def effort_for(self, level: Level) -> str | None:
        """The `reasoning.effort` this entry sends for `level` over the Responses API (None: none)."""
        for name, effort in self.effort.items():
            if name == level.value:
                return effort
        return None

    @model_validator(mode="after")
    def _native_needs_a_source(self) -> ResponsesRule:
        _check_source(self.mode, self.docs)
        return self


BRIDGE = ResponsesRule()

# The request fields a Messages level writes: the client's own are removed before the level's are
# merged in (Anthropic's `thinking`, and the effort knob of adaptive thinking).
MESSAGES_LEVEL_FIELDS = ("thinking", "output_config.effort")


class MessagesRule(_Strict):
    """How `POST /v1/messages` reaches this upstream (docs/messages.md). `bridge` (the default):
    translated to chat completions. `native`: forwarded to the upstream's own Messages API at
    `base_url` + `/v1/messages` (`base_url`: its Anthropic-compatible base when that differs from
    the chat base, e.g. DeepSeek's `https://api.deepseek.com/anthropic`; without it, the chat base
    without a trailing `/v1`), the level sent as the body fields `levels` gives for it (Anthropic's
    own `thinking`, and `output_config.effort` where the model takes it; a level left out sends
    none). `docs` is the source that says the upstream serves the Messages API and reads them.

    `effort_needs_thinking`: the upstream refuses an effort beside `thinking: {type: disabled}`
    (DeepSeek's 400, which Claude Code's sub-agents meet): a request whose thinking is off goes
    without `output_config.effort` (the level it means: off, one knob).
    `always_thinks`: the model's thinking cannot be turned off (Claude Opus 5.5, Fable 5.1): an
    off asked is not applied (the thinking field left out, the reason said in a response header),
    and forced tool use (`tool_choice` any or a named tool) is refused before the upstream."""

    mode: Literal["native", "bridge"] = "bridge"
    docs: str | None = None
    base_url: str | None = None
    levels: dict[LevelName, dict[str, Any]] = Field(default_factory=dict)
    effort_needs_thinking: bool = False
    always_thinks: bool = False

    def fields_for(self, level: Level) -> dict[str, Any] | None:
        """The body fields this entry sends for `level` (None: the entry offers no such level)."""
        for name, fields in self.levels.items():
            if name == level.value:
                return fields
        return None

    def url(self, chat_base_url: str) -> str:
        """The upstream's Messages endpoint, for a request whose chat base URL is `chat_base_url`."""
        base = (self.base_url or chat_base_url).rstrip("/")
        if self.base_url is None:
            base = base.removesuffix("/v1")
        return f"{base}/v1/messages"

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, base_url: str | None) -> str | None:
        if base_url is not None and not _URL.match(base_url):
            raise ValueError(f"{base_url!r} is not an http(s) URL")
        return base_url

    @field_validator("levels")
    @classmethod
    def _check_levels(cls, levels: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, fields in levels.items():
            extra = sorted(set(fields) - {"thinking", "output_config"})
            config = fields.get("output_config")
            if extra or (config is not None and (not isinstance(config, dict) or set(config) != {"effort"})):
                raise ValueError(
                    f"level {name!r} writes only thinking and output_config.effort (found {extra or config})"
                )
        return levels

    @model_validator(mode="after")
    def _native_needs_a_source(self) -> MessagesRule:
        _check_source(self.mode, self.docs)
        return self


MESSAGES_BRIDGE = MessagesRule()
