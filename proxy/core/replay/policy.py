"""providers.yaml's `replay`: what happens to reasoning in the assistant messages of a history.

Pure (a pydantic model, validated when the providers file loads). Two questions, one key each:

- `mode` — which earlier assistant turns carry their reasoning back: `strip` (none), `tool_calls`
  (those that called tools: DeepSeek, Kimi), `every_turn` (all of them: MiniMax, OpenRouter,
  Ollama, and the preserved / interleaved thinking of Kimi K2.7, GLM-4.7+ and MiniMax M2).
  `keep`, the older name of `every_turn`, is read as it, so an operator's copy of the file keeps
  working; there is one meaning and one value inside.
- `field` — the field the upstream reads reasoning from in its history: `reasoning_content`,
  `reasoning` (vLLM since it dropped `reasoning_content`, Ollama), `reasoning_details`
  (OpenRouter), `inline_think` (a `<think>` block in content: MiniMax), or `none` (the upstream
  reads none and refuses one: Groq answers 400 "property 'reasoning_content' is unsupported").
  It is a fact about the upstream, so it holds whatever the level: reasoning a client sends in
  another field is moved into this one, or removed under `none`.

Two more keys, for providers that keep replayed reasoning only when asked or refuse a history
without their signatures:

- `params` — knobs merged into the body when a level is applied (not `off`) and the history holds
  an earlier assistant turn: the request that asks for the reasoning to be kept (Qwen3.6's
  `chat_template_kwargs.preserve_thinking: true`, GLM's `thinking.clear_thinking: false`, Kimi
  K2.6's `thinking.keep: "all"`). Without a level the body is the client's, untouched.
- `missing_signature` — what a tool call that must carry a thought signature gets when it has
  none (a history another provider produced, or a client that dropped it and the store has none):
  `forward` (as it came) or `skip_validator` (Gemini's documented
  `skip_thought_signature_validator`, on the first tool call of each step of the current turn).

DESIGN.md's `replay_field` is `field` here, and its `replay: every_turn` is `mode: every_turn`:
no second key says the same thing.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# The thought signature Gemini documents for tool calls it did not produce (ai.google.dev/gemini-api/
# docs/thought-signatures): the validator skips them instead of answering 400.
SKIP_SIGNATURE = "skip_thought_signature_validator"

ReplayMode = Literal["strip", "tool_calls", "every_turn"]
ReplayField = Literal["reasoning_content", "reasoning", "reasoning_details", "inline_think", "none"]
TEXT_FIELDS = ("reasoning_content", "reasoning")


class ReplayPolicy(BaseModel):
    """What happens to reasoning in the assistant messages of the history sent upstream.

    strip: reasoning fields and inline reasoning blocks removed (when a level is applied).
    every_turn: reasoning put into `field` on every assistant message. tool_calls: as every_turn on
    assistant messages that carry tool_calls, strip on the others.

    `missing` decides what the replay store does when a message that must carry reasoning comes
    without it and nothing is remembered for it: `forward` sends the message as it came (the
    provider answers what it answers); `placeholder` sends an empty string in `field`, only for
    providers that document accepting one (a text field, never signed details).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: ReplayMode
    field: ReplayField = "reasoning_content"
    missing: Literal["placeholder", "forward"] = "forward"
    params: dict[str, Any] = Field(default_factory=dict)
    missing_signature: Literal["forward", "skip_validator"] = "forward"

    @field_validator("mode", mode="before")
    @classmethod
    def _older_name(cls, mode: Any) -> Any:
        return "every_turn" if mode == "keep" else mode

    @model_validator(mode="after")
    def _consistent(self) -> ReplayPolicy:
        if self.field == "none" and self.mode != "strip":
            raise ValueError(f"field none sends no reasoning back: mode {self.mode} needs a field to write")
        if self.missing == "placeholder" and self.field not in TEXT_FIELDS:
            raise ValueError("missing: placeholder needs field reasoning_content or reasoning")
        if self.params and self.mode == "strip":
            raise ValueError("params ask the upstream to keep replayed reasoning: mode strip replays none")
        return self

    @property
    def wants_reasoning(self) -> bool:
        """Some assistant turns carry their reasoning back (the store looks them up)."""
        return self.mode != "strip"

    @property
    def every_turn(self) -> bool:
        """Every assistant turn carries it, not only tool-call turns (plain answers are captured)."""
        return self.mode == "every_turn"
