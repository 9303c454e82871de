"""JSON in and out where the fast codec (orjson) and JSON itself disagree.

Pure. orjson reads what it cannot write: it parses 1,024 levels of nesting but writes only 254,
and it reads an integer above 64 bits as a float (so `2**70` would come back as `1.1805916207174113e+21`).
It also refuses lone surrogate escapes (`"\\ud800"`), which some upstreams send when they split
an emoji between chunks. Everything here keeps orjson's speed for ordinary JSON and falls back to
the standard library only for the rare document that needs it:

- `parse_chat_body`: a client's request body, refused with a 400 when it nests deeper than the
  proxy can write back; integers of any size are kept exact.
- `loads`: any body the proxy will re-encode, integers kept exact.
- `loads_lenient`: a document orjson refused, read the standard library's way (lone surrogates).
- `dumps`: orjson, else the standard library (big integers, lone surrogates, deep nesting).
- `string_insides`: many texts' JSON strings in one call (a run of deltas).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import orjson

from proxy.core.errors import BadRequest

# The deepest nesting orjson writes (one more level raises "Recursion limit reached").
MAX_DEPTH = 254
# How orjson says a document nests deeper than it parses (1,024 levels).
DEPTH_ERROR = "depth limit exceeded"
# An integer outside 64 bits has at least 19 digits (-9223372036854775809); orjson reads it as a
# float. Bodies without a run of 19 digits (anywhere, strings included) are read by orjson alone.
_LONG_INTEGER_DIGITS = 19
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))


def deeper_than(value: Any, limit: int) -> bool:
    """True when `value` nests containers more than `limit` levels deep (iterative, no recursion).

    A scalar is depth 0, `[]` or `{}` depth 1. Stops at the first path past the limit.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        if depth > limit:
            return True
        stack.extend((child, depth) for child in children if isinstance(child, dict | list))
    return False


def may_hold_big_integer(data: bytes) -> bool:
    """False when `data` has no run of 19 digits, so no integer orjson would turn into a float."""
    return data.translate(_DIGITS_ONLY).find(b"0" * _LONG_INTEGER_DIGITS) >= 0


def loads(data: bytes) -> Any:
    """orjson.loads, with integers of any size kept exact (raises orjson.JSONDecodeError)."""
    parsed = orjson.loads(data)
    if may_hold_big_integer(data):
        return json.loads(data, parse_constant=_refuse_constant)
    return parsed


def loads_lenient(data: bytes) -> Any | None:
    """The standard library's reading of a document orjson refused (lone surrogate escapes), or
    None when it is not JSON either (or nests too deeply for it)."""
    try:
        return json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None


def dumps(value: Any) -> bytes:
    """Compact JSON of `value`: orjson, else the standard library for what orjson refuses.

    Raises ValueError when neither can write it (nesting deeper than the interpreter recurses).
    """
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        pass
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        try:
            return text.encode()
        except UnicodeEncodeError:  # a lone surrogate: written as the escape it came as
            return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    except RecursionError:
        raise ValueError("JSON nested too deeply to write") from None


def string_insides(texts: Sequence[str]) -> list[bytes]:
    """What `dumps` writes between the quotes of each text's JSON string, for many texts in one
    orjson call (a run of deltas) when that is exact; else each text written alone.

    Exact when the list's JSON holds no escaped quote (no `\\"`): every quote is then a string's
    start or end, so a `","` is one string's end, the list's comma and the next one's start, or
    else the text "," itself, whose opening quote the separator before it (or the `["` cut off)
    has already taken when splitting from the left. An escaped quote can sit right before a comma
    and a string's end (the text `a",` is `"a\\","`), so with one the texts go alone; so do
    texts orjson refuses (a lone surrogate)."""
    if texts:
        try:
            listed = orjson.dumps(texts)
        except orjson.JSONEncodeError:
            pass
        else:
            if b'\\"' not in listed:
                return listed[2:-2].split(b'","')
    return [dumps(text)[1:-1] for text in texts]


def parse_chat_body(body: bytes) -> dict[str, Any]:
    """A chat request body as a dict, or a 400 saying what is wrong with it.

    Nesting deeper than `MAX_DEPTH` is refused up front: the proxy could not write such a body
    back (with a level applied) and the trace could not describe it.
    """
    if not body:
        raise BadRequest(
            "Request body is empty: send a JSON object with model and messages.", code="invalid_json"
        )
    try:
        parsed = loads(body)
    except orjson.JSONDecodeError as exc:
        if DEPTH_ERROR in str(exc):
            raise _too_deep() from None
        raise BadRequest(f"Request body is not valid JSON: {exc}.", code="invalid_json") from None
    if not isinstance(parsed, dict):
        raise BadRequest(
            f"Request body must be a JSON object, got {type(parsed).__name__}.", code="invalid_json"
        )
    # Counting brackets is a cheap bound: fewer than the limit cannot nest past it.
    if body.count(b"[") + body.count(b"{") > MAX_DEPTH and deeper_than(parsed, MAX_DEPTH):
        raise _too_deep()
    return parsed


def _too_deep() -> BadRequest:
    return BadRequest(
        f"Request body nests JSON more than {MAX_DEPTH} levels deep; at most {MAX_DEPTH} are "
        "accepted. Flatten the deepest value (a tool schema, a message's content) and retry.",
        code="json_too_deep",
    )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
