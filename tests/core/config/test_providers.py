from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest

from proxy.core.config.providers import ProvidersTable, ReplayPolicy, default_providers_path
from proxy.core.controls import Level
from proxy.core.errors import ConfigError

SHIPPED = ProvidersTable.load()

REQUIRED_ENTRIES = [
    "deepseek",
    "dashscope",
    "kimi",
    "minimax",
    "zhipu",
    "ark",
    "siliconflow",
    "openai",
    "azure",
    "gemini",
    "anthropic",
    "xai",
    "groq",
    "openrouter",
    "mistral",
    "ollama",
    "self-hosted",
    "sglang",
    "fallback",
]

# A minimal valid file; tests break one thing at a time.
MINIMAL = """
instructions:
  think_standard: {en: "Think in <think></think> first.", zh: "先在 <think></think> 里思考。"}
providers:
  alpha:
    docs: https://alpha.example/docs
    match: [api.alpha.example]
    levels:
      off: {params: {thinking: {type: disabled}}}
      standard: {params: {thinking: {type: enabled}}}
    conflicts: [thinking, chat_template_kwargs.enable_thinking]
    reasoning: {tags: [], implicit_open: false}
    replay: {mode: tool_calls, field: reasoning_content}
  fallback:
    docs: https://fallback.example/docs
    match: ["*"]
    levels:
      deep: {params: {reasoning_effort: high}}
    conflicts: [reasoning_effort]
    reasoning: {tags: [think]}
    replay: {mode: strip}
"""


def table_with(*entries: str) -> ProvidersTable:
    """A table of `entries` (YAML snippets of `name: {...}` under providers) plus a catch-all."""
    body = "".join(f"  {e}\n" for e in entries)
    fallback = (
        "  fallback: {docs: 'https://f.example', match: ['*'], levels: {}, conflicts: [],"
        " reasoning: {tags: []}, replay: {mode: strip}}\n"
    )
    return ProvidersTable.from_text("providers:\n" + body + fallback)


def entry(name: str, *patterns: str) -> str:
    quoted = ", ".join(f"'{p}'" for p in patterns)
    return (
        f"{name}: {{docs: 'https://{name}.example', match: [{quoted}], levels: {{}}, conflicts: [],"
        " reasoning: {tags: []}, replay: {mode: strip}}"
    )


# ---- the shipped file -------------------------------------------------------------------------------


def test_shipped_file_loads_with_every_required_entry() -> None:
    assert SHIPPED.entry_names == REQUIRED_ENTRIES


def test_default_path_is_the_repository_copy_in_a_checkout() -> None:
    path = default_providers_path()
    assert path.is_file()
    assert path.name == "providers.yaml"
    assert ProvidersTable.load(path).entry_names == SHIPPED.entry_names


def test_every_shipped_entry_cites_its_docs() -> None:
    for summary in SHIPPED.summaries():
        assert summary.docs.startswith("https://"), summary.name


def test_every_shipped_entry_says_when_its_docs_were_last_checked_within_a_year() -> None:
    today = date.today()
    for summary in SHIPPED.summaries():
        assert summary.verified is not None, f"{summary.name}: no verified date"
        age = today - summary.verified
        assert timedelta(0) <= age <= timedelta(days=366), f"{summary.name}: verified {summary.verified}"


def test_shipped_instructions_exist_in_both_languages_and_ask_for_think_tags() -> None:
    instructions = SHIPPED.match("https://api.openai.com/v1", "gpt-4o").instructions
    assert set(instructions) == {"think_standard", "think_deep"}
    for texts in instructions.values():
        assert set(texts) == {"en", "zh"}
        for text in texts.values():
            assert "<think>" in text and "</think>" in text
    assert instructions["think_standard"]["en"] != instructions["think_deep"]["en"]
    assert "thorough" in instructions["think_deep"]["en"]


def test_catch_all_reads_reasoning_from_think_tags_and_sends_reasoning_effort_only() -> None:
    dialect = SHIPPED.match("https://llm-gateway.example/v1")
    assert dialect.name == "fallback"
    assert dialect.reasoning.tags == ("think",)
    assert {level: rule.params for level, rule in dialect.levels.items()} == {
        Level.OFF: {"reasoning_effort": "none"},
        Level.STANDARD: {"reasoning_effort": "low"},
        Level.DEEP: {"reasoning_effort": "high"},
    }


