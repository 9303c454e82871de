from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.cli import main
from proxy.core.config.providers import ProvidersTable
from proxy.core.config.routing import RouteTable
from proxy.core.controls import Level
from proxy.core.errors import NotFound
from proxy.core.plan.rewrite import rewrite_body
from proxy.core.policy.auto_rules import make_rule
from proxy.explain import default_body, explain, explain_routed

TABLE = ProvidersTable.load()


def upstream_body(text: str) -> Any:
    """The JSON printed after the 'Upstream body:' line."""
    return orjson.loads(text.split("Upstream body:\n", 1)[1])


def test_explains_entry_docs_level_method_and_the_exact_body() -> None:
    text = explain(TABLE, "https://api.deepseek.com/v1", "deep", model="deepseek-v4-pro")
    assert "Entry:      deepseek (matched by 'api.deepseek.com')" in text
    assert "https://api-docs.deepseek.com/guides/thinking_mode" in text
    assert "deep -> applied: deep (method: params;" in text
    expected = rewrite_body(
        default_body("deepseek-v4-pro"), Level.DEEP, TABLE.match("https://api.deepseek.com/v1")
    )
    assert upstream_body(text) == expected.body
    assert upstream_body(text)["reasoning_effort"] == "max"


def test_the_body_given_is_the_body_explained_and_supplies_the_model() -> None:
    body = {
        "model": "gpt-5.1",
        "messages": [{"role": "user", "content": "hi"}],
        "reasoning_effort": "minimal",
    }
    text = explain(TABLE, "https://api.openai.com/v1", Level.OFF, body=body)
    assert "(model override: gpt-5.[1-9]*)" in text
    assert upstream_body(text) == {
        "model": "gpt-5.1",
        "messages": [{"role": "user", "content": "hi"}],
        "reasoning_effort": "none",
    }


def test_prompt_levels_show_the_injected_instruction() -> None:
    text = explain(TABLE, "https://api.openai.com/v1", "standard", model="gpt-4o")
    instruction = TABLE.match("https://api.openai.com/v1", "gpt-4o").instructions["think_standard"]["en"]
    assert "method: prompt" in text
    assert "Injected:" in text and instruction in text
    assert upstream_body(text)["messages"][0] == {"role": "system", "content": instruction}


def test_chinese_explanations_inject_the_chinese_instruction() -> None:
    text = explain(TABLE, "https://api.openai.com/v1", "deep", model="gpt-4o", zh=True)
    instruction = TABLE.match("https://api.openai.com/v1", "gpt-4o").instructions["think_deep"]["zh"]
    assert upstream_body(text)["messages"][0]["content"] == instruction


def test_no_level_means_the_body_is_forwarded_unchanged() -> None:
    text = explain(TABLE, "https://api.groq.com/openai/v1", None, model="llama-3.3-70b-versatile")
    assert "none requested -> body forwarded unchanged" in text
    assert upstream_body(text) == default_body("llama-3.3-70b-versatile")


def test_a_level_the_provider_lacks_is_reported_as_none() -> None:
    text = explain(TABLE, "https://api.minimax.io/v1", "off", model="MiniMax-M2.5")
    assert "off -> applied: none (minimax has no rule for 'off'" in text


def test_a_level_the_model_cannot_take_is_explained_with_its_reason() -> None:
    text = explain(TABLE, "https://api.moonshot.ai/v1", "off", model="kimi-k3")
    assert "off -> applied: none (not applicable: kimi-k3 always reasons" in text
    assert "the model always reasons (an answer without reasoning is counted)" in text
    keep = explain(TABLE, "https://api.moonshot.ai/v1", "standard", model="kimi-k2.6")
    assert 'with a level other than off and earlier turns: {"thinking":{"keep":"all"}}' in keep
    gemini = explain(
        TABLE, "https://generativelanguage.googleapis.com/v1beta/openai", "deep", model="gemini-3-pro"
    )
    assert "a missing thought signature gets skip_thought_signature_validator" in gemini
    m3 = explain(TABLE, "http://127.0.0.1:8000/v1", "standard", model="MiniMaxAI/MiniMax-M3")
    assert 'template opens the first tag when chat_template_kwargs.thinking_mode = "enabled"' in m3


def test_unrecognized_upstreams_explain_the_fallback() -> None:
    text = explain(TABLE, "https://my-gateway.example/v1", "STANDARD")
    assert "Entry:      fallback (matched by '*')" in text
    assert upstream_body(text)["reasoning_effort"] == "low"


def test_a_bad_level_name_is_an_error() -> None:
    with pytest.raises(ValueError):
        explain(TABLE, "https://api.deepseek.com", "max")


ROUTES = RouteTable.from_text(
    """
routes:
  - {name: deepseek, models: ["deepseek-*"], upstream: "https://api.deepseek.com/v1", api_key_env: DS}
  - {name: openrouter, prefix: "openrouter/", upstream: "https://openrouter.ai/api/v1"}
  - {name: local, models: ["*/*"], upstream: "http://gpu-box.internal:8000/v1"}
"""
)


