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


# MiniMax M3 marks reasoning <mm:think>…</mm:think>; its template may prefill the opening marker, so
# the output starts inside the reasoning with only the closing one (vLLM's minimax_m3 parser).
M3_TAGS = ("mm:think",)  # as the entry names it: a plain <think> is then text
M3_OPENED = "<mm:think>比较 a < b，<think> 不是 M3 的标记</think>，还有 </mm:thi</mm:think>答案：番茄是水果。"
M3_PREFILLED = "比较 a < b，然后 <mm:thin 不是标记</mm:think>答案：番茄是水果 <mm:"


def split_m3(pieces: list[str], inside: bool) -> tuple[str, str]:
    splitter = TextSplitter(tag_set(M3_TAGS), inside)
    parts = [splitter.feed(piece) for piece in pieces] + [splitter.flush()]
    return "".join(r for r, _ in parts), "".join(a for _, a in parts)


@pytest.mark.parametrize(
    ("text", "inside", "expected"),
    [
        (
            M3_OPENED,
            False,
            ("比较 a < b，<think> 不是 M3 的标记</think>，还有 </mm:thi", "答案：番茄是水果。"),
        ),
        (M3_PREFILLED, True, ("比较 a < b，然后 <mm:thin 不是标记", "答案：番茄是水果 <mm:")),
        # a stray closing marker first, when the template did not open one: nothing is lost
        ("</mm:think>答案", False, ("", "答案")),
    ],
)
def test_minimax_m3_markers_at_every_split(text: str, inside: bool, expected: tuple[str, str]) -> None:
    assert split_m3([text], inside) == expected
    for i in range(len(text) + 1):
        assert split_m3([text[:i], text[i:]], inside) == expected, i
        for j in range(i, len(text) + 1, 5):
            assert split_m3([text[:i], text[i:j], text[j:]], inside) == expected, (i, j)
    # one character at a time: every marker arrives cut at every place
    assert split_m3(list(text), inside) == expected


def test_minimax_m3_markers_at_every_byte_split_of_the_utf8_stream() -> None:
    # The pipeline decodes bytes before the splitter: a cut inside a multi-byte character or a
    # marker gives the same parts (an incremental UTF-8 decoder, as the SSE decoder has).
    import codecs

    data = M3_PREFILLED.encode()
    for i in range(len(data) + 1):
        decoder = codecs.getincrementaldecoder("utf-8")()
        pieces = [decoder.decode(data[:i]), decoder.decode(data[i:], final=True)]
        assert split_m3(pieces, True) == split_m3([M3_PREFILLED], True), i