# ---- matching --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        ("https://api.deepseek.com/v1", "deepseek"),
        ("https://api.deepseek.com", "deepseek"),
        ("http://api.deepseek.com:443/v1", "deepseek"),  # scheme ignored, port ignored when unnamed
        ("api.deepseek.com/v1", "deepseek"),  # no scheme at all
        ("https://API.DeepSeek.com./v1", "deepseek"),  # case and a trailing dot
        ("https://dashscope.aliyuncs.com/compatible-mode/v1", "dashscope"),
        ("https://dashscope-intl.aliyuncs.com/compatible-mode/v1/", "dashscope"),
        ("https://ws1.cn-beijing.maas.aliyuncs.com/compatible-mode/v1", "dashscope"),
        ("https://dashscope.aliyuncs.com/api/v1", "fallback"),  # path prefix required
        ("https://dashscope.aliyuncs.com/compatible-mode/v10", "fallback"),  # whole segments only
        ("https://api.moonshot.cn/v1", "kimi"),
        ("https://api.moonshot.ai/v1", "kimi"),
        ("https://api.minimax.io/v1", "minimax"),
        ("https://api.minimaxi.com/v1", "minimax"),
        ("https://open.bigmodel.cn/api/paas/v4", "zhipu"),
        ("https://api.z.ai/api/paas/v4/", "zhipu"),
        ("https://ark.cn-beijing.volces.com/api/v3", "ark"),
        ("https://ark.cn-shanghai.volces.com/api/v3", "ark"),
        ("https://ark.ap-southeast.bytepluses.com/api/v3", "ark"),
        ("https://ark.a.b.volces.com/api/v3", "fallback"),  # an inner '*' is exactly one label
        ("https://api.siliconflow.cn/v1", "siliconflow"),
        ("https://api.openai.com/v1", "openai"),
        ("https://my-resource.openai.azure.com/openai/v1", "azure"),
        ("https://a.b.openai.azure.com/openai", "azure"),  # a leading '*.' covers deeper subdomains
        ("https://openai.azure.com/openai", "fallback"),  # ... but needs at least one label
        ("https://generativelanguage.googleapis.com/v1beta/openai/", "gemini"),
        ("https://generativelanguage.googleapis.com/v1beta/models", "fallback"),
        ("https://api.anthropic.com/v1/", "anthropic"),
        ("https://api.x.ai/v1", "xai"),
        ("https://api.groq.com/openai/v1", "groq"),
        ("https://openrouter.ai/api/v1", "openrouter"),
        ("https://api.mistral.ai/v1", "mistral"),
        ("http://localhost:11434/v1", "ollama"),
        ("http://127.0.0.1:11434/v1", "ollama"),
        ("http://[::1]:11434/v1", "ollama"),
        ("http://ollama:11434/v1", "ollama"),  # a Compose service name on Ollama's port
        ("http://10.0.0.9:11434/v1", "ollama"),
        ("http://ollama.ai.svc.cluster.local:11434/v1", "ollama"),
        ("http://host.docker.internal:11434/v1", "ollama"),
        ("http://localhost:8080/v1", "self-hosted"),  # ollama's pattern names a port: it must match
        ("http://localhost/v1", "self-hosted"),  # default port 80 is not 11434
        ("https://llm.internal.example/v1", "fallback"),
        ("http://127.0.0.1:8000/v1", "self-hosted"),
        ("http://127.1.2.3/v1", "self-hosted"),
        ("http://[::1]:8080/v1", "self-hosted"),
        ("http://10.0.0.5/v1", "self-hosted"),
        ("http://192.168.1.20:5000/v1", "self-hosted"),
        ("http://172.16.0.1/v1", "self-hosted"),
        ("http://172.31.255.1/v1", "self-hosted"),
        ("http://172.32.0.1/v1", "fallback"),  # outside 172.16.0.0/12
        ("http://11.0.0.1/v1", "fallback"),
        ("http://gpu-box.local/v1", "self-hosted"),
        ("http://vllm.models.svc.cluster.local:8000/v1", "self-hosted"),
        ("http://host.docker.internal:1234/v1", "self-hosted"),
        ("http://nas.lan/v1", "self-hosted"),
        ("http://llm.home.arpa/v1", "self-hosted"),
        ("https://llm.example.com:8000/v1", "self-hosted"),  # a server's usual port
        ("https://llm.example.com:30000/v1", "sglang"),
        ("http://10.0.0.5:30000/v1", "sglang"),  # SGLang's port beats the private range
        ("http://localhost:30000/v1", "sglang"),
        ("http://sglang.models.svc.cluster.local:30000/v1", "sglang"),
        ("https://llm.example.com:1234/v1", "self-hosted"),
        ("https://llm.example.com:8443/v1", "fallback"),
        ("https://api.deepseek.com:8000/v1", "deepseek"),  # a named host beats any-host-on-a-port
        ("", "fallback"),
    ],
)
def test_shipped_patterns_match(base_url: str, expected: str) -> None:
    assert SHIPPED.match(base_url).name == expected


