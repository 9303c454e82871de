"""A JSON body re-encoded with every value the proxy left alone kept byte for byte.

Pure. A body forwarded to an upstream that serves the client's own API (native Messages and
Responses) is usually sent as it came; when the proxy changes a field (the level's `thinking`, a
policy's ceiling, the proxy's own sealed blocks left out), encoding the whole parsed body again
would rewrite bytes the proxy never meant to touch: the spaces, the escapes (`\\u00e9` or `é`),
the numbers' spelling (`1.0`, `1e3`) and, through a copy, the order of fields. Anthropic binds a
thinking block to the exact prefix that produced it (`system`, `tools`, every earlier message:
platform.claude.com/docs/build-with-claude/preserved-thinking), so a body whose unchanged parts
moved by one byte could lose the client's reasoning. `splice(raw, before, after)` writes `after`
(the body to send) over `raw` (the body as it came, which parses to `before`):

- a value that is `before`'s own object (`is`), unchanged, keeps its bytes as they came;
- an object keeps its members in the order they came, each written this same way; members it
  lost are left out, new ones are appended in `after`'s order;
- an array whose elements are `before`'s own elements in the same order (some left out, as the
  proxy's own thinking blocks are) keeps each kept one's bytes; an array of the same length is
  written element by element; any other array is encoded anew;
- anything else (a new or changed scalar, a value of another kind) is encoded anew.

An object with a key twice (the parse kept the last) is encoded anew, as it would be anyway.
"""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.core import jsonio

__all__ = ["splice"]

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def splice(raw: bytes, before: Any, after: Any) -> bytes:
    """`after` as JSON bytes, every part of it that is still `before`'s written as `raw` has it."""
    if after is before:
        return raw
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return jsonio.dumps(after)
    start = _SPACE.match(text, 0)
    assert start is not None
    out: list[str] = []
    _write(text, start.end(), before, after, out)
    return "".join(out).encode("utf-8")


def _end(text: str, at: int) -> int:
    """Where the JSON value starting at `at` ends."""
    return _DECODER.raw_decode(text, at)[1]


def _skip(text: str, at: int) -> int:
    found = _SPACE.match(text, at)
    assert found is not None
    return found.end()


def _write(text: str, at: int, before: Any, after: Any, out: list[str]) -> None:
    """`after` written into `out`, over the value of `text` at `at` (which parses to `before`)."""
    if after is before:
        out.append(text[at : _end(text, at)])
    elif isinstance(after, dict) and isinstance(before, dict) and text.startswith("{", at):
        _object(text, at, before, after, out)
    elif isinstance(after, list) and isinstance(before, list) and text.startswith("[", at):
        _array(text, at, before, after, out)
    else:
        out.append(jsonio.dumps(after).decode("utf-8"))


def _members(text: str, at: int) -> tuple[list[tuple[str, int, int, int]], int]:
    """An object's members as they came — (key, where `"key": value` starts, where its value starts,
    where it ends) — and where the closing brace is."""
    members: list[tuple[str, int, int, int]] = []
    i = _skip(text, at + 1)
    if text.startswith("}", i):
        return members, i
    while True:
        key, after_key = _DECODER.raw_decode(text, i)
        colon = _skip(text, after_key)
        value = _skip(text, colon + 1)
        end = _end(text, value)
        members.append((key, i, value, end))
        i = _skip(text, end)
        if text.startswith("}", i):
            return members, i
        i = _skip(text, i + 1)  # (the comma)


def _elements(text: str, at: int) -> tuple[list[tuple[int, int]], int]:
    """Where each element of the array at `at` starts and ends, and where the closing bracket is."""
    spans: list[tuple[int, int]] = []
    i = _skip(text, at + 1)
    if text.startswith("]", i):
        return spans, i
    while True:
        end = _end(text, i)
        spans.append((i, end))
        i = _skip(text, end)
        if text.startswith("]", i):
            return spans, i
        i = _skip(text, i + 1)


def _joined(text: str, at: int, close: int, spans: list[tuple[int, int]], kept: list[tuple[int, str]]) -> str:
    """The container again: its opening and closing bytes and, between the parts kept (each with
    the index of the original span it stands for, -1 for a new one), the separator that followed
    that span as it came (`,` after a new part)."""
    if not spans:
        return text[at] + ",".join(part for _, part in kept) + text[close]
    out = [text[at : spans[0][0]]]  # (the bracket and the space after it)
    for n, (_, part) in enumerate(kept):
        if n:
            previous = kept[n - 1][0]
            out.append(
                text[spans[previous][1] : spans[previous + 1][0]] if 0 <= previous < len(spans) - 1 else ","
            )
        out.append(part)
    out.append(text[spans[-1][1] : close + 1])  # (the space before the bracket, and the bracket)
    return "".join(out)


def _object(text: str, at: int, before: dict[str, Any], after: dict[str, Any], out: list[str]) -> None:
    members, close = _members(text, at)
    if len(members) != len(before):  # (a key sent twice: the parse kept the last)
        out.append(jsonio.dumps(after).decode("utf-8"))
        return
    kept: list[tuple[int, str]] = []
    for n, (key, key_at, value_at, _) in enumerate(members):
        if key not in after:
            continue
        piece: list[str] = [text[key_at:value_at]]
        _write(text, value_at, before[key], after[key], piece)
        kept.append((n, "".join(piece)))
    for key, value in after.items():
        if key not in before:
            kept.append((-1, jsonio.dumps(key).decode("utf-8") + ":" + jsonio.dumps(value).decode("utf-8")))
    spans = [(key_at, end) for _, key_at, _, end in members]
    out.append(_joined(text, at, close, spans, kept))


def _array(text: str, at: int, before: list[Any], after: list[Any], out: list[str]) -> None:
    spans, close = _elements(text, at)
    pairs = _kept_in_order(before, after)
    if pairs is None and len(after) == len(before):
        pairs = list(range(len(after)))
    if pairs is None or len(spans) != len(before):
        out.append(jsonio.dumps(after).decode("utf-8"))
        return
    kept: list[tuple[int, str]] = []
    for value, source in zip(after, pairs, strict=True):
        piece: list[str] = []
        _write(text, spans[source][0], before[source], value, piece)
        kept.append((source, "".join(piece)))
    out.append(_joined(text, at, close, spans, kept))


def _kept_in_order(before: list[Any], after: list[Any]) -> list[int] | None:
    """For each element of `after`, the index of the same object in `before`, in order; None when
    `after` is not `before` with some elements left out."""
    pairs: list[int] = []
    j = 0
    for value in after:
        while j < len(before) and before[j] is not value:
            j += 1
        if j == len(before):
            return None
        pairs.append(j)
        j += 1
    return pairs
