"""A self-hosted vLLM-style server: the model family's chat template decides what thinking does.

The server's only thinking knobs are the chat template's variables (`chat_template_kwargs`) and, for
gpt-oss, the harmony `reasoning_effort`. Each family honours only its own switch, as its template
does (a wrong switch has no effect, exactly as upstream):

- Qwen3 hybrid and GLM-4.5+: `chat_template_kwargs.enable_thinking`, on unless false;
- DeepSeek V3.1+: `chat_template_kwargs.thinking`, off unless true;
- gpt-oss: `reasoning_effort` low | medium | high (anything else is a 400, as vLLM validates it);
- DeepSeek-R1 distills, QwQ, Qwen3 thinking-2507: always think, and their template opens `<think>` in
  the prompt. This server runs them without a reasoning parser, so their reasoning arrives in
  `content` with only the closing tag (the implicit-open shape).
- MiniMax M3: `chat_template_kwargs.thinking_mode`: thinks only when it is "enabled", and then the
  template prefills the opening `<mm:think>`, so (without a reasoning parser, as here) the reasoning
  arrives in `content` followed by only `</mm:think>`, cut as a tokenizer cuts it (vLLM's
  minimax_m3_reasoning_parser reads the same kwarg the same way).
- Qwen3.6: as Qwen3, and its template renders the reasoning of turns before the last user message
  only with `chat_template_kwargs.preserve_thinking: true` (default false: dropped).

The other families' reasoning arrives in `delta.reasoning` / `message.reasoning`, as vLLM sends it
when started with `--reasoning-parser` (the field was renamed from `reasoning_content` in 2026).

On the way in, vLLM reads an earlier assistant turn's reasoning from `reasoning` only and hands it
to the chat template; a `reasoning_content` is silently dropped
(github.com/vllm-project/vllm/issues/38488: `_parse_chat_message_content` reads
`message.get("reasoning")`). The template renders what it got into the prompt, so this server
counts the `reasoning` of history messages in `usage.prompt_tokens`, and nothing of a
`reasoning_content`: the reasoning a client sent in the wrong field is lost, as upstream, and the
prompt count shows it (github.com/BerriAI/litellm/pull/41380 saw 43% of a prompt vanish this way).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

import orjson

from proxy.mock.dialects.base import (
    JSON,
    Counts,
    Dialect,
    Rejection,
    ResponsesTraits,
    Turn,
    tokens,
    tool_call_items,
)
from proxy.mock.dialects.knobs import lower
from proxy.mock.dialects.shapes import inline_think_pieces, inline_think_text
from proxy.mock.scenarios import Depth, Script

GPT_OSS_EFFORTS = ("low", "medium", "high")


def family(model: object) -> str:
    """The model family whose chat template the server applies, from the served model name."""
    name = str(model).lower()
    if "deepseek-r1" in name or ("qwq" in name and "preview" not in name):
        return "implicit"
    if "qwen3" in name and "thinking" in name:
        return "implicit"
    if "gpt-oss" in name:
        return "gpt-oss"
    if "minimax-m3" in name:
        return "minimax-m3"
    if "deepseek-v3.1" in name or "deepseek-v3.2" in name:
        return "deepseek-v3"
    if "qwen3" in name or "glm-4.5" in name or "glm-4.6" in name or "glm-4.7" in name:
        return "enable_thinking"
    return "other"


def history_reasoning(body: Mapping[str, Any], field: str = "reasoning") -> list[str]:
    """The reasoning of earlier assistant turns as the server reads it (vLLM: `reasoning` only;
    SGLang: `reasoning_content` only) and the chat template renders it (Qwen3.6: before the last
    user message only with preserve_thinking)."""
    messages = body.get("messages")
    items = messages if isinstance(messages, list) else []
    first = 0
    if "qwen3.6" in str(body.get("model")).lower() and _kwargs(body).get("preserve_thinking") is not True:
        users = [i for i, m in enumerate(items) if isinstance(m, dict) and m.get("role") == "user"]
        first = users[-1] if users else 0
    found = []
    for message in items[first:]:
        if isinstance(message, dict) and message.get("role") == "assistant":
            reasoning = message.get(field)
            if isinstance(reasoning, str) and reasoning:
                found.append(reasoning)
    return found


def _kwargs(body: Mapping[str, Any]) -> Mapping[str, Any]:
    kwargs = body.get("chat_template_kwargs")
    return kwargs if isinstance(kwargs, dict) else {}


class VLLM(Dialect):
    """vLLM's OpenAI-compatible server, one model family per request's `model`."""

    name = "vllm"
    default_model = "Qwen/Qwen3-8B"
    models = (
        "Qwen/Qwen3-8B",
        "deepseek-ai/DeepSeek-V3.1",
        "zai-org/GLM-4.5-Air",
        "openai/gpt-oss-20b",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
        "Qwen/QwQ-32B",
        "Qwen/Qwen3.6-35B-A3B",
        "MiniMaxAI/MiniMax-M3",
    )
    owned_by = "vllm"
    # vLLM serves /v1/responses too
    responses_api: ClassVar[ResponsesTraits | None] = ResponsesTraits(reasoning_text=True)
    sample_400 = "This model's maximum context length is 40960 tokens."
    close_tag = ("\n</", "think>\n\n")  # cut inside the tag, as a tokenizer does
    m3_close_tag = ("</mm", ":think>\n")

    def depth(self, body: Mapping[str, Any]) -> Depth:
        kind = family(body.get("model"))
        kwargs = _kwargs(body)
        if kind == "enable_thinking":
            return Depth.NONE if kwargs.get("enable_thinking") is False else Depth.STANDARD
        if kind == "deepseek-v3":
            return Depth.STANDARD if kwargs.get("thinking") is True else Depth.NONE
        if kind == "gpt-oss":
            return Depth.DEEP if lower(body.get("reasoning_effort")) == "high" else Depth.STANDARD
        if kind == "minimax-m3":
            return Depth.STANDARD if kwargs.get("thinking_mode") == "enabled" else Depth.NONE
        return Depth.STANDARD  # always-thinking families, and templates without a switch

    def check(self, body: Mapping[str, Any], depth: Depth) -> Rejection | None:
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            return Rejection(400, self.error_body("chat_template_kwargs: Input should be a valid dictionary"))
        effort = body.get("reasoning_effort")
        if effort is not None and lower(effort) not in GPT_OSS_EFFORTS:
            message = f"reasoning_effort: Input should be 'low', 'medium' or 'high' (got {effort!r})"
            return Rejection(400, self.error_body(message, param="reasoning_effort"))
        return None

    def error_body(self, message: str, *, param: str | None = None, code: str | None = None) -> bytes:
        return orjson.dumps(
            {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}
        )

    def frames(self, script: Script, turn: Turn, counts: Counts) -> list[bytes]:
        return super().frames(script, turn, self._rendered(turn, counts))

    def completion(self, script: Script, turn: Turn, counts: Counts) -> JSON:
        return super().completion(script, turn, self._rendered(turn, counts))

    reasoning_field = "reasoning"  # the one its input reads and its output writes

    def _rendered(self, turn: Turn, counts: Counts) -> Counts:
        """The prompt count with the history's reasoning the template rendered (see the docstring)."""
        extra = sum(tokens(text) for text in history_reasoning(turn.body, self.reasoning_field))
        return replace(counts, prompt=counts.prompt + extra) if extra else counts

    def _implicit(self, turn: Turn) -> bool:
        return family(turn.model) == "implicit"

    def _inline_close(self, turn: Turn) -> tuple[str, ...] | None:
        """The closing tag of a family whose reasoning arrives inline after a prefilled opening."""
        if self._implicit(turn):
            return self.close_tag
        if family(turn.model) == "minimax-m3":
            return self.m3_close_tag
        return None

    def reasoning_delta(self, turn: Turn, text: str, last: bool) -> JSON | None:
        return None if self._inline_close(turn) is not None else {self.reasoning_field: text}

    def content_pieces(self, script: Script, turn: Turn) -> list[str]:
        close = self._inline_close(turn)
        if close is not None:
            return inline_think_pieces(script if turn.thinking else _unthought(script), turn, (), close)
        return super().content_pieces(script, turn)

    def message(self, script: Script, turn: Turn) -> JSON:
        close = self._inline_close(turn)
        if close is not None:
            said = script if turn.thinking else _unthought(script)
            message: JSON = {"role": "assistant", "content": inline_think_text(said, (), close)}
        else:
            message = {"role": "assistant", "content": script.content or None}
            if turn.thinking and script.reasoning:
                message[self.reasoning_field] = script.reasoning
        if script.tool_calls:
            message["tool_calls"] = tool_call_items(script.tool_calls)
        return message


class SGLang(VLLM):
    """SGLang's OpenAI-compatible server: vLLM's families and switches (the same chat templates),
    with the other reasoning field both ways: it answers `reasoning_content`
    (docs.sglang.io/docs/advanced_features/separate_reasoning), and its assistant message model
    declares `reasoning_content` and no `reasoning` (sgl-project/sglang
    python/sglang/srt/entrypoints/openai/protocol.py, ChatCompletionMessageGenericParam), ignoring
    what it does not declare: a `reasoning` sent back is lost, and the prompt count shows it."""

    name = "sglang"
    owned_by = "sglang"
    reasoning_field = "reasoning_content"
    responses_api = None  # (its /v1/responses is not simulated)


def _unthought(script: Script) -> Script:
    """The script of a model that did not think this time: its answer only."""
    return replace(script, reasoning="")
