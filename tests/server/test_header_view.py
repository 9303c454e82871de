"""proxy.server.header_view: a request's headers decoded once, read as Starlette's `Headers` reads
them (the first value of a name, case-insensitive; every pair in order, repeats kept)."""

from __future__ import annotations

from starlette.datastructures import Headers

from proxy.server.header_view import RequestHeaders, headers_of

RAW = [
    (b"host", b"127.0.0.1"),
    (b"x-thinking-level", b"deep"),
    (b"x-thinking-level", b"off"),
    (b"accept-language", b"caf\xe9"),
    (b"Authorization", b"Bearer k"),
]


def test_reads_as_starlette_headers_read() -> None:
    ours, theirs = RequestHeaders(RAW), Headers(raw=RAW)
    assert ours.items() == theirs.items()
    assert ours.keys() == theirs.keys()
    for name in ("host", "X-Thinking-Level", "x-thinking-level", "accept-language", "authorization", "nope"):
        assert ours.get(name) == theirs.get(name), name
        assert (name in ours) == (name in theirs), name
    assert ours.get("nope", "default") == "default"
    assert ours["X-THINKING-LEVEL"] == "deep"
    assert len(ours) == len(RAW)


def test_items_is_a_copy_a_caller_may_change() -> None:
    headers = RequestHeaders(RAW)
    pairs = headers.items()
    pairs.append(("x-added", "1"))
    assert ("x-added", "1") not in headers.items()


def test_decoded_once_per_scope() -> None:
    scope = {"type": "http", "headers": list(RAW)}
    first = headers_of(scope)
    assert headers_of(scope) is first
    assert headers_of({"type": "http", "headers": list(RAW)}) is not first