def test_most_specific_pattern_wins_whatever_the_file_order() -> None:
    table = table_with(
        entry("wild", "*.example.com"),
        entry("host", "api.example.com"),
        entry("pathed", "api.example.com/v2"),
        entry("ported", "api.example.com:8443"),
        entry("inner", "api.*.com"),
    )
    assert table.match("https://api.example.com/v1").name == "host"  # exact host beats wildcards
    assert table.match("https://api.example.com/v2/chat").name == "pathed"  # a path prefix adds
    assert table.match("https://api.example.com:8443/v1").name == "ported"  # a named port adds
    assert table.match("https://www.example.com/v1").name == "wild"  # more literal labels than api.*.com
    assert table.match("https://api.other.com/v1").name == "inner"
    assert table.match("https://example.com").name == "fallback"


def test_ties_go_to_the_entry_listed_first() -> None:
    table = table_with(entry("first", "api.example.com"), entry("second", "api.example.com"))
    assert table.match("https://api.example.com").name == "first"


def test_matched_pattern_reports_the_winning_pattern() -> None:
    assert SHIPPED.matched_pattern("https://x.openai.azure.com/openai") == "*.openai.azure.com"
    assert SHIPPED.matched_pattern("https://nowhere.example") == "*"


def test_extra_patterns_map_a_path_prefix_onto_an_entry_without_touching_the_original() -> None:
    demo = SHIPPED.with_extra_patterns("deepseek", ["127.0.0.1/deepseek"]).with_extra_patterns(
        "minimax", ["127.0.0.1/minimax"]
    )
    assert demo.match("http://127.0.0.1:8765/deepseek/v1").name == "deepseek"
    assert demo.match("http://127.0.0.1:8765/minimax/v1").name == "minimax"
    assert demo.match("http://127.0.0.1:8765/other/v1").name == "self-hosted"
    assert demo.match("http://127.0.0.1:11434/v1").name == "ollama"
    assert SHIPPED.match("http://127.0.0.1:8765/deepseek/v1").name == "self-hosted"


def test_extra_patterns_reject_unknown_entries_and_bad_patterns() -> None:
    with pytest.raises(ConfigError, match="no entry 'nope'"):
        SHIPPED.with_extra_patterns("nope", ["127.0.0.1/x"])
    with pytest.raises(ConfigError, match=r"entry 'deepseek', extra pattern \[0\]"):
        SHIPPED.with_extra_patterns("deepseek", ["127.0.0.1:port/x"])


def test_match_returns_the_same_prebuilt_dialect_on_repeat() -> None:
    first = SHIPPED.match("https://api.deepseek.com/v1", "deepseek-v4-pro")
    assert SHIPPED.match("https://api.deepseek.com/v1", "deepseek-v4-pro") is first
    assert SHIPPED.match("https://api.deepseek.com/", "other") is first  # same entry, no override