def test_with_routes_the_model_picks_the_route_and_the_body_has_the_model_sent() -> None:
    text = explain_routed(TABLE, ROUTES, "deep", model="openrouter/anthropic/claude-sonnet-4.5")
    assert text.startswith("Route:      openrouter (routes[1]; prefix 'openrouter/' (stripped))")
    assert "Model sent: anthropic/claude-sonnet-4.5 (client asked for openrouter/anthropic/" in text
    assert "Entry:      openrouter" in text
    body = upstream_body(text)
    assert body["model"] == "anthropic/claude-sonnet-4.5" and body["reasoning"] == {"effort": "high"}

    text = explain_routed(TABLE, ROUTES, "off", model="Qwen/Qwen3-8B")
    assert "Route:      local (routes[2]; models ['*/*'])" in text and "Model sent" not in text
    assert "Entry:      self-hosted" in text and "model override: *qwen3*" in text
    assert upstream_body(text)["chat_template_kwargs"] == {"enable_thinking": False}

    text = explain_routed(TABLE, ROUTES, "standard", model="deepseek-v4", body={"model": "x", "messages": []})
    assert "key from $DS in gateway mode" in text and upstream_body(text)["model"] == "deepseek-v4"


def test_with_routes_a_model_no_route_takes_is_the_404() -> None:
    with pytest.raises(NotFound, match="'gpt-5' matches no route"):
        explain_routed(TABLE, ROUTES, "deep", model="gpt-5")


# -- a suffixed model and auto (issue 45) ------------------------------------------------------------


def test_a_suffixed_model_is_explained_under_its_own_name_at_the_suffixs_level() -> None:
    text = explain(TABLE, "https://api.deepseek.com/v1", None, model="deepseek-v4-pro(deep)")
    assert "Model:      deepseek-v4-pro (suffix (deep) taken off)" in text
    assert "Source:     suffix: the model's suffix" in text
    assert "deep -> applied: deep (method: params;" in text
    body = upstream_body(text)
    assert body["model"] == "deepseek-v4-pro" and body["reasoning_effort"] == "max"
    # --level (the header) goes before the suffix.
    text = explain(TABLE, "https://api.deepseek.com/v1", "off", model="deepseek-v4-pro(deep)")
    assert "Source:     header" in text and upstream_body(text)["thinking"] == {"type": "disabled"}


def test_auto_shows_the_rule_that_chose() -> None:
    body = {"model": "deepseek-v4-pro(auto)", "messages": [{"role": "user", "content": "Please refactor x"}]}
    text = explain(TABLE, "https://api.deepseek.com/v1", None, body=body)
    assert "Auto rule:  auto[1]: contains " in text and "-> deep" in text
    assert upstream_body(text)["reasoning_effort"] == "max"
    rules = (make_rule(1, Level.OFF, None),)
    text = explain(TABLE, "https://api.deepseek.com/v1", "auto", model="deepseek-v4-pro", rules=rules)
    assert "Source:     header" in text and "Auto rule:  auto[1]: otherwise -> off" in text


def test_the_bodys_own_knobs_go_as_they_came_without_a_level() -> None:
    body = {"model": "deepseek-v4-pro", "messages": [], "reasoning_effort": "high"}
    text = explain(TABLE, "https://api.deepseek.com/v1", None, body=body)
    assert "Source:     client" in text and upstream_body(text) == body


def test_with_routes_the_stripped_name_picks_the_route() -> None:
    text = explain_routed(TABLE, ROUTES, None, model="openrouter/anthropic/claude-sonnet-4.5(high)")
    assert text.startswith("Route:      openrouter (routes[1]; prefix 'openrouter/' (stripped))")
    assert "Model sent: anthropic/claude-sonnet-4.5 (client asked for openrouter/anthropic/" in text
    assert "(suffix (high) taken off)" in text
    assert upstream_body(text)["model"] == "anthropic/claude-sonnet-4.5"


def test_the_command_reads_the_policy_files_auto_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text('keys:\n  alice: {max_level: deep}\nauto:\n  - {when: {tools: false}, level: "off"}\n')
    argv = ["explain", "--base-url", "https://api.deepseek.com/v1", "--model", "deepseek-v4-pro(auto)"]
    assert main([*argv, "--policy", str(policy)]) == 0
    out = capsys.readouterr().out
    assert "Auto rule:  auto[1]: tools false -> off" in out
    assert upstream_body(out)["thinking"] == {"type": "disabled"}
    assert main([*argv[:3], "--level", "max"]) == 2
    assert "--level must be one of off, standard, deep, auto" in capsys.readouterr().err
    policy.write_text("auto:\n  - {level: high}\n")
    assert main([*argv, "--policy", str(policy)]) == 1
    assert "auto.0.level: 'high' is not a level" in capsys.readouterr().err
