"""Which agent session a request belongs to, and which kind of client sent it, from what the
clients already send (docs/sessions.md has the table). Pure: headers and a few body fields in,
names out.

Rules, first match wins: Claude Code's `X-Claude-Code-Session-Id`; Codex's `session-id` (else the
`session_id` in its `x-codex-turn-metadata`); a Responses chain (`previous_response_id`: the
session of the response it continues, which the caller looks up; `conversation`); a generic
`X-Session-Id`; else the request is a session of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import orjson

# An id the proxy keeps and shows: short, and nothing that could break a URL path, a log line or
# a Redis key. A value outside it is not used (the next rule applies).
_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")

CLAUDE_CODE_HEADER = "x-claude-code-session-id"
CODEX_HEADER = "session-id"
CODEX_METADATA_HEADER = "x-codex-turn-metadata"
GENERIC_HEADER = "x-session-id"
# The headers read here (lower case), so a listener keeps only these of a request's headers.
HEADERS = frozenset(
    {
        CLAUDE_CODE_HEADER,
        CODEX_HEADER,
        CODEX_METADATA_HEADER,
        GENERIC_HEADER,
        "user-agent",
        "x-stainless-raw-response",
    }
)
MAX_METADATA = 8192  # bytes of x-codex-turn-metadata parsed (it is ~1 KiB)


class SessionKey(NamedTuple):
    """The session a request belongs to: its `id` (without the tenant) and where it came from
    (`source`: claude-code, codex, responses, header, request)."""

    id: str
    source: str


class ChainLinks(NamedTuple):
    """What a Responses request says of the chain it is part of (from its body)."""

    previous_response_id: str | None = None
    conversation: str | None = None


def valid_id(value: object) -> str | None:
    return value if isinstance(value, str) and _ID.fullmatch(value) is not None else None


def pick_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The headers this module reads, by lower-case name (the first of each)."""
    found: dict[str, str] = {}
    for name, value in headers:
        lower = name.lower()
        if lower in HEADERS and lower not in found:
            found[lower] = value
    return found


def chain_links(body: Mapping[str, Any]) -> ChainLinks:
    """`previous_response_id` and `conversation` (`"conv_…"` or `{"id": "conv_…"}`) of a Responses body."""
    conversation = body.get("conversation")
    if isinstance(conversation, Mapping):
        conversation = conversation.get("id")
    return ChainLinks(valid_id(body.get("previous_response_id")), valid_id(conversation))


def codex_metadata_session(value: str | None) -> str | None:
    if not value or len(value) > MAX_METADATA:
        return None
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return valid_id(parsed.get("session_id")) if isinstance(parsed, dict) else None


def session_of(
    headers: Mapping[str, str],
    request_id: str,
    links: ChainLinks | None = None,
    continued: str | None = None,
) -> SessionKey:
    """The session of a request: `headers` as pick_headers returns them, `links` from a Responses
    body, `continued` the session of the response `links.previous_response_id` names when the
    caller knows it."""
    found = valid_id(headers.get(CLAUDE_CODE_HEADER))
    if found is not None:
        return SessionKey(found, "claude-code")
    found = valid_id(headers.get(CODEX_HEADER)) or codex_metadata_session(headers.get(CODEX_METADATA_HEADER))
    if found is not None:
        return SessionKey(found, "codex")
    if links is not None:
        if links.previous_response_id is not None:
            return SessionKey(continued or links.previous_response_id, "responses")
        if links.conversation is not None:
            return SessionKey(links.conversation, "responses")
    found = valid_id(headers.get(GENERIC_HEADER))
    if found is not None:
        return SessionKey(found, "header")
    return SessionKey(valid_id(request_id) or request_id[:128], "request")


def scoped(session_id: str, tenant: str | None) -> str:
    """The id the sessions API shows: per tenant in gateway mode (`<key name>:<id>`, or `_<n>:<id>`
    for an unnamed key: GatewayAuth.session_scope)."""
    return session_id if tenant is None else f"{tenant}:{session_id}"


# (prefix of the User-Agent, lower case) -> client kind, tried in order.
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("claude-cli/", "claude-code"),
    ("codex_", "codex"),
    ("codex-", "codex"),
    ("agents/python", "agents-sdk"),
    ("openai/js", "openai-node"),
    ("anthropic/python", "anthropic-python"),
    ("anthropic/js", "anthropic-node"),
    ("ai/", "ai-sdk"),
    ("curl/", "curl"),
    ("mozilla/", "browser"),
)
# openai-python's client classes: `OpenAI/Python`, `AsyncOpenAI/Python`, `AzureOpenAI/Python`, ...
_OPENAI_PYTHON = re.compile(r"[a-z]*openai/python", re.IGNORECASE)


def client_kind(headers: Mapping[str, str]) -> str:
    """The kind of client (docs/sessions.md, "Client kind"), from `headers` as pick_headers returns them."""
    agent = headers.get("user-agent", "")
    lower = agent.lower()
    if not lower:
        if CLAUDE_CODE_HEADER in headers:
            return "claude-code"
        return "codex" if CODEX_METADATA_HEADER in headers else "unknown"
    for prefix, kind in _PREFIXES:
        if lower.startswith(prefix):
            return kind
    if "langchain" in lower:
        return "langchain"
    if _OPENAI_PYTHON.match(agent) is not None:
        # langchain-openai sends openai-python's User-Agent; its one tell is the raw-response call.
        return (
            "langchain" if headers.get("x-stainless-raw-response", "").lower() == "true" else "openai-python"
        )
    if "ai-sdk/" in lower:
        return "ai-sdk"
    if CLAUDE_CODE_HEADER in headers:
        return "claude-code"
    return "codex" if CODEX_METADATA_HEADER in headers else "other"


# Where a Responses door leaves what it knows of the chain for the sessions' listener
# (`AccessRecord.notes`): (ChainLinks of the request's body, the id of the response it made or None).
CHAIN_NOTE = "responses_chain"