def test_many_distinct_models_do_not_break_lookup() -> None:
    # The cache is bounded (models are client-chosen); lookups stay correct across evictions.
    for i in range(5000):
        assert SHIPPED.match("https://api.openai.com/v1", f"gpt-4o-{i}").model_override is not None
    assert SHIPPED.match("https://api.openai.com/v1", "o3").model_override is None


# ---- model overrides -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "model", "levels"),
    [
        ("https://dashscope.aliyuncs.com/compatible-mode/v1", "qwq-plus", {"standard": {}, "deep": {}}),
        ("https://dashscope.aliyuncs.com/compatible-mode/v1", "QwQ-32B", {"standard": {}, "deep": {}}),
        (
            "https://dashscope.aliyuncs.com/compatible-mode/v1",
            "qwen3-235b-a22b-thinking-2507",
            {"standard": {}, "deep": {}},
        ),
        (
            "https://dashscope.aliyuncs.com/compatible-mode/v1",
            "qwen-plus",
            {
                "off": {"enable_thinking": False},
                "standard": {"enable_thinking": True},
                "deep": {"enable_thinking": True},
            },
        ),
        (
            "https://api.siliconflow.cn/v1",
            "Qwen/QwQ-32B",
            {"standard": {}, "deep": {"thinking_budget": 16384}},
        ),
        ("https://api.x.ai/v1", "grok-3-mini-fast", {"standard": {}, "deep": {"reasoning_effort": "high"}}),
        ("https://api.x.ai/v1", "grok-4", {}),
        (
            "https://api.groq.com/openai/v1",
            "openai/gpt-oss-120b",
            {"standard": {}, "deep": {"reasoning_effort": "high"}},
        ),
        (
            "https://api.openai.com/v1",
            "gpt-5.1",
            {
                "off": {"reasoning_effort": "none"},
                "standard": {"reasoning_effort": "medium"},
                "deep": {"reasoning_effort": "high"},
            },
        ),
        ("https://api.openai.com/v1", "gpt-5", {"standard": {}, "deep": {"reasoning_effort": "high"}}),
        (
            "https://open.bigmodel.cn/api/paas/v4",
            "glm-5.2",
            {
                "off": {"thinking": {"type": "disabled"}},
                "standard": {"thinking": {"type": "enabled"}},
                "deep": {"thinking": {"type": "enabled"}, "reasoning_effort": "max"},
            },
        ),
        (
            "https://open.bigmodel.cn/api/paas/v4",
            "glm-5.1",
            {
                "off": {"thinking": {"type": "disabled"}},
                "standard": {"thinking": {"type": "enabled"}},
                "deep": {"thinking": {"type": "enabled"}},
            },
        ),
        (
            "https://api.anthropic.com/v1",
            "claude-opus-4-7",
            {
                "off": {},
                "standard": {"thinking": {"type": "adaptive"}},
                "deep": {"thinking": {"type": "adaptive"}},
            },
        ),
        (
            "https://api.anthropic.com/v1",
            "claude-haiku-4-5-20251001",
            {
                "off": {},
                "standard": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
                "deep": {"thinking": {"type": "enabled", "budget_tokens": 16384}},
            },
        ),
    ],
)
def test_model_overrides(base_url: str, model: str, levels: dict[str, dict[str, object]]) -> None:
    dialect = SHIPPED.match(base_url, model)
    assert {level.value: rule.params for level, rule in dialect.levels.items()} == levels


@pytest.mark.parametrize(
    "model", ["gpt-4o", "gpt-4o-mini", "GPT-4.1-nano", "gpt-3.5-turbo", "chatgpt-4o-latest"]
)
def test_openai_models_without_a_knob_apply_levels_by_prompt(model: str) -> None:
    for url in ("https://api.openai.com/v1", "https://res.openai.azure.com/openai"):
        dialect = SHIPPED.match(url, model)
        assert dialect.levels[Level.STANDARD].prompt == "think_standard"
        assert dialect.levels[Level.DEEP].prompt == "think_deep"
        assert dialect.levels[Level.OFF].params == {}
        assert dialect.reasoning.tags == ("think",)


