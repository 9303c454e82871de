"""What both bridged front doors' request sides share, written once: reading the request body's
fields, the chat request's stream fields, and putting sealed reasoning back on the history (the
Responses door's `encrypted_content`, proxy.core.protocols.responses.{request,state}; the Messages
door's thinking `signature`, proxy.core.protocols.messages.{request,state}).

A door's blob names differ, and so do what binds it (the calls it preceded) and what else its
payload carries (the Responses door's thought signatures); what a history's blobs need from the
state store (`reference_keys`), what an opened payload gives (`take_reasoning`) and how the
reasoning lands on its assistant message (`put_reasoning`) are the same.

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from proxy.core import seal
from proxy.core.errors import BadRequest
from proxy.core.protocols.expansion import Expansion

__all__ = [
    "SEPARATOR",
    "present_fields",
    "put_reasoning",
    "reference_keys",
    "stream_fields",
    "take_reasoning",
]

# Between the reasoning texts of one assistant message's blobs.
SEPARATOR: Final = "\n\n"


def present_fields(body: Any) -> dict[str, Any]:
    """The request body's fields that are not null (a body that is not a JSON object: 400)."""
    if not isinstance(body, Mapping):
        raise BadRequest("Request body must be a JSON object.", code="invalid_json")
    return {k: v for k, v in body.items() if v is not None}


def stream_fields(present: Mapping[str, Any], chat: dict[str, Any]) -> None:
    """The chat request streams when the client's does, asking for the usage at the end (the
    encoder reports it); `stream` other than true or false: 400."""
    stream = present.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream must be true or false.", param="stream")
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}


def reference_keys(
    opener: Expansion, kind: seal.Kind, blobs: Iterable[tuple[str | None, Sequence[Sequence[str]]]]
) -> list[str]:
    """The state-store keys the proxy's reference blobs among `blobs` (each its text, None for
    none, and the bindings it may have) seal (reasoning too large to seal inline), each once, in
    order: the edge reads them before the restore (given the same `opener`, each distinct blob is
    opened once for both)."""
    keys: dict[str, None] = {}
    for text, id_sets in blobs:
        if seal.is_ours(text):
            key = opener.reference_key(kind, id_sets, str(text))
            if key is not None:
                keys[key] = None
    return list(keys)


def take_reasoning(payload: Mapping[str, Any], texts: list[str], details: list[Any]) -> None:
    """An opened blob's reasoning text (when not empty) and `reasoning_details`, added to those of
    its assistant message."""
    text = payload.get("reasoning")
    if isinstance(text, str) and text:
        texts.append(text)
    found = payload.get("details")
    if isinstance(found, list):
        details.extend(found)


def put_reasoning(
    messages: list[dict[str, Any]], index: int, texts: list[str], details: list[Any]
) -> dict[str, Any] | None:
    """The reasoning put on the assistant message at `index` (in place: `reasoning_content`, the
    internal field, and `reasoning_details`), which it returns; None when there is none to put or
    no such message."""
    if not (texts or details) or not 0 <= index < len(messages):
        return None
    message = messages[index]
    if texts:
        message["reasoning_content"] = SEPARATOR.join(texts)
    if details:
        message["reasoning_details"] = details
    return message
