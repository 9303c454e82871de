"""proxy.core.stream.reasoning_tags: tags found however the text is split."""

from __future__ import annotations

import pytest

from proxy.core.stream.reasoning_tags import TextSplitter, tag_set

TEXT = "before <think>weighing a < b and </thi not a tag</think> after <thinking> a <thi"


def split_all(pieces: list[str], inside: bool = False) -> tuple[str, str]:
    splitter = TextSplitter(tag_set(("think",)), inside)
    reasoning, answer = [], []
    for piece in pieces:
        r, a = splitter.feed(piece)
        reasoning.append(r)
        answer.append(a)
    r, a = splitter.flush()
    return "".join(reasoning) + r, "".join(answer) + a


def test_the_same_parts_at_every_split_and_in_three_pieces() -> None:
    whole = split_all([TEXT])
    assert whole == ("weighing a < b and </thi not a tag", "before  after <thinking> a <thi")
    for i in range(len(TEXT) + 1):
        assert split_all([TEXT[:i], TEXT[i:]]) == whole, i
        for j in range(i, len(TEXT) + 1, 7):
            assert split_all([TEXT[:i], TEXT[i:j], TEXT[j:]]) == whole, (i, j)


def test_implicit_open_starts_inside_reasoning() -> None:
    assert split_all(["plan</think>answer"], inside=True) == ("plan", "answer")


def test_a_held_prefix_that_never_completes_is_the_current_sides_text() -> None:
    splitter = TextSplitter(tag_set(("think",)), False)
    assert splitter.feed("x <thi") == ("", "x ")
    assert splitter.flush() == ("", "<thi")


@pytest.mark.parametrize("name", ["", "a>b", "a/b", "<x"])
def test_a_tag_name_that_cannot_be_a_tag_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid reasoning tag name"):
        tag_set((name,))