def test_first_matching_override_wins_and_replaces_the_whole_levels_map() -> None:
    table = table_with(
        "alpha: {docs: 'https://a.example', match: [a.example], conflicts: [thinking],"
        " levels: {off: {params: {x: 0}}, standard: {params: {x: 1}}},"
        " reasoning: {tags: [think]}, replay: {mode: keep, field: reasoning},"
        " models: [{match: ['m-*'], levels: {deep: {params: {x: 2}}}},"
        "          {match: ['m-special'], levels: {off: {params: {x: 9}}}, replay: {mode: strip}}]}"
    )
    special = table.match("https://a.example", "M-Special")
    assert special.model_override == ("m-*",)
    assert set(special.levels) == {Level.DEEP}  # not merged with the entry's off/standard
    # what the override does not name is inherited from the entry
    assert special.conflicts == ("thinking",)
    assert special.replay.mode == "every_turn"  # `keep`, its older name, is read as it
    assert special.reasoning.tags == ("think",)
    assert table.match("https://a.example", "other").model_override is None
    assert table.match("https://a.example", None).model_override is None


def test_dialect_levels_are_read_only() -> None:
    dialect = SHIPPED.match("https://api.deepseek.com")
    with pytest.raises(TypeError):
        dialect.levels[Level.OFF] = dialect.levels[Level.STANDARD]  # type: ignore[index]


# ---- YAML details ----------------------------------------------------------------------------------


def test_yaml_12_booleans_keep_off_a_level_name_and_on_yes_strings() -> None:
    table = table_with(
        "alpha: {docs: 'https://a.example', match: [a.example], conflicts: [],"
        " levels: {off: {params: {enable_thinking: false, mode: on, other: yes}}},"
        " reasoning: {tags: []}, replay: {mode: strip}}"
    )
    assert table.match("https://a.example").levels[Level.OFF].params == {
        "enable_thinking": False,
        "mode": "on",
        "other": "yes",
    }


