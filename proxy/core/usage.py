"""Token accounting: one answer's token counts, read in one place for every reader. (Answers the
proxy relays as they came — native Responses and Messages, other model routes — are read from their
bytes by proxy.core.native_usage, into the same `TokenUsage`.)

Pure. Upstreams report usage in several shapes; `account` reads any of them into one
`TokenUsage`, which the relay puts on the per-request record (`AccessRecord.usage`), so metrics,
OpenTelemetry, the console and the access log show the same numbers, and later consumers (per-key
budgets) have one count to charge.

Cached input tokens (billed at a fraction of a miss by most providers) come from
`usage.prompt_tokens_details.cached_tokens` (OpenAI and most compatible servers),
`usage.prompt_cache_hit_tokens` (DeepSeek; `prompt_cache_miss_tokens` is the rest),
`usage.cached_tokens` (Moonshot's Kimi), `usage.input_tokens_details.cached_tokens` (Responses)
or `usage.cache_read_input_tokens` (Anthropic).

Reasoning tokens: the upstream's own count when it reports one
(`completion_tokens_details.reasoning_tokens`, or the Responses
`output_tokens_details.reasoning_tokens`; Anthropic reports no separate thinking count), labelled
`reported`. Many servers (vLLM, llama.cpp, Ollama, some compatibility layers) return reasoning
text but no count; then the count is estimated from the reasoning text the proxy relayed,
labelled `estimated`. A reported 0 next to reasoning text the proxy saw is a placeholder, not a
count (the model did reason), so it is estimated too. Nothing is estimated when no reasoning text
was seen: a model that reasons without showing it has an unknown count, not 0.

The estimator (`estimate_tokens`): DeepSeek's published rule of thumb, about 0.3 token per
English character and 0.6 per Chinese character
(https://api-docs.deepseek.com/quick_start/token_usage). Characters are told apart by their
UTF-8 length, which the tally gets in C without looking at each character: one byte (ASCII)
counts 0.3, three bytes (CJK, kana, hangul) 0.6, two bytes (Latin accents, Greek, Cyrillic)
0.45, four (emoji) 0.75. It is a rough count, for dashboards and budgets, not for billing: byte
pair tokenizers differ by model (OpenAI's own rule of thumb is 0.25 token per English character),
so expect the estimate within about a third of the model's count for prose, and further off for
code, numbers or unusual scripts.

The estimate is written into the usage the client gets (never into `completion_tokens` or
`total_tokens`, which stay the upstream's) as `completion_tokens_details.reasoning_tokens` with
`completion_tokens_details.reasoning_tokens_estimated: true` beside it (`fill_reasoning`); SDK
models that do not know the marker ignore it (openai-python keeps unknown keys as extras). The
same marker tells `account` that a count it reads is the proxy's estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple

ReasoningSource = Literal["reported", "estimated"]
REPORTED: Final = "reported"
ESTIMATED: Final = "estimated"
SOURCES: Final = (REPORTED, ESTIMATED)

# The key beside `reasoning_tokens` that says the proxy estimated it.
ESTIMATED_MARKER: Final = "reasoning_tokens_estimated"

# DeepSeek's ratios (see the module docstring): tokens per one-byte character, and per extra
# UTF-8 byte of a longer one (a three-byte character: 0.3 + 2 x 0.15 = 0.6).
TOKENS_PER_CHAR: Final = 0.3
TOKENS_PER_EXTRA_BYTE: Final = 0.15


class ReasoningTokens(NamedTuple):
    """One answer's reasoning-token count and where it came from."""

    value: int
    source: ReasoningSource


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """One answer's token counts (None: not known). `cached_input` is part of `input`; `reasoning`
    is part of `output` when reported (an estimate was never added to it)."""

    input: int | None = None
    output: int | None = None
    cached_input: int | None = None
    reasoning: ReasoningTokens | None = None


def count(value: Any) -> int | None:
    """A token count as an upstream sent it: a non-negative int (not a bool), else None."""
    return value if type(value) is int and value >= 0 else None


