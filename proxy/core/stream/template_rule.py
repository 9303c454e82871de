"""What a stream's consumers decide of the chunks of its learned template (proxy.core.stream
.chunk_template): whether such a chunk may go out as it came, unparsed, and who hears its text.

Each consumer that reads parsed chunks says it for itself — the reasoning extractor
(`text_rule`), the trace builder (`text_rule`), the replay capture (it keeps an answer's
content) — and the pipeline takes a template's chunks from their texts alone only when all of
them agree. Their answer holds until a chunk takes the ordinary path, the only thing that changes
what they decide (StreamPipeline keeps it until then).

Pure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.chunk_template import ChunkTemplate
from proxy.core.stream.harmony import HarmonyExtractor
from proxy.core.stream.reasoning import StreamReasoningExtractor
from proxy.core.stream.trace import TraceBuilder


@dataclass(frozen=True, slots=True)
class TemplateRule:
    unless_lt: bool  # a text with `<` in it takes the ordinary path
    # Who hears each text. Each must only add the text to what it has (a run's texts are told
    # joined: tell_joined).
    tell: tuple[Callable[[str], None], ...]


FULL_PATH = TemplateRule(False, ())  # (compared by identity: every chunk takes the ordinary path)


def template_rule(
    template: ChunkTemplate,
    trace: TraceBuilder | None,
    extractor: StreamReasoningExtractor | HarmonyExtractor,
    capture: TurnCollector | None,
) -> TemplateRule:
    """What every consumer says of `template`'s chunks: FULL_PATH when any of them needs each
    chunk parsed."""
    field, index = template.field, template.index
    traced = None
    if trace is not None:
        passes, traced = trace.text_rule(index, field, template.reasoning)
        if not passes:
            return FULL_PATH
    # (Asked last: a rule the extractor gives stands for the chunks it covers.)
    extracting = extractor.text_rule(field, index, template.last)
    if extracting is None:
        return FULL_PATH
    tell = [extracting.tell] if extracting.tell is not None else []
    if traced is not None:
        tell.append(traced)
    if capture is not None and not template.reasoning:
        tell.append(functools.partial(capture.content, index))
    return TemplateRule(extracting.unless_lt, tuple(tell))


def tell_joined(tells: Sequence[Callable[[str], None]], texts: Sequence[str]) -> None:
    """A run's texts told to each consumer at once, joined: every consumer of a text rule adds the
    text to what it has (the token tally counts it, the replay capture appends it), so one call
    with the run's text says the same as one call per chunk — and a Python call per reasoning text
    was the largest cost the token accounting added to a burst stream (bench/README.md, "Where
    round three lost its figures")."""
    if not texts or not tells:
        return
    joined = texts[0] if len(texts) == 1 else "".join(texts)
    for tell in tells:
        tell(joined)