# ---- broken files ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "standard: {params: {thinking: {type: enabled}}}",
            "standard: {parms: {thinking: {type: enabled}}}",
            "providers.yaml: entry 'alpha', field 'levels.standard.parms': extra inputs are not permitted",
        ),
        (
            "standard: {params",
            "fast: {params",
            "providers.yaml: entry 'alpha', field 'levels.fast':"
            " unknown level 'fast' (levels are off, standard, deep)",
        ),
        (
            "standard: {params: {thinking: {type: enabled}}}",
            "standard: {params: {thinking: {type: enabled}}, prompt: think_standard}",
            "providers.yaml: entry 'alpha', field 'levels.standard':"
            " a level gives either params or prompt, not both",
        ),
        (
            "standard: {params: {thinking: {type: enabled}}}",
            "standard: {}",
            "providers.yaml: entry 'alpha', field 'levels.standard': a level needs params",
        ),
        (
            "match: [api.alpha.example]",
            "match: [api.alpha.example, 'api.*alpha.example']",
            "providers.yaml: entry 'alpha', field 'match[1]': bad pattern 'api.*alpha.example':"
            " '*' must stand for a whole label",
        ),
        (
            "match: [api.alpha.example]",
            "match: ['api.alpha.example:http']",
            "providers.yaml: entry 'alpha', field 'match[0]': bad pattern",
        ),
        (
            "match: [api.alpha.example]",
            "match: ['api.alpha.example/v1/*']",
            "field 'match[0]': bad pattern 'api.alpha.example/v1/*': the path prefix is literal",
        ),
        (
            "match: [api.alpha.example]",
            "match: ['*.*']",
            "field 'match[0]': bad pattern '*.*': the host needs at least one literal label",
        ),
        ("match: [api.alpha.example]", "match: []", "entry 'alpha', field 'match': "),
        (
            "mode: tool_calls",
            "mode: sometimes",
            "entry 'alpha', field 'replay.mode': input should be 'strip', 'tool_calls' or 'every_turn'",
        ),
        (
            "field: reasoning_content",
            "field: thoughts",
            "entry 'alpha', field 'replay.field': input should be 'reasoning_content', 'reasoning',"
            " 'reasoning_details', 'inline_think' or 'none'",
        ),
        (
            "field: reasoning_content}",
            "field: none}",
            "entry 'alpha', field 'replay': field none sends no reasoning back:"
            " mode tool_calls needs a field to write",
        ),
        (
            "field: reasoning_content}",
            "field: reasoning_details, missing: placeholder}",
            "entry 'alpha', field 'replay': missing: placeholder needs field reasoning_content or reasoning",
        ),
        (
            "field: reasoning_content}",
            "field: reasoning_content, replay_field: reasoning}",
            "entry 'alpha', field 'replay.replay_field': extra inputs are not permitted",
        ),
        ("    docs: https://alpha.example/docs\n", "", "entry 'alpha', field 'docs': field required"),
        (
            "docs: https://alpha.example/docs",
            "docs: alpha docs",
            "field 'docs': 'alpha docs' is not an http(s) URL",
        ),
        (
            "    match: [api.alpha.example]\n",
            "    match: [api.alpha.example]\n    responses_websocket: the websocket guide\n",
            "entry 'alpha', field 'responses_websocket': 'the websocket guide' is not an http(s) URL",
        ),
        ("tags: [think]", "tags: ['<think>']", "entry 'fallback', field 'reasoning.tags'"),
        ("conflicts: [thinking,", "conflicts: ['thinking..x',", "entry 'alpha', field 'conflicts'"),
        (
            "standard: {params: {thinking: {type: enabled}}}",
            "standard: {prompt: think_hard}",
            "entry 'alpha', field 'levels.standard.prompt':"
            " unknown instruction 'think_hard' (known: think_standard)",
        ),
        (
            "standard: {params: {thinking: {type: enabled}}}",
            "standard: {prompt: think_standard}",
            "entry 'alpha', field 'levels.standard.prompt': instruction 'think_standard' asks for none of",
        ),
        (
            'zh: "先在 <think></think> 里思考。"',
            "",
            "instruction 'think_standard', field 'zh': field required",
        ),
        ('match: ["*"]', "match: [fallback.example]", "exactly one entry must be the catch-all"),
        ('match: ["*"]', "match: ['*', fallback.example]", "entry 'fallback', field 'match': the catch-all"),
        ("  alpha:\n", "  al pha:\n", "entry 'al pha': names use letters"),
        ("providers:\n", "provider:\n", "providers.yaml: field 'provider': extra inputs are not permitted"),
        (
            "    conflicts: [thinking,",
            "    replay: {mode: strip}\n    conflicts: [thinking,",
            "duplicate key 'replay'",
        ),
        ("providers:\n", "providers: [\n", "providers.yaml: not valid YAML"),
    ],
)
def test_broken_files_name_the_entry_and_field(old: str, new: str, message: str) -> None:
    assert old in MINIMAL
    with pytest.raises(ConfigError) as info:
        ProvidersTable.from_text(MINIMAL.replace(old, new, 1))
    assert message in str(info.value)


def test_minimal_file_is_valid() -> None:
    table = ProvidersTable.from_text(MINIMAL)
    assert table.entry_names == ["alpha", "fallback"]


def test_responses_websocket_relays_a_native_entrys_sockets_only() -> None:
    """The entry key names the upstream's WebSocket mode; it relays sockets only where the
    Responses door is native (a bridged model override of the entry reaches chat, not a socket)."""
    guide = "https://alpha.example/websocket-mode"
    text = MINIMAL.replace(
        "    match: [api.alpha.example]\n",
        "    match: [api.alpha.example]\n"
        f"    responses_websocket: {guide}\n"
        "    responses: {mode: native, docs: 'https://alpha.example/responses'}\n"
        "    models:\n"
        "      - match: [bridged-*]\n"
        "        responses: {mode: bridge}\n",
    )
    table = ProvidersTable.from_text(text)
    native = table.match("https://api.alpha.example/v1", "alpha-1")
    bridged = table.match("https://api.alpha.example/v1", "bridged-1")
    assert native.responses_websocket == guide and native.relays_responses_socket
    assert bridged.responses_websocket == guide and not bridged.relays_responses_socket
    assert not table.match("https://other.example/v1", "alpha-1").relays_responses_socket
    shipped = ProvidersTable.load().match("https://api.openai.com/v1", "gpt-5.4")
    assert shipped.relays_responses_socket