def estimate_tokens(chars: int, extra_bytes: int) -> int:
    """Tokens of a text of `chars` characters whose UTF-8 form is `extra_bytes` longer."""
    return round(chars * TOKENS_PER_CHAR + extra_bytes * TOKENS_PER_EXTRA_BYTE)


def text_tokens(text: str) -> int:
    """The estimate for one text (see the module docstring)."""
    tally = ReasoningTally()
    tally.add(text)
    return tally.estimate() or 0


class ReasoningTally:
    """What the estimate needs of one answer's reasoning text (every choice): its characters and
    extra UTF-8 bytes, counted as the text goes by, so nothing is kept but two numbers.

    Called as the stream's reasoning sink (`tally(index, text)`, the signature of
    proxy.core.stream.reasoning's sink), or given each text with `add`. When the replay capture
    already collects the reasoning text, the tally reads it from there at the end instead
    (`follow`): the stream then pays nothing more per chunk."""

    __slots__ = ("_chars", "_extra", "_follow")

    def __init__(self) -> None:
        self._chars = 0
        self._extra = 0
        self._follow: Callable[[], Iterable[str]] | None = None

    def __call__(self, index: int, text: str) -> None:
        self._chars += len(text)
        if not text.isascii():
            self._extra += len(text.encode("utf-8", "surrogatepass")) - len(text)

    def add(self, text: str) -> None:
        self(0, text)

    def follow(self, texts: Callable[[], Iterable[str]]) -> None:
        """Count the texts `texts()` gives when asked, not what the tally was told."""
        self._follow = texts

    def estimate(self) -> int | None:
        """The estimated reasoning tokens so far; None when no reasoning text was seen."""
        if self._follow is not None:
            # One join, then counted in C: a call per piece was ~2% of a burst stream's CPU.
            whole = "".join(self._follow())
            self._chars = len(whole)
            self._extra = 0 if whole.isascii() else len(whole.encode("utf-8", "surrogatepass")) - len(whole)
        if not self._chars:
            return None
        return max(1, estimate_tokens(self._chars, self._extra))


_NO_DETAILS: Final[Mapping[str, Any]] = {}  # (read only: never written)


