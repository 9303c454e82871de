"""Inline reasoning tags in content (`<think>…</think>` and the like), found however the text is split.

Pure and incremental: `TextSplitter` splits one choice's content text into reasoning and answer
at tags across chunks; a possible tag start at the end of a chunk is held back (at most the longest
tag's length) until the next chunk decides it. proxy.core.stream.reasoning runs one splitter per
choice of a response whose dialect names tags.
"""

from __future__ import annotations

import functools
import re


class TagSet:
    """The opening and closing tag strings for a set of names, and how to find them."""

    __slots__ = ("is_opening", "longest", "pattern", "prefixes")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.is_opening: dict[str, bool] = {}
        for name in names:
            if not name or any(c in name for c in "<>/"):
                raise ValueError(f"invalid reasoning tag name {name!r}")
            self.is_opening[f"<{name}>"] = True
            self.is_opening[f"</{name}>"] = False
        # Longest first so that no tag is matched as a mere part of another.
        tags = sorted(self.is_opening, key=len, reverse=True)
        self.pattern = re.compile("|".join(map(re.escape, tags)))
        self.longest = len(tags[0])
        # Every proper prefix of a tag: what a chunk may end with while the tag is still unfinished.
        self.prefixes = frozenset(tag[:i] for tag in tags for i in range(1, len(tag)))


@functools.lru_cache(maxsize=64)
def tag_set(names: tuple[str, ...]) -> TagSet:
    """The tag set of `names`, built once (a regex and every tag prefix; never changed after)."""
    return TagSet(names)


class TextSplitter:
    """Splits one choice's content text into reasoning and answer at tags, across chunks.

    Every tag occurrence is removed: an opening tag switches to reasoning, a closing tag to
    answer. So content never carries a tag and reasoning + content = input minus tags.
    """

    __slots__ = ("fresh", "held", "inside", "tags")

    def __init__(self, tags: TagSet | None, inside: bool) -> None:
        self.tags = tags
        self.inside = inside
        self.held = ""  # a possible tag start at the end of the text so far
        self.fresh = True  # no content text seen yet

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning, answer) parts of `text`; a possible unfinished tag at its end is held."""
        if not text:
            return "", ""
        self.fresh = False
        tags = self.tags
        if tags is None or (not self.held and "<" not in text):
            return (text, "") if self.inside else ("", text)
        s = self.held + text
        self.held = ""
        reasoning: list[str] = []
        answer: list[str] = []
        pos = 0
        for match in tags.pattern.finditer(s):
            if match.start() > pos:
                (reasoning if self.inside else answer).append(s[pos : match.start()])
            self.inside = tags.is_opening[match.group()]
            pos = match.end()
        end = len(s)
        lt = s.rfind("<", max(pos, end - tags.longest + 1))
        if lt >= 0 and s[lt:] in tags.prefixes:
            self.held = s[lt:]
            end = lt
        if end > pos:
            (reasoning if self.inside else answer).append(s[pos:end])
        return "".join(reasoning), "".join(answer)

    def flush(self) -> tuple[str, str]:
        """The held text as literal text of the current side: the tag never completed."""
        held, self.held = self.held, ""
        return (held, "") if self.inside else ("", held)
