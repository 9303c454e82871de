"""The chat-completions front door (`POST /v1/chat/completions`): the first adapter pair, and the
identity on both sides, since the internal exchange is chat-shaped.

`parse_request` is where a front door refuses what it cannot carry (invalid JSON, a body nested
too deep to write back) and returns the internal request. Its encoder is the identity: the
pipeline's bytes go to the client as they are, so the fast path (a chunk that needs nothing is
passed on unparsed) reaches the client untouched; a front door with a wire of its own adds its
encoder between the pipeline and the client (proxy.server.streaming).
"""

from __future__ import annotations

from typing import Any

from proxy.core.jsonio import parse_chat_body

NAME = "chat"


def parse_request(body: bytes) -> dict[str, Any]:
    """The internal request: the client's chat body, parsed and checked (400 when it is not one)."""
    return parse_chat_body(body)
