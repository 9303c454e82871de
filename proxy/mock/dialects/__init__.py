"""How each provider shapes a chat-completion answer: its knobs, stream chunks, messages and errors.

Pure: a request body and a `Script` (what the model says) in, JSON-ready dicts and SSE frames out.
Each `Dialect` reproduces one provider's structure as it is seen on the wire (key order, null
fields, where reasoning goes, where usage goes, id style), because the proxy must cope with exactly
those shapes. Facts come from the providers' public documentation and examples (the sources
providers.yaml cites); where those do not pin a detail down, the shape is kept minimal.

A dialect honours only the thinking knobs its provider honours, so a wrong rewrite shows up as
"no effect" in the mock just as it would upstream.

Layout: `base` holds the OpenAI-compatible shape and the values a dialect works on, `knobs` the
request-knob readers several providers share, `shapes` their shared wire habits, and one module
per provider; this module is the registry the mock app looks dialects up in.
"""

from __future__ import annotations

from collections.abc import Mapping

from proxy.mock.dialects.base import (
    DEEP_BUDGET_TOKENS,
    DONE_FRAME,
    JSON,
    MODELS_CREATED,
    Counts,
    Dialect,
    Rejection,
    ResponsesTraits,
    Turn,
    count_tokens,
    frame,
    split_arguments,
    split_text,
    tokens,
)
from proxy.mock.dialects.deepseek import DeepSeek
from proxy.mock.dialects.gemini import Gemini
from proxy.mock.dialects.groq import Groq
from proxy.mock.dialects.kimi import Kimi
from proxy.mock.dialects.local import Local
from proxy.mock.dialects.minimax import MiniMax, MiniMaxSplit
from proxy.mock.dialects.mistral import Mistral
from proxy.mock.dialects.ollama import Ollama
from proxy.mock.dialects.openai import OpenAI
from proxy.mock.dialects.openrouter import OpenRouter
from proxy.mock.dialects.prompted import Prompted
from proxy.mock.dialects.qwen import Qwen
from proxy.mock.dialects.vllm import VLLM, SGLang
from proxy.mock.scenarios import Depth

__all__ = [
    "DEEP_BUDGET_TOKENS",
    "DIALECTS",
    "DONE_FRAME",
    "JSON",
    "MODELS_CREATED",
    "REGISTRY",
    "VLLM",
    "Counts",
    "DeepSeek",
    "Depth",
    "Dialect",
    "Gemini",
    "Groq",
    "Kimi",
    "Local",
    "MiniMax",
    "MiniMaxSplit",
    "Mistral",
    "Ollama",
    "OpenAI",
    "OpenRouter",
    "Prompted",
    "Qwen",
    "Rejection",
    "ResponsesTraits",
    "SGLang",
    "Turn",
    "count_tokens",
    "dialect_named",
    "frame",
    "models_payload",
    "split_arguments",
    "split_text",
    "tokens",
]

_ALL: tuple[Dialect, ...] = (
    DeepSeek(),
    Qwen(),
    Kimi(),
    MiniMax(),
    MiniMaxSplit(),
    Ollama(),
    OpenRouter(),
    Mistral(),
    Local(),
    Prompted(),
    OpenAI(),
    VLLM(),
    SGLang(),
    Gemini(),
    Groq(),
)
REGISTRY: Mapping[str, Dialect] = {d.name: d for d in _ALL}
DIALECTS: tuple[str, ...] = tuple(REGISTRY)


def dialect_named(name: str) -> Dialect | None:
    return REGISTRY.get(name.lower())


def models_payload(dialect: Dialect) -> JSON:
    models = dialect.models or (dialect.default_model,)
    return {
        "object": "list",
        "data": [
            {"id": m, "object": "model", "created": MODELS_CREATED, "owned_by": dialect.owned_by}
            for m in models
        ],
    }
