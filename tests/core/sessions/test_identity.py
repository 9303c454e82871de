"""Which session a request belongs to and which client sent it, from what clients send
(docs/sessions.md): the headers Claude Code 2.1.332 and Codex 0.171.0 were seen sending, a
Responses chain, X-Session-Id, else the request's own id; per tenant in gateway mode."""

from __future__ import annotations

import orjson
import pytest

from proxy.core.sessions.identity import (
    ChainLinks,
    SessionKey,
    chain_links,
    client_kind,
    pick_headers,
    scoped,
    session_of,
)

CODEX_UA = "codex_exec/0.171.0 (Debian 12.0.0; x86_64) unknown (codex_exec; 0.171.0)"
CODEX_METADATA = orjson.dumps({"session_id": "019a-meta", "turn_id": "t1", "request_kind": "turn"}).decode()


def headers(*pairs: tuple[str, str]) -> dict[str, str]:
    return pick_headers(pairs)


def test_claude_code_session_header_wins_over_everything() -> None:
    h = headers(("X-Claude-Code-Session-Id", "cc-1"), ("X-Session-Id", "mine"), ("session-id", "codex"))
    assert session_of(h, "req-1", ChainLinks("resp_a", None), "chain") == SessionKey("cc-1", "claude-code")


def test_codex_session_id_then_its_turn_metadata() -> None:
    assert session_of(headers(("session-id", "019a-1")), "r") == SessionKey("019a-1", "codex")
    only_metadata = headers(("x-codex-turn-metadata", CODEX_METADATA))
    assert session_of(only_metadata, "r") == SessionKey("019a-meta", "codex")
    # Unreadable metadata is no session id: the next rule applies.
    assert session_of(headers(("x-codex-turn-metadata", "{not json")), "r") == SessionKey("r", "request")


def test_responses_chain_joins_the_session_of_the_response_it_continues() -> None:
    links = chain_links({"previous_response_id": "resp_b", "input": "more"})
    assert session_of({}, "r", links, "resp_a") == SessionKey("resp_a", "responses")
    # A response the proxy does not know: the chain is still named by it.
    assert session_of({}, "r", links, None) == SessionKey("resp_b", "responses")
    assert chain_links({"conversation": {"id": "conv_1"}}) == ChainLinks(None, "conv_1")
    assert session_of({}, "r", chain_links({"conversation": "conv_2"})) == SessionKey("conv_2", "responses")
    # The chain comes before a generic X-Session-Id.
    assert session_of(headers(("X-Session-Id", "s")), "r", links, None).source == "responses"


def test_generic_header_then_the_request_alone() -> None:
    assert session_of(headers(("X-Session-Id", "task-42")), "r") == SessionKey("task-42", "header")
    assert session_of({}, "req-9") == SessionKey("req-9", "request")


@pytest.mark.parametrize("bad", ["", "a" * 129, "has space", "new\nline", "slash/in/it", "ü"])
def test_an_id_outside_the_safe_alphabet_is_not_used(bad: str) -> None:
    assert session_of(headers(("X-Session-Id", bad)), "req-1") == SessionKey("req-1", "request")


def test_sessions_belong_to_their_tenant() -> None:
    assert scoped("s1", None) == "s1"
    assert scoped("s1", "team-a") != scoped("s1", "team-b")
    assert scoped("s1", "team-a") == "team-a:s1"


@pytest.mark.parametrize(
    ("pairs", "kind"),
    [
        ((("User-Agent", "claude-cli/2.1.332 (external, sdk-cli)"),), "claude-code"),
        ((("user-agent", CODEX_UA),), "codex"),
        ((("user-agent", "codex_vscode/0.171.0"),), "codex"),
        ((("user-agent", "Agents/Python 0.24.0"),), "agents-sdk"),
        ((("user-agent", "OpenAI/Python 3.63.0"),), "openai-python"),
        ((("user-agent", "AsyncOpenAI/Python 3.63.0"),), "openai-python"),
        ((("user-agent", "OpenAI/Python 3.63.0"), ("x-stainless-raw-response", "true")), "langchain"),
        ((("user-agent", "ai/6.0.325 ai-sdk/provider-utils/4.0.66 runtime/node.js/v20.20.2"),), "ai-sdk"),
        ((("user-agent", "Anthropic/Python 2.16.0"),), "anthropic-python"),
        ((("user-agent", "OpenAI/JS 6.1.0"),), "openai-node"),
        ((("user-agent", "curl/7.88.1"),), "curl"),
        ((("user-agent", "Mozilla/5.0 (X11; Linux x86_64)"),), "browser"),
        ((("user-agent", "my-tool/1.0"),), "other"),
        ((), "unknown"),
        ((("X-Claude-Code-Session-Id", "cc"),), "claude-code"),
    ],
)
def test_client_kind_from_the_user_agent(pairs: tuple[tuple[str, str], ...], kind: str) -> None:
    assert client_kind(pick_headers(pairs)) == kind
