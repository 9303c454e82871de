"""Tool display titles (THINKPROXY_TOOL_TITLES_FILE): validated at start-up, carried by the tool
events of the trace in the trace's language."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.core.config.tool_titles import load_tool_titles, parse_tool_titles
from proxy.core.controls import TraceMode
from proxy.core.errors import ConfigError
from proxy.core.stream.trace import TraceBuilder

TITLES = {"kb_search": {"zh": "调用知识库", "en": "Searching the knowledge base"}}
CALL = {
    "choices": [
        {
            "index": 0,
            "delta": {
                "tool_calls": [
                    {"index": 0, "id": "c1", "function": {"name": "kb_search", "arguments": '{"q": "x"}'}}
                ]
            },
        }
    ]
}


def test_loads_yaml_and_json_and_fills_the_missing_language(tmp_path: Path) -> None:
    yaml_file = tmp_path / "titles.yaml"
    yaml_file.write_text(
        "kb_search:\n  zh: 调用知识库\n  en: Searching the knowledge base\nweb: Web search\n"
    )
    json_file = tmp_path / "titles.json"
    json_file.write_text('{"kb_search": {"zh": "调用知识库"}}')
    titles = load_tool_titles(yaml_file)
    assert dict(titles["kb_search"]) == TITLES["kb_search"]
    assert dict(titles["web"]) == {"en": "Web search", "zh": "Web search"}
    assert dict(load_tool_titles(json_file)["kb_search"]) == {"en": "调用知识库", "zh": "调用知识库"}
    assert load_tool_titles(None) == {}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "must be a mapping"),
        ({"kb": {"fr": "x"}}, "unknown key"),
        ({"kb": {"zh": ""}}, "non-empty"),
        ({"kb": {}}, "needs zh and/or en"),
        ({"kb": 3}, "must be a mapping"),
        ({"kb": {"en": "x" * 500}}, "longer than"),
    ],
)
def test_bad_entries_name_the_entry(data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_tool_titles(data, "titles.yaml")


def test_unreadable_or_invalid_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_tool_titles(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("kb: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_tool_titles(bad)


@pytest.mark.parametrize(("zh", "title"), [(False, "Searching the knowledge base"), (True, "调用知识库")])
def test_tool_events_carry_the_title_in_the_trace_language(zh: bool, title: str) -> None:
    builder = TraceBuilder(
        mode=TraceMode.DETAILED, zh=zh, level="deep", provider="p", titles=parse_tool_titles(TITLES)
    )
    events = builder.begin(
        {
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c0", "function": {"name": "kb_search", "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "c0", "content": "[]"},
            ]
        },
        0,
    )
    events += builder.on_chunk(CALL, False, 5) + builder.finish(9)
    tools = [e for e in events if e["type"] in ("tool_call.start", "tool_call.end", "tool_result")]
    assert [e["type"] for e in tools] == ["tool_result", "tool_call.start", "tool_call.end"]
    assert all(e["title"] == title for e in tools)
    assert tools[1]["message"] == title and tools[1]["name"] == "kb_search"


def test_untitled_tools_are_unchanged() -> None:
    builder = TraceBuilder(mode=TraceMode.DETAILED, zh=False, level="deep", provider="p", titles={})
    events = builder.on_chunk(CALL, False, 5)
    start = next(e for e in events if e["type"] == "tool_call.start")
    assert "title" not in start and start["message"] == "Calling tool: kb_search"


def test_titled_events_match_the_schema() -> None:
    import json

    import jsonschema

    schema = json.loads((Path(__file__).parents[3] / "docs" / "trace-event.schema.json").read_text())
    builder = TraceBuilder(
        mode=TraceMode.DETAILED, zh=True, level="deep", provider="p", titles=parse_tool_titles(TITLES)
    )
    for event in builder.on_chunk(CALL, False, 5) + builder.finish(9):
        jsonschema.validate(event, schema)