def _details(usage: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    details = usage.get(key)
    # (`type is dict` first, and None before the ABC check: usage is parsed JSON, details often absent)
    if type(details) is dict or (details is not None and isinstance(details, Mapping)):
        return details
    return _NO_DETAILS


def cached_input(usage: Mapping[str, Any]) -> int | None:
    """Cached (cache-hit) input tokens, in whichever shape the upstream reports them; 0 when it
    reports a miss, None when it says nothing. Where two shapes appear (DeepSeek may send both),
    the first one above zero counts."""
    found: int | None = None
    for value in (
        _details(usage, "prompt_tokens_details").get("cached_tokens"),
        usage.get("prompt_cache_hit_tokens"),
        usage.get("cached_tokens"),
        _details(usage, "input_tokens_details").get("cached_tokens"),
        usage.get("cache_read_input_tokens"),
    ):
        if type(value) is int and value >= 0:  # (`count` written out: five fields of every answer)
            if value:
                return value
            found = value
    return found


def reported_reasoning(usage: Mapping[str, Any]) -> tuple[int | None, bool]:
    """The reasoning count in `usage` (chat or Responses shape), and whether the proxy's marker
    says it is an estimate it wrote itself."""
    for key in ("completion_tokens_details", "output_tokens_details"):
        details = _details(usage, key)
        n = details.get("reasoning_tokens")
        if type(n) is int and n >= 0:  # (`count`, written out)
            return n, details.get(ESTIMATED_MARKER) is True
    return None, False


def capped(usage: Mapping[str, Any], estimate: int | None) -> int | None:
    """The estimate, never above the answer's output tokens when the upstream counted them
    (reasoning is part of the output; a rough estimate must not claim more than all of it)."""
    if estimate is None:
        return None
    output = usage.get("completion_tokens")
    if not (type(output) is int and output >= 0):  # (`count`, written out: chat's field first)
        output = count(usage.get("output_tokens"))
    return estimate if output is None else min(estimate, output)


def reasoning_of(usage: Any, estimate: int | None) -> ReasoningTokens | None:
    """The one reasoning count of an answer: reported when the upstream's usage has it (and it is
    not a 0 beside reasoning text), else the estimate when reasoning text was seen, else None."""
    # (`type is dict` first: parsed usage is a dict, and the ABC check costs more)
    mapping = type(usage) is dict or isinstance(usage, Mapping)
    if mapping:
        estimate = capped(usage, estimate)
    reported, marked = reported_reasoning(usage) if mapping else (None, False)
    if reported is not None:
        if marked:
            return ReasoningTokens(reported, ESTIMATED)
        if reported > 0 or not estimate:
            return ReasoningTokens(reported, REPORTED)
    if estimate is not None:
        return ReasoningTokens(estimate, ESTIMATED)
    return None


def account(usage: Any, estimate: int | None = None) -> TokenUsage:
    """An answer's `usage` (as the upstream sent it, or as the proxy filled it in) and the
    estimate from its reasoning text, as one `TokenUsage`."""
    reasoning = reasoning_of(usage, estimate)
    if not (type(usage) is dict or isinstance(usage, Mapping)):
        return TokenUsage(reasoning=reasoning)
    # (`count` written out for chat's fields; the Responses and Messages names are read after them)
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    return TokenUsage(
        prompt if type(prompt) is int and prompt >= 0 else count(usage.get("input_tokens")),
        completion if type(completion) is int and completion >= 0 else count(usage.get("output_tokens")),
        cached_input(usage),
        reasoning,
    )


def fill_reasoning(usage: dict[str, Any], estimate: int | None) -> bool:
    """Writes the estimate into a chat `usage` the client will get, in place, when the upstream
    reported no reasoning count (or a 0 beside reasoning text): `completion_tokens_details` gets
    `reasoning_tokens` and the `reasoning_tokens_estimated: true` marker; nothing else changes.
    True when it wrote. Never with no estimate (no reasoning text seen), never a reported count."""
    estimate = capped(usage, estimate)
    if not estimate:
        return False
    details = usage.get("completion_tokens_details")
    if details is None:  # absent, or null (vLLM and others send no details)
        usage["completion_tokens_details"] = {"reasoning_tokens": estimate, ESTIMATED_MARKER: True}
        return True
    if not isinstance(details, dict):
        return False  # the upstream's own odd shape, left as it came
    reported = details.get("reasoning_tokens")
    if not (type(reported) is int and reported >= 0):  # (`count`, written out)
        reported = None
    if details.get(ESTIMATED_MARKER) is True:
        if reported == estimate:
            return False  # written already (a stream that repeats its usage)
    elif reported:
        return False  # the upstream's own count
    details["reasoning_tokens"] = estimate
    details[ESTIMATED_MARKER] = True
    return True


def fill_final_usage(chunk: dict[str, Any], tally: ReasoningTally) -> bool:
    """A stream chunk whose `usage` is not None: the estimate written into it (`fill_reasoning`)
    when the chunk ends the answer, i.e. has no choices (`include_usage`'s chunk) or a finish
    reason (usage on the last chunk); a stream that repeats usage on every chunk is filled at its
    end only. True when the chunk changed (it must be written anew)."""
    usage = chunk["usage"]
    if type(usage) is not dict:
        return False
    choices = chunk.get("choices")
    if (
        choices
        and type(choices) is list
        and not any(type(c) is dict and c.get("finish_reason") is not None for c in choices)
    ):
        return False  # usage on a chunk that is not the last: filled at the end
    return fill_reasoning(usage, tally.estimate())


def tally_completion(completion: dict[str, Any], tally: ReasoningTally) -> bool:
    """A non-stream answer: every choice's reasoning text (normalized, still visible) counted,
    and the estimate written into its `usage`. True when the answer changed."""
    choices = completion.get("choices")
    for choice in choices if type(choices) is list else ():
        message = choice.get("message") if type(choice) is dict else None
        if type(message) is dict:
            for key in ("reasoning_content", "reasoning"):
                text = message.get(key)
                if type(text) is str and text:
                    tally.add(text)
                    break
    usage = completion.get("usage")
    return type(usage) is dict and fill_reasoning(usage, tally.estimate())
