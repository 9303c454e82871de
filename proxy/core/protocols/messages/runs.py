"""Runs of more of the same in what the Messages door reads, taken with as little work per event
as the bytes allow.

The door's transcoder (proxy.core.protocols.messages.stream) reads the pipeline's output. Most of
it is runs of SSE events `data: ` + prefix + <a JSON string> + suffix + blank line, the prefix and
suffix those of a chunk it decoded (its ChunkTemplate, proxy.core.stream.chunk_template): the next
pieces of reasoning or of the answer. `take_run` reads such a run event by event without scanning
for the blank line: after the prefix, the text token ends at its first quote that no backslash
escapes (a JSON string holds no other), and the suffix and the blank line must follow it at once.
Such an event holds no line end but its last two (neither part holds one, and a JSON string holds
none raw: orjson refuses one), so it is one whole SSE event, the learned chunk with another text.

The texts are read in one orjson call per run (each token is a run of bytes between two quotes
with none unescaped inside, so a list of them parses only as exactly those strings); when orjson's
own writing of the texts is the tokens joined, each token is that writing, and the caller can copy
them as they came. The rare rest (a token orjson refuses) is read token by token and the run cut
before the first that does not read.

Pure.
"""

from __future__ import annotations

from typing import TypeAlias

import orjson

# Where the run ends, its tokens, their texts, and whether the tokens are orjson's writing.
Run: TypeAlias = tuple[int, list[bytes], list[str], bool]


def take_run(data: bytes, start: int, prefix: bytes, suffix: bytes) -> Run:
    """The run of events `prefix + <a non-empty JSON string> + suffix + "\\n\\n"` from `start`:
    where it ends, the tokens (quotes included, as they came), the texts, and whether each token
    is exactly orjson's writing of its text. For data whose line ends are LF, where an event starts
    at `start` (an idle SSE decoder's view)."""
    end_mark = suffix + b"\n\n"
    head, after = len(prefix), len(end_mark)
    find, startswith = data.find, data.startswith
    size = len(data)
    tokens: list[bytes] = []
    pos = start
    while pos < size and startswith(prefix, pos):
        first = pos + head
        if first >= size or data[first] != 0x22:  # '"'
            break
        close = find(b'"', first + 1)
        while close > 0 and data[close - 1] == 0x5C:  # a backslash: escaped, unless it is escaped
            back = close - 1
            while data[back] == 0x5C:
                back -= 1
            if (close - 1 - back) % 2 == 0:
                break
            close = find(b'"', close + 1)
        if close - first < 2 or not startswith(end_mark, close + 1):
            break  # (an empty text: decoded, it writes nothing; or not the template's event)
        tokens.append(data[first : close + 1])
        pos = close + 1 + after
    if not tokens:
        return start, tokens, [], False
    texts, canonical = _texts(tokens)
    end = start + (head + after) * len(tokens) + sum(map(len, tokens))
    return end, tokens, texts, canonical


def _texts(tokens: list[bytes]) -> tuple[list[str], bool]:
    """The tokens' texts (`tokens` cut before the first that orjson does not read), and whether
    every token is orjson's own writing of its text."""
    joined = b",".join(tokens)
    try:
        texts: list[str] = orjson.loads(b"[" + joined + b"]")
    except orjson.JSONDecodeError:
        texts = []
        for token in tokens:  # (rare: a raw control character, a bad escape, a lone surrogate)
            try:
                texts.append(orjson.loads(token))
            except orjson.JSONDecodeError:
                break
        del tokens[len(texts) :]
        return texts, False
    return texts, orjson.dumps(texts)[1:-1] == joined
