"""What the consumers decide of a learned template's chunks (proxy.core.stream.template_rule): the
full path when one of them needs every chunk parsed, else who hears a text, and a run's texts told
joined, once per consumer."""

from __future__ import annotations

import orjson

from proxy.core.stream import chunk_template, harmony
from proxy.core.stream.capture import TurnCollector
from proxy.core.stream.chunk_template import ChunkTemplate
from proxy.core.stream.reasoning import ReasoningOptions
from proxy.core.stream.template_rule import FULL_PATH, tell_joined, template_rule


def learned(field: str, text: str) -> ChunkTemplate:
    chunk = {"id": "c1", "model": "m", "created": 1, "choices": [{"index": 0, "delta": {field: text}}]}
    template = chunk_template.learn(orjson.dumps(chunk), chunk)
    assert template is not None
    return template


def test_content_chunks_go_unparsed_and_the_capture_hears_their_text() -> None:
    capture = TurnCollector()
    rule = template_rule(learned("content", "Hello"), None, harmony.extractor(ReasoningOptions()), capture)
    assert rule is not FULL_PATH and not rule.unless_lt
    tell_joined(rule.tell, ["Hel", "lo"])
    assert [turn.content for turn in capture.turns()] == ["Hello"]


def test_tags_to_look_for_send_a_text_with_a_lt_the_ordinary_way() -> None:
    extractor = harmony.extractor(ReasoningOptions(tags=("think",)))
    rule = template_rule(learned("content", "Hello"), None, extractor, None)
    assert rule.unless_lt and rule.tell == ()


def test_an_extractor_that_must_parse_every_chunk_means_the_full_path() -> None:
    extractor = harmony.extractor(ReasoningOptions(tags=("think",), implicit_open=True))
    assert template_rule(learned("content", "Hello"), None, extractor, TurnCollector()) is FULL_PATH


def test_a_runs_texts_are_told_joined_once_to_each_consumer() -> None:
    heard: list[list[str]] = [[], []]
    tell_joined((heard[0].append, heard[1].append), ["a", "b", "c"])
    assert heard == [["abc"], ["abc"]]
    tell_joined((heard[0].append,), ["d"])
    tell_joined((heard[0].append,), [])
    assert heard[0] == ["abc", "d"]