def with_verified(written: str) -> str:
    return MINIMAL.replace(
        "    match: [api.alpha.example]\n", f"    verified: {written}\n    match: [api.alpha.example]\n"
    )


@pytest.mark.parametrize("written", ["2026-12-02", "'2026-12-02'", '"2026-12-02"'])
def test_verified_is_a_date_written_bare_or_quoted_and_optional(written: str) -> None:
    alpha, fallback = ProvidersTable.from_text(with_verified(written)).summaries()
    assert alpha.verified == date(2026, 12, 2)
    assert fallback.verified is None  # an operator's own file need not carry one
    assert ProvidersTable.from_text(MINIMAL).summaries()[0].verified is None


@pytest.mark.parametrize("written", ["last week", "2026-13-01", "20261202", "[2026, 12, 2]"])
def test_a_verified_that_is_not_a_date_names_the_entry_and_field(written: str) -> None:
    with pytest.raises(ConfigError, match=r"^providers\.yaml: entry 'alpha', field 'verified': "):
        ProvidersTable.from_text(with_verified(written))


def test_bad_replay_values_are_one_line_each() -> None:
    broken = MINIMAL.replace("mode: tool_calls", "mode: every_time").replace(
        "mode: strip}", "mode: strip, field: x}"
    )
    with pytest.raises(ConfigError) as info:
        ProvidersTable.from_text(broken)
    assert str(info.value).splitlines() == [
        "providers.yaml: entry 'alpha', field 'replay.mode': input should be 'strip', 'tool_calls' "
        "or 'every_turn'",
        "providers.yaml: entry 'fallback', field 'replay.field': input should be 'reasoning_content', "
        "'reasoning', 'reasoning_details', 'inline_think' or 'none'",
    ]


def test_keep_is_read_as_every_turn_and_none_only_strips() -> None:
    table = table_with(
        "alpha: {docs: 'https://a.example', match: [a.example], conflicts: [], levels: {},"
        " reasoning: {tags: []}, replay: {mode: keep, field: reasoning},"
        " models: [{match: ['g-*'], replay: {mode: strip, field: none}}]}"
    )
    assert table.match("https://a.example").replay == ReplayPolicy(mode="every_turn", field="reasoning")
    assert table.match("https://a.example", "g-1").replay.field == "none"


def test_load_reports_the_file_name_and_unreadable_paths(tmp_path: Path) -> None:
    broken = tmp_path / "custom.yaml"
    broken.write_text(MINIMAL.replace("parms", "x").replace("replay: {mode: strip}", "replay: {mode: nope}"))
    with pytest.raises(ConfigError, match=r"^custom\.yaml: entry 'fallback', field 'replay\.mode'"):
        ProvidersTable.load(broken)
    with pytest.raises(ConfigError, match="cannot read the providers file"):
        ProvidersTable.load(tmp_path / "missing.yaml")


def test_a_file_that_is_not_a_mapping_is_rejected() -> None:
    with pytest.raises(ConfigError, match="must be a mapping"):
        ProvidersTable.from_text("- just\n- a list\n")


# ---- not_applicable, replay params, missing signatures, implicit open when, always ---------------


def with_alpha(old: str, new: str) -> str:
    assert old in MINIMAL
    return MINIMAL.replace(old, new, 1)


NOT_APPLICABLE = with_alpha(
    "    conflicts: [thinking, chat_template_kwargs.enable_thinking]\n",
    "    not_applicable: {deep: 'one switch only (docs)'}\n"
    "    conflicts: [thinking, chat_template_kwargs.enable_thinking]\n",
)


def test_a_level_not_applicable_carries_its_reason_into_the_dialect() -> None:
    table = ProvidersTable.from_text(NOT_APPLICABLE)
    dialect = table.match("https://api.alpha.example/v1")
    assert dict(dialect.not_applicable) == {Level.DEEP: "one switch only (docs)"}
    assert Level.DEEP not in dialect.levels
    assert not ProvidersTable.from_text(MINIMAL).match("https://api.alpha.example/v1").not_applicable


