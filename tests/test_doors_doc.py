"""What docs/responses.md, docs/messages.md and docs/console.md tell a user to set, or promise,
agrees with the code: a copied client set-up applies a level, a stated effort maps to the level
said, the listed `route` values are the ones a summary can carry, `include` does what its row says."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.core.controls import Level
from proxy.core.events import MODEL_ROUTES, AccessRecord
from proxy.core.plan.model_suffix import split_model
from proxy.core.protocols.messages import request as messages_request
from proxy.core.protocols.responses import request as responses_request
from proxy.mock import MockOptions, create_mock_app
from proxy.server.app import create_app
from proxy.server.serving import BackgroundServer
from proxy.simulated import simulated_table
from tests.helpers import make_settings
from tests.test_docs_commands import fenced_blocks

DOCS = Path(__file__).resolve().parent.parent / "docs"


def prose(page: str) -> str:
    """A page's text outside fenced blocks, lines joined (a sentence may wrap anywhere)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return " ".join(re.sub(r"^ *```.*?^ *```[^\n]*$", "", text, flags=re.S | re.M).split())


def test_the_codex_config_applies_a_level() -> None:
    """Codex sends no reasoning.effort for a model it does not know (deepseek-v4-pro): the set-up
    names the level on the model (its suffix), or sets `model_reasoning_effort`, or the header."""
    tomls = [b for b in fenced_blocks(DOCS / "responses.md") if b.language == "toml"]
    config = tomllib.loads(tomls[0].text)
    suffix = split_model(config["model"])
    assert suffix is not None and suffix.model == "deepseek-v4-pro" and suffix.level is Level.DEEP
    effort = tomllib.loads(tomls[1].text)
    assert effort["model"] == "deepseek-v4-pro"
    assert responses_request.EFFORT_LEVELS[effort["model_reasoning_effort"]] is Level.DEEP
    headers = tomllib.loads(tomls[2].text)["model_providers"]["thinkproxy"]["http_headers"]
    assert Level(headers["X-Thinking-Level"]) is Level.DEEP
    assert "Codex sends no effort" in prose("responses.md")


def test_claude_code_s_default_effort_is_said_with_the_level_it_gets() -> None:
    said = re.search(r"For `deepseek-v4-pro` that is `(\w+)`: level (\w+)", prose("messages.md"))
    assert said is not None
    effort, level = said.groups()
    assert effort == "high"  # what Claude Code 2.1.332 sends for deepseek-v4-pro (not `medium`)
    assert messages_request.EFFORT_LEVELS[effort] is Level(level)
    model = re.search(r'ANTHROPIC_MODEL="([^"]+)"', (DOCS / "messages.md").read_text(encoding="utf-8"))
    assert model is not None
    suffix = split_model(model.group(1))
    assert suffix is not None and suffix.model == "deepseek-v4-pro" and suffix.level is Level.DEEP


def test_console_lists_every_route_a_summary_can_carry() -> None:
    said = re.search(r"`route` \((.*?)\), `stream`", prose("console.md"))
    assert said is not None
    listed = set(re.findall(r"`([a-z_]+)` for", said.group(1)))
    assert listed == set(MODEL_ROUTES) | {AccessRecord(method="GET", path="/").route}


@pytest.fixture(scope="module")
def proxy() -> Iterator[BackgroundServer]:
    with BackgroundServer(create_mock_app(MockOptions())) as mock:
        settings = make_settings(upstream_base_url=f"{mock.url}/deepseek/v1")
        with BackgroundServer(create_app(settings, table=simulated_table(mock.port))) as server:
            yield server


@pytest.mark.parametrize("include", [None, [], ["reasoning.encrypted_content"]])
def test_bridged_reasoning_carries_its_sealed_blob_whatever_include_says(
    proxy: BackgroundServer, include: list[str] | None
) -> None:
    """docs/responses.md, `include`: the bridge always returns `encrypted_content` (as OpenAI's
    reference now says of its own), so a client that echoes items without asking keeps its loop."""
    body: dict[str, object] = {"model": "deepseek-v4-pro", "input": "Hi", "reasoning": {"effort": "high"}}
    if include is not None:
        body["include"] = include
    answer = httpx.post(
        f"{proxy.url}/v1/responses", json=body, headers={"authorization": "Bearer sk-t"}, timeout=20
    )
    assert answer.status_code == 200, answer.text
    reasoning = [item for item in answer.json()["output"] if item["type"] == "reasoning"]
    assert reasoning and all(item["encrypted_content"].startswith("tp1.") for item in reasoning)
    row = next(
        line for line in (DOCS / "responses.md").read_text().splitlines() if line.startswith("| `include` |")
    )
    assert "whether or not" in row
