"""The proxy's own errors (proxy.core.errors): what an error message may quote of a client's input."""

from __future__ import annotations

import pytest

from proxy.core.errors import MAX_MESSAGE_CHARS, QUOTE_CHARS, BadRequest, ProxyError, quoted


def test_a_short_value_is_quoted_whole() -> None:
    assert quoted("resp_1") == "'resp_1'"
    assert quoted(["a", 1]) == "['a', 1]"


def test_a_long_value_is_cut_and_its_length_said() -> None:
    text = quoted("x" * 1_000_000)
    assert text == repr("x" * QUOTE_CHARS)[:QUOTE_CHARS] + "… (1000000 chars)"
    assert len(text) < QUOTE_CHARS + 30
    assert quoted({"k": "v" * 500}).endswith(f"… ({len(repr({'k': 'v' * 500}))} chars)")


@pytest.mark.parametrize("cls", [ProxyError, BadRequest])
def test_no_error_message_echoes_a_huge_value_whole(cls: type[ProxyError]) -> None:
    """A message built from client input somewhere nobody cut it is cut as a whole (the backstop)."""
    error = cls("tool_choice " + "n" * 1_000_000 + " is not among tools.")
    assert len(error.message) <= MAX_MESSAGE_CHARS + 30
    assert (
        error.message.endswith("… (1000032 chars)") and error.payload()["error"]["message"] == error.message
    )
    assert cls("short").message == "short"