@pytest.mark.parametrize(
    ("reasons", "message"),
    [
        ("{standard: 'x'}", "level 'standard' has a rule and is also not_applicable: keep one"),
        ("{deeper: 'x'}", "not_applicable: unknown level 'deeper'"),
        ("{deep: ' '}", "not_applicable.deep: give the reason"),
        ('{deep: "ok\\nno"}', "not_applicable.deep: one line of ASCII text"),
        ("{deep: 'café'}", "not_applicable.deep: one line of ASCII text"),
    ],
)
def test_a_bad_not_applicable_names_the_entry(reasons: str, message: str) -> None:
    broken = NOT_APPLICABLE.replace("{deep: 'one switch only (docs)'}", reasons)
    with pytest.raises(ConfigError, match="entry 'alpha'") as info:
        ProvidersTable.from_text(broken)
    assert message in str(info.value)


def test_a_model_override_keeps_the_entry_s_reasons_unless_it_replaces_the_levels() -> None:
    overrides = (
        "    models:\n"
        "      - match: ['keeps-*']\n"
        "        replay: {mode: every_turn}\n"
        "      - match: ['own-*']\n"
        "        levels: {standard: {params: {}}}\n"
        "      - match: ['says-*']\n"
        "        levels: {standard: {params: {}}}\n"
        "        not_applicable: {off: 'always thinks'}\n"
        "      - match: ['clash-*']\n"
        "        not_applicable: {off: 'x'}\n"
    )
    text = NOT_APPLICABLE.replace(
        "    replay: {mode: tool_calls, field: reasoning_content}\n",
        "    replay: {mode: tool_calls, field: reasoning_content}\n" + overrides,
        1,
    )
    with pytest.raises(ConfigError, match=r"entry 'alpha', field 'models\[3\]\.not_applicable\.off'"):
        ProvidersTable.from_text(text)
    table = ProvidersTable.from_text(
        text.replace("      - match: ['clash-*']\n        not_applicable: {off: 'x'}\n", "")
    )
    url = "https://api.alpha.example/v1"
    assert dict(table.match(url, "keeps-1").not_applicable) == {Level.DEEP: "one switch only (docs)"}
    assert not table.match(url, "own-1").not_applicable
    assert dict(table.match(url, "says-1").not_applicable) == {Level.OFF: "always thinks"}


def test_replay_params_and_missing_signature_are_read_and_checked() -> None:
    text = with_alpha(
        "    replay: {mode: tool_calls, field: reasoning_content}\n",
        "    replay: {mode: every_turn, field: reasoning_content, params: {thinking: {keep: all}},"
        " missing_signature: skip_validator}\n",
    )
    replay = ProvidersTable.from_text(text).match("https://api.alpha.example/v1").replay
    assert replay.params == {"thinking": {"keep": "all"}} and replay.missing_signature == "skip_validator"
    with pytest.raises(ConfigError, match="params ask the upstream to keep replayed reasoning: mode strip"):
        ProvidersTable.from_text(text.replace("mode: every_turn", "mode: strip"))
    with pytest.raises(ConfigError, match=r"field 'replay\.missing_signature'"):
        ProvidersTable.from_text(text.replace("skip_validator", "invent_one"))


def test_implicit_open_when_reads_the_request_as_sent() -> None:
    text = with_alpha(
        "    reasoning: {tags: [], implicit_open: false}\n",
        "    reasoning: {tags: ['mm:think'], always: true,"
        " implicit_open_when: {chat_template_kwargs.thinking_mode: enabled}}\n",
    )
    reasoning = ProvidersTable.from_text(text).match("https://api.alpha.example/v1").reasoning
    assert reasoning.always
    assert reasoning.opens_implicitly({"chat_template_kwargs": {"thinking_mode": "enabled"}})
    for body in (
        {},
        None,
        {"chat_template_kwargs": {"thinking_mode": "disabled"}},
        {"chat_template_kwargs": "x"},
    ):
        assert not reasoning.opens_implicitly(body)
    with pytest.raises(ConfigError, match="is not a dotted path"):
        ProvidersTable.from_text(text.replace("chat_template_kwargs.thinking_mode", "chat template"))
